//! `POST /api/generate` and `POST /api/chat`: validation in Ollama's order and wording, the
//! load/unload special cases (empty prompt or messages), then the job goes to the `Inference`
//! seam and its chunks are streamed (NDJSON) or folded into one reply. A stub model (cloud or
//! remote) goes to `crate::remote::stub` instead: this is the one place that decides, and the
//! OpenAI and Anthropic layers run through these handlers, so they reach stubs too.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;

use super::inference::{
    check_capabilities, check_requires, engine, request_images, resolve_model, ChatJob,
    GenerateJob, NameErrors,
};
use super::options::Options;
use super::request::{
    check_raw, check_top_logprobs, effective_think, parse_format, parse_keep_alive, parse_think,
};
use super::stream::{respond_chat, respond_generate, ChunkStream};
use super::types::{
    created_at_now, ChatRequest, ChatResponse, GenerateRequest, GenerateResponse, Message,
};
use super::{AppState, OJson};
use crate::config::KeepAlive;
use crate::error::{Error, Result};

pub async fn generate(
    State(state): State<AppState>,
    OJson(req): OJson<GenerateRequest>,
) -> Response {
    generate_inner(state, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn generate_inner(state: AppState, req: GenerateRequest) -> Result<Response> {
    // Decode-time checks in Ollama (the JSON binding rejects these first).
    let think = parse_think(req.think.as_ref())?;
    let keep_alive = parse_keep_alive(req.keep_alive.as_ref())?;
    check_top_logprobs(req.top_logprobs)?;
    let model = resolve_model(&state, &req.model, NameErrors::NotFound).await?;
    // A stub is served by its remote host, whatever the request (Ollama checks it first).
    if model.view.config.remote().is_some() {
        return crate::remote::stub::generate(&state.remote, &req, &model).await;
    }

    if req.prompt.is_empty() && keep_alive == Some(KeepAlive::For(Duration::ZERO)) {
        engine(&state)?.unload(model).await?;
        return Ok(Json(generate_done(&req.model, "unload")).into_response());
    }
    // Ollama's image-generation models (capability `image`) are not run by its text engines.
    if model.can("image") {
        return Err(Error::BadRequest(
            "image generation models are not currently supported".into(),
        ));
    }
    check_raw(&req)?;
    let think = effective_think(think, model.can("thinking"), &req.model)?;
    let mut wanted = vec!["completion"];
    if !req.suffix.is_empty() {
        wanted.push("insert");
    }
    check_capabilities(&model, &req.model, "generate", &wanted)?;
    check_requires(&model)?;
    let options = Options::resolve(
        state.defaults.context_length,
        &model.view.options,
        req.options.as_ref(),
    )?;
    // A render-only request shows where images go; no model looks at them.
    let images = if req.debug_render_only {
        Arc::default()
    } else {
        request_images(&model, req.images.clone(), &options).await?
    };
    let format = parse_format(req.format.as_ref())?;
    let keep_alive = keep_alive.unwrap_or(state.defaults.keep_alive);
    let engine = engine(&state)?;

    if req.prompt.is_empty() {
        engine.load(model, options, keep_alive).await?;
        return Ok(Json(generate_done(&req.model, "load")).into_response());
    }
    let name = req.model.clone();
    // A render-only reply is one JSON object whatever `stream` says, as Ollama writes it.
    let stream = req.streams() && !req.debug_render_only;
    let chunks = engine
        .generate(GenerateJob {
            model,
            request: req,
            options,
            think,
            format,
            keep_alive,
            images,
        })
        .await?;
    let chunks: ChunkStream<GenerateResponse> = Box::pin(chunks.map(move |c| {
        c.map(|mut c| {
            c.model.clone_from(&name);
            if c.created_at.is_empty() {
                c.created_at = created_at_now();
            }
            c
        })
    }));
    Ok(respond_generate(chunks, stream).await)
}

fn generate_done(model: &str, reason: &str) -> GenerateResponse {
    GenerateResponse {
        model: model.to_owned(),
        created_at: created_at_now(),
        done: true,
        done_reason: Some(reason.to_owned()),
        ..GenerateResponse::default()
    }
}

pub async fn chat(State(state): State<AppState>, OJson(req): OJson<ChatRequest>) -> Response {
    chat_inner(state, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat_inner(state: AppState, req: ChatRequest) -> Result<Response> {
    let think = parse_think(req.think.as_ref())?;
    let keep_alive = parse_keep_alive(req.keep_alive.as_ref())?;
    check_top_logprobs(req.top_logprobs)?;
    let model = resolve_model(&state, &req.model, NameErrors::Required).await?;

    let stub = model.view.config.remote().is_some();
    if req.messages.is_empty() && keep_alive == Some(KeepAlive::For(Duration::ZERO)) {
        // A stub is never loaded here: there is nothing to unload (Ollama answers the same).
        if !stub {
            engine(&state)?.unload(model).await?;
        }
        return Ok(Json(chat_done(&req.model, "unload")).into_response());
    }
    if stub {
        return crate::remote::stub::chat(&state.remote, &req, &model).await;
    }
    let mut wanted = vec!["completion"];
    if !req.tools.is_empty() {
        wanted.push("tools");
    }
    let think = effective_think(think, model.can("thinking"), &req.model)?;
    check_capabilities(&model, &req.model, "chat", &wanted)?;
    check_requires(&model)?;
    let options = Options::resolve(
        state.defaults.context_length,
        &model.view.options,
        req.options.as_ref(),
    )?;
    let images = if req.debug_render_only {
        Arc::default()
    } else {
        let all = req.messages.iter().flat_map(|m| m.images.iter().cloned());
        request_images(&model, all.collect(), &options).await?
    };
    let format = parse_format(req.format.as_ref())?;
    let keep_alive = keep_alive.unwrap_or(state.defaults.keep_alive);
    let engine = engine(&state)?;

    if req.messages.is_empty() {
        engine.load(model, options, keep_alive).await?;
        return Ok(Json(chat_done(&req.model, "load")).into_response());
    }
    let name = req.model.clone();
    // A render-only reply is one JSON object whatever `stream` says, as Ollama writes it.
    let stream = req.streams() && !req.debug_render_only;
    let has_tools = !req.tools.is_empty();
    let chunks = engine
        .chat(ChatJob {
            model,
            request: req,
            options,
            think,
            format,
            keep_alive,
            images,
        })
        .await?;
    let chunks: ChunkStream<ChatResponse> = Box::pin(chunks.map(move |c| {
        c.map(|mut c| {
            c.model.clone_from(&name);
            if c.created_at.is_empty() {
                c.created_at = created_at_now();
            }
            c
        })
    }));
    Ok(respond_chat(chunks, stream, has_tools).await)
}

fn chat_done(model: &str, reason: &str) -> ChatResponse {
    ChatResponse {
        model: model.to_owned(),
        created_at: created_at_now(),
        message: Message::assistant(""),
        done: true,
        done_reason: Some(reason.to_owned()),
        ..ChatResponse::default()
    }
}
