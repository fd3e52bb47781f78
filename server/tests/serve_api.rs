//! Inference endpoints through the production app, a real scheduler and the fake runner: Ollama's
//! exact body shapes (stream and not), load/unload replies, per-handler 404 strings, request
//! validation errors, option precedence, prompt layering, /api/ps and embeddings.
//! Needs `cargo build -p fake-runner` first.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const TEXT: &str = "Hello from the fake runner.";

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn generate_streams_ollama_chunks() {
    let h = Harness::new();
    h.fake("fake", &[], &[]);
    let r = h
        .post("/api/generate", json!({"model": "fake", "prompt": "hi"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.headers["content-type"], "application/x-ndjson");
    let ls = lines(&r);
    assert!(ls.len() >= 3, "several chunks: {ls:?}");
    let (last, rest) = ls.split_last().unwrap();
    for c in rest {
        assert_eq!(keys(c), ["model", "created_at", "response", "done"], "{c}");
        assert_eq!(c["model"], "fake", "the name as requested");
        assert_eq!(c["done"], false);
        rfc3339(c["created_at"].as_str().unwrap());
    }
    let text: String = rest
        .iter()
        .map(|c| c["response"].as_str().unwrap())
        .collect();
    assert_eq!(text, TEXT);
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["response"], "");
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "eval_count",
    ] {
        assert!(
            last[k].as_u64().unwrap() > 0,
            "{k} is a positive integer: {last}"
        );
    }
    assert!(last["total_duration"].as_u64() >= last["load_duration"].as_u64());
    assert_eq!(last["eval_count"], rest.len() as u64);
    // context = tokens of prompt + output; the fake tokenizer is one token per byte (+3).
    let ctx: Vec<u64> = last["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = format!("hi{TEXT}")
        .bytes()
        .map(|b| u64::from(b) + 3)
        .collect();
    assert_eq!(ctx, expected);
}

#[tokio::test]
async fn generate_and_chat_without_streaming_fold_the_text() {
    let h = Harness::new();
    h.fake("fake", &[], &[]);
    let r = h
        .post(
            "/api/generate",
            json!({"model": "fake", "prompt": "hi", "stream": false, "raw": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let b = r.json();
    assert_eq!(b["response"], TEXT);
    assert_eq!(
        (b["done"].clone(), b["done_reason"].clone()),
        (json!(true), json!("stop"))
    );
    assert!(b.get("context").is_none(), "no context with raw");
    assert!(b["eval_count"].as_u64().unwrap() > 0);

    let r = h
        .post(
            "/api/chat",
            json!({"model": "fake", "stream": false, "messages": [{"role": "USER", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let b = r.json();
    assert_eq!(b["message"], json!({"role": "assistant", "content": TEXT}));
    assert_eq!(b["done_reason"], "stop");
    assert!(b["total_duration"].as_u64().unwrap() > 0);

    let r = h
        .post(
            "/api/chat",
            json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    let ls = lines(&r);
    let (last, rest) = ls.split_last().unwrap();
    for c in rest {
        assert_eq!(keys(c), ["model", "created_at", "message", "done"], "{c}");
        assert_eq!(c["message"]["role"], "assistant");
    }
    let text: String = rest
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, TEXT);
    assert_eq!(last["message"], json!({"role": "assistant", "content": ""}));
    assert!(last["eval_count"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn empty_prompt_loads_and_keep_alive_zero_unloads() {
    let h = Harness::new();
    h.fake("fake", &[], &[]);
    let r = h.post("/api/generate", json!({"model": "fake"})).await;
    assert_eq!(r.status, StatusCode::OK);
    let b = r.json();
    assert_eq!(
        keys(&b),
        ["model", "created_at", "response", "done", "done_reason"]
    );
    assert_eq!(b["done_reason"], "load");
    let pid = h.runner_pid().await;

    let r = h
        .post("/api/generate", json!({"model": "fake", "keep_alive": 0}))
        .await;
    assert_eq!(r.json()["done_reason"], "unload");
    assert!(h.ps().await.is_empty());
    assert!(
        scheduler_support::wait_gone(pid, std::time::Duration::from_secs(5)).await,
        "runner process gone"
    );

    let r = h
        .post("/api/chat", json!({"model": "fake", "messages": []}))
        .await;
    let b = r.json();
    assert_eq!(b["done_reason"], "load");
    assert_eq!(b["message"], json!({"role": "assistant", "content": ""}));
    let pid = h.runner_pid().await;
    // A real request with keep_alive 0 unloads right after it.
    let r = h
        .post(
            "/api/chat",
            json!({"model": "fake", "keep_alive": 0, "stream": false,
                                  "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(r.json()["message"]["content"], TEXT);
    assert!(scheduler_support::wait_gone(pid, std::time::Duration::from_secs(5)).await);
    assert!(h.ps().await.is_empty());
}

#[tokio::test]
async fn not_found_and_validation_errors_use_ollamas_words() {
    let h = Harness::new();
    h.fake("fake", &[], &[]);
    let cases = [
        (
            "/api/generate",
            json!({"model": "nope", "prompt": "x"}),
            404,
            "model 'nope' not found",
        ),
        (
            "/api/generate",
            json!({"model": "", "prompt": "x"}),
            404,
            "model '' not found",
        ),
        (
            "/api/chat",
            json!({"model": "nope", "messages": []}),
            404,
            "model 'nope' not found",
        ),
        (
            "/api/chat",
            json!({"model": "", "messages": []}),
            400,
            "model is required",
        ),
        (
            "/api/embed",
            json!({"model": "nope", "input": "x"}),
            404,
            "model \"nope\" not found, try pulling it first",
        ),
        (
            "/api/embeddings",
            json!({"model": "nope", "prompt": "x"}),
            404,
            "model \"nope\" not found, try pulling it first",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "format": "yaml"}),
            400,
            "invalid format: \"\\\"yaml\\\"\"; expected \"json\" or a valid JSON Schema object",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "think": true}),
            400,
            "\"fake\" does not support thinking",
        ),
        (
            "/api/chat",
            json!({"model": "fake", "messages": [], "think": "high"}),
            400,
            "\"fake\" does not support thinking",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "top_logprobs": 21}),
            400,
            "top_logprobs must be between 0 and 20",
        ),
        (
            "/api/chat",
            json!({"model": "fake", "messages": [], "top_logprobs": -1}),
            400,
            "top_logprobs must be between 0 and 20",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "raw": true, "system": "s"}),
            400,
            "raw mode does not support template, system, or context",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "options": {"num_ctx": "big"}}),
            500,
            "option \"num_ctx\" must be of type integer",
        ),
        (
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "keep_alive": "300"}),
            400,
            "time: missing unit in duration \"300\"",
        ),
        (
            "/api/embed",
            json!({"model": "fake", "input": [1]}),
            400,
            "invalid input type",
        ),
    ];
    for (uri, body, status, msg) in cases {
        let r = h.post(uri, body.clone()).await;
        assert_eq!(
            (r.status.as_u16(), r.json()),
            (status, json!({"error": msg})),
            "{uri} {body}"
        );
    }
    // Nothing above needed a runner.
    assert!(h.ps().await.is_empty());
    // Unknown option keys are ignored.
    let r = h
        .post(
            "/api/generate",
            json!({"model": "fake", "prompt": "x", "stream": false, "options": {"mirostat": 2}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn num_ctx_precedence_request_over_modelfile_over_default() {
    let h = Harness::new();
    h.fake("plain", &[], &[]);
    h.fake(
        "tuned",
        &[],
        &[(MT_PARAMS, br#"{"num_ctx":2048,"temperature":0.1}"#)],
    );
    async fn ctx(h: &Harness) -> u64 {
        h.ps().await[0]["context_length"].as_u64().unwrap()
    }
    h.post("/api/generate", json!({"model": "plain"})).await;
    assert_eq!(ctx(&h).await, 4096, "CPU default");
    h.post("/api/generate", json!({"model": "plain", "keep_alive": 0}))
        .await;
    h.post("/api/generate", json!({"model": "tuned"})).await;
    assert_eq!(ctx(&h).await, 2048, "Modelfile PARAMETER num_ctx");
    // A different runner option reloads the model with the request's value.
    h.post(
        "/api/generate",
        json!({"model": "tuned", "options": {"num_ctx": 1024}}),
    )
    .await;
    let ps = h.ps().await;
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0]["context_length"], 1024);
}

#[tokio::test]
async fn prompt_layers_render_through_the_template() {
    let h = Harness::new();
    let template = b"{{ if .System }}[S:{{ .System }}]{{ end }}{{ range .Messages }}<{{ .Role }}:{{ .Content }}>{{ end }}";
    h.fake(
        "echo",
        &["--echo"],
        &[
            (MT_TEMPLATE, template),
            (MT_SYSTEM, b"be brief"),
            (
                MT_MESSAGES,
                br#"[{"role":"user","content":"q0"},{"role":"assistant","content":"a0"}]"#,
            ),
        ],
    );
    let gen =
        |body: Value| async { h.post("/api/generate", body).await.json()["response"].clone() };
    assert_eq!(
        gen(json!({"model": "echo", "prompt": "hi", "stream": false})).await,
        "[S:be brief]<system:be brief><user:q0><assistant:a0><user:hi>"
    );
    assert_eq!(
        gen(json!({"model": "echo", "prompt": "hi", "system": "mine", "stream": false})).await,
        "[S:mine]<system:mine><user:q0><assistant:a0><user:hi>"
    );
    assert_eq!(
        gen(json!({"model": "echo", "prompt": "hi", "raw": true, "stream": false})).await,
        "hi"
    );
    // A legacy (.Prompt) template runs once per turn, MESSAGE layers included, with the
    // appended {{ .Response }} cut on the last.
    assert_eq!(
        gen(
            json!({"model": "echo", "prompt": "hi", "template": "T={{ .Prompt }}", "stream": false})
        )
        .await,
        "T=q0a0T=hi"
    );
    let chat = h
        .post(
            "/api/chat",
            json!({"model": "echo", "stream": false, "messages": [
                {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
        )
        .await;
    // SYSTEM layer first, MESSAGE layers, then the request; same-role messages merged.
    assert_eq!(
        chat.json()["message"]["content"],
        "[S:be brief]<system:be brief><user:q0><assistant:a0><user:a\n\nb>"
    );
    let chat = h
        .post(
            "/api/chat",
            json!({"model": "echo", "stream": false, "_debug_render_only": true, "messages": [
                {"role": "system", "content": "own"}, {"role": "user", "content": "b"}]}),
        )
        .await;
    assert_eq!(
        chat.json()["_debug_info"]["rendered_template"],
        "[S:own]<user:q0><assistant:a0><system:own><user:b>"
    );
}

#[tokio::test]
async fn chat_drops_oldest_turns_to_fit_num_ctx() {
    let h = Harness::new();
    h.fake(
        "echo",
        &["--echo"],
        &[(
            MT_TEMPLATE,
            b"{{ range .Messages }}{{ .Content }}|{{ end }}",
        )],
    );
    let long = "x".repeat(40);
    let msgs = json!([
        {"role": "system", "content": "S"},
        {"role": "user", "content": long},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "last"}
    ]);
    let ask = |truncate: Option<bool>| {
        let mut body = json!({"model": "echo", "stream": false, "messages": msgs.clone(),
                              "options": {"num_ctx": 64}});
        if let Some(t) = truncate {
            body["truncate"] = json!(t);
        }
        async { h.post("/api/chat", body).await.json()["message"]["content"].clone() }
    };
    // The fake tokenizer counts bytes (+BOS): "S|" + 41 + "last|" fits 64, two long turns do not.
    assert_eq!(ask(None).await, format!("S|{long}|last|"));
    assert_eq!(ask(Some(false)).await, format!("S|{long}|{long}|last|"));
}

#[tokio::test]
async fn ps_reports_loaded_models_with_keep_alive_deadlines() {
    let h = Harness::new();
    // Distinct blobs: two names on one blob are one runner.
    h.fake("a", &["--n-embd", "8"], &[]);
    h.fake("b", &["--n-embd", "9"], &[]);
    assert!(h.ps().await.is_empty());
    h.post("/api/generate", json!({"model": "a", "keep_alive": "10m"}))
        .await;
    h.post("/api/generate", json!({"model": "b", "keep_alive": -1}))
        .await;
    let ps = h.ps().await;
    assert_eq!(ps.len(), 2);
    assert_eq!(
        keys(&ps[0]),
        [
            "name",
            "model",
            "size",
            "digest",
            "details",
            "expires_at",
            "size_vram",
            "context_length"
        ]
    );
    // Forever first, then the finite keep-alive.
    assert_eq!(
        (ps[0]["name"].clone(), ps[1]["name"].clone()),
        (json!("b:latest"), json!("a:latest"))
    );
    assert_eq!(ps[1]["model"], "a:latest");
    let now = time::OffsetDateTime::now_utc();
    let a = rfc3339(ps[1]["expires_at"].as_str().unwrap());
    let left = (a - now).whole_seconds();
    assert!((570..=600).contains(&left), "10m keep-alive, {left}s left");
    assert!(rfc3339(ps[0]["expires_at"].as_str().unwrap()).year() > 2200);
    assert!(ps[1]["size"].as_u64().unwrap() > 0);
    assert_eq!(ps[1]["digest"].as_str().unwrap().len(), 64);
    assert!(ps[1]["details"].is_object());
}

#[tokio::test]
async fn embed_normalizes_and_cuts_dimensions() {
    let h = Harness::new();
    h.fake("emb", &["--n-embd", "16"], &[]);
    let norm = |v: &Value| -> f64 {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap().powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let r = h
        .post("/api/embed", json!({"model": "emb", "input": ["a", "b"]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let b = r.json();
    assert_eq!(b["model"], "emb");
    let e = b["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    assert_ne!(e[0], e[1]);
    for v in e {
        assert_eq!(v.as_array().unwrap().len(), 16);
        assert!((norm(v) - 1.0).abs() < 1e-5);
    }
    assert!(b["prompt_eval_count"].as_u64().unwrap() > 0);
    let cut = h
        .post(
            "/api/embed",
            json!({"model": "emb", "input": "a", "dimensions": 4}),
        )
        .await
        .json();
    let c = &cut["embeddings"][0];
    assert_eq!(c.as_array().unwrap().len(), 4);
    assert!((norm(c) - 1.0).abs() < 1e-5);
    // The cut vector is the full one's prefix, renormalized.
    let full = &e[0];
    let scale = c[0].as_f64().unwrap() / full[0].as_f64().unwrap();
    for i in 0..4 {
        assert!((c[i].as_f64().unwrap() - full[i].as_f64().unwrap() * scale).abs() < 1e-5);
    }
    let legacy = h
        .post("/api/embeddings", json!({"model": "emb", "prompt": "a"}))
        .await
        .json();
    let raw = &legacy["embedding"];
    let n = norm(raw);
    assert!((n - 1.0).abs() > 1e-3, "legacy vector is raw, norm {n}");
    for i in 0..16 {
        assert!((raw[i].as_f64().unwrap() / n - full[i].as_f64().unwrap()).abs() < 1e-5);
    }
    assert_eq!(
        h.post("/api/embed", json!({"model": "emb", "input": []}))
            .await
            .json(),
        json!({"model": "emb", "embeddings": []})
    );
    assert_eq!(
        h.post("/api/embeddings", json!({"model": "emb", "prompt": ""}))
            .await
            .json(),
        json!({"embedding": []})
    );
}

#[tokio::test]
async fn generate_context_round_trips() {
    let h = Harness::new();
    h.fake("echo", &["--echo"], &[]);
    let first = h
        .post(
            "/api/generate",
            json!({"model": "echo", "prompt": "hi", "stream": false}),
        )
        .await
        .json();
    // No template: the prompt is the text, and the echo runner repeats it.
    assert_eq!(first["response"], "hi");
    let ctx = first["context"].clone();
    assert_eq!(
        ctx.as_array().unwrap().len(),
        4,
        "tokens of prompt + output: {ctx}"
    );
    // A given context is detokenized and prepended to the new prompt.
    let second = h
        .post(
            "/api/generate",
            json!({"model": "echo", "prompt": " there", "context": ctx, "stream": false}),
        )
        .await
        .json();
    assert_eq!(second["response"], "hihi there");
    let n = second["context"].as_array().unwrap().len();
    assert_eq!(n, "hihi there".len() * 2);
}
