//! `/api/generate` and `/api/chat` through the real app with a scripted `Inference`
//! (inference_support): validation order and wording, load/unload, option precedence, NDJSON
//! streaming (errors before and after the first chunk), non-streamed folding.

mod api_support;
mod inference_support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use server::config::KeepAlive;

use api_support::*;
use inference_support::*;

#[tokio::test]
async fn generate_streams_ndjson_and_folds_when_not_streaming() {
    let (_ts, fake, app) = setup();
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "Tiny", "prompt": "Hi there"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/x-ndjson");
    let lines: Vec<Value> = ndjson(&r).into_iter().map(strip_time).collect();
    assert_eq!(
        lines,
        vec![
            json!({"model": "Tiny", "response": "Hi ", "done": false}),
            json!({"model": "Tiny", "response": "there", "done": false}),
            json!({"model": "Tiny", "response": "", "done": true, "done_reason": "stop",
                   "total_duration": 900, "load_duration": 100, "prompt_eval_count": 3,
                   "prompt_eval_duration": 200, "eval_count": 2, "eval_duration": 500}),
        ]
    );
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "Hi there", "stream": false}),
    )
    .await;
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(
        strip_time(r.json()),
        json!({"model": "tiny", "response": "Hi there", "done": true, "done_reason": "stop",
               "total_duration": 900, "load_duration": 100, "prompt_eval_count": 3,
               "prompt_eval_duration": 200, "eval_count": 2, "eval_duration": 500})
    );
    // Options: request > params layer > env default; keep_alive defaulted.
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "x", "options": {"temperature": 1.5}, "keep_alive": "1h", "format": "json"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let calls = fake.calls.lock().unwrap();
    let Call::Generate(job) = calls.last().unwrap() else {
        panic!("{calls:?}")
    };
    assert_eq!(job.options.runner.num_ctx, 8192);
    assert_eq!(job.options.temperature, 1.5);
    assert_eq!(job.keep_alive, KeepAlive::For(Duration::from_secs(3600)));
    assert_eq!(job.format, server::api::request::Format::Json);
    assert_eq!(
        job.model.name.to_string(),
        "registry.ollama.ai/library/tiny:latest"
    );
    let Call::Generate(first) = &calls[0] else {
        panic!()
    };
    assert_eq!(first.keep_alive, KeepAlive::For(Duration::from_secs(300)));
    assert_eq!(first.options.temperature, 0.3);
}

#[tokio::test]
async fn generate_errors_in_ollamas_order_and_wording() {
    let (_ts, fake, app) = setup();
    let cases = [
        (json!({"model": "", "prompt": "x"}), 404, "model '' not found"),
        (json!({"model": "nope", "prompt": "x"}), 404, "model 'nope' not found"),
        (json!({"model": "bad name", "prompt": "x"}), 400, "invalid model name"),
        (json!({"model": "tiny", "top_logprobs": 21}), 400, "top_logprobs must be between 0 and 20"),
        (json!({"model": "tiny", "think": "extreme"}), 400,
         "invalid think value: \"extreme\" (must be \"high\", \"medium\", \"low\", \"max\", true, or false)"),
        (json!({"model": "tiny", "keep_alive": "300"}), 400, "time: missing unit in duration \"300\""),
        (json!({"model": "tiny", "prompt": "x", "raw": true, "system": "s"}), 400,
         "raw mode does not support template, system, or context"),
        (json!({"model": "tiny", "prompt": "x", "think": true}), 400, "\"tiny\" does not support thinking"),
        (json!({"model": "tiny", "prompt": "x", "suffix": "y"}), 400,
         "registry.ollama.ai/library/tiny:latest does not support insert"),
        (json!({"model": "tiny", "prompt": "x", "options": {"num_ctx": "big"}}), 500,
         "option \"num_ctx\" must be of type integer"),
        (json!({"model": "tiny", "prompt": "x", "format": "yaml"}), 400,
         "invalid format: \"\\\"yaml\\\"\"; expected \"json\" or a valid JSON Schema object"),
        (json!({"model": "tiny", "prompt": "busy"}), 503,
         "server busy, please try again.  maximum pending requests exceeded"),
    ];
    for (req, status, msg) in cases {
        let r = post_json(&app, "/api/generate", req.clone()).await;
        assert_eq!(
            (r.status.as_u16(), r.json()),
            (status, json!({"error": msg})),
            "{req}"
        );
    }
    // Only the last case reached the engine.
    assert_eq!(fake.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn mid_stream_failure_is_a_trailing_error_line() {
    let (_ts, _fake, app) = setup();
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "crash now"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let lines = ndjson(&r);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["response"], "crash ");
    assert_eq!(
        lines[1],
        json!({"error": "llama runner process has terminated: signal: killed"})
    );
    // Not streamed: the failure is the whole answer.
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "crash now", "stream": false}),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn empty_prompt_loads_and_keep_alive_zero_unloads() {
    let (_ts, fake, app) = setup();
    let r = post_json(&app, "/api/generate", json!({"model": "tiny"})).await;
    assert_eq!(
        strip_time(r.json()),
        json!({"model": "tiny", "response": "", "done": true, "done_reason": "load"})
    );
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "keep_alive": 0}),
    )
    .await;
    assert_eq!(
        strip_time(r.json()),
        json!({"model": "tiny", "response": "", "done": true, "done_reason": "unload"})
    );
    let r = post_json(
        &app,
        "/api/chat",
        json!({"model": "tiny", "keep_alive": -1}),
    )
    .await;
    assert_eq!(
        strip_time(r.json()),
        json!({"model": "tiny", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "load"})
    );
    let r = post_json(
        &app,
        "/api/chat",
        json!({"model": "tiny", "messages": [], "keep_alive": "0"}),
    )
    .await;
    assert_eq!(r.json()["done_reason"], "unload");
    let calls = fake.calls.lock().unwrap();
    let summary: Vec<String> = calls
        .iter()
        .map(|c| match c {
            Call::Load(m, k, ctx) => {
                format!("load {m} {} {ctx}", server::config::keep_alive_display(k))
            }
            Call::Unload(m) => format!("unload {m}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        summary,
        [
            "load registry.ollama.ai/library/tiny:latest 300s 8192",
            "unload registry.ollama.ai/library/tiny:latest",
            "load registry.ollama.ai/library/tiny:latest forever 8192",
            "unload registry.ollama.ai/library/tiny:latest",
        ]
    );
}

#[tokio::test]
async fn chat_validates_streams_and_folds() {
    let (_ts, fake, app) = setup();
    let r = post_json(&app, "/api/chat", json!({"model": "", "messages": []})).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "model is required"})
        )
    );
    let r = post_json(&app, "/api/chat", json!({"model": "ghost", "messages": []})).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model 'ghost' not found"})
        )
    );
    let tools =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let msgs = json!([{"role": "user", "content": "hello you"}]);
    let r = post_json(
        &app,
        "/api/chat",
        json!({"model": "tiny", "messages": msgs, "tools": tools}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "registry.ollama.ai/library/tiny:latest does not support tools"})
        )
    );
    let r = post_json(
        &app,
        "/api/chat",
        json!({"model": "tools", "messages": msgs, "tools": tools}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let lines: Vec<Value> = ndjson(&r).into_iter().map(strip_time).collect();
    assert_eq!(
        lines[0],
        json!({"model": "tools", "message": {"role": "assistant", "content": "hello "}, "done": false})
    );
    assert_eq!(lines[2]["done"], true);
    assert_eq!(lines[2]["eval_count"], 2);

    let r = post_json(
        &app,
        "/api/chat",
        json!({"model": "tiny", "messages": msgs, "stream": false}),
    )
    .await;
    assert_eq!(
        strip_time(r.json()),
        json!({"model": "tiny", "message": {"role": "assistant", "content": "hello you"}, "done": true,
               "done_reason": "stop", "total_duration": 900, "load_duration": 100, "prompt_eval_count": 3,
               "prompt_eval_duration": 200, "eval_count": 2, "eval_duration": 500})
    );
    let calls = fake.calls.lock().unwrap();
    let Call::Chat(job) = calls.last().unwrap() else {
        panic!()
    };
    assert_eq!(job.request.messages[0].role, "user");
    assert_eq!(job.think, None, "non-thinking model, think unset");
}
