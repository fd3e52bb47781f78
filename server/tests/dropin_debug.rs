//! OLLAMA_DEBUG reaches the runners (issue 14, item 8): with it, the runner prints llama.cpp's
//! own log at debug level (model loader, tensor placement), forwarded into the server's log, so
//! an operator can see where layers went; without it those lines stay quiet. The real `herd
//! serve` binary and runner on SmolLM2.

mod quantize_support;

use quantize_support::{native_runner, test_model, Serve};
use serde_json::json;

async fn serve_one_request(env: &[(&str, &str)]) -> Vec<String> {
    let runner = native_runner().expect("runner");
    let gguf = test_model("SmolLM2-135M-Instruct.Q4_1.gguf").expect("SmolLM2");
    let serve = Serve::start(&runner, env);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Modelfile"),
        format!("FROM {}\n", gguf.display()),
    )
    .unwrap();
    let (ok, _, err) = serve.herd(&["create", "smol", "-f", "Modelfile"], dir.path());
    assert!(ok, "{err}");
    let (st, body) = serve
        .post(
            "/api/generate",
            json!({"model": "smol", "prompt": "hi", "stream": false,
                   "options": {"num_predict": 1, "num_thread": 1}}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    // Let the forwarder drain the runner's output.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let log = serve.log.lock().unwrap().clone();
    log
}

fn has_loader_lines(log: &[String]) -> bool {
    log.iter()
        .any(|l| l.contains("llama_model_loader") || l.contains("load_tensors"))
}

#[tokio::test]
async fn ollama_debug_shows_llama_cpp_log_and_quiet_by_default() {
    let debug = serve_one_request(&[("OLLAMA_DEBUG", "1")]).await;
    assert!(
        has_loader_lines(&debug),
        "llama.cpp's load log with OLLAMA_DEBUG=1: {:#?}",
        &debug[..debug.len().min(40)]
    );
    let quiet = serve_one_request(&[("OLLAMA_DEBUG", "0")]).await;
    assert!(!has_loader_lines(&quiet), "{quiet:#?}");
}
