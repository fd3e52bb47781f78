//! The real runner-mlx binary serving the SmolLM2-135M MLX checkpoint over its Unix socket, as
//! the server drives it (the socket harness is runner-llamacpp's tests/common, shared by path).

#[path = "../../runner-llamacpp/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use hyper::StatusCode;
use runner_protocol::{
    CompletionChunk, DoneReason, ErrorBody, ErrorKind, Health, Info, TokenizeResponse,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::model_dir;

const CHAT: &str =
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

#[tokio::test]
async fn greedy_is_deterministic_cold_and_warm_with_prefix_reuse() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "512"]);
    r.wait_ready().await;
    let req = greedy(CHAT, 12);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(complete(&r.socket, req.clone()).await);
    }
    assert!(
        runs[0].text.contains("Paris"),
        "SmolLM2 answers: {:?}",
        runs[0].text
    );
    for c in &runs {
        assert_eq!(c.text, runs[0].text);
    }
    let t = &runs[0].timings;
    assert_eq!(t.cached_tokens, 0, "the first run is cold");
    assert!(t.eval_count > 0 && t.eval_duration_ns > 0 && t.prompt_eval_duration_ns > 0);
    for c in &runs[1..] {
        assert_eq!(c.timings.eval_count, t.eval_count);
        assert_eq!(
            (c.timings.cached_tokens + 1, c.timings.prompt_eval_count),
            (t.prompt_eval_count, 1),
            "a warm run evaluates only the last prompt token again"
        );
    }
    // The first token chunk carries the whole prompt's length.
    let announced = runs[1].chunks.iter().find_map(|c| match c {
        CompletionChunk::Token { prompt_tokens, .. } => *prompt_tokens,
        _ => None,
    });
    assert_eq!(announced, Some(t.prompt_eval_count));
}

#[tokio::test]
async fn four_concurrent_streams_equal_their_solo_runs() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "256", "--parallel", "4"]);
    r.wait_ready().await;
    let prompts = [
        CHAT,
        "1, 2, 3, 4, 5, 6, 7, 8,",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who \
         went out every morning before dawn. One day his nets came back heavier than ever, and",
        "The chemical symbol for gold is Au; the chemical symbol for iron is",
    ];
    let req = |p: &str| {
        let mut req = greedy(p, 16);
        req["cache_prompt"] = json!(false);
        req
    };
    let mut solo = Vec::new();
    for p in prompts {
        solo.push(complete(&r.socket, req(p)).await.text);
    }
    for round in 0..2 {
        let runs = prompts.map(|p| {
            let socket = r.socket.clone();
            let body = req(p);
            tokio::spawn(async move { complete(&socket, body).await })
        });
        for (i, h) in runs.into_iter().enumerate() {
            let c = h.await.unwrap();
            assert_eq!(c.text, solo[i], "round {round}, prompt {i}");
        }
    }
}

#[tokio::test]
async fn stops_logprobs_length_and_a_full_context() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "32"]);
    r.wait_ready().await;
    let story = "Once upon a time, there was a little";
    let full = complete(&r.socket, greedy(story, 12)).await;
    let word = full.text.split_whitespace().nth(1).expect("two words");
    let mut req = greedy(story, 12);
    req["stop"] = json!([word]);
    let cut = complete(&r.socket, req).await;
    assert_eq!(cut.reason, DoneReason::Stop);
    assert!(
        full.text.starts_with(&cut.text) && !cut.text.contains(word),
        "{:?} cut at {word:?} → {:?}",
        full.text,
        cut.text
    );
    assert_eq!(full.reason, DoneReason::Length);
    assert_eq!(full.timings.eval_count, 12);

    let mut req = greedy(CHAT, 4);
    req["logprobs"] = json!(true);
    req["top_logprobs"] = json!(3);
    let lp = complete(&r.socket, req).await;
    let entries: Vec<_> = lp
        .chunks
        .iter()
        .flat_map(|c| match c {
            CompletionChunk::Token { logprobs, .. } => logprobs.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(entries.len(), 4);
    for e in &entries {
        assert!(e.logprob <= 0.0 && e.top_logprobs.len() == 3, "{e:?}");
        assert_eq!(e.top_logprobs[0].logprob, e.logprob, "greedy takes the top");
    }
    let text: String = entries.iter().map(|e| e.token.clone()).collect();
    assert_eq!(text, lp.text, "logprob tokens spell the text");

    // 32 positions hold the 1-token prompt and 31 sampled tokens; the 32nd sampled token needs
    // no position, so without shift generation ends there with `length`.
    let mut req = greedy("The", 40);
    req["shift"] = json!(false);
    let stopped = complete(&r.socket, req).await;
    assert_eq!(stopped.reason, DoneReason::Length);
    assert_eq!(stopped.timings.eval_count, 32, "{:?}", stopped.timings);
    let mut req = greedy("The", 40);
    req["shift"] = json!(true);
    let shifted = complete(&r.socket, req).await;
    assert_eq!(
        shifted.timings.eval_count, 40,
        "a shifting context keeps going"
    );
    assert!(
        shifted.text.starts_with(&stopped.text),
        "the same tokens up to the shift"
    );
}

#[tokio::test]
async fn closing_the_connection_cancels_and_frees_the_slot() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "512", "--parallel", "1"]);
    r.wait_ready().await;
    closing_frees_the_slot(&r, "Write a very long story:").await;
}

#[tokio::test]
async fn a_json_schema_constrains_every_sampled_reply() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "512"]);
    r.wait_ready().await;
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
        "required": ["city", "population"], "additionalProperties": false});
    let prompt = "<|im_start|>user\nName a large city and its population as JSON.<|im_end|>\n\
                  <|im_start|>assistant\n";
    for seed in 0..3 {
        let body = json!({"prompt": prompt, "num_predict": 80,
            "sampling": {"temperature": 0.7, "seed": seed},
            "constraint": {"type": "json_schema", "schema": schema}});
        let c = complete(&r.socket, body).await;
        let v: Value = serde_json::from_str(&c.text)
            .unwrap_or_else(|e| panic!("seed {seed}: {:?} is not JSON: {e}", c.text));
        assert!(v["city"].is_string() && v["population"].is_i64(), "{v}");
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
        assert_eq!(c.reason, DoneReason::Stop);
    }
}

#[tokio::test]
async fn tokenize_detokenize_info_and_embed() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "256", "--parallel", "2"]);
    r.wait_ready().await;
    let (st, body) = call(&r.socket, "GET", "/info", None).await;
    assert_eq!(st, StatusCode::OK);
    let info: Info = serde_json::from_slice(&body).unwrap();
    assert!(
        info.engine.starts_with("mlx-cpu 0.32.4") && info.engine.contains("libmlx 0.32.4 on cpu"),
        "{}",
        info.engine
    );
    assert_eq!((info.n_ctx, info.n_parallel), (256, 2));
    assert_eq!((info.n_vocab, info.n_embd), (49152, 576));
    assert!(info.eog_tokens.contains(&2), "<|im_end|> ends generation");
    assert!(info.memory_bytes > 50 << 20);

    let body = json!({"content": "Hello world", "add_special": false});
    let (st, bytes) = call(&r.socket, "POST", "/tokenize", Some(body)).await;
    assert_eq!(st, StatusCode::OK);
    let tokens = serde_json::from_slice::<TokenizeResponse>(&bytes)
        .unwrap()
        .tokens;
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    let body = json!({"tokens": tokens});
    let (st, bytes) = call(&r.socket, "POST", "/detokenize", Some(body)).await;
    assert_eq!(st, StatusCode::OK);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["content"], "Hello world");

    let (st, bytes) = call(&r.socket, "POST", "/embed", Some(json!({"inputs": ["hi"]}))).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let e: ErrorBody = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(e.error.kind, ErrorKind::BadRequest);
    assert!(
        e.error.message.contains("embeddings"),
        "{}",
        e.error.message
    );
}

#[tokio::test]
async fn what_it_cannot_load_is_a_typed_load_error() {
    let _g = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(std::path::PathBuf, Vec<&str>, &str)> = vec![
        (dir.path().join("nothing"), vec![], "does not exist"),
        (model_dir(), vec!["--lora", "/x.gguf"], "LoRA"),
        (model_dir(), vec!["--mmproj", "/x.gguf"], "vision"),
        (model_dir(), vec!["--cache-type", "q8_0"], "q8_0"),
        (dir.path().to_path_buf(), vec![], "config.json"),
    ];
    for (model, extra, want) in cases {
        let r = Runner::spawn(&model, &extra);
        let deadline = Instant::now() + Duration::from_secs(60);
        let (kind, message) = loop {
            match r.health().await {
                Health::Failed { kind, message } => break (kind, message),
                h => assert!(Instant::now() < deadline, "still {h:?}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(kind, ErrorKind::ModelLoad);
        assert!(
            message.contains(want),
            "{message:?} should mention {want:?}"
        );
        let (st, _) = call(&r.socket, "POST", "/completion", Some(greedy("Hi", 1))).await;
        assert_ne!(
            st,
            StatusCode::OK,
            "a failed load answers requests with its error"
        );
    }
}

#[tokio::test]
async fn sigterm_cancels_in_flight_and_exits_zero() {
    let _g = serial().await;
    let mut r = Runner::spawn(&model_dir(), &["--ctx-size", "256"]);
    r.wait_ready().await;
    // A count does not end by itself within 2000 tokens.
    sigterm_drains(&mut r, "1, 2, 3, 4, 5,").await;
}

#[tokio::test]
async fn bf16_compute_answers_and_is_deterministic() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "256", "--compute", "bf16"]);
    r.wait_ready().await;
    let req = greedy(CHAT, 12);
    let (a, b) = (
        complete(&r.socket, req.clone()).await,
        complete(&r.socket, req).await,
    );
    assert!(
        a.text.contains("Paris"),
        "SmolLM2 in bf16 answers: {:?}",
        a.text
    );
    assert_eq!(a.text, b.text);
}
