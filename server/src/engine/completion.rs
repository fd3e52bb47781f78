//! A runner completion as the handlers consume it: text steps, then one final step carrying
//! Ollama's metrics (integer nanoseconds; `total_duration` since the request arrived,
//! `load_duration` = scheduling + load). A runner failure ends the stream with `Err`; nothing
//! follows it. Dropping the stream drops the runner connection (and the lease it owns), which
//! cancels the generation. [`events`] runs steps through the response's output parser.

use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use runner_protocol::{CompletionChunk, DoneReason, TokenLogprob};

use crate::api::convert::metrics;
use crate::api::types::Metrics;
use crate::error::{Error, Result};
use crate::metrics::CompletionMeter;
use crate::prompt::parsers::{Parsed, Parser};
use crate::runner::CompletionStream;

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Text {
        content: String,
        logprobs: Vec<TokenLogprob>,
        /// The whole prompt's token count, on the first text step (when the runner says it).
        prompt_tokens: Option<u64>,
    },
    Done {
        reason: DoneReason,
        metrics: Metrics,
    },
}

/// Maps a runner stream to steps. `started` is when the HTTP request arrived; `load` is the
/// time spent acquiring the runner. `meter` sees every token and the final counts: this is
/// the one place a completion's tokens pass, so time to first token, token gaps and token
/// counts are recorded here.
pub fn steps(
    stream: CompletionStream,
    started: Instant,
    load: Duration,
    mut meter: CompletionMeter,
) -> impl Stream<Item = Result<Step>> + Send {
    stream.map(move |item| {
        item.and_then(|chunk| match chunk {
            CompletionChunk::Token {
                content,
                logprobs,
                prompt_tokens,
            } => {
                meter.token();
                Ok(Step::Text {
                    content,
                    logprobs,
                    prompt_tokens: prompt_tokens.map(u64::from),
                })
            }
            CompletionChunk::Done {
                done_reason,
                timings,
            } => {
                let metrics = metrics(&timings, load, started.elapsed());
                meter.done(metrics.prompt_eval_count, metrics.eval_count);
                meter.drafted(timings.drafted.into(), timings.accepted.into());
                log_done(meter.model(), &timings, &metrics);
                Ok(Step::Done {
                    reason: done_reason,
                    metrics,
                })
            }
            // The client already turns error chunks into `Err` and consumes heartbeats; this
            // keeps the mapping total (an empty text step is no event).
            CompletionChunk::Error { error } => Err(Error::Runner(error)),
            CompletionChunk::Progress { .. } => Ok(Step::Text {
                content: String::new(),
                logprobs: Vec::new(),
                prompt_tokens: None,
            }),
        })
    })
}

/// The request log line of a finished completion: its counts, and what speculative decoding
/// drafted and had accepted. Info when something was drafted (a draft model, the n-gram
/// drafter or a grammar's forced text), so acceptance is visible without debug logging.
fn log_done(model: &str, t: &runner_protocol::Timings, m: &Metrics) {
    if t.drafted > 0 {
        tracing::info!(
            model,
            prompt_eval_count = m.prompt_eval_count,
            eval_count = m.eval_count,
            eval_duration_ns = m.eval_duration,
            drafted = t.drafted,
            accepted = t.accepted,
            "completion done"
        );
    } else {
        tracing::debug!(
            model,
            prompt_eval_count = m.prompt_eval_count,
            eval_count = m.eval_count,
            eval_duration_ns = m.eval_duration,
            "completion done"
        );
    }
}

/// A completion after the output parser: what the client sees, before the wire shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Never empty: chunks the parser has nothing for yet (a possible tag held back) and that
    /// carry no logprobs are not events.
    Text {
        parsed: Parsed,
        logprobs: Vec<TokenLogprob>,
        /// The prompt's token count, on the first event after the runner reported it.
        prompt_tokens: Option<u64>,
    },
    Done {
        /// What the parser held back until the end.
        parsed: Parsed,
        reason: DoneReason,
        metrics: Metrics,
        /// The prompt of the generation that finished, followed by its output (generate's
        /// `context`).
        transcript: String,
    },
}

/// Runs `steps` through `parser`. `prompt` starts the transcript.
pub fn events(
    steps: impl Stream<Item = Result<Step>> + Send,
    mut parser: Box<dyn Parser>,
    prompt: String,
) -> impl Stream<Item = Result<Event>> + Send {
    let mut transcript = prompt;
    // Held until an event goes out: the parser may hold the first text back.
    let mut announce = None;
    steps.filter_map(move |item| {
        let event = item.map(|step| match step {
            Step::Text {
                content,
                logprobs,
                prompt_tokens,
            } => {
                transcript.push_str(&content);
                announce = announce.or(prompt_tokens);
                let parsed = parser.add(&content, false);
                (!parsed.is_empty() || !logprobs.is_empty()).then(|| Event::Text {
                    parsed,
                    logprobs,
                    prompt_tokens: announce.take(),
                })
            }
            Step::Done { reason, metrics } => Some(Event::Done {
                parsed: parser.add("", true),
                reason,
                metrics,
                transcript: std::mem::take(&mut transcript),
            }),
        });
        std::future::ready(event.transpose())
    })
}
