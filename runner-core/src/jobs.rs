//! The work the socket handlers hand to a runner's engine thread, over one `std::sync::mpsc`
//! channel: every job carries the sender its answer goes back through.

use crate::sampling::TokenMask;
use crate::Token;
use runner_protocol::{CompletionChunk, CompletionRequest, EmbedResponse, RunnerError};
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// A prompt's images as the engine that tokenized them made them (one entry per image, in
/// prompt order). Opaque here: only that engine reads them back (it downcasts each entry).
pub type Media = Vec<Box<dyn std::any::Any + Send>>;

/// Tokenizes a prompt that carries images: takes `r.images` out of the request and returns the
/// text tokens around the image chunks plus the engine's [`Media`].
pub trait MediaPrompt: Send + Sync {
    #[allow(clippy::type_complexity)]
    fn prompt<'a>(
        &'a self,
        r: &'a mut CompletionRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(Vec<Token>, Media), RunnerError>> + Send + 'a>>;
}

pub struct CompleteJob {
    /// Already tokenized and fitted to the slot size (the engine's `fit_prompt`).
    pub tokens: Vec<Token>,
    /// The prompt's images, in order (empty for a text prompt).
    pub media: Media,
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
