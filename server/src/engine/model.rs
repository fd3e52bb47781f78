//! A stored model made ready for inference: its manifest layers (`api::show::ModelView`), the
//! GGUF facts the scheduler and option resolution need (training context, embedding width, KV
//! geometry), its capabilities, and its compiled prompt template. Building one reads files, so it
//! is blocking work; [`super::Engine`] caches them per manifest digest.

use std::path::PathBuf;
use std::sync::Arc;

use crate::api::inference::ResolvedModel;
use crate::api::show::{ModelDetails, ModelView};
use crate::error::{Error, Result};
use crate::gguf::{self, GgufFile, Value};
use crate::prompt::Template;
use crate::scheduler::{MemoryInputs, RunnerKind};

/// Everything a handler needs about one model, independent of any request.
#[derive(Debug)]
pub struct Model {
    /// The name as `/api/ps` and responses show it (`smollm2:latest`).
    pub display_name: String,
    /// The full name (`registry.ollama.ai/library/smollm2:latest`), for capability errors.
    pub full_name: String,
    /// Hex sha256 of the manifest file.
    pub digest: String,
    pub view: ModelView,
    /// The model layer's blob.
    pub path: PathBuf,
    /// `<arch>.context_length`; `None` for non-GGUF files (the fake runner's scripts).
    pub ctx_train: Option<u32>,
    pub embedding_length: Option<u64>,
    pub memory: MemoryInputs,
    pub capabilities: Vec<String>,
    pub details: ModelDetails,
    /// TEMPLATE layer (Go), else the GGUF chat template (Jinja), else `{{ .Prompt }}`.
    pub template: Arc<Template>,
    /// The BOS token's text, when a Jinja template may print it itself.
    pub bos_text: Option<String>,
    /// The engine that serves it (from the model's format).
    pub runner: RunnerKind,
    /// The projector's geometry when its image resolution is dynamic (its first projector
    /// layer, the one the runner loads; `crate::images::budget`).
    pub image_geometry: Option<crate::images::budget::Geometry>,
}

impl Model {
    /// Reads the GGUF header of a resolved model and compiles its template. Blocking.
    /// Safetensors models get their runner-mlx directory under `runner_dir`.
    pub fn prepare_in(resolved: &ResolvedModel, runner_dir: &std::path::Path) -> Result<Model> {
        if resolved.view.is_safetensors() {
            return Self::prepare_mlx(resolved, &runner_dir.join("models"));
        }
        Self::prepare(resolved)
    }

    fn prepare_mlx(resolved: &ResolvedModel, root: &std::path::Path) -> Result<Model> {
        let view = resolved.view.clone();
        let p = super::mlx_model::prepare(&view, root, &resolved.digest)?;
        let details = crate::mlx::view::details(&view)?;
        Ok(Model {
            display_name: resolved.name.display_shortest(),
            full_name: resolved.name.to_string(),
            digest: resolved.digest.clone(),
            path: p.dir,
            ctx_train: p.ctx_train,
            embedding_length: p.embedding_length,
            memory: p.memory,
            capabilities: resolved.capabilities.clone(),
            details,
            template: Arc::new(p.template),
            bos_text: p.bos_text,
            runner: RunnerKind::Mlx,
            // Images on MLX are not in this slice: a projector never reaches runner-mlx.
            image_geometry: None,
            view,
        })
    }

    /// [`Model::prepare_in`] for a GGUF model (no directory needed).
    pub fn prepare(resolved: &ResolvedModel) -> Result<Model> {
        let view = resolved.view.clone();
        let path = view
            .model_path
            .clone()
            .ok_or_else(|| Error::InvalidManifest("the manifest has no model layer".into()))?;
        let file_size = std::fs::metadata(&path)?.len();
        // A model that is not GGUF (the fake runner's script files) has no metadata: the runner
        // decides everything the header would have told us.
        let gguf = match view.gguf(false) {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "model layer is not GGUF");
                None
            }
        };
        // The runner trusts these facts (token ids index its vocabulary): refuse a file that
        // lies about them before it is loaded (a store written by another tool, or before the
        // create-time check existed).
        if let Some(g) = &gguf {
            g.check_engine_facts().map_err(|e| {
                Error::InvalidGguf(format!("model {}: {e}", resolved.name.display_shortest()))
            })?;
        }
        let capabilities = resolved.capabilities.clone();
        let details = view.details(gguf.as_ref());
        let (template, bos_text) = match view.config.renderer.as_str() {
            "" => template_for(&view, gguf.as_ref())?,
            r => builtin_for(
                &view,
                r,
                &resolved.name.display_shortest(),
                &details.parameter_size,
            )?,
        };
        let g = gguf.as_ref();
        let u32_of = |v: Option<u64>| v.map(|n| n.min(u64::from(u32::MAX)) as u32);
        let mut memory = match g {
            Some(g) => MemoryInputs::from_heads(
                file_size,
                u32_of(g.block_count()).unwrap_or(0),
                u32_of(g.embedding_length()).unwrap_or(0),
                u32_of(g.head_count()).unwrap_or(0),
                u32_of(g.head_count_kv()),
                u32_of(g.key_length()),
                u32_of(g.value_length()),
            ),
            None => MemoryInputs {
                file_size,
                ..MemoryInputs::default()
            },
        };
        let image_geometry = match view.projector_paths.first() {
            Some(p) => {
                crate::images::budget::Geometry::of(&crate::gguf::read_path(p, Default::default())?)
            }
            None => None,
        };
        if let Some(crate::gguf::Value::Array(a)) = g.and_then(|g| g.get("tokenizer.ggml.tokens")) {
            memory.n_vocab = u32_of(Some(a.len)).unwrap_or(0);
        }
        Ok(Model {
            image_geometry,
            display_name: resolved.name.display_shortest(),
            full_name: resolved.name.to_string(),
            digest: resolved.digest.clone(),
            path,
            ctx_train: u32_of(g.and_then(GgufFile::context_length)),
            embedding_length: g.and_then(GgufFile::embedding_length),
            memory,
            capabilities,
            details,
            template: Arc::new(template),
            bos_text,
            runner: RunnerKind::Llamacpp,
            view,
        })
    }

    pub fn has_capability(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }

    /// Embedding models (a pooling type in the GGUF) are loaded for embeddings only.
    pub fn is_embedding(&self) -> bool {
        self.has_capability("embedding") && !self.has_capability("completion")
    }

    /// The output parser its responses get (`prompt::parsers::parser_name`): the config's
    /// `parser`, or `harmony` for a gpt-oss model with a harmony template.
    pub fn parser(&self) -> &str {
        crate::prompt::parsers::parser_name(
            &self.template,
            &self.details.family,
            &self.view.config.parser,
        )
    }

    /// Ollama's `shouldUseHarmony` (`prompt::parsers::is_harmony`).
    pub fn is_harmony(&self) -> bool {
        crate::prompt::parsers::is_harmony(&self.template, &self.details.family)
    }
}

/// Picks the prompt template (DESIGN 7): a TEMPLATE layer renders with the Go engine (unless
/// `OLLAMA_GO_TEMPLATE` or the preference sets it aside, `ModelView::renders_parsed`);
/// else the GGUF `tokenizer.chat_template` renders with minijinja; else Ollama's `{{ .Prompt }}`.
fn template_for(view: &ModelView, g: Option<&GgufFile>) -> Result<(Template, Option<String>)> {
    if let Some(src) = &view.template {
        // Parsed once: the choice reads it too.
        let parsed = Template::parse_go(src);
        if view.renders_parsed(g, parsed.as_ref().ok()) {
            return Ok((parsed.map_err(Template::parse_error)?, None));
        }
    }
    let Some(src) = g.and_then(GgufFile::chat_template) else {
        return Ok((Template::default_go(), None));
    };
    // Jinja templates print bos_token/eos_token themselves; their text sits in the token list,
    // which the first (cheap) read skipped.
    let full = view.gguf(true).ok().flatten();
    let token = |key: &str| -> Option<String> {
        let g = full.as_ref()?;
        let id = g.get(key)?.as_u64()?;
        match g.get("tokenizer.ggml.tokens")? {
            Value::Array(a) => match a.values.as_ref()? {
                gguf::ArrayValues::String(v) => v.get(usize::try_from(id).ok()?).cloned(),
                _ => None,
            },
            _ => None,
        }
    };
    let bos = token("tokenizer.ggml.bos_token_id");
    let eos = token("tokenizer.ggml.eos_token_id");
    let t = Template::jinja(
        src.to_owned(),
        bos.clone().unwrap_or_default(),
        eos.unwrap_or_default(),
    )?;
    Ok((t, bos))
}

/// A model with a config `renderer` (Ollama's RENDERER) renders with that built-in renderer
/// (`gemma4` resolved per model), its TEMPLATE layer kept beside it for suffix requests; the
/// renderer's leading BOS text, when it prints one, stops the runner adding another.
pub fn builtin_for(
    view: &ModelView,
    renderer: &str,
    name: &str,
    parameter_size: &str,
) -> Result<(Template, Option<String>)> {
    let go = match &view.template {
        Some(src) => Some(Template::parse_go(src).map_err(Template::parse_error)?),
        None => None,
    };
    let name = crate::prompt::renderers::resolve(renderer, name, parameter_size);
    let t = Template::builtin(&name, go)?;
    let bos = match &t {
        Template::Builtin(b) => {
            Some(b.renderer.leading_bos().to_string()).filter(|s| !s.is_empty())
        }
        _ => None,
    };
    Ok((t, bos))
}

/// Ollama's per-request template override on /api/generate: a parse failure is a 500 (a 400
/// when the template exceeds the engine's nesting bound).
pub fn parse_request_template(src: &str) -> Result<Template> {
    Template::parse_go(src).map_err(Template::parse_error)
}
