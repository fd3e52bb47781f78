//! Errors from a failed model load (issue 22 item 9), on the real `herd serve` with the real
//! runner: a GGUF that passes create's validation but that llama.cpp cannot load answers 500
//! naming the model and llama.cpp's reason (`error loading model: …`), never a path on the
//! server (`/…/blobs/sha256-…`), in the native, OpenAI and Anthropic shapes. Needs `cargo build -p runner-llamacpp`.

mod herd_proc;
mod serve_support;

use herd_proc::HerdServe;
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::native_runner;
use server::gguf::GgufBuilder;

/// `tiny_llama` is a well-formed GGUF (create accepts it) that lacks what llama.cpp's loader
/// needs: it refuses it with `key not found in model: llama.attention.layer_norm_rms_epsilon`.
fn unloadable() -> Vec<u8> {
    GgufBuilder::tiny_llama().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_names_the_model_and_no_server_path() {
    let Some(runner) = native_runner() else {
        return;
    };
    let ts = TestStore::new();
    let runner = runner.display().to_string();
    let herd = HerdServe::start(ts.root(), &[("HERD_RUNNER", runner.as_str())]);
    let http = reqwest::Client::new();

    let bytes = unloadable();
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    let r = http
        .post(herd.url(&format!("/api/blobs/{digest}")))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .post(herd.url("/api/create"))
        .json(&json!({"model": "broken", "files": {"model.gguf": digest}, "stream": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "create accepts it: {}",
        r.text().await.unwrap()
    );

    let root = ts.root().display().to_string();
    let check = |what: &str, body: &str| {
        assert!(body.contains("broken"), "{what}: names the model: {body}");
        assert!(!body.contains(&root), "{what}: store path leaked: {body}");
        assert!(!body.contains("blobs"), "{what}: blob path leaked: {body}");
        assert!(
            !body.contains("sha256-"),
            "{what}: blob name leaked: {body}"
        );
        assert!(
            !body.contains(&runner),
            "{what}: runner path leaked: {body}"
        );
    };
    for (path, body, what) in [
        (
            "/api/generate",
            json!({"model": "broken", "prompt": "hi", "stream": false}),
            "generate",
        ),
        (
            "/api/chat",
            json!({"model": "broken", "messages": [{"role": "user", "content": "hi"}]}),
            "chat (streaming)",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "broken", "messages": [{"role": "user", "content": "hi"}]}),
            "openai",
        ),
        (
            "/v1/messages",
            json!({"model": "broken", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
            "anthropic",
        ),
        (
            "/api/embed",
            json!({"model": "broken", "input": "hi"}),
            "embed",
        ),
    ] {
        let r = http.post(herd.url(path)).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        eprintln!("{what}: {status} {text}");
        // A stream that started already is 200 with an error line; otherwise a 500.
        assert!(
            status == 500 || text.contains("error"),
            "{what}: {status} {text}"
        );
        check(what, &text);
        // llama.cpp's own reason, not only that the load failed.
        assert!(
            text.contains("error loading model: ") && text.contains("layer_norm_rms_epsilon"),
            "{what}: the reason is kept: {text}"
        );
        if path == "/api/generate" {
            assert_eq!(status, 500, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let err = v["error"].as_str().unwrap();
            assert!(err.starts_with("model broken:latest"), "{err}");
        }
    }
    // The operator still sees what failed, path included, in the server's own log.
    let log = herd.log_with("blobs");
    assert!(log.contains("blobs"), "the log keeps the detail:\n{log}");
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}
