//! The work the socket handlers hand to a runner's engine thread, over one `std::sync::mpsc`
//! channel: every job carries the sender its answer goes back through.

use crate::sampling::TokenMask;
use crate::Token;
use runner_protocol::{CompletionChunk, CompletionRequest, EmbedResponse, RunnerError};
use tokio::sync::{mpsc::UnboundedSender, oneshot};

pub struct CompleteJob {
    /// Already tokenized and fitted to the slot size (the engine's `fit_prompt`).
    pub tokens: Vec<Token>,
    pub req: CompletionRequest,
    pub out: UnboundedSender<CompletionChunk>,
    /// The request's output constraint (`NoMask` when it has none).
    pub mask: Box<dyn TokenMask>,
}

pub struct EmbedJob {
    /// Tokenized and fitted inputs.
    pub inputs: Vec<Vec<Token>>,
    pub reply: oneshot::Sender<Result<EmbedResponse, RunnerError>>,
}

pub enum Job {
    Complete(Box<CompleteJob>),
    Embed(EmbedJob),
    Shutdown,
}

impl Job {
    /// Answer the job with `e` (a failed load, a stopped engine); false for `Shutdown`.
    pub fn fail(self, e: &RunnerError) -> bool {
        match self {
            Job::Complete(j) => drop(j.out.send(CompletionChunk::Error { error: e.clone() })),
            Job::Embed(j) => drop(j.reply.send(Err(e.clone()))),
            Job::Shutdown => return false,
        }
        true
    }
}
