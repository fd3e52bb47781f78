//! The Modelfile's `DRAFT` layer drafts through the real server and runner (issue 19): SmolLM2
//! with a copy of itself as its draft model answers with the very bytes SmolLM2 alone gives
//! (greedy), the runner's drafted and accepted tokens reach `/metrics`, and `draft_num_predict`
//! 0 loads the model without its draft.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

/// `herd_draft_{what}_total` for `model`, 0 when absent.
async fn counter(h: &Harness, what: &str, model: &str) -> u64 {
    let text = get(&h.app, "/metrics").await.text();
    let key = format!("herd_draft_{what}_total{{model=\"{model}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

async fn answer(h: &Harness, model: &str, options: Value) -> String {
    let r = h
        .post(
            "/api/generate",
            json!({"model": model, "prompt": "Name three colors of the rainbow.", "stream": false,
                   "options": options}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{model}: {}", r.text());
    r.json()["response"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_draft_layer_drafts_and_leaves_greedy_output_unchanged() {
    let Some(h) = smol_harness(&[]) else { return };
    let gguf = test_model("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap();
    let bytes = std::fs::read(&gguf).unwrap();
    register_file(&h.ts, "smold", &gguf, &[(MT_DRAFT, &bytes)]);
    let opts = json!({"temperature": 0, "num_predict": 24, "num_thread": 1});

    let plain = answer(&h, "smol", opts.clone()).await;
    assert!(!plain.is_empty());
    assert_eq!(counter(&h, "tokens", "smol:latest").await, 0);

    let drafted = answer(&h, "smold", opts.clone()).await;
    assert_eq!(
        drafted, plain,
        "a draft model changes speed, not the answer"
    );
    let (tokens, accepted) = (
        counter(&h, "tokens", "smold:latest").await,
        counter(&h, "accepted_tokens", "smold:latest").await,
    );
    assert!(tokens > 0, "the draft model drafted");
    assert!(accepted > 0 && accepted <= tokens, "{accepted} of {tokens}");
    // Two copies of the weights (the model's and its draft's) count in the runner's size.
    let ps = h.ps().await;
    let runner = ps.iter().find(|m| m["name"] == "smold:latest").unwrap();
    let size = runner["size"].as_u64().unwrap();
    assert!(
        size * 10 > bytes.len() as u64 * 18,
        "size {size} for two copies of {} bytes: {runner}",
        bytes.len()
    );

    // draft_num_predict 0: the model loads without its draft model.
    let mut off = opts.clone();
    off["draft_num_predict"] = json!(0);
    assert_eq!(answer(&h, "smold", off).await, plain);
    assert_eq!(counter(&h, "tokens", "smold:latest").await, tokens);
}
