//! `herd eval repeat REQUEST.json -n N`: the determinism instrument. Sends one request N times in
//! each of five states and counts the answers byte-identical (content, thinking, tool calls) to
//! the very first one:
//! - `cold`: a fresh runner each time (unload, wait until `/api/ps` no longer lists the model);
//! - `warm`: the runner loaded, its cache holding another prompt (a filler request just ran);
//! - `prefix`: the same request just ran (a prefix-cache hit);
//! - `alone`: back to back with nothing else in flight (the baseline for the next state);
//! - `concurrent`: while 3 other streams are generating (they batch with it when the server's
//!   OLLAMA_NUM_PARALLEL ≥ 4; otherwise they queue and the state is not really concurrent).
//!
//! `--json` prints the counts as one record ([`record`]) instead of the table.

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Value};

use super::record::Response;
use super::run::unload_and_wait;
use super::RepeatArgs;
use crate::cli::client::Client;

pub const STATES: [&str; 5] = ["cold", "warm", "prefix", "alone", "concurrent"];

/// Streams running beside the measured request in the `concurrent` state.
const BESIDE: usize = 3;

pub async fn run(args: RepeatArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.request)
        .with_context(|| format!("reading {}", args.request.display()))?;
    let mut body: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON request", args.request.display()))?;
    let Some(obj) = body.as_object_mut() else {
        bail!(
            "{}: the request must be a JSON object",
            args.request.display()
        );
    };
    if let Some(m) = &args.model {
        obj.insert("model".into(), json!(m));
    }
    let Some(model) = obj.get("model").and_then(Value::as_str).map(str::to_string) else {
        bail!("the request names no model (set \"model\" or pass --model)");
    };
    obj.insert("stream".into(), json!(false));
    let path = if obj.contains_key("messages") {
        "/api/chat"
    } else if obj.contains_key("prompt") {
        "/api/generate"
    } else {
        bail!("the request needs messages (chat) or prompt (generate)");
    };
    if args.n == 0 {
        bail!("-n must be at least 1");
    }
    let client = Client::new(&args.client.host)?;
    let counts = measure(&client, path, &body, &model, args.n).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&record(&model, path, args.n, &counts))?
        );
        return Ok(());
    }
    println!("{:<12}identical to the first", "state");
    for (state, same) in STATES.iter().zip(counts) {
        println!("{state:<12}{same}/{}", args.n);
    }
    Ok(())
}

/// The `--json` record: per state, how many of `n` answers were byte-identical to the first.
pub fn record(model: &str, endpoint: &str, n: u32, counts: &[u32]) -> Value {
    let states: Vec<Value> = STATES
        .iter()
        .zip(counts)
        .map(|(state, same)| json!({"state": state, "identical": same, "n": n}))
        .collect();
    json!({
        "model": model,
        "endpoint": endpoint,
        "n": n,
        "states": states,
        "all_identical": counts.iter().all(|&c| c == n),
    })
}

/// The same request with a different question (so it shares no cache prefix with it).
fn filler(body: &Value, k: usize, num_predict: u64) -> Value {
    let mut f = body.clone();
    let q = format!("Filler {k}: write a long story about a lighthouse.");
    if f.get("messages").is_some() {
        f["messages"] = json!([{"role": "user", "content": q}]);
    } else {
        f["prompt"] = json!(q);
    }
    f["options"]["num_predict"] = json!(num_predict);
    f
}

async fn send(client: &Client, path: &str, body: &Value) -> anyhow::Result<Response> {
    let resp: Value = client.json(Method::POST, path, Some(body)).await?;
    Ok(Response::of(&resp))
}

/// Per state, how many of `n` answers equal the first answer of the first state.
async fn measure(
    client: &Client,
    path: &str,
    body: &Value,
    model: &str,
    n: u32,
) -> anyhow::Result<Vec<u32>> {
    let bar = indicatif::ProgressBar::new(n as u64 * STATES.len() as u64);
    let mut first: Option<Response> = None;
    let mut counts = Vec::new();
    for state in STATES {
        bar.set_message(state);
        if state == "prefix" {
            send(client, path, body).await?; // prime the cache with this very request
        }
        let mut same = 0;
        for _ in 0..n {
            let answer = match state {
                "cold" => {
                    unload_and_wait(client, model).await?;
                    send(client, path, body).await?
                }
                "warm" => {
                    send(client, path, &filler(body, 0, 1)).await?;
                    send(client, path, body).await?
                }
                "concurrent" => beside(client, path, body).await?,
                _ => send(client, path, body).await?,
            };
            let reference = first.get_or_insert_with(|| answer.clone());
            same += u32::from(*reference == answer);
            bar.inc(1);
        }
        counts.push(same);
    }
    bar.finish_and_clear();
    Ok(counts)
}

/// Sends `body` once while `BESIDE` filler streams are generating: each filler has produced its
/// first chunk before the measured request goes; they are dropped (cancelled) after it.
async fn beside(client: &Client, path: &str, body: &Value) -> anyhow::Result<Response> {
    let mut streams = Vec::new();
    for k in 0..BESIDE {
        let mut f = filler(body, k + 1, 256);
        f["stream"] = json!(true);
        let mut resp = client.post_stream(path, &f).await?;
        // The first chunk: the filler is admitted and decoding.
        resp.chunk().await.context("reading a filler stream")?;
        streams.push(resp);
    }
    let answer = send(client, path, body).await;
    drop(streams);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_lists_every_state() {
        let r = record("m", "/api/chat", 20, &[20, 20, 19, 20, 20]);
        assert_eq!(r["states"].as_array().unwrap().len(), 5);
        assert_eq!(
            r["states"][2],
            json!({"state": "prefix", "identical": 19, "n": 20})
        );
        assert_eq!(r["all_identical"], json!(false));
        assert_eq!(
            record("m", "/api/chat", 3, &[3; 5])["all_identical"],
            json!(true)
        );
    }
}
