//! `herd pull` / `herd push`: stream `/api/pull` or `/api/push` and draw Ollama-style progress —
//! one line per layer (`pulling 3f8eb4da87fa:  42% ▕████      ▏ 420 MB/1.0 GB  95 MB/s  6s`) plus
//! the plain statuses. On a terminal the block is redrawn in place; otherwise each status is
//! printed once when it first appears (and each layer once it completes).

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use futures_util::StreamExt as _;

use super::client::Client;
use super::format::{human_bytes, human_duration};
use crate::config::TransferArgs;
use crate::store::registry::Progress;

#[derive(Clone, Copy)]
pub enum Direction {
    Pull,
    Push,
}

pub async fn run(args: TransferArgs, dir: Direction) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let path = match dir {
        Direction::Pull => "/api/pull",
        Direction::Push => "/api/push",
    };
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("{}{path}", client.base()))
        .json(
            &serde_json::json!({ "model": args.model, "insecure": args.insecure, "stream": true }),
        )
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() {
                anyhow!(
                    "could not connect to herd server at {}, run 'herd serve' to start it",
                    client.base()
                )
            } else {
                anyhow!(e)
            }
        })?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.bytes().await.unwrap_or_default();
        #[derive(serde::Deserialize)]
        struct E {
            error: String,
        }
        return Err(match serde_json::from_slice::<E>(&body) {
            Ok(e) => anyhow!(e.error),
            Err(_) => anyhow!("{status}"),
        });
    }
    let mut view = View::new(std::io::stderr().is_terminal());
    let mut stream = resp.bytes_stream();
    let mut pending = Vec::new();
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk.context("reading the server's response")?);
        while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let v: serde_json::Value =
                serde_json::from_slice(&line).context("decoding progress")?;
            if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                view.finish();
                return Err(anyhow!(e.to_owned()));
            }
            let p: Progress = serde_json::from_value(v).context("decoding progress")?;
            view.update(p);
        }
    }
    view.finish();
    Ok(())
}

/// The progress block: statuses in first-seen order.
struct View {
    tty: bool,
    order: Vec<String>,
    rows: HashMap<String, Row>,
    drawn: usize,
    last_draw: Instant,
}

struct Row {
    p: Progress,
    started: Instant,
    printed_done: bool,
}

impl View {
    fn new(tty: bool) -> View {
        View {
            tty,
            order: Vec::new(),
            rows: HashMap::new(),
            drawn: 0,
            last_draw: Instant::now() - Duration::from_secs(1),
        }
    }

    fn update(&mut self, p: Progress) {
        let key = p.status.clone();
        let new = !self.rows.contains_key(&key);
        if new {
            self.order.push(key.clone());
        }
        let row = self.rows.entry(key.clone()).or_insert_with(|| Row {
            p: p.clone(),
            started: Instant::now(),
            printed_done: false,
        });
        row.p = p;
        if self.tty {
            if new || self.last_draw.elapsed() >= Duration::from_millis(100) {
                self.draw();
            }
            return;
        }
        let done = row.p.total == 0 || row.p.completed >= row.p.total;
        if (row.p.total == 0 && new) || (row.p.total > 0 && done && !row.printed_done) {
            row.printed_done = true;
            eprintln!("{}", render(row));
        }
    }

    fn draw(&mut self) {
        let mut out = String::new();
        if self.drawn > 0 {
            out.push_str(&format!("\x1b[{}A", self.drawn));
        }
        for key in &self.order {
            out.push_str("\x1b[2K");
            out.push_str(&render(&self.rows[key]));
            out.push('\n');
        }
        self.drawn = self.order.len();
        self.last_draw = Instant::now();
        let mut e = std::io::stderr();
        let _ = e.write_all(out.as_bytes());
        let _ = e.flush();
    }

    fn finish(&mut self) {
        if self.tty {
            self.draw();
        }
    }
}

fn render(row: &Row) -> String {
    let p = &row.p;
    if p.total == 0 {
        return p.status.clone();
    }
    let done = p.completed.min(p.total);
    let pct = done * 100 / p.total;
    const WIDTH: u64 = 25;
    let filled = (done * WIDTH / p.total) as usize;
    let bar = format!(
        "{}{}",
        "█".repeat(filled),
        " ".repeat(WIDTH as usize - filled)
    );
    let secs = row.started.elapsed().as_secs_f64().max(0.001);
    let rate = (done as f64 / secs) as u64;
    let mut s = format!(
        "{}: {pct:>3}% ▕{bar}▏ {}/{}",
        p.status,
        human_bytes(done),
        human_bytes(p.total)
    );
    if done < p.total && rate > 0 {
        let eta = Duration::from_secs((p.total - done) / rate);
        s.push_str(&format!(
            "  {}/s  {}",
            human_bytes(rate),
            human_duration(eta)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_bar_and_plain_status() {
        let row = |status: &str, total, completed| Row {
            p: Progress {
                status: status.into(),
                total,
                completed,
                ..Progress::default()
            },
            started: Instant::now(),
            printed_done: false,
        };
        assert_eq!(render(&row("success", 0, 0)), "success");
        let s = render(&row("pulling 0123456789ab", 1000, 1000));
        assert!(
            s.starts_with("pulling 0123456789ab: 100% ▕█████████████████████████▏ "),
            "{s}"
        );
        let s = render(&row("pulling 0123456789ab", 1000, 500));
        assert!(s.contains(" 50% ▕████████████             ▏"), "{s}");
    }
}
