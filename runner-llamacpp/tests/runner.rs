//! The real runner binary with gemma-3-270m on one thread, over its Unix socket.

mod common;

use common::*;
use hyper::StatusCode;
use runner_protocol::{
    CompletionChunk, DoneReason, EmbedResponse, ErrorBody, ErrorKind, Health, Info,
    TokenizeResponse,
};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn greedy_is_byte_identical_cold_and_warm_with_prefix_reuse() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "512"]);
    r.wait_ready().await;
    let req = greedy(
        "The capital of France is Paris. The capital of Germany is",
        12,
    );
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(complete(&r.socket, req.clone()).await);
    }
    assert!(!runs[0].text.is_empty());
    for c in &runs {
        assert_eq!(c.text, runs[0].text);
        assert_eq!(c.timings.eval_count, 12);
    }
    assert_eq!(runs[0].timings.cached_tokens, 0, "first run is cold");
    let prompt_len = runs[0].timings.prompt_eval_count;
    for c in &runs[1..] {
        assert!(c.timings.cached_tokens > 0, "warm run reuses the prefix");
        // Only the last prompt token is evaluated again.
        assert_eq!(c.timings.prompt_eval_count, 1);
        assert_eq!(c.timings.cached_tokens + 1, prompt_len);
    }
}

// Batch invariance with the default flags (repacked weights, prompts of several requests in
// flight): on CPU llama.cpp picks kernels by how many rows share an op, and that depends on
// which requests share a step (arrival timing). patches/llama.cpp make the matmul and decode
// attention rows independent of that count, and the engine decodes each prompt chunk alone, cut
// as when its request runs alone (src/numerics.rs measures every case). Unpatched, an earlier
// short-prompt version of this test failed 6 runs in 6 with the default flags; with the patches
// but prompt chunks batched beside decode rows, this one failed 2 in 2 (on the 64+-token
// prompt). Prompt caching is off so that every concurrent round prefills its prompts while the
// others decode; one prompt is over 64 tokens (flash attention's tiled path), the others over 8
// (where the tiled K-quant matmul starts).
#[tokio::test]
async fn four_concurrent_streams_equal_their_solo_runs() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "256", "--parallel", "4"]);
    r.wait_ready().await;
    let long = "Once upon a time, in a small village by the sea, there lived an old \
                fisherman who went out every morning before dawn. One day his nets came \
                back heavier than ever, and among the fish he found a small golden box \
                with a strange mark on its lid. He carried it home, set it on the table \
                beside the window, and waited until his wife came back from the market. \
                When she saw the mark she went pale, because she had seen it once before, \
                long ago, on";
    let prompts = [
        "The capital of France is Paris, and the capital of Italy is",
        "1, 2, 3, 4, 5, 6, 7, 8,",
        long,
        "The chemical symbol for gold is Au; the chemical symbol for iron is",
    ];
    let req = |p: &str| {
        let mut req = greedy(p, 16);
        req["cache_prompt"] = json!(false);
        req
    };
    let mut solo = Vec::new();
    for p in prompts {
        let c = complete(&r.socket, req(p)).await;
        assert_eq!(c.timings.eval_count, 16);
        assert!(c.timings.prompt_eval_count >= if p == long { 64 } else { 8 });
        solo.push(c.text);
    }
    for round in 0..5 {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let (socket, req) = (r.socket.clone(), req(p));
                tokio::spawn(async move { complete(&socket, req).await })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.await.unwrap().text, solo[i], "round {round}, prompt {i}");
        }
    }
}

#[tokio::test]
async fn stop_strings_cut_the_output_and_num_predict_gives_length() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "256"]);
    r.wait_ready().await;
    let prompt = "The capital of France is Paris. The capital of Germany is";
    let full = complete(&r.socket, greedy(prompt, 16)).await;
    assert_eq!(full.reason, DoneReason::Length);
    assert_eq!(full.timings.eval_count, 16);

    // A stop string taken from the middle of the unconstrained output.
    let words: Vec<&str> = full.text.split_whitespace().collect();
    assert!(words.len() >= 3, "need a few words: {:?}", full.text);
    let stop = words[2];
    let cut = full.text.find(stop).unwrap();
    let mut req = greedy(prompt, 16);
    req["stop"] = json!([stop, "never-appears-xyz"]);
    let stopped = complete(&r.socket, req).await;
    assert_eq!(stopped.reason, DoneReason::Stop);
    assert_eq!(stopped.text, full.text[..cut]);
    assert!(!stopped.text.contains(stop));

    let five = complete(&r.socket, greedy(prompt, 5)).await;
    assert_eq!(five.reason, DoneReason::Length);
    assert_eq!(five.timings.eval_count, 5);
    assert!(full.text.starts_with(&five.text));

    // Logprobs: one entry per token; greedy picks the most likely alternative.
    let mut req = greedy(prompt, 4);
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
    assert_eq!(
        entries.iter().map(|e| e.token.as_str()).collect::<String>(),
        lp.text
    );
    for e in &entries {
        assert!(e.logprob <= 0.0 && e.logprob.is_finite());
        assert_eq!(e.top_logprobs.len(), 3);
        assert_eq!(e.top_logprobs[0].token, e.token);
        assert_eq!(e.top_logprobs[0].logprob, e.logprob);
        assert!(e.top_logprobs[1].logprob <= e.top_logprobs[0].logprob);
    }

    // Seeded sampling repeats itself when the evaluation is the same (no prefix reuse: a
    // re-evaluated last token alone can differ from the full-prompt batch in the last float
    // bits, which moves a temperature-1 draw); another seed (very likely) differs somewhere.
    let sampled = |seed: i64| {
        json!({"prompt": "My favourite animal is", "num_predict": 12, "cache_prompt": false,
               "sampling": {"temperature": 1.0, "top_k": 100, "top_p": 1.0, "seed": seed}})
    };
    let a = complete(&r.socket, sampled(7)).await.text;
    assert_eq!(a, complete(&r.socket, sampled(7)).await.text);
    let mut differs = false;
    for seed in 8..12 {
        differs |= complete(&r.socket, sampled(seed)).await.text != a;
    }
    assert!(differs, "four other seeds all reproduced {a:?}");
}

#[tokio::test]
async fn closing_the_connection_cancels_and_frees_the_slot() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "512", "--parallel", "1"]);
    r.wait_ready().await;
    closing_frees_the_slot(&r, "Write a very long story:").await;
}

#[tokio::test]
async fn tokenize_detokenize_embed_and_info() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "256"]);
    r.wait_ready().await;
    let text = "Héllo wörld, <b>bold</b> 😀";
    let (st, b) = call(
        &r.socket,
        "POST",
        "/tokenize",
        Some(json!({"content": text})),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let toks: TokenizeResponse = serde_json::from_slice(&b).unwrap();
    assert!(toks.tokens.len() > 5);
    let (st, b) = call(
        &r.socket,
        "POST",
        "/detokenize",
        Some(json!({"tokens": toks.tokens})),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let back: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(back["content"], text);

    // add_special puts BOS first; render_special controls whether it shows.
    let (_, b) = call(
        &r.socket,
        "POST",
        "/tokenize",
        Some(json!({"content": "hi", "add_special": true})),
    )
    .await;
    let with_bos: TokenizeResponse = serde_json::from_slice(&b).unwrap();
    assert_eq!(with_bos.tokens.len(), 2);
    let (_, b) = call(
        &r.socket,
        "POST",
        "/detokenize",
        Some(json!({"tokens": with_bos.tokens, "render_special": true})),
    )
    .await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&b).unwrap()["content"],
        "<bos>hi"
    );
    let (_, b) = call(
        &r.socket,
        "POST",
        "/detokenize",
        Some(json!({"tokens": with_bos.tokens})),
    )
    .await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&b).unwrap()["content"],
        "hi"
    );

    let (st, b) = call(
        &r.socket,
        "POST",
        "/detokenize",
        Some(json!({"tokens": [999_999_999]})),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(
        serde_json::from_slice::<ErrorBody>(&b).unwrap().error.kind,
        ErrorKind::BadRequest
    );

    let (st, b) = call(
        &r.socket,
        "POST",
        "/embed",
        Some(json!({"inputs": ["hello world", "a different sentence"]})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    let e: EmbedResponse = serde_json::from_slice(&b).unwrap();
    assert_eq!(e.embeddings.len(), 2);
    assert!(e.embeddings.iter().all(|v| v.len() == 640));
    assert_ne!(e.embeddings[0], e.embeddings[1]);
    assert!(e.embeddings[0].iter().all(|x| x.is_finite()));
    // Same input, same vector; generation still works after the embeddings toggle.
    let (_, b2) = call(
        &r.socket,
        "POST",
        "/embed",
        Some(json!({"inputs": ["hello world"]})),
    )
    .await;
    let e2: EmbedResponse = serde_json::from_slice(&b2).unwrap();
    assert_eq!(e2.embeddings[0], e.embeddings[0]);
    assert_eq!(
        complete(&r.socket, greedy("Hello", 2))
            .await
            .timings
            .eval_count,
        2
    );

    // Inputs longer than a slot: refused without truncate, cut with it to the slot less
    // Ollama's BOS/EOS reservation (254 content tokens), plus gemma's own BOS.
    let long = "word ".repeat(400);
    let req = json!({"inputs": [long], "truncate": false});
    let (st, b) = call(&r.socket, "POST", "/embed", Some(req)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let kind = serde_json::from_slice::<ErrorBody>(&b).unwrap().error.kind;
    assert_eq!(kind, ErrorKind::ContextOverflow);
    let (st, b) = call(&r.socket, "POST", "/embed", Some(json!({"inputs": [long]}))).await;
    assert_eq!(st, StatusCode::OK);
    let cut: EmbedResponse = serde_json::from_slice(&b).unwrap();
    assert_eq!(cut.prompt_eval_count, 255);

    let (st, b) = call(&r.socket, "GET", "/info", None).await;
    assert_eq!(st, StatusCode::OK);
    let info: Info = serde_json::from_slice(&b).unwrap();
    assert_eq!(info.engine, "llama.cpp b11434");
    assert_eq!(
        (info.n_embd, info.n_vocab, info.n_ctx, info.n_parallel),
        (640, 262_144, 256, 1)
    );
    assert!(
        info.eog_tokens.contains(&1),
        "gemma's <eos> is id 1: {:?}",
        info.eog_tokens
    );
}

#[tokio::test]
async fn long_prompts_truncate_or_overflow_and_full_contexts_shift_or_stop() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "256"]);
    r.wait_ready().await;
    let long = "one two three four five six seven eight nine ten ".repeat(40); // ~400 tokens
    let mut req = greedy(&long, 2);
    req["truncate"] = json!(false);
    let (st, b) = call(&r.socket, "POST", "/completion", Some(req.clone())).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(
        serde_json::from_slice::<ErrorBody>(&b).unwrap().error.kind,
        ErrorKind::ContextOverflow
    );
    req["truncate"] = json!(true);
    let c = complete(&r.socket, req).await;
    // Ollama's cut: the BOS and num_keep 4, then the newest tail, 256 - (256 - 5) / 2 = 131
    // tokens in all, half of the rest of the slot left for the answer.
    assert_eq!(c.timings.prompt_eval_count, 131, "{:?}", c.timings);

    // A 200-token prompt plus 80 generated overruns 256 positions.
    let prompt = "a b c d e f g h i j ".repeat(20);
    let mut req = greedy(&prompt, 80);
    req["shift"] = json!(false);
    let c = complete(&r.socket, req.clone()).await;
    assert_eq!(c.reason, DoneReason::Length);
    assert!(
        c.timings.eval_count < 80,
        "stopped at the context end: {:?}",
        c.timings
    );
    req["shift"] = json!(true);
    let c = complete(&r.socket, req).await;
    assert_eq!(c.reason, DoneReason::Length);
    assert_eq!(c.timings.eval_count, 80, "shifted and kept going");
}

#[tokio::test]
async fn health_reports_loading_then_ready() {
    let _g = serial().await;
    let r = Runner::spawn(&gemma(), &["--ctx-size", "256", "--load-delay-ms", "1500"]);
    assert!(matches!(r.health().await, Health::Loading { .. }));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&r.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket is private");
    // A request made while loading waits for the load instead of failing.
    let c = complete(&r.socket, greedy("Hi", 1)).await;
    assert_eq!(c.timings.eval_count, 1);
    assert_eq!(r.health().await, Health::Ready);
}

#[tokio::test]
async fn a_bad_model_path_reports_model_load() {
    let r = Runner::spawn(std::path::Path::new("/nonexistent/model.gguf"), &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match r.health().await {
            Health::Failed { kind, message } => {
                assert_eq!(kind, ErrorKind::ModelLoad);
                assert!(message.contains("/nonexistent/model.gguf"), "{message}");
                break;
            }
            h => assert!(Instant::now() < deadline, "still {h:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, b) = call(&r.socket, "POST", "/completion", Some(greedy("x", 1))).await;
    assert_eq!(st.as_u16(), ErrorKind::ModelLoad.status());
    assert_eq!(
        serde_json::from_slice::<ErrorBody>(&b).unwrap().error.kind,
        ErrorKind::ModelLoad
    );
}

#[tokio::test]
async fn a_missing_backend_module_is_a_clear_load_error() {
    // The binary and its linked libraries, but no libggml-cpu*.so beside them.
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_runner-llamacpp"));
    let from = exe.parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let linked = ["libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so"];
        if linked.iter().any(|l| name.starts_with(l)) {
            std::fs::copy(e.path(), dir.path().join(&name)).unwrap();
        }
    }
    let copy = dir.path().join("runner-llamacpp");
    std::fs::copy(exe, &copy).unwrap();
    let r = Runner::spawn_exe(&copy, &gemma(), &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match r.health().await {
            Health::Failed { kind, message } => {
                assert_eq!(kind, ErrorKind::ModelLoad);
                assert!(message.contains("no ggml backend"), "{message}");
                break;
            }
            h => assert!(Instant::now() < deadline, "still {h:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sigterm_cancels_in_flight_and_exits_zero() {
    let _g = serial().await;
    let mut r = Runner::spawn(&gemma(), &["--ctx-size", "256"]);
    r.wait_ready().await;
    sigterm_drains(&mut r, "Tell me a story.").await;
}
