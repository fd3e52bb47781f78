//! Modelfile `ADAPTER` is applied, never dropped (issue 14, item 5): a tiny random llama created
//! with a LoRA adapter (both generated here) answers differently from the same model without
//! it, `/api/show` lists the adapter, and an adapter that does not fit the model makes the load
//! fail with a clear error instead of running the model bare. The real `herd serve` binary and
//! runner.

mod quantize_support;
#[path = "create_util/tiny_llama.rs"]
mod tiny_llama;

use quantize_support::{native_runner, Serve};
use serde_json::{json, Value};
use server::gguf::GgmlType;

async fn greedy(serve: &Serve, name: &str) -> (u16, Value) {
    let (st, body) = serve
        .post(
            "/api/generate",
            json!({"model": name, "prompt": "Hello world", "raw": true, "stream": false,
                   "options": {"num_predict": 12, "temperature": 0, "num_ctx": 256, "num_thread": 1}}),
        )
        .await;
    (
        st,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

#[tokio::test]
async fn adapters_change_the_output_and_a_misfit_fails_the_load() {
    let runner = native_runner().expect("runner");
    let serve = Serve::start(&runner, &[]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("tiny.gguf"),
        tiny_llama::tiny_llama(GgmlType::F16, 5),
    )
    .unwrap();
    std::fs::write(p.join("lora.gguf"), tiny_llama::tiny_lora(7, "llama")).unwrap();
    std::fs::write(p.join("bad.gguf"), tiny_llama::tiny_lora(7, "gemma3")).unwrap();
    let create = |name: &str, modelfile: &str| {
        std::fs::write(p.join(format!("{name}.Modelfile")), modelfile).unwrap();
        let (ok, _, err) = serve.herd(&["create", name, "-f", &format!("{name}.Modelfile")], p);
        assert!(ok, "{name}: {err}");
    };
    create("bare", "FROM ./tiny.gguf\n");
    create("tuned", "FROM ./tiny.gguf\nADAPTER ./lora.gguf\n");
    create("misfit", "FROM ./tiny.gguf\nADAPTER ./bad.gguf\n");

    let (st, bare) = greedy(&serve, "bare").await;
    assert_eq!(st, 200, "{bare}");
    let (st, tuned) = greedy(&serve, "tuned").await;
    assert_eq!(st, 200, "{tuned}");
    assert_ne!(
        bare["response"], tuned["response"],
        "the adapter must change what the model says"
    );
    // Deterministic: the adapter is applied the same way on a second load.
    let (_, again) = greedy(&serve, "tuned").await;
    assert_eq!(again["response"], tuned["response"]);

    let (st, show) = serve.post("/api/show", json!({"model": "tuned"})).await;
    assert_eq!(st, 200);
    let show: Value = serde_json::from_str(&show).unwrap();
    assert!(
        show["modelfile"].as_str().unwrap().contains("\nADAPTER "),
        "{}",
        show["modelfile"]
    );

    let (st, misfit) = greedy(&serve, "misfit").await;
    assert!(
        st >= 400,
        "a model whose adapter cannot load must not run: {misfit}"
    );
    let msg = misfit["error"].as_str().unwrap_or_default();
    assert!(msg.contains("adapter"), "{misfit}");
    assert!(
        !msg.contains("/blobs/"),
        "errors name no server paths: {msg}"
    );
    // The server is fine afterwards.
    let (st, _) = greedy(&serve, "bare").await;
    assert_eq!(st, 200);
}
