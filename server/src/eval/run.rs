//! `herd eval run`: sends each dataset item to a server and appends one record per item (and
//! repeat) to RUN.jsonl, flushed as it goes so an interrupted run resumes where it stopped: rows
//! already in the file are skipped, a torn last line is cut off. `--cold` unloads the model and
//! waits until `/api/ps` no longer lists it before each item, so every item meets a fresh runner.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Value};

use super::dataset::{self, Item};
use super::record::{self, Record, RowProvenance};
use super::RunArgs;
use crate::cli::client::Client;

/// How long `--cold` waits for `/api/ps` to empty after an unload.
const UNLOAD_WAIT: Duration = Duration::from_secs(60);

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.dataset)
        .with_context(|| format!("reading {}", args.dataset.display()))?;
    let items = dataset::parse(&text)?;
    let client = Client::new(&args.client.host)?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => only_model(&client).await?,
    };
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| args.dataset.with_extension("run.jsonl"));

    // Resume: keep the rows already written, drop a torn last line.
    let done = match std::fs::read_to_string(&out_path) {
        Ok(existing) => {
            let (rows, good_end) = record::read(&existing)?;
            if good_end < existing.len() {
                let f = std::fs::OpenOptions::new().write(true).open(&out_path)?;
                f.set_len(good_end as u64)?;
            }
            rows.into_iter().map(|r| r.key()).collect()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::collections::HashSet::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out_path.display())),
    };
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out_path)
        .with_context(|| format!("opening {}", out_path.display()))?;

    let provenance = RowProvenance {
        host: client.base().to_string(),
        server: client
            .json(Method::GET, "/api/version", None::<&()>)
            .await?,
        model_digest: model_digest(&client, &model).await?,
    };

    let repeat = args.repeat.max(1);
    let todo: Vec<(&Item, u32)> = items
        .iter()
        .flat_map(|it| (0..repeat).map(move |r| (it, r)))
        .filter(|(it, r)| !done.contains(&(it.id.to_string(), *r)))
        .collect();
    let bar = indicatif::ProgressBar::new(todo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} eta {eta} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut errors = 0u64;
    for (item, rep) in todo {
        if args.cold {
            unload_and_wait(&client, &model).await?;
        }
        let (path, body) = item.request(&model)?;
        let mut rec = Record {
            id: item.id.clone(),
            repeat: rep,
            request_hash: dataset::hash(&body),
            prompt_hash: item.prompt_hash(),
            gold: item.gold.clone(),
            scorer: item.scorer.clone(),
            model: model.clone(),
            error: None,
            response: Default::default(),
            done_reason: None,
            prompt_eval_count: 0,
            eval_count: 0,
            total_duration: 0,
            load_duration: 0,
            prompt_eval_duration: 0,
            eval_duration: 0,
            provenance: provenance.clone(),
        };
        match client
            .json::<_, Value>(Method::POST, path, Some(&body))
            .await
        {
            Ok(resp) => rec.fill(&resp),
            // No server: stop so that the rest is not recorded as errors (resume continues).
            Err(e) if e.to_string().starts_with("could not connect") => return Err(e),
            Err(e) => {
                errors += 1;
                rec.error = Some(format!("{e:#}"));
            }
        }
        let mut line = serde_json::to_vec(&rec)?;
        line.push(b'\n');
        out.write_all(&line)?;
        out.flush()?;
        bar.inc(1);
        bar.set_message(format!("{errors} errors"));
    }
    bar.finish();
    eprintln!("wrote {}", out_path.display());
    Ok(())
}

/// The model when the server has exactly one; otherwise `--model` is needed.
pub(super) async fn only_model(client: &Client) -> anyhow::Result<String> {
    let tags: Value = client.json(Method::GET, "/api/tags", None::<&()>).await?;
    let names: Vec<&str> = tags["models"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["name"].as_str()).collect())
        .unwrap_or_default();
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        _ => bail!(
            "the server has {} models: name one with --model",
            names.len()
        ),
    }
}

/// The manifest digest `/api/tags` lists for `model` (`name` or `name:latest`).
async fn model_digest(client: &Client, model: &str) -> anyhow::Result<Option<String>> {
    let tags: Value = client.json(Method::GET, "/api/tags", None::<&()>).await?;
    let full = full_name(model);
    Ok(tags["models"].as_array().and_then(|a| {
        a.iter()
            .find(|m| {
                m["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(&full))
            })
            .and_then(|m| m["digest"].as_str().map(str::to_string))
    }))
}

/// Unloads `model` (keep_alive 0) and waits until `/api/ps` no longer lists it (other models
/// may stay loaded: they do not share its runner).
pub async fn unload_and_wait(client: &Client, model: &str) -> anyhow::Result<()> {
    client
        .send(
            Method::POST,
            "/api/generate",
            Some(&json!({"model": model, "keep_alive": 0})),
        )
        .await?;
    let full = full_name(model);
    let deadline = Instant::now() + UNLOAD_WAIT;
    loop {
        let ps: Value = client.json(Method::GET, "/api/ps", None::<&()>).await?;
        let loaded = ps["models"].as_array().is_some_and(|a| {
            a.iter().any(|m| {
                m["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(&full))
            })
        });
        if !loaded {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("model still loaded {UNLOAD_WAIT:?} after keep_alive 0");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `name` with the `:latest` tag Ollama adds when none is given.
fn full_name(model: &str) -> String {
    if model.contains(':') {
        model.to_string()
    } else {
        format!("{model}:latest")
    }
}
