//! Parsed completion events ([`Event`]) in the native wire shapes: generate chunks (`response`,
//! `thinking`, and on the last one the metrics, the tool calls the parser gave with it, and,
//! unless `raw`, `context` = the tokens of prompt + output) and chat chunks (an assistant
//! message with content, thinking and tool calls). One place for both the single pass and the
//! two-pass flow.

use futures_util::{Stream, StreamExt};
use runner_protocol::TokenizeRequest;

use super::completion::Event;
use crate::api::convert as api_convert;
use crate::api::stream::ChunkStream;
use crate::api::types::{created_at_now, ChatResponse, GenerateResponse, Message};
use crate::error::Result;
use crate::prompt::parsers::Parsed;
use crate::runner::Runner;

pub type Events = std::pin::Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

pub fn generate_chunk(done_reason: Option<&str>) -> GenerateResponse {
    GenerateResponse {
        created_at: created_at_now(),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
}

pub fn chat_chunk(done_reason: Option<&str>) -> ChatResponse {
    ChatResponse {
        created_at: created_at_now(),
        message: Message::assistant(""),
        done: done_reason.is_some(),
        done_reason: done_reason.map(str::to_owned),
        ..Default::default()
    }
}

/// Generate chunks. `context_from`: the runner that tokenizes the final transcript into
/// `context`; `None` for raw prompts, which return none.
pub fn generate_chunks(
    events: Events,
    context_from: Option<Runner>,
) -> ChunkStream<GenerateResponse> {
    Box::pin(events.then(move |item| {
        let runner = context_from.clone();
        async move {
            Ok(match item? {
                Event::Text {
                    parsed, logprobs, ..
                } => {
                    let mut r = generate_chunk(None);
                    r.response = parsed.content;
                    r.thinking = parsed.thinking;
                    r.logprobs = api_convert::logprobs(&logprobs);
                    r
                }
                Event::Done {
                    parsed,
                    reason,
                    metrics,
                    transcript,
                } => {
                    let mut r = generate_chunk(Some(api_convert::done_reason(reason)));
                    r.response = parsed.content;
                    r.thinking = parsed.thinking;
                    // Ollama's generate keeps the calls of the last chunk only (a harmony model's,
                    // which come there), without ids.
                    r.tool_calls = tool_calls(parsed.tool_calls);
                    r.tool_calls.iter_mut().for_each(|c| c.id.clear());
                    r.metrics = metrics;
                    if let Some(runner) = &runner {
                        r.context = context_tokens(runner, transcript).await;
                    }
                    r
                }
            })
        }
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

/// Chat chunks: each event as one assistant message chunk.
pub fn chat_chunks(events: Events) -> ChunkStream<ChatResponse> {
    Box::pin(events.map(|item| {
        item.map(|e| match e {
            Event::Text {
                parsed,
                logprobs,
                prompt_tokens,
            } => {
                let mut r = chat_chunk(None);
                parsed_into(&mut r.message, parsed);
                r.logprobs = api_convert::logprobs(&logprobs);
                r.metrics.prompt_announced = prompt_tokens.unwrap_or(0);
                r
            }
            Event::Done {
                parsed,
                reason,
                metrics,
                ..
            } => {
                let mut r = chat_chunk(Some(api_convert::done_reason(reason)));
                parsed_into(&mut r.message, parsed);
                r.metrics = metrics;
                r
            }
        })
    }))
}

/// A parser's output as the chat message's fields.
fn parsed_into(m: &mut Message, p: Parsed) {
    m.content = p.content;
    m.thinking = p.thinking;
    m.tool_calls = tool_calls(p.tool_calls);
}

/// Parsed tool calls in the wire shape.
fn tool_calls(calls: Vec<crate::prompt::ToolCall>) -> Vec<crate::api::types::ToolCall> {
    calls
        .into_iter()
        .map(|c| crate::api::types::ToolCall {
            id: c.id,
            function: crate::api::types::ToolCallFunction {
                index: c.index,
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect()
}
