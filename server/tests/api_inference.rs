//! `/api/generate`, `/api/chat`, `/api/embed`, `/api/embeddings` through the real app with a
//! scripted `Inference`: validation order and wording, load/unload, option precedence, NDJSON
//! streaming (errors before and after the first chunk), non-streamed folding, embeddings.

mod api_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use api_support::*;
use axum::http::{Method, StatusCode};
use axum::Router;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use server::api::inference::{ChatJob, EmbedJob, EmbedOutput, GenerateJob, ResolvedModel, Running};
use server::api::options::Options;
use server::api::stream::ChunkStream;
use server::api::types::{ChatResponse, GenerateResponse, Message, Metrics};
use server::api::{app, AppState, Inference};
use server::config::KeepAlive;
use server::error::{Error, Result};

#[derive(Debug)]
enum Call {
    Load(String, KeepAlive, i64),
    Unload(String),
    Generate(Box<GenerateJob>),
    Chat(Box<ChatJob>),
    Embed(Vec<String>, bool),
}

#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<Call>>,
}

fn words(text: &str, done_metrics: Metrics) -> Vec<(String, bool, Metrics)> {
    let mut out: Vec<(String, bool, Metrics)> = text
        .split_inclusive(' ')
        .map(|w| (w.to_owned(), false, Metrics::default()))
        .collect();
    out.push((String::new(), true, done_metrics));
    out
}

const METRICS: Metrics = Metrics {
    total_duration: 900,
    load_duration: 100,
    prompt_eval_count: 3,
    prompt_eval_duration: 200,
    eval_count: 2,
    eval_duration: 500,
};

impl Inference for Fake {
    fn load(
        &self,
        m: Arc<ResolvedModel>,
        o: Options,
        k: KeepAlive,
    ) -> BoxFuture<'static, Result<()>> {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Load(m.name.to_string(), k, o.runner.num_ctx));
        Box::pin(async { Ok(()) })
    }

    fn unload(&self, m: Arc<ResolvedModel>) -> BoxFuture<'static, Result<()>> {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Unload(m.name.to_string()));
        Box::pin(async { Ok(()) })
    }

    fn generate(
        &self,
        job: GenerateJob,
    ) -> BoxFuture<'static, Result<ChunkStream<GenerateResponse>>> {
        let prompt = job.request.prompt.clone();
        self.calls
            .lock()
            .unwrap()
            .push(Call::Generate(Box::new(job)));
        Box::pin(async move {
            if prompt == "busy" {
                return Err(Error::QueueFull);
            }
            let mut items: Vec<Result<GenerateResponse>> = words(&prompt, METRICS)
                .into_iter()
                .map(|(w, done, metrics)| {
                    Ok(GenerateResponse {
                        response: w,
                        done,
                        done_reason: done.then(|| "stop".into()),
                        metrics,
                        ..Default::default()
                    })
                })
                .collect();
            if prompt.starts_with("crash") {
                items.truncate(1);
                items.push(Err(Error::RunnerExited(
                    "llama runner process has terminated: signal: killed".into(),
                )));
            }
            Ok(Box::pin(futures_util::stream::iter(items)) as ChunkStream<_>)
        })
    }

    fn chat(&self, job: ChatJob) -> BoxFuture<'static, Result<ChunkStream<ChatResponse>>> {
        let last = job
            .request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        self.calls.lock().unwrap().push(Call::Chat(Box::new(job)));
        Box::pin(async move {
            let items: Vec<Result<ChatResponse>> = words(&last, METRICS)
                .into_iter()
                .map(|(w, done, metrics)| {
                    Ok(ChatResponse {
                        message: Message::assistant(w),
                        done,
                        done_reason: done.then(|| "stop".into()),
                        metrics,
                        ..Default::default()
                    })
                })
                .collect();
            Ok(Box::pin(futures_util::stream::iter(items)) as ChunkStream<_>)
        })
    }

    fn embed(&self, job: EmbedJob) -> BoxFuture<'static, Result<EmbedOutput>> {
        let n = job.inputs.len();
        self.calls
            .lock()
            .unwrap()
            .push(Call::Embed(job.inputs, job.truncate));
        Box::pin(async move {
            Ok(EmbedOutput {
                embeddings: vec![vec![3.0, 4.0, 0.0, 12.0]; n],
                prompt_eval_count: 7,
                load_duration: Duration::from_nanos(5),
            })
        })
    }

    fn ps(&self) -> BoxFuture<'static, Vec<Running>> {
        let soon = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        Box::pin(async move {
            vec![
                Running {
                    name: "registry.ollama.ai/library/tiny:latest".into(),
                    digest: "ab".repeat(32),
                    size: 1000,
                    size_vram: 0,
                    context_length: 4096,
                    expires_at: Some(soon),
                },
                Running {
                    name: "gone:latest".into(),
                    digest: "cd".repeat(32),
                    size: 10,
                    size_vram: 10,
                    context_length: 2048,
                    expires_at: None,
                },
            ]
        })
    }
}

fn setup() -> (TestStore, Arc<Fake>, Router) {
    let ts = TestStore::new();
    let params = br#"{"num_ctx":8192,"temperature":0.3}"#;
    ts.model(
        "tiny",
        "latest",
        &tiny_gguf(),
        &[(MT_PARAMS, params)],
        ago(10),
    );
    ts.model(
        "tools",
        "latest",
        &tiny_gguf(),
        &[(MT_TEMPLATE, b"{{ .Tools }}{{ .Prompt }}")],
        ago(20),
    );
    let fake = Arc::new(Fake::default());
    let state = AppState::new(ts.store()).with_inference(fake.clone());
    (ts, fake, app(state))
}

fn ndjson(r: &Reply) -> Vec<Value> {
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn strip_time(mut v: Value) -> Value {
    let t = v["created_at"].as_str().expect("created_at").to_owned();
    assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    v.as_object_mut().unwrap().remove("created_at");
    v
}

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

#[tokio::test]
async fn embed_normalizes_and_cuts_dimensions() {
    let (_ts, fake, app) = setup();
    let r = post_json(
        &app,
        "/api/embed",
        json!({"model": "tiny", "input": ["a", "b"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let body = r.json();
    assert_eq!(body["model"], "tiny");
    let want = [3.0 / 13.0, 4.0 / 13.0, 0.0, 12.0 / 13.0];
    let got = body["embeddings"].as_array().unwrap();
    assert_eq!(got.len(), 2);
    for v in got {
        let v: Vec<f64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), 4);
        for (g, w) in v.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{v:?}");
        }
    }
    assert_eq!(body["prompt_eval_count"], 7);
    assert_eq!(body["load_duration"], 5);
    assert!(body["total_duration"].as_u64().unwrap() > 0);

    let r = post_json(
        &app,
        "/api/embed",
        json!({"model": "tiny", "input": "a", "dimensions": 2, "truncate": false}),
    )
    .await;
    assert_eq!(r.json()["embeddings"], json!([[0.6, 0.8]]));

    let r = post_json(&app, "/api/embed", json!({"model": "tiny", "input": [1]})).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid input type"})
        )
    );
    let r = post_json(&app, "/api/embed", json!({"model": "tiny", "input": ""})).await;
    assert_eq!(r.json(), json!({"model": "tiny", "embeddings": []}));
    let r = post_json(&app, "/api/embed", json!({"model": "nope", "input": "x"})).await;
    // Ollama's embed handlers word it through handleScheduleError.
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model \"nope\" not found, try pulling it first"})
        )
    );

    let r = post_json(
        &app,
        "/api/embeddings",
        json!({"model": "tiny", "prompt": "a"}),
    )
    .await;
    assert_eq!(r.json(), json!({"embedding": [3.0, 4.0, 0.0, 12.0]}));
    let r = post_json(
        &app,
        "/api/embeddings",
        json!({"model": "tiny", "prompt": ""}),
    )
    .await;
    assert_eq!(r.json(), json!({"embedding": []}));

    let calls = fake.calls.lock().unwrap();
    let embeds: Vec<String> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Embed(inputs, truncate) => Some(format!("{inputs:?} {truncate}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        embeds,
        ["[\"a\", \"b\"] true", "[\"a\"] false", "[\"a\"] true"]
    );
}

#[tokio::test]
async fn without_an_engine_validation_still_answers() {
    let ts = TestStore::new();
    ts.model("tiny", "latest", &tiny_gguf(), &[], ago(1));
    let app = ts.app();
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "nope", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.json(),
        json!({"error": "inference is not available in this server build"})
    );
    let r = send(
        &app,
        request(Method::GET, "/api/chat", axum::body::Body::empty()),
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn ps_lists_loaded_models_longest_keep_alive_first() {
    let (_ts, _fake, app) = setup();
    let body = get(&app, "/api/ps").await.json();
    let models = body["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    // Never-expiring first, shown ~292 years ahead like Ollama's MaxInt64 duration.
    assert_eq!(models[0]["name"], "gone:latest");
    let year: i32 = models[0]["expires_at"].as_str().unwrap()[..4]
        .parse()
        .unwrap();
    assert!(year > 2300, "{}", models[0]["expires_at"]);
    assert_eq!(
        models[0]["details"]["format"], "",
        "no such model in the store"
    );
    let mut tiny = models[1].clone();
    tiny.as_object_mut().unwrap().remove("details");
    assert_eq!(
        tiny,
        json!({"name": "tiny:latest", "model": "tiny:latest", "size": 1000, "digest": "ab".repeat(32),
               "expires_at": "2030-03-17T17:46:40Z", "size_vram": 0, "context_length": 4096})
    );
    assert_eq!(models[1]["details"]["family"], "llama");
}
