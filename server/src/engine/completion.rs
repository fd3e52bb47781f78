//! A runner completion as the handlers consume it: text steps, then one final step carrying
//! Ollama's metrics (integer nanoseconds; `total_duration` since the request arrived,
//! `load_duration` = scheduling + load). A runner failure ends the stream with `Err`; nothing
//! follows it. Dropping the stream drops the runner connection (and the lease it owns), which
//! cancels the generation.

use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use runner_protocol::{CompletionChunk, DoneReason, TokenLogprob};

use crate::api::convert::metrics;
use crate::api::types::Metrics;
use crate::error::{Error, Result};
use crate::runner::CompletionStream;

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Text {
        content: String,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        reason: DoneReason,
        metrics: Metrics,
    },
}

/// Maps a runner stream to steps. `started` is when the HTTP request arrived; `load` is the
/// time spent acquiring the runner.
pub fn steps(
    stream: CompletionStream,
    started: Instant,
    load: Duration,
) -> impl Stream<Item = Result<Step>> + Send {
    stream.map(move |item| {
        item.and_then(|chunk| match chunk {
            CompletionChunk::Token { content, logprobs } => Ok(Step::Text { content, logprobs }),
            CompletionChunk::Done {
                done_reason,
                timings,
            } => Ok(Step::Done {
                reason: done_reason,
                metrics: metrics(&timings, load, started.elapsed()),
            }),
            // The client already turns error chunks into `Err`; this keeps the mapping total.
            CompletionChunk::Error { error } => Err(Error::Runner(error)),
        })
    })
}
