//! API tests of the OpenAI and Anthropic layers through the real app, native handlers,
//! scheduler and the fake runner (`cargo build -p fake-runner` first): exact SSE framing,
//! `[DONE]`, usage, finish reasons, error bodies per API family, and request translation seen
//! through an echoing model (its output is the rendered prompt).

#[path = "scheduler_support/mod.rs"]
mod sched;
#[path = "api_support/mod.rs"]
mod support;

use axum::Router;
use base64::Engine as _;
use serde_json::{json, Value};
use server::api::{app, AppState};
use server::engine::{Engine, Settings};
use server::scheduler::{Scheduler, SchedulerConfig};
use support::*;

/// Renders every message as `[role]content`, images as `(img)`, tool results with their name.
const ECHO_TEMPLATE: &str = "{{- if .Tools }}[tools:{{ len .Tools }}]{{ end }}{{- range .Messages }}[{{ .Role }}{{ if .ToolName }}:{{ .ToolName }}{{ end }}]{{ .Content }}{{ range .Images }}(img){{ end }}{{ range .ToolCalls }}<call {{ .Function.Name }}>{{ end }}{{ end }}";

/// A fake-runner model with a TEMPLATE layer and capabilities declared in its config blob (a
/// script is not GGUF, so nothing else would give it any).
fn scripted(
    store: &TestStore,
    name: &str,
    script: &str,
    template: &str,
    caps: &[&str],
    modified: std::time::SystemTime,
) {
    let model = store.blob(script.as_bytes());
    let tmpl = store.blob(template.as_bytes());
    let config = serde_json::to_vec(&json!({"model_format": "gguf", "capabilities": caps,
        "rootfs": {"type": "layers", "diff_ids": [model, tmpl]}}))
    .unwrap();
    let config_digest = store.blob(&config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [
            {"mediaType": MT_MODEL, "digest": model, "size": script.len()},
            {"mediaType": MT_TEMPLATE, "digest": tmpl, "size": template.len()},
        ]
    });
    let path = store.manifest_path(name, "latest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, manifest.to_string()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

struct Env {
    _store: TestStore,
    _runners: tempfile::TempDir,
    engine: Engine,
    app: Router,
}

impl Env {
    fn new() -> Env {
        Env::with(true)
    }

    fn with(models: bool) -> Env {
        Env::with_defaults(models, server::api::InferenceDefaults::default())
    }

    fn with_defaults(models: bool, defaults: server::api::InferenceDefaults) -> Env {
        let store = TestStore::new();
        if models {
            let fake = |tokens: &str| format!("#fake-runner\n--tokens\n{tokens}\n");
            store.model(
                "fake",
                "latest",
                fake("Hello, world").as_bytes(),
                &[],
                ago(60),
            );
            scripted(
                &store,
                "echo",
                "#fake-runner\n--echo\n",
                ECHO_TEMPLATE,
                &["completion", "tools"],
                ago(30),
            );
            store.model(
                "crash",
                "latest",
                b"#fake-runner\n--tokens\none two three four\n--crash-after\n2\n",
                &[],
                ago(10),
            );
        }
        let runners = server::runner::create_runner_dir().unwrap();
        let mut cfg = SchedulerConfig::new(sched::fake_runner(), runners.path());
        cfg.stop_grace = std::time::Duration::from_secs(2);
        let engine = Engine::new(Scheduler::new(cfg), Settings::default());
        let app = app(AppState::new(store.store())
            .with_engine(engine.clone())
            .with_defaults(defaults));
        Env {
            _store: store,
            _runners: runners,
            engine,
            app,
        }
    }

    async fn post(&self, uri: &str, body: Value) -> Reply {
        post_json(&self.app, uri, body).await
    }

    async fn get(&self, uri: &str) -> Reply {
        get(&self.app, uri).await
    }

    async fn done(self) {
        self.engine.scheduler().shutdown().await;
    }
}

/// The `data:` payloads of an SSE body, checking the framing on the way.
fn data_frames(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "frames end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            f.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data frame: {f:?}"))
                .to_owned()
        })
        .collect()
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn chat_completion_non_streamed() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["content-type"], "application/json");
    let mut v = r.json();
    let id = v["id"].take();
    let id = id.as_str().unwrap();
    let n: u32 = id.strip_prefix("chatcmpl-").unwrap().parse().unwrap();
    assert!(n < 999);
    assert!(v["created"].take().as_i64().unwrap() > 1_700_000_000);
    let usage = v["usage"].take();
    assert_eq!(
        v,
        json!({"id": null, "object": "chat.completion", "created": null, "model": "fake",
               "system_fingerprint": "fp_ollama",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello, world"}, "finish_reason": "stop"}],
               "usage": null})
    );
    assert_eq!(usage["completion_tokens"], 2, "two word tokens");
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + 2
    );
    env.done().await;
}

#[tokio::test]
async fn chat_completion_stream_frames() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi"), "stream": true, "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let frames = data_frames(&r.text());
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert_eq!(chunks.len(), 4, "two deltas, finish, usage: {chunks:?}");
    for c in &chunks {
        assert_eq!(c["id"], chunks[0]["id"]);
        assert_eq!(c["created"], chunks[0]["created"]);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(
            c["model"], "fake",
            "the name as requested, like the native reply"
        );
        assert_eq!(c["system_fingerprint"], "fp_ollama");
    }
    assert_eq!(
        chunks[0]["choices"],
        json!([{"index": 0, "delta": {"role": "assistant", "content": "Hello,"}, "finish_reason": null}])
    );
    assert_eq!(
        chunks[1]["choices"],
        json!([{"index": 0, "delta": {"content": " world"}, "finish_reason": null}])
    );
    assert_eq!(
        chunks[2]["choices"],
        json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    );
    assert_eq!(chunks[3]["choices"], json!([]));
    assert_eq!(chunks[3]["usage"]["completion_tokens"], 2);
    env.done().await;
}

#[tokio::test]
async fn chat_request_translation_reaches_the_prompt() {
    let env = Env::new();
    let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
    let r = env
        .post(
            "/v1/chat/completions",
            json!({
                "model": "echo",
                "messages": [
                    {"role": "system", "content": "S"},
                    {"role": "user", "content": [{"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}]},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "R"}
                ],
                "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
                "unknown_field": [1, 2, 3],
                // Images reach a model only with vision; rendering shows where they go.
                "_debug_render_only": true
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["_debug_info"]["rendered_template"],
        // The parts are two user messages (Ollama): joined again, the image's marker after the
        // text; the joined turn is the first part's, so the template sees no image on it.
        "[tools:1][system]S[user]look\n\n[img-0][assistant]<call lookup>[tool:lookup]R"
    );
    env.done().await;
}

#[tokio::test]
async fn debug_render_only_returns_the_prompt() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "echo", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
                   "_debug_render_only": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["_debug_info"]["rendered_template"],
        "[system]S[user]hi"
    );
    env.done().await;
}

#[tokio::test]
async fn length_finish_and_stop() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi"), "max_tokens": 1}),
        )
        .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello,");
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi"), "stop": " world"}),
        )
        .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello,");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    env.done().await;
}

fn openai_error(message: &str, ty: &str) -> Value {
    json!({"error": {"message": message, "type": ty, "param": null, "code": null}})
}

#[tokio::test]
async fn openai_errors_keep_native_status() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": []}),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (
            400,
            openai_error("[] is too short - 'messages'", "invalid_request_error")
        )
    );
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "nope", "messages": user("hi")}),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (
            404,
            openai_error("model 'nope' not found", "not_found_error")
        )
    );
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("image URLs are not currently supported"));
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi"), "tools": [{"type": "function", "function": {"parameters": {}}}]}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = send(
        &env.app,
        request(
            axum::http::Method::POST,
            "/v1/chat/completions",
            "{\"model\":",
        ),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (400, openai_error("unexpected EOF", "invalid_request_error"))
    );
    let r = send(
        &env.app,
        request(axum::http::Method::POST, "/v1/completions", ""),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (
            400,
            openai_error("missing request body", "invalid_request_error")
        )
    );
    env.done().await;
}

#[tokio::test]
async fn mid_stream_failure_is_an_error_frame_without_done() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "crash", "messages": user("hi"), "stream": true}),
        )
        .await;
    assert_eq!(r.status, 200);
    let frames = data_frames(&r.text());
    assert!(!frames.iter().any(|f| f == "[DONE]"), "{frames:?}");
    let last: Value = serde_json::from_str(frames.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "api_error");
    assert!(!last["error"]["message"].as_str().unwrap().is_empty());
    let first: Value = serde_json::from_str(&frames[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["content"], "one");
    env.done().await;
}

#[tokio::test]
async fn text_completions() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/completions",
            json!({"model": "echo", "prompt": "Once upon", "max_tokens": 1, "logprobs": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["object"], "text_completion");
    // The prompt went through the model template like /api/generate renders it.
    assert_eq!(v["choices"][0]["text"], "[user]Once");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["logprobs"]["tokens"], json!(["[user]Once"]));
    assert_eq!(v["choices"][0]["logprobs"]["text_offset"], json!([0]));
    let r = env
        .post(
            "/v1/completions",
            json!({"model": "fake", "prompt": "x", "stream": true}),
        )
        .await;
    let frames = data_frames(&r.text());
    assert_eq!(frames.len(), 4, "{frames:?}");
    let texts: Vec<Value> = frames[..3]
        .iter()
        .map(|f| serde_json::from_str::<Value>(f).unwrap()["choices"][0].clone())
        .collect();
    assert_eq!(texts[0]["text"], "Hello,");
    assert_eq!(texts[1]["text"], " world");
    assert_eq!(
        (texts[2]["text"].clone(), texts[2]["finish_reason"].clone()),
        (json!(""), json!("stop"))
    );
    assert_eq!(frames[3], "[DONE]");
    env.done().await;
}

#[tokio::test]
async fn embeddings_float_and_base64() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/embeddings",
            json!({"model": "fake", "input": ["a", "bc"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let floats = r.json();
    assert_eq!(floats["object"], "list");
    assert_eq!(floats["model"], "fake");
    assert_eq!(floats["data"].as_array().unwrap().len(), 2);
    assert_eq!(floats["data"][1]["index"], 1);
    assert_eq!(floats["data"][1]["object"], "embedding");
    let v0: Vec<f32> = serde_json::from_value(floats["data"][0]["embedding"].clone()).unwrap();
    let norm: f32 = v0.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(
        (norm - 1.0).abs() < 1e-4,
        "normalized like /api/embed: {norm}"
    );
    assert!(floats["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let r = env
        .post(
            "/v1/embeddings",
            json!({"model": "fake", "input": ["a", "bc"], "encoding_format": "base64"}),
        )
        .await;
    let b = r.json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let back: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(back, v0);
    let r = env
        .post("/v1/embeddings", json!({"model": "fake", "input": ""}))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 1);
    let r = env
        .post("/v1/embeddings", json!({"model": "fake", "input": []}))
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (400, openai_error("invalid input", "invalid_request_error"))
    );
    let r = env
        .post("/v1/embeddings", json!({"model": "fake", "input": [1, 2]}))
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (
            400,
            openai_error("invalid input type", "invalid_request_error")
        ),
        "the native handler judges other input shapes"
    );
    let r = env
        .post("/v1/embeddings", json!({"model": "nope", "input": "x"}))
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    env.done().await;
}

#[tokio::test]
async fn models_list_and_retrieve() {
    let empty = Env::with(false);
    let r = get(&empty.app, "/v1/models").await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (200, json!({"object": "list", "data": null}))
    );
    // `/api/show` reads the GGUF header, so these models are real (tiny) GGUF files.
    empty
        ._store
        .model("tiny", "latest", &tiny_gguf(), &[], ago(60));
    empty._store.model("tiny", "q4", &tiny_gguf(), &[], ago(5));
    let v = get(&empty.app, "/v1/models").await.json();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["tiny:q4", "tiny:latest"], "newest first");
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["owned_by"], "library");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((v["data"][1]["created"].as_i64().unwrap() - (now - 60)).abs() <= 1);
    let r = get(&empty.app, "/v1/models/tiny").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut m = r.json();
    assert!((m["created"].take().as_i64().unwrap() - (now - 60)).abs() <= 1);
    assert_eq!(
        m,
        json!({"id": "tiny", "object": "model", "created": null, "owned_by": "library"})
    );
    let r = get(&empty.app, "/v1/models/nope").await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (
            404,
            openai_error("model 'nope:latest' not found", "not_found_error")
        )
    );
    empty.done().await;
}

#[path = "compat/messages.rs"]
mod messages;

#[tokio::test]
async fn chat_logprobs_and_namespaced_models() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "fake", "messages": user("hi"), "logprobs": true, "top_logprobs": 2}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let lp = &r.json()["choices"][0]["logprobs"]["content"];
    let tokens: Vec<&str> = lp
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect();
    assert_eq!(tokens, ["Hello,", " world"]);
    assert!(lp[0]["logprob"].as_f64().unwrap() <= 0.0);
    assert_eq!(lp[0]["top_logprobs"].as_array().unwrap().len(), 2);
    assert!(lp[0]["bytes"].is_array());
    env.done().await;

    let env = Env::with(false);
    let path = env
        ._store
        .root()
        .join("manifests/registry.ollama.ai/someone/tiny");
    // A `someone/tiny:v1` model: the route must take names with a namespace.
    env._store
        .model("tiny", "latest", &tiny_gguf(), &[], ago(5));
    std::fs::create_dir_all(&path).unwrap();
    std::fs::copy(env._store.manifest_path("tiny", "latest"), path.join("v1")).unwrap();
    let r = get(&env.app, "/v1/models/someone/tiny:v1").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["id"], "someone/tiny:v1");
    assert_eq!(r.json()["owned_by"], "someone");
    env.done().await;
}

#[path = "compat/rendering.rs"]
mod rendering;
