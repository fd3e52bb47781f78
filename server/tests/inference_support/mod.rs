//! The scripted `Inference` behind the API inference tests (api_inference.rs, api_embed.rs):
//! records every call, streams canned words, and the app wired to it over a two-model store.

#![allow(dead_code)]

use axum::Router;
use futures_util::future::BoxFuture;
use serde_json::Value;
use server::api::inference::{ChatJob, EmbedJob, EmbedOutput, GenerateJob, ResolvedModel, Running};
use server::api::options::Options;
use server::api::stream::ChunkStream;
use server::api::types::{ChatResponse, GenerateResponse, Message, Metrics};
use server::api::{app, AppState, Inference};
use server::config::KeepAlive;
use server::error::{Error, Result};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api_support::*;

#[derive(Debug)]
pub enum Call {
    Load(String, KeepAlive, i64),
    Unload(String),
    Generate(Box<GenerateJob>),
    Chat(Box<ChatJob>),
    Embed(Vec<String>, bool),
}

#[derive(Default)]
pub struct Fake {
    pub calls: Mutex<Vec<Call>>,
}

pub fn words(text: &str, done_metrics: Metrics) -> Vec<(String, bool, Metrics)> {
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
    prompt_cached: 0,
    prompt_announced: 0,
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
                    placement: Vec::new(),
                },
                Running {
                    name: "gone:latest".into(),
                    digest: "cd".repeat(32),
                    size: 10,
                    size_vram: 10,
                    context_length: 2048,
                    expires_at: None,
                    placement: Vec::new(),
                },
            ]
        })
    }
}

pub fn setup() -> (TestStore, Arc<Fake>, Router) {
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

pub fn ndjson(r: &Reply) -> Vec<Value> {
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn strip_time(mut v: Value) -> Value {
    let t = v["created_at"].as_str().expect("created_at").to_owned();
    assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    v.as_object_mut().unwrap().remove("created_at");
    v
}
