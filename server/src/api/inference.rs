//! The seam between the native inference handlers and whatever runs models. Handlers validate
//! and resolve everything Ollama checks up front (names, options, think, format, keep-alive,
//! capabilities) and hand a finished job to an `Inference`; the implementation renders the
//! prompt, schedules a runner and turns its output into API chunks. Dropping a returned stream
//! cancels the work. Tests implement it with a scripted fake.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::models::blocking;
use super::options::Options;
use super::request::{Format, ThinkValue};
use super::show::{go_quote, ModelView};
use super::stream::ChunkStream;
use super::types::{ChatRequest, ChatResponse, GenerateRequest, GenerateResponse};
use super::AppState;
use crate::config::KeepAlive;
use crate::error::{Error, Result};
use crate::store::ModelName;

/// A stored model, resolved and read, as a job carries it.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// Exact casing of the manifest on disk.
    pub name: ModelName,
    /// Hex sha256 of the manifest file (`/api/ps` `digest`; the engine's cache key).
    pub digest: String,
    pub view: ModelView,
    /// Ollama's capability list (`completion`, `embedding`, `tools`, `thinking`, …).
    pub capabilities: Vec<String>,
}

impl ResolvedModel {
    pub fn can(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

#[derive(Debug, Clone)]
pub struct GenerateJob {
    pub model: Arc<ResolvedModel>,
    /// The request as sent (prompt, suffix, system, template, images, raw, context, logprobs…).
    pub request: GenerateRequest,
    pub options: Options,
    /// Effective thinking (defaulted on for thinking models).
    pub think: Option<ThinkValue>,
    pub format: Format,
    pub keep_alive: KeepAlive,
    /// The request's images, decoded, in conversation order.
    pub images: Arc<Vec<crate::images::Image>>,
}

#[derive(Debug, Clone)]
pub struct ChatJob {
    pub model: Arc<ResolvedModel>,
    pub request: ChatRequest,
    pub options: Options,
    pub think: Option<ThinkValue>,
    pub format: Format,
    pub keep_alive: KeepAlive,
    /// The request's images, decoded, in conversation order.
    pub images: Arc<Vec<crate::images::Image>>,
}

#[derive(Debug, Clone)]
pub struct EmbedJob {
    pub model: Arc<ResolvedModel>,
    /// Never empty.
    pub inputs: Vec<String>,
    /// Truncate inputs to the context (default) instead of failing.
    pub truncate: bool,
    pub options: Options,
    pub keep_alive: KeepAlive,
}

/// Raw (unnormalized) vectors, one per input, with the load time and prompt token count.
#[derive(Debug, Clone, Default)]
pub struct EmbedOutput {
    pub embeddings: Vec<Vec<f32>>,
    pub prompt_eval_count: u64,
    pub load_duration: Duration,
}

/// One loaded model, as `/api/ps` reports it (the scheduler's view).
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    /// The model's name as loaded (any spelling `ModelName::parse` accepts).
    pub name: String,
    /// Hex sha256 of the manifest (as `/api/tags` `digest`).
    pub digest: String,
    /// Bytes in use, and the part of it on accelerators.
    pub size: u64,
    pub size_vram: u64,
    pub context_length: u32,
    /// When keep-alive unloads it; `None` = never.
    pub expires_at: Option<std::time::SystemTime>,
    /// Layers per device (issue 20).
    pub placement: Vec<runner_protocol::LayerPlacement>,
}

/// What the native handlers need from the scheduler.
pub trait Inference: Send + Sync + 'static {
    /// Make sure the model is loaded (an empty prompt or message list), keeping it this long.
    fn load(
        &self,
        model: Arc<ResolvedModel>,
        options: Options,
        keep_alive: KeepAlive,
    ) -> BoxFuture<'static, Result<()>>;
    /// Unload the model now (empty prompt with `keep_alive: 0`).
    fn unload(&self, model: Arc<ResolvedModel>) -> BoxFuture<'static, Result<()>>;
    /// Completion chunks; the last has `done: true`, its `done_reason` and metrics.
    fn generate(
        &self,
        job: GenerateJob,
    ) -> BoxFuture<'static, Result<ChunkStream<GenerateResponse>>>;
    fn chat(&self, job: ChatJob) -> BoxFuture<'static, Result<ChunkStream<ChatResponse>>>;
    fn embed(&self, job: EmbedJob) -> BoxFuture<'static, Result<EmbedOutput>>;
    /// Loaded models.
    fn ps(&self) -> BoxFuture<'static, Vec<Running>>;
}

/// Defaults a request falls back to (from `Config`).
#[derive(Debug, Clone, Copy)]
pub struct InferenceDefaults {
    /// `OLLAMA_CONTEXT_LENGTH`; 0 = automatic.
    pub context_length: u32,
    /// `OLLAMA_KEEP_ALIVE`.
    pub keep_alive: KeepAlive,
    /// `OLLAMA_GO_TEMPLATE`: which of a model's templates renders (`ModelView::load`).
    pub go_template: crate::prompt::prefer::GoTemplate,
}

impl Default for InferenceDefaults {
    fn default() -> Self {
        InferenceDefaults {
            context_length: 0,
            keep_alive: KeepAlive::For(Duration::from_secs(300)),
            go_template: crate::prompt::prefer::GoTemplate::Auto,
        }
    }
}

/// How an endpoint words a bad or empty model name (they differ, ollama.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameErrors {
    /// generate, embed, embeddings: empty → 404 `model '' not found`.
    NotFound,
    /// chat: empty → 400 `model is required`.
    Required,
    /// embed: missing → 404 `model "RAW" not found, try pulling it first` (Ollama's
    /// `handleScheduleError`); empty → 404 `model '' not found`.
    TryPulling,
    /// embeddings (legacy): missing as embed; empty → 400 `model is required`
    /// (`EmbeddingsHandler`'s fallback for `modelref.ErrModelRequired`).
    TryPullingRequired,
}

/// Parses and finds `raw` in the store and reads it. Invalid names are 400 `invalid model
/// name`; a missing model is 404 `model 'RAW' not found`.
pub async fn resolve_model(
    state: &AppState,
    raw: &str,
    errors: NameErrors,
) -> Result<Arc<ResolvedModel>> {
    // Ollama's `modelref.ParseRef` trims the name first: blank is "no model", worded per
    // endpoint with the name as sent.
    if raw.trim().is_empty() {
        return Err(match errors {
            NameErrors::NotFound | NameErrors::TryPulling => {
                Error::NotFound(format!("model '{raw}' not found"))
            }
            NameErrors::Required | NameErrors::TryPullingRequired => {
                Error::BadRequest("model is required".into())
            }
        });
    }
    // `name:local` asks for the local store only (a stub then does not count); two source
    // suffixes are Ollama's 400. Explicit cloud references never get here
    // (`remote::cloud::passthrough`) unless a stub of that exact name is looked up.
    let (lookup, local_only) =
        match crate::remote::modelref::parse(raw).map_err(Error::BadRequest)? {
            Some(r) if r.source == crate::remote::modelref::Source::Local => (r.base, true),
            _ => (raw.trim().to_owned(), false),
        };
    let name = ModelName::parse(&lookup).map_err(|_| Error::InvalidModelName)?;
    let store = state.store.clone();
    let cache = state.resolved.clone();
    let mode = state.defaults.go_template;
    let not_found = match errors {
        NameErrors::TryPulling | NameErrors::TryPullingRequired => {
            format!("model {} not found, try pulling it first", go_quote(raw))
        }
        _ => format!("model '{raw}' not found"),
    };
    let stub_hidden = not_found.clone();
    let model = blocking(move || {
        let entry = store.read(&name)?.ok_or(Error::NotFound(not_found))?;
        // The manifest digest pins every layer (blobs are content-addressed), so a model read
        // once is reused until its manifest changes: no GGUF parse on the request path.
        if let Some(m) = cache.get(&entry.digest_hex, &entry.name) {
            return Ok(m);
        }
        let view = ModelView::load(&store, &entry, mode)?;
        // A model layer that is not GGUF (the fake runner's scripts) has no metadata; the runner
        // refuses what it cannot do; its TEMPLATE may still add tools or thinking.
        let gguf = view.gguf(false).ok().flatten();
        let mut capabilities = view.capabilities(gguf.as_ref());
        if gguf.is_none()
            && !capabilities
                .iter()
                .any(|c| c == "completion" || c == "embedding")
        {
            capabilities.insert(0, "completion".to_owned());
        }
        let model = Arc::new(ResolvedModel {
            name: entry.name,
            digest: entry.digest_hex,
            view,
            capabilities,
        });
        cache.put(model.clone());
        Ok(model)
    })
    .await?;
    if local_only && model.view.config.remote().is_some() {
        return Err(Error::NotFound(stub_hidden));
    }
    Ok(model)
}

/// Resolved models by manifest digest (bounded; cleared when full).
#[derive(Debug, Default)]
pub struct ResolvedCache(std::sync::Mutex<std::collections::HashMap<String, Arc<ResolvedModel>>>);

impl ResolvedCache {
    const MAX: usize = 64;

    /// The cached model for `digest`, if it was read under this exact name (the name is part of
    /// what a job reports).
    fn get(&self, digest: &str, name: &ModelName) -> Option<Arc<ResolvedModel>> {
        let map = self.0.lock().unwrap();
        map.get(digest).filter(|m| m.name == *name).cloned()
    }

    fn put(&self, m: Arc<ResolvedModel>) {
        let mut map = self.0.lock().unwrap();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.insert(m.digest.clone(), m);
    }
}

/// Ollama's capability check: a model that cannot complete is `"RAW" does not support
/// <endpoint>`; any other missing capability is `FULLNAME does not support x`.
pub fn check_capabilities(
    model: &ResolvedModel,
    raw_name: &str,
    endpoint: &str,
    wanted: &[&str],
) -> Result<()> {
    if wanted.contains(&"completion") && !model.can("completion") {
        return Err(Error::BadRequest(format!(
            "{} does not support {endpoint}",
            go_quote(raw_name)
        )));
    }
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| *c != "completion" && !model.can(c))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "{} does not support {}",
            model.name,
            missing.join("\n")
        )))
    }
}

/// A model whose `REQUIRES` names a newer Ollama than herd implements is refused (its layers
/// may mean what this server cannot do), with the registry's wording for the same case.
pub fn check_requires(model: &ResolvedModel) -> Result<()> {
    let required = &model.view.config.requires;
    if required.is_empty() || crate::modelfile::satisfies(crate::OLLAMA_COMPAT_VERSION, required) {
        return Ok(());
    }
    Err(Error::BadRequest(format!(
        "this model requires a newer version of Ollama ({required} or later; this server \
         implements {})",
        crate::OLLAMA_COMPAT_VERSION
    )))
}

/// Images are never dropped in silence. A model without the vision capability gets Ollama's
/// error (its runner's text, which clients match on to fall back to text-only); a vision model
/// whose encoder lives inside the model file (no projector layer) is refused too, since the
/// GGUF engine evaluates images only through a projector. Otherwise the images are decoded,
/// bounded and sized for the projector under the options' image budgets here
/// (`crate::images`), before any runner is involved.
pub async fn request_images(
    model: &ResolvedModel,
    images: Vec<String>,
    options: &Options,
) -> Result<Arc<Vec<crate::images::Image>>> {
    if images.is_empty() {
        return Ok(Arc::default());
    }
    if !model.can("vision") {
        return Err(Error::BadRequest(
            "this model is missing data required for image input".into(),
        ));
    }
    if model.view.projector_paths.is_empty() {
        return Err(Error::BadRequest(format!(
            "{}: this model's vision encoder is inside the model file; the GGUF engine \
             evaluates images only through a projector layer",
            model.name
        )));
    }
    let budget = crate::images::budget::Budget {
        min: options.image_min_tokens,
        max: options.image_max_tokens,
    };
    crate::images::decode_all(images, model.view.projector_paths.first().cloned(), budget).await
}

/// The engine, or a clear error while none is wired in.
pub fn engine(state: &AppState) -> Result<Arc<dyn Inference>> {
    state
        .inference
        .clone()
        .ok_or_else(|| Error::Internal("inference is not available in this server build".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(caps: &[&str]) -> ResolvedModel {
        ResolvedModel {
            name: ModelName::parse("tiny").unwrap(),
            digest: String::new(),
            view: ModelView::default(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn capability_errors() {
        let embed_only = model(&["embedding"]);
        assert_eq!(
            check_capabilities(&embed_only, "Tiny", "chat", &["completion", "tools"])
                .unwrap_err()
                .to_string(),
            "\"Tiny\" does not support chat"
        );
        let plain = model(&["completion"]);
        assert!(check_capabilities(&plain, "tiny", "generate", &["completion"]).is_ok());
        assert_eq!(
            check_capabilities(&plain, "tiny", "chat", &["completion", "tools"])
                .unwrap_err()
                .to_string(),
            "registry.ollama.ai/library/tiny:latest does not support tools"
        );
    }
}
