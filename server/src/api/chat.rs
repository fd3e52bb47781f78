//! `POST /api/chat` (Ollama's `ChatHandler`): validate, find the model, layer in the Modelfile's
//! MESSAGEs and SYSTEM (the latter only when the conversation does not start with a system
//! message), drop the oldest non-system messages until the rendered prompt fits `num_ctx`
//! (counted with the runner's tokenizer), render, and stream the completion as assistant
//! message chunks. Empty `messages` only loads (`done_reason: "load"`) or, with
//! `keep_alive: 0`, unloads the model.

use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use runner_protocol::{Prompt, TokenizeRequest};

use super::infer::{self, NotFound};
use super::request::{self, check_top_logprobs};
use super::stream::{respond_chat, ChunkStream};
use super::types::{created_at_now, ChatRequest, ChatResponse, DebugInfo, Message};
use super::{AppState, OJson};
use crate::engine::{self, plan, truncate, Step};
use crate::error::{Error, Result};
use crate::prompt::{self, render_chat, RenderRequest};

pub async fn chat(State(state): State<AppState>, OJson(req): OJson<ChatRequest>) -> Response {
    match run(state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn bare(model: &str, done_reason: Option<&str>) -> ChatResponse {
    ChatResponse {
        model: model.to_owned(),
        created_at: created_at_now(),
        message: Message::assistant(""),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
}

/// The conversation as rendered: Modelfile SYSTEM (unless the request starts with a system
/// message), Modelfile MESSAGEs, then the request's messages.
pub fn layered(system: &str, layer: Vec<prompt::Message>, req: &[Message]) -> Vec<prompt::Message> {
    let mut msgs = Vec::with_capacity(layer.len() + req.len() + 1);
    if !system.is_empty() && req.first().is_none_or(|m| m.role != "system") {
        msgs.push(prompt::Message::new("system", system));
    }
    msgs.extend(layer);
    msgs.extend(req.iter().map(infer::render_message));
    msgs
}

async fn run(state: AppState, req: ChatRequest) -> Result<Response> {
    let started = Instant::now();
    if req.model.is_empty() {
        return Err(Error::BadRequest("model is required".into()));
    }
    let format = request::parse_format(req.format.as_ref())?;
    let think = request::parse_think(req.think.as_ref())?;
    let keep_alive = infer::keep_alive(request::parse_keep_alive(req.keep_alive.as_ref())?);
    check_top_logprobs(req.top_logprobs)?;
    let engine = infer::engine(&state)?.clone();
    let model = infer::lookup(&state, &req.model, NotFound::Quoted).await?;
    infer::require(&model, "completion", "chat", &req.model)?;
    if !req.tools.is_empty() && !model.template.uses_tools() {
        return Err(Error::BadRequest(format!(
            "{} does not support tools",
            model.full_name
        )));
    }
    let think = request::effective_think(think, model.has_capability("thinking"), &req.model)?;
    let opts = infer::options(&engine, &model, req.options.as_ref())?;
    let name = model.display_name.clone();

    if req.messages.is_empty() {
        if keep_alive.is_some_and(|k| k.is_zero()) {
            engine.unload(&model).await;
            return Ok(Json(bare(&name, Some("unload"))).into_response());
        }
        let (lease, _) = engine.acquire(&model, &opts, keep_alive).await?;
        drop(lease);
        return Ok(Json(bare(&name, Some("load"))).into_response());
    }

    let msgs = layered(
        &model.view.system,
        infer::layer_messages(&model),
        &req.messages,
    );
    let tools: Vec<serde_json::Value> = req
        .tools
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<_, _>>()?;
    let think = infer::think(think);
    let render = |messages: Vec<prompt::Message>| {
        render_chat(
            &model.template,
            &RenderRequest {
                messages,
                tools: tools.clone(),
                think: think.clone(),
            },
        )
    };
    if req.debug_render_only {
        let mut r = bare(&name, None);
        let images = msgs.iter().map(|m| m.images as u64).sum();
        r.debug_info = Some(DebugInfo {
            rendered_template: render(msgs)?,
            image_count: images,
        });
        return Ok(Json(r).into_response());
    }

    let (lease, load) = engine.acquire(&model, &opts, keep_alive).await?;
    let runner = lease.runner().clone();
    let num_ctx = lease.options().ctx_size as usize;
    let kept = truncate::fit(&msgs, num_ctx, req.truncate.unwrap_or(true), |window| {
        let runner = runner.clone();
        let rendered = render(window);
        async move {
            let content = rendered?;
            let t = runner
                .tokenize(&TokenizeRequest {
                    content,
                    add_special: true,
                    parse_special: true,
                })
                .await?;
            Ok(t.tokens.len())
        }
    })
    .await?;
    let prompt_text = render(kept)?;

    let mut creq = plan::completion_request(&opts);
    creq.add_special = infer::add_special(&model, &prompt_text);
    creq.prompt = Prompt::Text(prompt_text);
    creq.truncate = req.truncate.unwrap_or(true);
    creq.shift = req.shift.unwrap_or(true);
    creq.logprobs = req.logprobs;
    creq.top_logprobs = req.top_logprobs as u32;
    creq.constraint = infer::constraint(&format);
    let stream = lease.into_completion(&creq).await?;
    let steps = engine::steps(stream, started, load);
    Ok(respond_chat(
        chunks(Box::pin(steps), name),
        req.streams(),
        !req.tools.is_empty(),
    )
    .await)
}

fn chunks(
    steps: std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Step>> + Send>>,
    name: String,
) -> ChunkStream<ChatResponse> {
    Box::pin(steps.map(move |item| {
        item.map(|step| match step {
            Step::Text { content, logprobs } => {
                let mut r = bare(&name, None);
                r.message.content = content;
                r.logprobs = infer::logprobs(logprobs);
                r
            }
            Step::Done { reason, metrics } => {
                let mut r = bare(&name, Some(engine::done_reason(reason)));
                r.metrics = metrics;
                r
            }
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }

    #[test]
    fn modelfile_layers() {
        let layer = vec![
            prompt::Message::new("user", "example q"),
            prompt::Message::new("assistant", "example a"),
        ];
        let roles = |ms: Vec<prompt::Message>| {
            ms.into_iter()
                .map(|m| format!("{}:{}", m.role, m.content))
                .collect::<Vec<_>>()
        };
        // SYSTEM layer goes first when the request does not bring its own.
        assert_eq!(
            roles(layered("be brief", layer.clone(), &[wire("user", "hi")])),
            vec![
                "system:be brief",
                "user:example q",
                "assistant:example a",
                "user:hi"
            ]
        );
        // A request system message replaces the SYSTEM layer.
        assert_eq!(
            roles(layered(
                "be brief",
                layer,
                &[wire("system", "mine"), wire("user", "hi")]
            )),
            vec![
                "user:example q",
                "assistant:example a",
                "system:mine",
                "user:hi"
            ]
        );
        assert_eq!(
            roles(layered("", vec![], &[wire("user", "hi")])),
            vec!["user:hi"]
        );
    }
}
