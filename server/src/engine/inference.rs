//! `Inference` for [`Engine`]: what happens to a validated job. Generate renders the prompt
//! (unless `raw`; a per-request TEMPLATE or SYSTEM replaces the model's; a `context` is
//! detokenized and prepended, and then the Modelfile MESSAGEs are left out), takes a runner slot
//! and streams chunks whose last carries metrics and, unless `raw`, `context` = the tokens of
//! prompt + output. Chat layers the Modelfile SYSTEM (only when the conversation does not start
//! with a system message) and MESSAGEs in, drops the oldest non-system turns until the prompt
//! fits `num_ctx` by the runner's tokenizer, and streams assistant message chunks. Embed returns
//! the runner's raw vectors.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, Stream, StreamExt};
use runner_protocol::{DetokenizeRequest, EmbedRequest, ErrorKind, Prompt, TokenizeRequest};

use super::convert;
use super::{model::parse_request_template, truncate, Engine, Model, Step};
use crate::api::convert as api_convert;
use crate::api::inference::{
    ChatJob, EmbedJob, EmbedOutput, GenerateJob, Inference, ResolvedModel, Running,
};
use crate::api::options::Options;
use crate::api::stream::ChunkStream;
use crate::api::types::{created_at_now, ChatResponse, DebugInfo, GenerateResponse, Message};
use crate::error::{Error, Result};
use crate::prompt::{self, render_chat, render_generate, RenderRequest};
use crate::runner::Runner;
use crate::scheduler::KeepAlive;

type Steps = std::pin::Pin<Box<dyn Stream<Item = Result<Step>> + Send>>;

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
        async move { embed(engine, job).await }.boxed()
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
                })
                .collect()
        }
        .boxed()
    }
}

fn single<T: Send + 'static>(item: T) -> ChunkStream<T> {
    Box::pin(futures_util::stream::once(async move { Ok(item) }))
}

fn generate_chunk(done_reason: Option<&str>) -> GenerateResponse {
    GenerateResponse {
        created_at: created_at_now(),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
}

fn chat_chunk(done_reason: Option<&str>) -> ChatResponse {
    ChatResponse {
        created_at: created_at_now(),
        message: Message::assistant(""),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
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
}

/// The completion parameters every job shares.
fn completion(
    model: &Model,
    opts: &Options,
    prompt: String,
    ctl: Controls<'_>,
) -> runner_protocol::CompletionRequest {
    let mut c = opts.completion_request();
    c.add_special = convert::add_special(model, &prompt);
    c.prompt = Prompt::Text(prompt);
    c.truncate = ctl.truncate.unwrap_or(true);
    c.shift = ctl.shift.unwrap_or(true);
    c.logprobs = ctl.logprobs;
    c.top_logprobs = u32::try_from(ctl.top_logprobs).unwrap_or(0);
    c.constraint = api_convert::constraint(ctl.format, ctl.thinking_close);
    c
}

async fn generate(engine: Engine, job: GenerateJob) -> Result<ChunkStream<GenerateResponse>> {
    let started = Instant::now();
    let req = &job.request;
    let model = engine.prepare(job.model.clone()).await?;
    let has_context = req.context.as_ref().is_some_and(|c| !c.is_empty());
    let mut parser = None;
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
        let messages = if has_context {
            Vec::new()
        } else {
            convert::layer_messages(&model)
        };
        let think = convert::think(job.think);
        let rendered = render_generate(
            template,
            &prompt::GenerateRequest {
                prompt: req.prompt.clone(),
                suffix: req.suffix.clone(),
                system,
                messages,
                images: req.images.len(),
                think: think.clone(),
            },
        )?;
        // Raw prompts get no parser and name no closing strings: the format applies at once.
        parser = Some(prompt::parsers::for_model(
            template,
            &prompt::parsers::Options {
                think: think.as_ref(),
                prompt: &rendered,
                ..Default::default()
            },
        ));
        rendered
    };
    if req.debug_render_only {
        let mut r = generate_chunk(None);
        r.debug_info = Some(DebugInfo {
            rendered_template: rendered,
            image_count: req.images.len() as u64,
        });
        return Ok(single(r));
    }

    let (lease, load) = engine
        .acquire(&model, &job.options, Some(job.keep_alive))
        .await?;
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
            thinking_close: parser
                .as_ref()
                .map(|p| p.thinking_close())
                .unwrap_or_default(),
        },
    );
    let stream = lease.into_completion(&creq).await?;
    let steps: Steps = Box::pin(super::steps(stream, started, load));
    let tail = Tail {
        runner,
        prompt: (!req.raw).then_some(full_prompt),
    };
    Ok(generate_chunks(steps, tail, parser))
}

/// What the final generate chunk needs beyond the metrics.
struct Tail {
    runner: Runner,
    /// The full prompt when `context` is to be returned (not with `raw`).
    prompt: Option<String>,
}

struct GenState {
    steps: Steps,
    tail: Tail,
    output: String,
    finished: bool,
    parser: Option<Box<dyn prompt::parsers::Parser>>,
}

fn generate_chunks(
    steps: Steps,
    tail: Tail,
    parser: Option<Box<dyn prompt::parsers::Parser>>,
) -> ChunkStream<GenerateResponse> {
    let st = GenState {
        steps,
        tail,
        output: String::new(),
        finished: false,
        parser,
    };
    Box::pin(futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        // Chunks the parser has nothing for yet (a possible tag held back) are skipped.
        let item = loop {
            match st.steps.next().await? {
                Err(e) => {
                    st.finished = true;
                    break Err(e);
                }
                Ok(Step::Text { content, logprobs }) => {
                    st.output.push_str(&content);
                    let mut r = generate_chunk(None);
                    r.logprobs = api_convert::logprobs(&logprobs);
                    match &mut st.parser {
                        Some(p) => {
                            let out = p.add(&content, false);
                            if out.is_empty() && logprobs.is_empty() {
                                continue;
                            }
                            r.response = out.content;
                            r.thinking = out.thinking;
                        }
                        None => r.response = content,
                    }
                    break Ok(r);
                }
                Ok(Step::Done { reason, metrics }) => {
                    st.finished = true;
                    let mut r = generate_chunk(Some(api_convert::done_reason(reason)));
                    if let Some(p) = &mut st.parser {
                        let out = p.add("", true);
                        r.response = out.content;
                        r.thinking = out.thinking;
                    }
                    r.metrics = metrics;
                    if let Some(p) = &st.tail.prompt {
                        r.context =
                            context_tokens(&st.tail.runner, format!("{p}{}", st.output)).await;
                    }
                    break Ok(r);
                }
            }
        };
        Some((item, st))
    }))
}

/// `context` for the final chunk; a tokenizer failure only drops it (the text is delivered).
async fn context_tokens(runner: &Runner, content: String) -> Vec<i64> {
    let req = TokenizeRequest {
        content,
        add_special: false,
        parse_special: true,
    };
    match runner.tokenize(&req).await {
        Ok(t) => t.tokens.into_iter().map(i64::from).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not tokenize the context");
            Vec::new()
        }
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
    msgs.extend(req.iter().map(convert::render_message));
    msgs
}

async fn chat(engine: Engine, job: ChatJob) -> Result<ChunkStream<ChatResponse>> {
    let started = Instant::now();
    let req = &job.request;
    let model = engine.prepare(job.model.clone()).await?;
    let msgs = layered(
        &model.view.system,
        convert::layer_messages(&model),
        &req.messages,
    );
    let tools: Vec<serde_json::Value> = req
        .tools
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<_, _>>()?;
    let think = convert::think(job.think);
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
        let mut r = chat_chunk(None);
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
    let kept = truncate::fit(&msgs, num_ctx, req.truncate.unwrap_or(true), |window| {
        let runner = runner.clone();
        let rendered = render(window);
        async move {
            let content = rendered?;
            // Every token of text covers at least one byte, so bytes + the BOS/EOS the tokenizer
            // may add bound the count: a prompt that fits by that bound needs no runner trip.
            if content.len() + 2 <= num_ctx {
                return Ok(content.len() + 2);
            }
            let req = TokenizeRequest {
                content,
                add_special: true,
                parse_special: true,
            };
            Ok(runner.tokenize(&req).await?.tokens.len())
        }
    })
    .await?;
    let prompt_text = render(kept.clone())?;
    let names = prompt::parsers::tool_names(&tools);
    let mut parser = prompt::parsers::for_model(
        &model.template,
        &prompt::parsers::Options {
            think: think.as_ref(),
            tools: &names,
            last: kept.last(),
            prompt: &prompt_text,
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
        },
    );
    let stream = lease.into_completion(&creq).await?;
    let steps = super::steps(stream, started, load);
    // The parser splits content, thinking and tool calls; text it holds back (a possible tag)
    // comes in a later chunk, so chunks with nothing to say are skipped as Ollama does.
    Ok(Box::pin(steps.filter_map(move |item| {
        let out = item.map(|step| match step {
            Step::Text { content, logprobs } => {
                let mut r = chat_chunk(None);
                let p = parser.add(&content, false);
                let empty = p.is_empty() && logprobs.is_empty();
                parsed_into(&mut r.message, p);
                r.logprobs = api_convert::logprobs(&logprobs);
                (!empty).then_some(r)
            }
            Step::Done { reason, metrics } => {
                let mut r = chat_chunk(Some(api_convert::done_reason(reason)));
                parsed_into(&mut r.message, parser.add("", true));
                r.metrics = metrics;
                Some(r)
            }
        });
        futures_util::future::ready(out.transpose())
    })))
}

/// A parser's output as the chat message's fields.
fn parsed_into(m: &mut Message, p: prompt::parsers::Parsed) {
    m.content = p.content;
    m.thinking = p.thinking;
    m.tool_calls = p
        .tool_calls
        .into_iter()
        .map(|c| crate::api::types::ToolCall {
            id: c.id,
            function: crate::api::types::ToolCallFunction {
                index: c.index,
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect();
}

async fn embed(engine: Engine, job: EmbedJob) -> Result<EmbedOutput> {
    let model = engine.prepare(job.model.clone()).await?;
    let (lease, load) = engine
        .acquire(&model, &job.options, Some(job.keep_alive))
        .await?;
    let req = EmbedRequest {
        inputs: job.inputs.into_iter().map(Prompt::Text).collect(),
        truncate: job.truncate,
    };
    let resp = lease.embed(&req).await.map_err(|e| match e {
        Error::Runner(r) if r.kind == ErrorKind::ContextOverflow => {
            Error::BadRequest("the input length exceeds the context length".into())
        }
        other => other,
    })?;
    Ok(EmbedOutput {
        embeddings: resp.embeddings,
        prompt_eval_count: u64::from(resp.prompt_eval_count),
        load_duration: load,
    })
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
