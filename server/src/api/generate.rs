//! `POST /api/generate` (Ollama's `GenerateHandler`): validate, find the model, resolve options,
//! render the prompt (unless `raw`), take a runner slot through the scheduler and stream the
//! completion back as NDJSON (or one folded reply). An empty prompt only loads the model
//! (`done_reason: "load"`), or unloads it with `keep_alive: 0` (`"unload"`). The final chunk
//! carries the metrics and, unless `raw`, `context`: the tokens of prompt + output.

use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use runner_protocol::{DetokenizeRequest, Prompt, TokenizeRequest};

use super::infer::{self, NotFound};
use super::request::{self, check_raw, check_top_logprobs};
use super::stream::{respond_generate, ChunkStream};
use super::types::{created_at_now, DebugInfo, GenerateRequest, GenerateResponse};
use super::{AppState, OJson};
use crate::engine::{self, model::parse_request_template, plan, Step};
use crate::error::{Error, Result};
use crate::prompt::{self, render_generate};
use crate::runner::Runner;

pub async fn generate(
    State(state): State<AppState>,
    OJson(req): OJson<GenerateRequest>,
) -> Response {
    match run(state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A reply with no generated text (load, unload, debug render).
fn bare(model: &str, done_reason: Option<&str>) -> GenerateResponse {
    GenerateResponse {
        model: model.to_owned(),
        created_at: created_at_now(),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
}

async fn run(state: AppState, req: GenerateRequest) -> Result<Response> {
    let started = Instant::now();
    let format = request::parse_format(req.format.as_ref())?;
    let think = request::parse_think(req.think.as_ref())?;
    let keep_alive = infer::keep_alive(request::parse_keep_alive(req.keep_alive.as_ref())?);
    check_top_logprobs(req.top_logprobs)?;
    let engine = infer::engine(&state)?.clone();
    let model = infer::lookup(&state, &req.model, NotFound::Quoted).await?;
    check_raw(&req)?;
    infer::require(&model, "completion", "generate", &req.model)?;
    if !req.suffix.is_empty() {
        infer::require(&model, "insert", "insert", &req.model)?;
    }
    let think = request::effective_think(think, model.has_capability("thinking"), &req.model)?;
    let opts = infer::options(&engine, &model, req.options.as_ref())?;
    let name = model.display_name.clone();

    if req.prompt.is_empty() && req.suffix.is_empty() && req.images.is_empty() {
        if keep_alive.is_some_and(|k| k.is_zero()) {
            engine.unload(&model).await;
            return Ok(Json(bare(&name, Some("unload"))).into_response());
        }
        let (lease, _) = engine.acquire(&model, &opts, keep_alive).await?;
        drop(lease);
        return Ok(Json(bare(&name, Some("load"))).into_response());
    }

    let has_context = req.context.as_ref().is_some_and(|c| !c.is_empty());
    let rendered = if req.raw {
        req.prompt.clone()
    } else {
        let own;
        let template = if req.template.is_empty() {
            &*model.template
        } else {
            own = parse_request_template(&req.template)?;
            &own
        };
        let system = if req.system.is_empty() {
            model.view.system.clone()
        } else {
            req.system.clone()
        };
        render_generate(
            template,
            &prompt::GenerateRequest {
                prompt: req.prompt.clone(),
                suffix: req.suffix.clone(),
                system,
                messages: if has_context {
                    Vec::new()
                } else {
                    infer::layer_messages(&model)
                },
                images: req.images.len(),
                think: infer::think(think),
            },
        )?
    };
    if req.debug_render_only {
        let mut r = bare(&name, None);
        r.debug_info = Some(DebugInfo {
            rendered_template: rendered,
            image_count: req.images.len() as u64,
        });
        return Ok(Json(r).into_response());
    }

    let (lease, load) = engine.acquire(&model, &opts, keep_alive).await?;
    let runner = lease.runner().clone();
    let mut full_prompt = rendered;
    if has_context {
        let tokens = req
            .context
            .iter()
            .flatten()
            .map(|&t| {
                i32::try_from(t)
                    .map_err(|_| Error::BadRequest(format!("invalid context token {t}")))
            })
            .collect::<Result<Vec<i32>>>()?;
        let prefix = runner
            .detokenize(&DetokenizeRequest {
                tokens,
                render_special: true,
            })
            .await?;
        full_prompt.insert_str(0, &prefix.content);
    }

    let mut creq = plan::completion_request(&opts);
    creq.add_special = infer::add_special(&model, &full_prompt);
    creq.prompt = Prompt::Text(full_prompt.clone());
    creq.truncate = req.truncate.unwrap_or(true);
    creq.shift = req.shift.unwrap_or(true);
    creq.logprobs = req.logprobs;
    creq.top_logprobs = req.top_logprobs as u32;
    creq.constraint = infer::constraint(&format);
    let stream = lease.into_completion(&creq).await?;
    let steps = engine::steps(stream, started, load);
    let tail = Tail {
        runner,
        prompt: (!req.raw).then_some(full_prompt),
    };
    Ok(respond_generate(chunks(steps, name, tail), req.streams()).await)
}

/// What the final chunk needs beyond the metrics.
struct Tail {
    runner: Runner,
    /// The full prompt when `context` is to be returned (not with `raw`).
    prompt: Option<String>,
}

struct State2<S> {
    steps: S,
    name: String,
    tail: Tail,
    output: String,
    finished: bool,
}

fn chunks<S>(steps: S, name: String, tail: Tail) -> ChunkStream<GenerateResponse>
where
    S: futures_util::Stream<Item = Result<Step>> + Send + Unpin + 'static,
{
    let st = State2 {
        steps,
        name,
        tail,
        output: String::new(),
        finished: false,
    };
    Box::pin(futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        let item = match st.steps.next().await? {
            Err(e) => {
                st.finished = true;
                Err(e)
            }
            Ok(Step::Text { content, logprobs }) => {
                st.output.push_str(&content);
                let mut r = bare(&st.name, None);
                r.response = content;
                r.logprobs = infer::logprobs(logprobs);
                Ok(r)
            }
            Ok(Step::Done { reason, metrics }) => {
                st.finished = true;
                let mut r = bare(&st.name, Some(engine::done_reason(reason)));
                r.metrics = metrics;
                if let Some(p) = &st.tail.prompt {
                    let content = format!("{p}{}", st.output);
                    match st
                        .tail
                        .runner
                        .tokenize(&TokenizeRequest {
                            content,
                            add_special: false,
                            parse_special: true,
                        })
                        .await
                    {
                        Ok(t) => r.context = t.tokens.into_iter().map(i64::from).collect(),
                        Err(e) => tracing::warn!(error = %e, "could not tokenize the context"),
                    }
                }
                Ok(r)
            }
        };
        Some((item, st))
    }))
}
