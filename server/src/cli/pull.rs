//! `herd pull` / `herd push`: stream `/api/pull` or `/api/push` and draw Ollama's progress layout
//! (its `progress/bar.go`: as wide as the terminal, 80 columns when that is unknown) — one line
//! per layer,
//! `pulling 3f8eb4da87fa:  35% ▕█████         ▏ 420 MB/1.2 GB   95 MB/s      8s`, finished layers
//! as `pulling 3f8eb4da87fa: 100% ▕██████████████▏ 1.2 GB`, plus the plain statuses. The rate is
//! over the last ~10 s (one sample a second), the ETA is what is left at that rate. On a terminal
//! the block is redrawn in place; otherwise each status is printed once when it first appears
//! (and each layer once it completes). As in Ollama, a pulled layer's line is named from its
//! digest and appears with its first bytes; a push ends with "You can find your model at:"
//! and where that is.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use futures_util::StreamExt as _;

use super::client::Client;
use super::format::human_bytes;
use crate::config::TransferArgs;
use crate::store::registry::Progress;

#[derive(Clone, Copy)]
pub enum Direction {
    Pull,
    Push,
}

pub async fn run(args: TransferArgs, dir: Direction) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let done = transfer(&client, &args.model, args.insecure, dir).await;
    if let Direction::Pull = dir {
        return done;
    }
    done.map_err(push_error)?;
    // Ollama's PushHandler ends with where the model now lives, on stdout.
    println!(
        "\nYou can find your model at:\n\n\t{}",
        push_destination(&args.model)
    );
    Ok(())
}

/// A registry's refusal of a push, in Ollama's words; any other error as it is.
fn push_error(e: anyhow::Error) -> anyhow::Error {
    let text = e.to_string().to_lowercase();
    if text.contains("access denied") || text.contains("unauthorized") {
        anyhow!("you are not authorized to push to this namespace, create the model under a namespace you own")
    } else {
        e
    }
}

/// Where a pushed model can be found: its page on ollama.com for Ollama's registry
/// (`https://ollama.com/me/m`, `:latest` left out), else its full name
/// (`host/namespace/model:tag`), as Ollama's PushHandler prints it.
fn push_destination(model: &str) -> String {
    let Ok(name) = crate::store::ModelName::parse(model) else {
        return model.to_owned();
    };
    let host = name.host().to_ascii_lowercase();
    if host.ends_with(".ollama.ai") || host.ends_with(".ollama.com") {
        let short = name.display_shortest();
        let short = short.strip_suffix(":latest").unwrap_or(&short);
        format!("https://ollama.com/{short}")
    } else {
        name.to_string()
    }
}

/// Streams one pull or push with its progress display on stderr; `herd pull`, `herd push` and
/// `herd run` (pulling a missing model first, as `ollama run` does) share it.
pub async fn transfer(
    client: &Client,
    model: &str,
    insecure: bool,
    dir: Direction,
) -> anyhow::Result<()> {
    let path = match dir {
        Direction::Pull => "/api/pull",
        Direction::Push => "/api/push",
    };
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("{}{path}", client.base()))
        .json(&serde_json::json!({ "model": model, "insecure": insecure, "stream": true }))
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
    let tty = std::io::stderr().is_terminal();
    let mut view = View::new(dir, tty, if tty { terminal_width() } else { LINE_WIDTH });
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

/// Columns of the terminal on stderr, or Ollama's default when it cannot be read.
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&c| c >= 40)
        .unwrap_or(LINE_WIDTH)
}

/// The progress block: statuses in first-seen order.
struct View {
    dir: Direction,
    tty: bool,
    width: usize,
    order: Vec<String>,
    rows: HashMap<String, Row>,
    drawn: usize,
    last_draw: Instant,
}

struct Row {
    /// What the line starts with: Ollama's bar message (`pulling <12hex>:` from the digest
    /// when pulling, the status as sent when pushing), or the plain status.
    label: String,
    p: Progress,
    started: Instant,
    /// When the layer reached its total (rate and ETA are then dropped).
    stopped: Option<Instant>,
    initial: u64,
    /// (time, completed) samples, at most one a second, the last `RATE_SAMPLES`.
    samples: std::collections::VecDeque<(Instant, u64)>,
    printed_done: bool,
}

/// Ollama's default terminal width; its bar leaves the last column free (lines are one
/// narrower than the terminal).
const LINE_WIDTH: usize = 80;
const RATE_SAMPLES: usize = 10;

impl Row {
    fn new(label: String, p: Progress, now: Instant) -> Row {
        let mut r = Row {
            label,
            initial: p.completed,
            p: Progress::default(),
            started: now,
            stopped: None,
            samples: Default::default(),
            printed_done: false,
        };
        r.set(p, now);
        r
    }

    fn set(&mut self, p: Progress, now: Instant) {
        let done = p.completed.min(p.total);
        if p.total > 0 && done >= p.total && self.stopped.is_none() {
            self.stopped = Some(now);
        }
        let due = self
            .samples
            .back()
            .is_none_or(|(t, _)| now.duration_since(*t) > Duration::from_secs(1));
        if due {
            self.samples.push_back((now, done));
            if self.samples.len() > RATE_SAMPLES {
                self.samples.pop_front();
            }
        }
        self.p = p;
    }

    /// Bytes per second over the sampled window (Ollama rounds the window to whole seconds).
    fn rate(&self) -> f64 {
        let (bytes, secs) = match (self.stopped, self.samples.front(), self.samples.back()) {
            (Some(stop), _, _) => (
                self.p
                    .completed
                    .min(self.p.total)
                    .saturating_sub(self.initial),
                stop.duration_since(self.started),
            ),
            (None, Some(first), Some(last)) if self.samples.len() > 1 => (
                last.1.saturating_sub(first.1),
                last.0.duration_since(first.0),
            ),
            (None, Some(only), _) => (
                only.1.saturating_sub(self.initial),
                only.0.duration_since(self.started),
            ),
            _ => return 0.0,
        };
        let secs = secs.as_secs_f64().round();
        if secs == 0.0 {
            0.0
        } else {
            bytes as f64 / secs
        }
    }
}

impl View {
    fn new(dir: Direction, tty: bool, width: usize) -> View {
        View {
            dir,
            tty,
            width,
            order: Vec::new(),
            rows: HashMap::new(),
            drawn: 0,
            last_draw: Instant::now() - Duration::from_secs(1),
        }
    }

    fn update(&mut self, p: Progress) {
        // Ollama's pull shows no bar for a layer before its first bytes: the server announces
        // every layer at 0 first (for totals), and those would all sit at 0% at once.
        if matches!(self.dir, Direction::Pull) && !p.digest.is_empty() && p.completed == 0 {
            return;
        }
        // A layer's line is keyed by its digest, a plain status by its text (Ollama's bars
        // and spinners).
        let key = if p.digest.is_empty() {
            p.status.clone()
        } else {
            p.digest.clone()
        };
        let label = bar_label(self.dir, &p);
        let new = !self.rows.contains_key(&key);
        if new {
            self.order.push(key.clone());
        }
        let now = Instant::now();
        let row = match self.rows.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let row = e.into_mut();
                row.set(p, now);
                row
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Row::new(label, p, now)),
        };
        if self.tty {
            if new || self.last_draw.elapsed() >= Duration::from_millis(100) {
                self.draw();
            }
            return;
        }
        let done = row.p.total == 0 || row.p.completed >= row.p.total;
        if (row.p.total == 0 && new) || (row.p.total > 0 && done && !row.printed_done) {
            row.printed_done = true;
            eprintln!("{}", render(row, self.width).trim_end());
        }
    }

    fn draw(&mut self) {
        let mut out = String::new();
        if self.drawn > 0 {
            out.push_str(&format!("\x1b[{}A", self.drawn));
        }
        for key in &self.order {
            out.push_str("\x1b[2K");
            out.push_str(&render(&self.rows[key], self.width));
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

/// The text before a line's percentage: a pulled layer is `pulling <first 12 hex>:` whatever
/// the server's status says (Ollama's PullHandler builds it from the digest); a pushed layer
/// shows the server's status as it is, or `pushing <12 hex>...` when there is none (its
/// PushHandler); a plain status is itself.
fn bar_label(dir: Direction, p: &Progress) -> String {
    if p.digest.is_empty() {
        return p.status.clone();
    }
    let hex = p.digest.strip_prefix("sha256:");
    match dir {
        Direction::Pull => {
            let name = hex.unwrap_or(&p.digest).trim();
            let name = match hex {
                Some(_) => name.get(..12).unwrap_or(name),
                None => name,
            };
            format!("pulling {name}:")
        }
        Direction::Push if p.status.is_empty() => {
            format!("pushing {}...", p.digest.get(7..19).unwrap_or(&p.digest))
        }
        Direction::Push => p.status.clone(),
    }
}

/// One row, `width - 1` columns wide when it has a bar.
fn render(row: &Row, width: usize) -> String {
    let p = &row.p;
    if p.total == 0 {
        return row.label.clone();
    }
    let done = p.completed.min(p.total);
    let frac = done as f64 / p.total as f64;
    let pre = format!("{} {:>3.0}%", row.label.trim(), frac * 100.0);
    let pad = |s: String| format!("{s:>6}");
    let rate = row.rate();
    let mut suf = if row.stopped.is_none() {
        format!("{}/{}", pad(human_bytes(done)), pad(human_bytes(p.total)))
    } else {
        format!("{}{}", pad(human_bytes(p.total)), " ".repeat(7))
    };
    if row.stopped.is_none() && rate > 0.0 {
        let eta = Duration::from_secs(((p.total - done) as f64 / rate) as u64);
        suf.push_str(&format!("  {}/s", pad(human_bytes(rate as u64))));
        suf.push_str(&format!("  {}", pad(eta_text(eta))));
    } else {
        suf.push_str(&" ".repeat(18));
    }
    let width = width.saturating_sub(pre.chars().count() + suf.chars().count() + 5);
    let filled = ((width as f64 * frac) as usize).min(width);
    format!(
        "{pre} ▕{}{}▏ {suf}",
        "█".repeat(filled),
        " ".repeat(width - filled)
    )
}

/// Go's `Duration.Round(time.Second).String()`, capped as Ollama's bar does (`1h5m`, `99h+`).
fn eta_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s >= 100 * 3600 => "99h+".into(),
        _ if s >= 3600 => format!("{}h{}m", s / 3600, s / 60 % 60),
        _ if s >= 60 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_ollamas_layout() {
        let t0 = Instant::now();
        let p = |total, completed| Progress {
            status: "pulling 0123456789ab".into(),
            total,
            completed,
            ..Progress::default()
        };
        let row = Row::new("success".into(), p(0, 0), t0);
        assert_eq!(render(&row, LINE_WIDTH), "success");

        // In flight: 400 MB of 1.0 GB after 4 s (samples at 0, 2 and 4 s) = 100 MB/s, 6 s left.
        let mut row = Row::new("pulling 0123456789ab:".into(), p(1_000_000_000, 0), t0);
        row.set(p(1_000_000_000, 200_000_000), t0 + Duration::from_secs(2));
        row.set(p(1_000_000_000, 400_000_000), t0 + Duration::from_secs(4));
        let s = render(&row, LINE_WIDTH);
        assert_eq!(s.chars().count(), LINE_WIDTH - 1, "{s:?}");
        assert!(s.starts_with("pulling 0123456789ab:  40% ▕"), "{s:?}");
        assert!(s.ends_with("▏ 400 MB/  1 GB  100 MB/s      6s"), "{s:?}");
        let bar: String = s.chars().skip_while(|&c| c != '▕').collect();
        let full = bar.chars().filter(|&c| c == '█').count();
        let width = LINE_WIDTH - "pulling 0123456789ab:  40%".len() - 31 - 5;
        assert_eq!(full, width * 4 / 10);

        // Finished: the size alone, no rate or ETA, a full bar.
        row.set(
            p(1_000_000_000, 1_000_000_000),
            t0 + Duration::from_secs(10),
        );
        let s = render(&row, LINE_WIDTH);
        assert_eq!(s.chars().count(), LINE_WIDTH - 1, "{s:?}");
        assert!(s.starts_with("pulling 0123456789ab: 100% ▕████"), "{s:?}");
        assert!(s.contains("█▏   1 GB "), "{s:?}");
        assert!(!s.contains("/s"), "{s:?}");

        // A wider terminal widens the bar only.
        let wide = render(&row, 120);
        assert_eq!(wide.chars().count(), 119, "{wide:?}");
        let bar = |s: &str| s.chars().filter(|&c| c == '█').count();
        assert_eq!(bar(&wide), bar(&s) + 40);
        assert_eq!(wide.replace('█', ""), s.replace('█', ""));
    }

    #[test]
    fn labels_and_skipped_updates_like_ollamas() {
        let digest = format!("sha256:0123456789ab{}", "c".repeat(52));
        let layer = |status: &str, completed| Progress {
            status: status.into(),
            digest: digest.clone(),
            total: 1_000,
            completed,
        };
        // Pull: from the digest, whatever the status; push: the status as sent, no colon.
        assert_eq!(
            bar_label(Direction::Pull, &layer("downloading", 5)),
            "pulling 0123456789ab:"
        );
        assert_eq!(
            bar_label(Direction::Push, &layer("pushing 0123456789ab", 5)),
            "pushing 0123456789ab"
        );
        assert_eq!(
            bar_label(Direction::Push, &layer("", 5)),
            "pushing 0123456789ab..."
        );
        assert_eq!(
            bar_label(Direction::Pull, &Progress::status("pulling manifest")),
            "pulling manifest"
        );
        let t0 = Instant::now();
        let row = Row::new("pushing 0123456789ab".into(), layer("", 400), t0);
        assert!(render(&row, LINE_WIDTH).starts_with("pushing 0123456789ab  40% ▕"));

        // A pull's announcement of a layer at 0 bytes draws nothing; its first bytes do.
        let mut view = View::new(Direction::Pull, false, LINE_WIDTH);
        view.update(layer("pulling 0123456789ab", 0));
        assert!(view.order.is_empty());
        view.update(layer("pulling 0123456789ab", 10));
        assert_eq!(view.order, std::slice::from_ref(&digest));
        // A push shows its layers from the start.
        let mut view = View::new(Direction::Push, false, LINE_WIDTH);
        view.update(layer("pushing 0123456789ab", 0));
        assert_eq!(view.order, [digest]);
    }

    #[test]
    fn push_messages() {
        assert_eq!(push_destination("me/m"), "https://ollama.com/me/m");
        assert_eq!(push_destination("me/m:v2"), "https://ollama.com/me/m:v2");
        assert_eq!(
            push_destination("registry.ollama.ai/me/m:latest"),
            "https://ollama.com/me/m"
        );
        assert_eq!(
            push_destination("localhost:5000/me/m"),
            "localhost:5000/me/m:latest"
        );
        assert_eq!(
            push_error(anyhow!("401 Unauthorized: token expired")).to_string(),
            "you are not authorized to push to this namespace, create the model under a namespace you own"
        );
        assert_eq!(push_error(anyhow!("boom")).to_string(), "boom");
    }

    #[test]
    fn eta_like_go_durations() {
        let d = Duration::from_secs;
        assert_eq!(eta_text(d(0)), "0s");
        assert_eq!(eta_text(d(59)), "59s");
        assert_eq!(eta_text(d(65)), "1m5s");
        assert_eq!(eta_text(d(3600 + 300 + 7)), "1h5m");
        assert_eq!(eta_text(d(100 * 3600)), "99h+");
    }
}
