//! `Inference` for [`Engine`]: what happens to a validated job. Generate renders the prompt
//! (unless `raw`; a per-request TEMPLATE or SYSTEM replaces the model's; a `context` is
//! detokenized and prepended, and then the Modelfile MESSAGEs are left out), takes a runner slot
//! and streams chunks whose last carries metrics and, unless `raw`, `context` = the tokens of
//! prompt + output. Chat layers the Modelfile SYSTEM (only when the conversation does not start
//! with a system message) and MESSAGEs in, drops the oldest non-system turns until the prompt
//! fits `num_ctx` by the runner's tokenizer, and streams assistant message chunks. Embed is
//! `super::embed`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use runner_protocol::{DetokenizeRequest, Prompt, TokenizeRequest};

use super::bound::Window;
use super::convert;
use super::respond::{self, Events};
use super::{model::parse_request_template, truncate, two_pass, Engine, Model};
use crate::api::convert as api_convert;
use crate::api::inference::{
    ChatJob, EmbedJob, EmbedOutput, GenerateJob, Inference, ResolvedModel, Running,
};
use crate::api::options::Options;
use crate::api::stream::ChunkStream;
use crate::api::types::{ChatResponse, DebugInfo, GenerateResponse, Message};
use crate::error::{Error, Result};
use crate::prompt::{self, render_chat, render_generate, RenderRequest, Template};
use crate::scheduler::{KeepAlive, Lease};

impl Inference for Engine {
    fn load(
        &self,
        model: Arc<ResolvedModel>,
        options: Options,
        keep: KeepAlive,
    ) -> BoxFuture<'static, Result<()>> {
        let engine = self.clone();
        async move {
            let model = engine.prepare(model).await?;
            let (lease, _) = engine.acquire(&model, &options, Some(keep)).await?;
            drop(lease);
            Ok(())
        }
        .boxed()
    }

    fn unload(&self, model: Arc<ResolvedModel>) -> BoxFuture<'static, Result<()>> {
        let engine = self.clone();
        async move {
            if let Some(path) = &model.view.model_path {
                engine.scheduler().unload(path).await;
            }
            Ok(())
        }
        .boxed()
    }

    fn generate(
        &self,
        job: GenerateJob,
    ) -> BoxFuture<'static, Result<ChunkStream<GenerateResponse>>> {
        let engine = self.clone();
        async move { generate(engine, job).await }.boxed()
    }

    fn chat(&self, job: ChatJob) -> BoxFuture<'static, Result<ChunkStream<ChatResponse>>> {
        let engine = self.clone();
        async move { chat(engine, job).await }.boxed()
    }

    fn embed(&self, job: EmbedJob) -> BoxFuture<'static, Result<EmbedOutput>> {
        let engine = self.clone();
        async move { super::embed::embed(engine, job).await }.boxed()
    }

    fn ps(&self) -> BoxFuture<'static, Vec<Running>> {
        let engine = self.clone();
        async move {
            engine
                .scheduler()
                .ps()
                .await
                .into_iter()
                .map(|m| Running {
                    name: m.name,
                    digest: m.digest,
                    size: m.size,
                    size_vram: m.size_vram,
                    context_length: m.context_length,
                    expires_at: m.expires_at,
                    placement: m.placement,
                })
                .collect()
        }
        .boxed()
    }
}

fn single<T: Send + 'static>(item: T) -> ChunkStream<T> {
    Box::pin(futures_util::stream::once(async move { Ok(item) }))
}

/// The request controls generate and chat share.
struct Controls<'a> {
    truncate: Option<bool>,
    shift: Option<bool>,
    logprobs: bool,
    top_logprobs: i64,
    format: &'a crate::api::request::Format,
    /// Strings that end the thinking the response begins with (the output parser's).
    thinking_close: Vec<String>,
    /// The images the prompt's `[img-N]` markers name.
    images: &'a [crate::images::Image],
}

/// The completion parameters every job shares.
fn completion(
    model: &Model,
    opts: &Options,
    prompt: String,
    ctl: Controls<'_>,
) -> Result<runner_protocol::CompletionRequest> {
    let mut c = opts.completion_request();
    c.add_special = convert::add_special(model, &prompt);
    let (prompt, images) = crate::images::place(&prompt, ctl.images)?;
    c.prompt = Prompt::Text(prompt);
    c.images = images;
    c.truncate = ctl.truncate.unwrap_or(true);
    c.shift = ctl.shift.unwrap_or(true);
    c.logprobs = ctl.logprobs;
    // Alternatives come only with `logprobs`, as Ollama asks llama-server for them.
    c.top_logprobs = if ctl.logprobs {
        u32::try_from(ctl.top_logprobs).unwrap_or(0)
    } else {
        0
    };
    c.constraint = api_convert::constraint(ctl.format, ctl.thinking_close);
    Ok(c)
}

async fn generate(engine: Engine, job: GenerateJob) -> Result<ChunkStream<GenerateResponse>> {
    let started = Instant::now();
    let req = &job.request;
    let model = engine.prepare(job.model.clone()).await?;
    let has_context = req.context.as_ref().is_some_and(|c| !c.is_empty());
    // Bound the work by num_ctx before rendering or tokenizing anything in full.
    let win = engine.window(&model, &job.options);
    let truncate = req.truncate.unwrap_or(true);
    let context = req.context.as_deref().unwrap_or_default();
    if !truncate {
        if win.certainly_overflows(req.prompt.len()) {
            return Err(overflow(Window::min_tokens(req.prompt.len()), win.limit));
        }
        if context.len() > win.limit {
            return Err(overflow(context.len(), win.limit));
        }
    }
    let user_prompt = win
        .clip_text(&req.prompt)
        .unwrap_or_else(|| req.prompt.clone());
    let context = win.clip_ids(context);
    let think = think_for(&model, job.think);
    let template: Arc<Template> = if req.template.is_empty() {
        model.template.clone()
    } else {
        Arc::new(parse_request_template(&req.template)?)
    };
    let render_req = prompt::GenerateRequest {
        prompt: user_prompt,
        suffix: req.suffix.clone(),
        system: if req.system.is_empty() {
            model.view.system.clone()
        } else {
            req.system.clone()
        },
        messages: if has_context {
            Vec::new()
        } else {
            convert::layer_messages(&model)
        },
        images: req.images.len(),
        think: think.clone(),
        prefill: None,
    };
    let (rendered, parser) = if req.raw {
        // Raw prompts get no parser and name no closing strings: the format applies at once.
        (render_req.prompt.clone(), prompt::parsers::passthrough())
    } else {
        let (t, r) = (template.clone(), render_req.clone());
        let rendered = blocking(move || render_generate(&t, &r)).await?;
        let parser = prompt::parsers::for_model(
            &template,
            &prompt::parsers::Options {
                think: think.as_ref(),
                prompt: &rendered,
                named: model.parser(),
                ..Default::default()
            },
        );
        (rendered, parser)
    };
    let debug = |rendered_template: String| {
        let mut r = respond::generate_chunk(None);
        r.debug_info = Some(DebugInfo {
            rendered_template,
            image_count: req.images.len() as u64,
        });
        Ok(single(r))
    };
    // A render-only request loads nothing, unless its context needs the runner's vocabulary.
    if req.debug_render_only && !has_context {
        return debug(rendered);
    }

    let (lease, load) = engine
        .acquire(&model, &job.options, Some(job.keep_alive))
        .await?;
    let runner = lease.runner().clone();
    let mut prefix = String::new();
    if has_context {
        let tokens = context
            .iter()
            .map(|&t| {
                i32::try_from(t)
                    .map_err(|_| Error::BadRequest(format!("invalid context token {t}")))
            })
            .collect::<Result<Vec<i32>>>()?;
        prefix = runner
            .detokenize(&DetokenizeRequest {
                tokens,
                render_special: true,
            })
            .await?
            .content;
    }
    let full_prompt = format!("{prefix}{rendered}");
    if req.debug_render_only {
        // Ollama renders the context's text ahead of the prompt, as the runner would see it.
        return debug(full_prompt);
    }
    let creq = completion(
        &model,
        &job.options,
        full_prompt.clone(),
        Controls {
            truncate: req.truncate,
            shift: req.shift,
            logprobs: req.logprobs,
            top_logprobs: req.top_logprobs,
            format: &job.format,
            thinking_close: parser.thinking_close(),
            images: &job.images,
        },
    )?;
    let reprompt: two_pass::Reprompt = Box::new(move |thinking: &str| {
        let prefill = two_pass::prefill(thinking);
        let rendered = render_generate(
            &template,
            &prompt::GenerateRequest {
                prefill: Some(prefill.clone()),
                ..render_req
            },
        )?;
        let harmony = model.parser() == "harmony";
        let prompt = two_pass::open_final(harmony, format!("{prefix}{rendered}"));
        let parser = prompt::parsers::for_model(
            &template,
            &prompt::parsers::Options {
                think: think.as_ref(),
                last: Some(&prefill),
                prompt: &prompt,
                named: model.parser(),
                ..Default::default()
            },
        );
        Ok(two_pass::Second {
            add_special: convert::add_special(&model, &prompt),
            prompt,
            parser,
        })
    });
    let events = run(&engine, lease, creq, parser, reprompt, started, load).await?;
    Ok(respond::generate_chunks(
        events,
        (!req.raw).then_some(runner),
    ))
}

/// One generation through the response's parser, or the two-pass rollback when it is switched
/// on and a format meets a response that begins in thinking.
async fn run(
    engine: &Engine,
    lease: Lease,
    creq: runner_protocol::CompletionRequest,
    parser: Box<dyn prompt::parsers::Parser>,
    reprompt: two_pass::Reprompt,
    started: Instant,
    load: std::time::Duration,
) -> Result<Events> {
    if two_pass::applies(engine.settings().format_two_pass, creq.constraint.as_ref()) {
        if !creq.images.is_empty() {
            // Pass two re-renders the prompt, which would have to place the images again.
            return Err(Error::BadRequest(
                "a format with images is not supported while OLLAMA_FORMAT_TWO_PASS is on".into(),
            ));
        }
        return Ok(Box::pin(two_pass::run(two_pass::Plan {
            lease,
            first: creq,
            parser,
            reprompt,
            started,
            load,
        })));
    }
    let prompt = match &creq.prompt {
        Prompt::Text(t) => t.clone(),
        Prompt::Tokens(_) => String::new(),
    };
    let meter = lease.meter(started);
    let stream = lease.into_completion(&creq).await?;
    let steps = super::steps(stream, started, load, meter);
    Ok(Box::pin(super::events(steps, parser, prompt)))
}

/// The conversation as rendered: Modelfile SYSTEM (unless the request starts with a system
/// message), Modelfile MESSAGEs, then the request's messages.
pub fn layered(system: &str, layer: Vec<prompt::Message>, req: &[Message]) -> Vec<prompt::Message> {
    let mut msgs = Vec::with_capacity(layer.len() + req.len() + 1);
    if !system.is_empty() && req.first().is_none_or(|m| m.role != "system") {
        msgs.push(prompt::Message::new("system", system));
    }
    msgs.extend(layer);
    msgs.extend(req.iter().map(convert::render_message));
    msgs
}

async fn chat(engine: Engine, job: ChatJob) -> Result<ChunkStream<ChatResponse>> {
    let started = Instant::now();
    let req = &job.request;
    let model = engine.prepare(job.model.clone()).await?;
    let mut msgs = layered(
        &model.view.system,
        convert::layer_messages(&model),
        &req.messages,
    );
    if prompt::parsers::thinking::strips_old_thinking(
        &model.view.config.model_family,
        job.model.name.model(),
    ) {
        prompt::parsers::thinking::filter_old_thinking(&mut msgs);
    }
    // Bound the work by num_ctx before rendering or tokenizing anything in full: a message
    // longer than the runner could keep is clipped to the head and tail it would keep.
    let win = engine.window(&model, &job.options);
    let truncate = req.truncate.unwrap_or(true);
    let total: usize = msgs.iter().map(|m| m.content.len()).sum();
    if !truncate && win.certainly_overflows(total) {
        return Err(overflow(Window::min_tokens(total), win.limit));
    }
    for m in &mut msgs {
        if let Some(c) = win.clip_text(&m.content) {
            m.content = c;
        }
    }
    let tools: Vec<serde_json::Value> = req
        .tools
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<_, _>>()?;
    let think = think_for(&model, job.think);
    // The prompt may name the tools differently (harmony); the parser maps its calls back.
    let shown = prompt::parsers::prompt_tools(model.parser(), &tools);
    let render: Arc<dyn Fn(Vec<prompt::Message>) -> Result<String> + Send + Sync> = {
        let (model, think) = (model.clone(), think.clone());
        Arc::new(move |messages: Vec<prompt::Message>| {
            render_chat(
                &model.template,
                &RenderRequest {
                    messages,
                    tools: shown.clone(),
                    think: think.clone(),
                },
            )
        })
    };
    if req.debug_render_only {
        let mut r = respond::chat_chunk(None);
        let images = msgs.iter().map(|m| m.images as u64).sum();
        r.debug_info = Some(DebugInfo {
            rendered_template: render(msgs)?,
            image_count: images,
        });
        return Ok(single(r));
    }

    let (lease, load) = engine
        .acquire(&model, &job.options, Some(job.keep_alive))
        .await?;
    let runner = lease.runner().clone();
    let num_ctx = lease.options().ctx_size as usize;
    let kept = truncate::fit(&msgs, num_ctx, truncate, |window| {
        let runner = runner.clone();
        let render = render.clone();
        // The window's images count as Ollama counts them (truncate::image_tokens).
        let n_images = window.iter().map(|m| m.images).sum();
        let pics = truncate::image_tokens(&job.images, n_images);
        async move {
            // Rendering runs on the blocking pool, off the threads other requests wait on.
            let content = blocking(move || render(window)).await?;
            // Every token of text covers at least one byte, so bytes + the BOS/EOS the tokenizer
            // may add bound the count: a prompt that fits by that bound needs no runner trip,
            // and one that certainly overflows needs none either.
            if content.len() + 2 + pics <= num_ctx {
                return Ok(content.len() + 2 + pics);
            }
            if Window::min_tokens(content.len()) + pics > num_ctx {
                return Ok(Window::min_tokens(content.len()) + pics);
            }
            let req = TokenizeRequest {
                content,
                add_special: true,
                parse_special: true,
            };
            Ok(runner.tokenize(&req).await?.tokens.len() + pics)
        }
    })
    .await?;
    let prompt_text = {
        let (render, kept) = (render.clone(), kept.clone());
        blocking(move || render(kept)).await?
    };
    // Truncation drops the oldest turns, so the kept messages hold the last images; their
    // markers are numbered from 0 again in the rendered window.
    let kept_images: usize = kept.iter().map(|m| m.images).sum();
    let images = &job.images[job.images.len().saturating_sub(kept_images)..];
    let names = prompt::parsers::tool_names(&tools);
    // The parser splits content, thinking and tool calls; text it holds back (a possible tag)
    // comes in a later chunk, so chunks with nothing to say are skipped as Ollama does.
    let parser = prompt::parsers::for_model(
        &model.template,
        &prompt::parsers::Options {
            think: think.as_ref(),
            tools: &names,
            last: kept.last(),
            prompt: &prompt_text,
            named: model.parser(),
            schemas: &tools,
        },
    );
    let creq = completion(
        &model,
        &job.options,
        prompt_text,
        Controls {
            truncate: req.truncate,
            shift: req.shift,
            logprobs: req.logprobs,
            top_logprobs: req.top_logprobs,
            format: &job.format,
            thinking_close: parser.thinking_close(),
            images,
        },
    )?;
    let reprompt: two_pass::Reprompt = {
        let model = model.clone();
        Box::new(move |thinking: &str| {
            let prefill = two_pass::prefill(thinking);
            let mut messages = kept;
            messages.push(prefill.clone());
            let prompt = two_pass::open_final(model.parser() == "harmony", render(messages)?);
            let parser = prompt::parsers::for_model(
                &model.template,
                &prompt::parsers::Options {
                    think: think.as_ref(),
                    tools: &names,
                    last: Some(&prefill),
                    prompt: &prompt,
                    named: model.parser(),
                    schemas: &tools,
                },
            );
            Ok(two_pass::Second {
                add_special: convert::add_special(&model, &prompt),
                prompt,
                parser,
            })
        })
    };
    let events = run(&engine, lease, creq, parser, reprompt, started, load).await?;
    Ok(respond::chat_chunks(events))
}

/// The request's `think` as the prompt and the parser read it: a harmony model's prompt knows
/// no `max`, so it thinks `high` (Ollama's chat and generate handlers).
fn think_for(
    model: &Model,
    think: Option<crate::api::request::ThinkValue>,
) -> Option<prompt::Think> {
    let think = convert::think(think);
    if model.is_harmony() {
        prompt::parsers::harmony::think(think)
    } else {
        think
    }
}

/// Runs CPU-heavy prompt work (rendering a long conversation or prompt) on tokio's blocking
/// pool, so the runtime threads that every other request needs stay free.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("prompt rendering task: {e}")))?
}

/// The 400 for a prompt that certainly does not fit a context of `n_ctx` while truncation is
/// off, before it is tokenized: the runner's refusal text, with the fewest tokens the prompt
/// can be (it is never tokenized whole, so the count is a lower bound, still over `n_ctx`).
fn overflow(tokens: usize, n_ctx: usize) -> Error {
    Error::Runner(runner_protocol::RunnerError::exceeds_context(tokens, n_ctx))
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
        // The SYSTEM layer goes first when the request does not bring its own.
        assert_eq!(
            roles(layered("be brief", layer.clone(), &[wire("user", "hi")])),
            vec![
                "system:be brief",
                "user:example q",
                "assistant:example a",
                "user:hi"
            ]
        );
        // A request system message replaces it; MESSAGE layers still precede the request.
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
