//! A generation model's micro-batch is its batch, as Ollama launches llama-server (`-b N -ub N`):
//! a `num_batch` above 512 is the micro-batch llama.cpp's context is created with (it stayed 512
//! before), and unset the batch is Ollama's automatic one for the context (1024 past 4096
//! tokens). Read from llama.cpp's own context log, which the runner prints with OLLAMA_DEBUG.
//! The real `herd serve` binary and runner on SmolLM2.

mod quantize_support;

use quantize_support::{native_runner, test_model, Serve};
use serde_json::{json, Value};

/// The `n_batch` and `n_ubatch` values of every llama.cpp context created so far, in order
/// (`llama_context: n_ubatch              = 768`, within the server's log line).
fn contexts(log: &[String]) -> Vec<(u32, u32)> {
    let value = |line: &str, key: &str| -> Option<u32> {
        let rest = line.split_once("llama_context:")?.1.trim_start();
        let rest = rest.strip_prefix(key)?.trim_start().strip_prefix('=')?;
        let rest = rest.trim_start();
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..digits].parse().ok()
    };
    let mut batches = Vec::new();
    let mut out = Vec::new();
    for line in log {
        if let Some(b) = value(line, "n_batch") {
            batches.push(b);
        } else if let Some(u) = value(line, "n_ubatch") {
            out.push((batches.last().copied().unwrap_or(0), u));
        }
    }
    out
}

#[tokio::test]
async fn generation_models_load_with_the_micro_batch_ollama_uses() {
    let runner = native_runner().expect("runner");
    let gguf = test_model("SmolLM2-135M-Instruct.Q4_1.gguf").expect("SmolLM2");
    let serve = Serve::start(&runner, &[("OLLAMA_DEBUG", "1")]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Modelfile"),
        format!("FROM {}\n", gguf.display()),
    )
    .unwrap();
    let (ok, _, err) = serve.herd(&["create", "smol", "-f", "Modelfile"], dir.path());
    assert!(ok, "{err}");
    // (options, the context's (n_batch, n_ubatch)); each differs, so each loads anew.
    let cases: [(Value, (u32, u32)); 3] = [
        (json!({"num_batch": 768, "num_ctx": 4096}), (768, 768)),
        (json!({"num_ctx": 8192}), (1024, 1024)),
        (json!({"num_ctx": 2048}), (512, 512)),
    ];
    for (i, (options, want)) in cases.iter().enumerate() {
        let mut options = options.clone();
        options["num_predict"] = json!(1);
        options["num_thread"] = json!(1);
        let (st, body) = serve
            .post(
                "/api/generate",
                json!({"model": "smol", "prompt": "hi", "stream": false, "options": options}),
            )
            .await;
        assert_eq!(st, 200, "{body}");
        // Let the forwarder drain the runner's output.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let log = serve.log.lock().unwrap().clone();
        let seen = contexts(&log);
        assert_eq!(seen.len(), i + 1, "one context per load: {seen:?}");
        assert_eq!(seen[i], *want, "{options}: {seen:?}");
    }
}
