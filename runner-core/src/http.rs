//! The runner protocol over HTTP/1.1 on the Unix socket (runner_protocol's endpoint table).
//!
//! Handlers never touch the engine: tokenizing uses the shared, thread-safe [`Vocabulary`];
//! completions and embeddings go to the engine thread as jobs. Requests that need the model wait
//! for the load to finish (or fail with `ModelLoad`); `/health` answers at once. Every non-2xx
//! answer carries an `ErrorBody` whose kind sets the status.

use crate::embed_cut;
use crate::grammar;
use crate::jobs::{CompleteJob, EmbedJob, Job};
use crate::sampling::{NoMask, TokenMask};
use crate::slots::{Cut, Overflow};
use crate::{Token, Vocabulary};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use runner_protocol::{
    CompletionChunk, CompletionRequest, Constraint, DetokenizeRequest, DetokenizeResponse,
    EmbedRequest, ErrorBody, ErrorKind, Health, Info, Prompt, RunnerError, TokenizeRequest,
    TokenizeResponse, NDJSON,
};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

pub type Body = BoxBody<Bytes, Infallible>;

/// Request bodies above this are refused (a long prompt is a few MB of JSON at most).
// Images travel as RGB (the server bounds them at 64 Mpx a request: 256 MiB of base64).
const MAX_BODY: usize = 320 << 20;

/// How an engine fits a prompt into a slot of `n_ctx` positions (`num_keep`, and what the
/// request's `truncate`/`shift` allow): the tokens to evaluate, or the overflow when it does not
/// fit and may not be cut.
pub type FitPrompt = fn(Vec<Token>, usize, i32, Cut) -> Result<Vec<Token>, Overflow>;

/// What a loaded runner knows; set once when the load succeeds.
pub struct Loaded {
    pub vocab: Arc<dyn Vocabulary>,
    pub info: Info,
    pub fit_prompt: FitPrompt,
    /// Positions per slot (llama.cpp rounds a context up, to a multiple of 256).
    pub n_ctx_seq: usize,
    /// The context a slot was asked for (`--ctx-size`, the request's `num_ctx`), at most
    /// `n_ctx_seq`: what a long prompt is truncated to and an embedding input may hold, as in
    /// Ollama, which measures them against `num_ctx`; a prompt that may not be truncated is
    /// refused only past `n_ctx_seq`, as llama-server refuses it.
    pub n_ctx_asked: usize,
    /// Longest embedding input (per-slot context, or one batch for pooled models).
    pub embed_limit: usize,
    /// What the tokenizer adds to an empty text ([`added_specials`]): its BOS and/or EOS.
    pub added_specials: Vec<Token>,
    pub abort: Arc<AtomicBool>,
    /// How prompts with images are tokenized, when the model has a projector (`--mmproj`).
    pub media: Option<Arc<dyn crate::jobs::MediaPrompt>>,
}

pub struct State {
    pub health: watch::Sender<Health>,
    pub loaded: OnceLock<Loaded>,
    pub jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    pub shutting_down: AtomicBool,
}

type Res = Result<Response<Body>, RunnerError>;

pub async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<Body>, Infallible> {
    let out = match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/health") => Ok(json(StatusCode::OK, &*state.health.borrow())),
        (Method::GET, "/info") => ready(&state).await.map(|l| json(StatusCode::OK, &l.info)),
        (Method::POST, "/completion") => completion(req, &state).await,
        (Method::POST, "/embed") => embed(req, &state).await,
        (Method::POST, "/tokenize") => tokenize(req, &state).await,
        (Method::POST, "/detokenize") => detokenize(req, &state).await,
        (_, path) => Err(RunnerError::new(
            ErrorKind::BadRequest,
            format!("no such endpoint: {path}"),
        )),
    };
    Ok(out.unwrap_or_else(error_response))
}

pub fn error_response(e: RunnerError) -> Response<Body> {
    let status = StatusCode::from_u16(e.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, &ErrorBody { error: e })
}

fn json<T: Serialize + ?Sized>(status: StatusCode, v: &T) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_default()
}

/// Wait for the load to end; the loaded state, or the load failure.
async fn ready(state: &State) -> Result<&Loaded, RunnerError> {
    let mut rx = state.health.subscribe();
    let h = rx
        .wait_for(|h| !matches!(h, Health::Loading { .. }))
        .await
        .map_err(|_| RunnerError::new(ErrorKind::Internal, "runner state is gone"))?
        .clone();
    match (h, state.loaded.get()) {
        (Health::Failed { kind, message }, _) => Err(RunnerError::new(kind, message)),
        (_, Some(l)) => Ok(l),
        _ => Err(RunnerError::new(
            ErrorKind::Internal,
            "runner is ready but has no model",
        )),
    }
}

async fn body<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, RunnerError> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| RunnerError::new(ErrorKind::BadRequest, format!("reading request body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| RunnerError::new(ErrorKind::BadRequest, format!("invalid request: {e}")))
}

fn send(state: &State, job: Job) -> Result<(), RunnerError> {
    let jobs = state
        .jobs
        .lock()
        .map_err(|_| RunnerError::new(ErrorKind::Internal, "job queue poisoned"))?;
    jobs.send(job)
        .map_err(|_| RunnerError::new(ErrorKind::Cancelled, "runner is shutting down"))
}

/// Whether `tokens`, the tokenized prompt of `r`, begin with a BOS the tokenizer added.
fn adds_bos(added: &[Token], r: &CompletionRequest, tokens: &[Token]) -> bool {
    if !r.add_special || matches!(r.prompt, Prompt::Tokens(_)) {
        return false;
    }
    added.len() == 1 && tokens.first() == added.first()
}

/// The special tokens the tokenizer adds around a text (what it makes of an empty one), found
/// once per load for [`Loaded::added_specials`].
pub fn added_specials(vocab: &dyn Vocabulary) -> Vec<Token> {
    vocab.tokenize("", true, false).unwrap_or_default()
}

/// Tokens of a prompt: text is tokenized off the async threads; ids are range-checked.
async fn prompt_tokens(
    model: &Arc<dyn Vocabulary>,
    p: Prompt,
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<Token>, RunnerError> {
    match p {
        Prompt::Tokens(t) => {
            let n = model.n_vocab();
            match t.iter().find(|&&x| x < 0 || x >= n) {
                Some(bad) => Err(RunnerError::new(
                    ErrorKind::BadRequest,
                    format!("token id {bad} is outside the vocabulary (0..{n})"),
                )),
                None => Ok(t),
            }
        }
        Prompt::Text(s) => {
            let m = model.clone();
            tokio::task::spawn_blocking(move || m.tokenize(&s, add_special, parse_special))
                .await
                .map_err(|e| RunnerError::new(ErrorKind::Internal, e.to_string()))?
                .map_err(|e| RunnerError::new(ErrorKind::BadRequest, e))
        }
    }
}

async fn completion(req: Request<Incoming>, state: &State) -> Res {
    let loaded = ready(state).await?;
    let mut r: CompletionRequest = body(req).await?;
    if r.top_logprobs > 20 {
        return Err(RunnerError::new(
            ErrorKind::BadRequest,
            "top_logprobs must be at most 20",
        ));
    }
    let (tokens, media) = if r.images.is_empty() {
        let tokens = prompt_tokens(
            &loaded.vocab,
            r.prompt.clone(),
            r.add_special,
            r.parse_special,
        )
        .await?;
        (tokens, Vec::new())
    } else {
        match &loaded.media {
            Some(m) => m.prompt(&mut r).await?,
            None => {
                return Err(RunnerError::new(
                    ErrorKind::BadRequest,
                    "this model is missing data required for image input",
                ))
            }
        }
    };
    if tokens.is_empty() {
        return Err(RunnerError::new(
            ErrorKind::BadRequest,
            "the prompt is empty",
        ));
    }
    // `num_keep` counts the prompt's tokens after the BOS the tokenizer adds, which is kept as
    // well (Ollama and llama-server add one for it, when truncating and when shifting).
    if r.num_keep >= 0 && adds_bos(&loaded.added_specials, &r, &tokens) {
        r.num_keep = r.num_keep.saturating_add(1);
    }
    // A prompt with images is never cut (half an image means nothing to the model): like
    // Ollama, which sends it whole, it is refused as llama-server refuses it when too long.
    let cut = if media.is_empty() {
        Cut::for_request(r.truncate, r.shift)
    } else {
        Cut::Refuse
    };
    // Ollama bounds generation by the context asked for, not the (rounded up) slot.
    r.num_predict = crate::reply::budget(r.num_predict, loaded.n_ctx_asked.min(loaded.n_ctx_seq))
        .try_into()
        .unwrap_or(i32::MAX);
    let n_ctx = match cut {
        Cut::Refuse => loaded.n_ctx_seq,
        Cut::Truncate | Cut::RefuseWithoutShift => loaded.n_ctx_asked.min(loaded.n_ctx_seq),
    };
    let tokens = (loaded.fit_prompt)(tokens, n_ctx, r.num_keep, cut).map_err(|o| o.error())?;
    let mask = constraint_mask(&loaded.vocab, r.constraint.clone()).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    send(
        state,
        Job::Complete(Box::new(CompleteJob {
            tokens,
            media,
            req: r,
            out: tx,
            mask,
        })),
    )?;
    let lines = UnboundedReceiverStream::new(rx).map(|chunk: CompletionChunk| {
        let mut line = serde_json::to_vec(&chunk).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(line)))
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header("content-type", NDJSON)
        .body(BodyExt::boxed(StreamBody::new(lines)))
        .unwrap_or_default())
}

/// The token mask for a request's constraint; compiling (and, the first time, building the
/// vocabulary trie) runs off the async threads.
async fn constraint_mask(
    model: &Arc<dyn Vocabulary>,
    c: Option<Constraint>,
) -> Result<Box<dyn TokenMask>, RunnerError> {
    let Some(c) = c else {
        return Ok(Box::new(NoMask));
    };
    let m = model.clone();
    let mask = tokio::task::spawn_blocking(move || grammar::for_model(&*m)?.mask(&c))
        .await
        .map_err(|e| RunnerError::new(ErrorKind::Internal, e.to_string()))??;
    Ok(Box::new(mask))
}

async fn embed(req: Request<Incoming>, state: &State) -> Res {
    let loaded = ready(state).await?;
    let r: EmbedRequest = body(req).await?;
    if r.inputs.is_empty() {
        return Err(RunnerError::new(
            ErrorKind::BadRequest,
            "no inputs to embed",
        ));
    }
    // Ollama measures an input against the `num_ctx` asked for (`embed_cut`), which may be
    // below the smallest context a runner loads with; the slot may be larger.
    let ctx = r
        .num_ctx
        .map_or(loaded.n_ctx_asked, |n| (n as usize).min(loaded.n_ctx_asked));
    let mut inputs = Vec::with_capacity(r.inputs.len());
    for p in r.inputs {
        let mut t = prompt_tokens(&loaded.vocab, p, true, false).await?;
        let shape = embed_cut::Shape::of(&loaded.added_specials, &t);
        if let Some(n) = embed_cut::keep(shape, ctx, loaded.embed_limit, r.truncate)? {
            embed_cut::cut(&mut t, shape, n);
        }
        inputs.push(t);
    }
    let (tx, rx) = oneshot::channel();
    send(state, Job::Embed(EmbedJob { inputs, reply: tx }))?;
    let out = rx
        .await
        .map_err(|_| RunnerError::new(ErrorKind::Cancelled, "runner is shutting down"))??;
    Ok(json(StatusCode::OK, &out))
}

async fn tokenize(req: Request<Incoming>, state: &State) -> Res {
    let loaded = ready(state).await?;
    let r: TokenizeRequest = body(req).await?;
    let tokens = prompt_tokens(
        &loaded.vocab,
        Prompt::Text(r.content),
        r.add_special,
        r.parse_special,
    )
    .await?;
    Ok(json(StatusCode::OK, &TokenizeResponse { tokens }))
}

async fn detokenize(req: Request<Incoming>, state: &State) -> Res {
    let loaded = ready(state).await?;
    let r: DetokenizeRequest = body(req).await?;
    let tokens = prompt_tokens(&loaded.vocab, Prompt::Tokens(r.tokens), false, false).await?;
    let m = loaded.vocab.clone();
    let bytes = tokio::task::spawn_blocking(move || m.detokenize(&tokens, r.render_special))
        .await
        .map_err(|e| RunnerError::new(ErrorKind::Internal, e.to_string()))?;
    let content = String::from_utf8_lossy(&bytes).into_owned();
    Ok(json(StatusCode::OK, &DetokenizeResponse { content }))
}
