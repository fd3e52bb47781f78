//! The scale-out test's request mix (nginx_replicas.rs): request `i` names SmolLM2 or gemma (by
//! alias, spelled three ways) and is an Ollama stream, a chat stream, a non-streamed generate,
//! an OpenAI SSE stream or /api/show; `send` runs one through nginx and says whether it ended
//! with 200 and `done`, and if not whether it was cut (the replica died) or answered.
#![allow(dead_code)]

use std::time::Instant;

use serde_json::{json, Value};

/// The router's canonical keys for the two aliases (herd.js `canonical`).
pub const SMOL_KEY: &str = "registry.ollama.ai/library/smol:latest";
pub const GEMMA_KEY: &str = "registry.ollama.ai/library/gemma:latest";
pub const REQUESTS: usize = 200;
/// The request whose stream is in flight at the SmolLM2 replica when that replica is killed.
pub const KILL_AT: usize = REQUESTS / 2;
/// After the 200: a gemma stream in flight at its replica while that replica drains (SIGTERM),
/// then one more gemma request.
pub const DRAIN_AT: usize = REQUESTS + 1;

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Generate,
    Chat,
    GenerateOnce,
    OpenAi,
    Show,
}

/// Request `i`: its model (alias, spelled one of three ways), kind and path/body.
pub fn request(i: usize) -> (&'static str, Kind, &'static str, Value) {
    let (key, names) = if i.is_multiple_of(2) {
        (SMOL_KEY, ["smol", "smol:latest", "library/smol"])
    } else {
        (GEMMA_KEY, ["gemma", "gemma:latest", "library/gemma"])
    };
    let model = names[(i / 2) % 3];
    let predict = match i {
        KILL_AT => 400,
        DRAIN_AT => 40,
        _ => 3,
    };
    let opts = json!({"temperature": 0, "num_predict": predict});
    let msgs = json!([{"role": "user", "content": format!("Say hello {i}")}]);
    let kind = if i == KILL_AT || i == DRAIN_AT {
        Kind::Generate
    } else {
        [
            Kind::Generate,
            Kind::Chat,
            Kind::GenerateOnce,
            Kind::OpenAi,
            Kind::Show,
        ][(i / 2) % 5]
    };
    let (path, body) = match kind {
        Kind::Generate => (
            "/api/generate",
            json!({"model": model, "prompt": format!("Count from {i}:"), "options": opts}),
        ),
        Kind::Chat => (
            "/api/chat",
            json!({"model": model, "messages": msgs, "options": opts}),
        ),
        Kind::GenerateOnce => (
            "/api/generate",
            json!({"model": model, "prompt": format!("Number {i} is"), "stream": false,
                   "options": opts}),
        ),
        Kind::OpenAi => (
            "/v1/chat/completions",
            json!({"model": model, "messages": msgs, "max_tokens": 3, "temperature": 0,
                   "stream": true}),
        ),
        Kind::Show => ("/api/show", json!({"model": model})),
    };
    (key, kind, path, body)
}

pub struct Outcome {
    pub model: &'static str,
    pub sent: Instant,
    pub ended: Instant,
    /// `Err((cut, why))`; `cut`: the connection or the stream broke, or nginx answered 502
    /// (the replica died before its response began), as opposed to an answer from herd.
    pub result: Result<(), (bool, String)>,
}

/// Sends request `i` through nginx; `first_chunk` is told when the first body bytes arrive.
pub async fn send(
    http: &reqwest::Client,
    base: &str,
    i: usize,
    first_chunk: Option<tokio::sync::oneshot::Sender<()>>,
) -> Outcome {
    let (model, kind, path, body) = request(i);
    let sent = Instant::now();
    let result = async {
        let mut r = http
            .post(format!("{base}{path}"))
            .header("X-Request-Id", format!("req-{i}"))
            .json(&body)
            .send()
            .await
            .map_err(|e| (true, format!("send: {e}")))?;
        let status = r.status();
        let mut text = String::new();
        let mut first_chunk = first_chunk;
        while let Some(c) = r.chunk().await.map_err(|e| (true, format!("body: {e}")))? {
            if let Some(tx) = first_chunk.take() {
                let _ = tx.send(());
            }
            text.push_str(&String::from_utf8_lossy(&c));
        }
        if status != 200 {
            return Err((status == 502, format!("status {status}: {text}")));
        }
        let done = match kind {
            Kind::Generate | Kind::Chat => text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .any(|v| v["done"] == true),
            Kind::GenerateOnce => serde_json::from_str::<Value>(&text)
                .is_ok_and(|v| v["done"] == true && v["response"].is_string()),
            Kind::OpenAi => text.trim_end().ends_with("data: [DONE]"),
            Kind::Show => {
                serde_json::from_str::<Value>(&text).is_ok_and(|v| v["details"].is_object())
            }
        };
        if done {
            Ok(())
        } else {
            Err((false, format!("no done: {text}")))
        }
    }
    .await;
    Outcome {
        model,
        sent,
        ended: Instant::now(),
        result,
    }
}
