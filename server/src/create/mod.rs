//! `/api/create`'s work: build a model's layers from an existing model (`from`) or from uploaded
//! GGUF blobs (`files`), apply TEMPLATE/SYSTEM/LICENSE/PARAMETER/MESSAGE and config fields, and
//! write the manifest (shared/research/ollama.md §5, Ollama's `server/create.go`).
//!
//! Invariants:
//! - everything that can be refused (names, file paths, digests, GGUF validity, quantize
//!   requests) is checked before the first progress message, so the API can still answer with a
//!   real status code; on any error no manifest is written;
//! - an imported GGUF layer *is* the uploaded blob (same digest), never a copy (except the one
//!   merged file a split GGUF needs, and a layer quantized at create time, see `quantize`);
//! - the manifest is written last, after every blob it names exists (the store enforces it);
//!   blobs only the replaced manifest of the same name used are then removed.
//!
//! Blocking filesystem code: call `create_model` from `spawn_blocking`.

mod arch;
mod experimental;
mod import;
mod layers;
mod mlx_quantize;
mod projector;
mod quantize;
mod remote;
mod safetensors;
mod split;

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

pub use import::valid_rel_path;
pub use layers::{ConfigV2, DraftConfig, Message};
pub use quantize::QuantizeOptions;

use crate::error::{Error, Result};
use crate::gguf::{self, ReadOptions};
use crate::store::manifest::{
    MEDIA_TYPE_ADAPTER, MEDIA_TYPE_DRAFT, MEDIA_TYPE_LICENSE, MEDIA_TYPE_MODEL,
    MEDIA_TYPE_PROJECTOR,
};
use crate::store::{Digest, Manifest, ModelName, Store};
use import::GgufLayer;
use layers::Built;

/// Ollama's `api.CreateRequest` (the fields herd acts on).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Deprecated alias of `model`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quantize: String,
    /// Deprecated alias of `quantize`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quantization: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapters: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_files: Option<BTreeMap<String, String>>,
    /// The type the `draft_files` model is quantized to (`herd create --draft-quantize`); its
    /// source must be unquantized (F16/BF16/F32), as for `quantize`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub draft_quantize: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template: String,
    /// A string or a list of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<Json>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Json>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub renderer: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parser: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requires: String,
    /// A stub's upstream server: with `from`, the new model is a stub proxied there
    /// (`remote.rs`); set for a cloud `from` (`m:tag:cloud`) by the handler.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    /// Config overrides (capabilities, family, lengths; `remote::apply_info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Map<String, Json>>,
    /// herd's form of `ollama create --experimental`: store a safetensors `files` checkpoint
    /// in Ollama's MLX layout (for runner-mlx) instead of converting it to GGUF.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub experimental: bool,
}

/// One progress line (Ollama's `api.ProgressResponse`): the same type pull and push stream.
pub use crate::store::registry::Progress;

/// The quantization types Ollama accepts (`ParseFileType`), upper-cased input; `Q4_K` means
/// `Q4_K_M`.
pub fn parse_quantize(q: &str) -> Result<&'static str> {
    Ok(match q.to_ascii_uppercase().as_str() {
        "F32" => "F32",
        "F16" => "F16",
        "BF16" => "BF16",
        "Q8_0" => "Q8_0",
        "Q4_K_S" => "Q4_K_S",
        "Q4_K_M" | "Q4_K" => "Q4_K_M",
        other => {
            return Err(Error::BadRequest(format!(
                "unsupported quantization type {other} - supported types are F32, F16, Q4_K_S, Q4_K_M, Q8_0"
            )))
        }
    })
}

/// Ollama's refusal for a quantized source.
pub const QUANTIZE_SOURCE_ERROR: &str =
    "quantization is only supported for F16, BF16 and F32 models";

/// Ollama's refusal of `draft_quantize` without `draft_files`.
pub const DRAFT_QUANTIZE_WITHOUT_DRAFT: &str = "--draft-quantize requires a DRAFT model";

/// Checks what can be checked without touching blobs (Ollama does this before streaming):
/// the name, file paths and digests. Returns the target name.
pub fn precheck(req: &CreateRequest) -> Result<ModelName> {
    for files in [&req.files, &req.adapters, &req.draft_files]
        .into_iter()
        .flatten()
    {
        import::check_files(files)?;
    }
    // Every later request to the model applies these: a wrongly typed one would fail them all
    // with 500, so it is the create that is refused (400, the option's own message).
    if let Some(params) = &req.parameters {
        crate::api::options::Options::defaults(0)
            .apply(params)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
    }
    let name = if req.model.is_empty() {
        &req.name
    } else {
        &req.model
    };
    let name = ModelName::parse(name)?;
    // A RENDERER or PARSER herd has nothing for would be stored and then fail every chat:
    // refuse it at create.
    use crate::prompt::{parsers, renderers};
    if !req.renderer.is_empty() && !renderers::is_known(&req.renderer) {
        return Err(Error::BadRequest(format!(
            "renderer {:?} is not supported by this server (supported: {})",
            req.renderer,
            renderers::NAMES.join(", ")
        )));
    }
    if !req.parser.is_empty() && !parsers::is_named(&req.parser) {
        let names: Vec<&str> = parsers::NAMED.iter().map(|(n, _)| *n).collect();
        return Err(Error::BadRequest(format!(
            "parser {:?} is not supported by this server (supported: {})",
            req.parser,
            names.join(", ")
        )));
    }
    // An unknown type is refused before anything (e.g. a conversion) streams progress.
    let q = quantize::requested(req);
    if req.experimental {
        if req.files.is_none() || !req.from.is_empty() {
            return Err(Error::BadRequest(
                "--experimental needs a safetensors model directory (config.json + *.safetensors)"
                    .into(),
            ));
        }
        if !q.is_empty() {
            experimental::parse_mlx_quantize(q)?;
        }
        // runner-mlx has no draft model: one stored beside its checkpoint would be ignored.
        if req.draft_files.is_some() {
            return Err(Error::BadRequest(
                "DRAFT is not supported with --experimental (a draft model needs a GGUF model)"
                    .into(),
            ));
        }
    } else if !q.is_empty() {
        parse_quantize(q)?;
    }
    if !req.draft_quantize.is_empty() {
        if req.draft_files.as_ref().is_none_or(BTreeMap::is_empty) {
            return Err(Error::BadRequest(DRAFT_QUANTIZE_WITHOUT_DRAFT.into()));
        }
        parse_quantize(&req.draft_quantize)?;
    }
    Ok(name)
}

/// Everything decided before any progress is reported.
struct Plan {
    name: ModelName,
    /// Model/projector/adapter/draft layers with their GGUF metadata; other inherited layers
    /// have `gguf: None`. In manifest order.
    base: Vec<(Built, Option<GgufLayer>)>,
    config: ConfigV2,
    licenses: Vec<String>,
    /// The request's parameters plus what the model's architecture adds (`arch::apply`).
    parameters: Map<String, Json>,
    parsed: usize,
    /// Legacy projectors rewritten with their default type (`projector`).
    projectors_updated: usize,
}

/// Creates (or replaces) the model `req.model`, reporting Ollama's progress lines through
/// `progress` (the final `success` included). Returns the name written.
pub fn create_model(
    store: &Store,
    req: &CreateRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<ModelName> {
    create_model_with(store, req, &QuantizeOptions::default(), progress)
}

/// `create_model` with an explicit quantizer (the runner binary the server is configured with).
pub fn create_model_with(
    store: &Store,
    req: &CreateRequest,
    quantizer: &QuantizeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<ModelName> {
    let mut plan = plan(store, req, quantizer, progress)?;
    for _ in 0..plan.parsed {
        progress(Progress::status("parsing GGUF"));
    }
    for _ in 0..plan.projectors_updated {
        progress(Progress::status(projector::STATUS));
    }
    if !req.experimental {
        quantize::apply(store.blobs(), req, &mut plan, quantizer, progress)?;
    }
    let name = write(store, req, plan, progress)?;
    progress(Progress::status("success"));
    Ok(name)
}

fn plan(
    store: &Store,
    req: &CreateRequest,
    quantizer: &QuantizeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan> {
    let name = precheck(req)?;
    let licenses = licenses(req)?;
    if !req.template.is_empty() {
        crate::prompt::Template::parse_go(&req.template)
            .map_err(|e| Error::BadRequest(format!("template error: {e}")))?
            .check_limits()
            .map_err(|e| Error::BadRequest(format!("template error: {e}")))?;
    }
    let blobs = store.blobs();
    let mut config = ConfigV2 {
        renderer: req.renderer.clone(),
        parser: req.parser.clone(),
        requires: req.requires.clone(),
        ..ConfigV2::default()
    };
    let mut parsed = 0;
    let mut projectors_updated = 0;
    let mut base: Vec<(Built, Option<GgufLayer>)> = Vec::new();
    let imported = |layers: Vec<GgufLayer>| {
        layers.into_iter().map(|g| {
            let verb = if g.new_blob {
                "creating new layer"
            } else {
                "using existing layer"
            };
            let built = Built {
                status: format!("{verb} {}", g.layer.digest),
                layer: g.layer.clone(),
            };
            (built, Some(g))
        })
    };
    if !req.from.is_empty() && !req.remote_host.is_empty() {
        // A stub: its config names the upstream, it has no model layers of its own.
        let from = crate::remote::modelref::parse(&req.from)
            .map_err(Error::BadRequest)?
            .map_or_else(|| req.from.clone(), |r| r.base);
        config.remote_model = from;
        config.remote_host = remote::remote_url(&req.remote_host)?;
        if req.draft_files.is_some() {
            return Err(Error::BadRequest(remote::DRAFT_UNSUPPORTED.into()));
        }
    } else if !req.from.is_empty() {
        base = from_model(store, &req.from, &mut config)?;
    } else if let (true, Some(files)) = (req.experimental, &req.files) {
        let layers = experimental::import(blobs, files, req, quantizer, &mut config, progress)?;
        base.extend(layers.into_iter().map(|b| (b, None)));
    } else if let Some(files) = &req.files {
        let layers = if safetensors::is_checkpoint(files) {
            // Refusals happen before its first progress line ("converting model").
            safetensors::import_checkpoint(blobs, files, name.model(), progress)?
        } else {
            let mut layers = import::import_files(blobs, files, None)?;
            projectors_updated = projector::add_default_types(blobs, &mut layers)?;
            layers
        };
        parsed += layers.len();
        base.extend(imported(layers));
    } else {
        return Err(Error::BadRequest(
            "neither 'from' or 'files' was specified".into(),
        ));
    }
    if let Some(info) = &req.info {
        remote::apply_info(info, &mut config)?;
    }
    let adapters = req
        .adapters
        .as_ref()
        .filter(|_| config.remote_host.is_empty());
    if let Some(adapters) = adapters {
        if adapters.len() > 1 {
            return Err(Error::BadRequest(
                "only one adapter is currently supported".into(),
            ));
        }
        let layers = import::import_files(blobs, adapters, Some(MEDIA_TYPE_ADAPTER))?;
        parsed += layers.len();
        base.extend(imported(layers));
    }
    if let Some(drafts) = &req.draft_files {
        // A model has one draft (the last draft layer is the one loaded, as in Ollama's
        // `GetModel`): a new DRAFT replaces the one `from` had instead of riding along unused.
        base.retain(|(b, _)| b.layer.media_type != MEDIA_TYPE_DRAFT);
        let layers = import::import_files(blobs, drafts, Some(MEDIA_TYPE_DRAFT))?;
        parsed += layers.len();
        base.extend(imported(layers));
    }
    let mut parameters = req.parameters.clone().unwrap_or_default();
    apply_model_layers(req, &base, &mut config, &mut parameters)?;
    Ok(Plan {
        name,
        base,
        config,
        licenses,
        parameters,
        parsed,
        projectors_updated,
    })
}

/// The layers of an existing model, each marked as coming from it; its renderer, parser,
/// requires, format and capabilities fill what the request leaves empty.
fn from_model(
    store: &Store,
    from: &str,
    config: &mut ConfigV2,
) -> Result<Vec<(Built, Option<GgufLayer>)>> {
    let from_name = ModelName::parse(from)?;
    // The API handler pulls a missing base first (api/create.rs); a library caller gets 404.
    let Some(entry) = store.read(&from_name)? else {
        return Err(Error::NotFound(format!(
            "model '{}' not found, pull it first",
            from_name.display_shortest()
        )));
    };
    let blobs = store.blobs();
    let label = entry.name.display_shortest();
    if blobs.exists(&entry.manifest.config.digest) {
        let bytes = layers::read_text(blobs, &entry.manifest.config)?;
        if let Ok(base) = serde_json::from_slice::<ConfigV2>(&bytes) {
            let fill = |mine: &mut String, theirs: String| {
                if mine.is_empty() {
                    *mine = theirs;
                }
            };
            fill(&mut config.renderer, base.renderer);
            fill(&mut config.parser, base.parser);
            fill(&mut config.requires, base.requires);
            fill(&mut config.model_format, base.model_format);
            if config.capabilities.is_empty() {
                config.capabilities = base.capabilities;
            }
        }
    }
    let mut out = Vec::with_capacity(entry.manifest.layers.len());
    for src in &entry.manifest.layers {
        if !blobs.exists(&src.digest) {
            return Err(Error::InvalidManifest(format!(
                "{label}: layer {} is missing from the blob store",
                src.digest
            )));
        }
        blobs.touch(&src.digest)?;
        let mut layer = src.clone();
        layer.from = Some(label.clone());
        let g = match layer.media_type.as_str() {
            MEDIA_TYPE_MODEL | MEDIA_TYPE_PROJECTOR | MEDIA_TYPE_ADAPTER | MEDIA_TYPE_DRAFT => {
                let gguf = gguf::read_path(&blobs.path(&layer.digest), ReadOptions::default())?;
                gguf.check_engine_facts()
                    .map_err(|e| Error::InvalidGguf(format!("{label}: {e}")))?;
                Some(GgufLayer {
                    layer: layer.clone(),
                    gguf,
                    new_blob: false,
                })
            }
            _ => None,
        };
        let built = Built {
            status: format!("using existing layer {}", layer.digest),
            layer,
        };
        out.push((built, g));
    }
    Ok(out)
}

/// Config fields (and architecture defaults, `arch::apply`) from the model layers, and the
/// quantize refusals (Ollama's `createModel` loop).
fn apply_model_layers(
    req: &CreateRequest,
    base: &[(Built, Option<GgufLayer>)],
    config: &mut ConfigV2,
    parameters: &mut Map<String, Json>,
) -> Result<()> {
    let quantize = if req.quantize.is_empty() {
        &req.quantization
    } else {
        &req.quantize
    };
    let fill = |mine: &mut String, theirs: String| {
        if mine.is_empty() {
            *mine = theirs;
        }
    };
    for (built, g) in base {
        let Some(g) = g else { continue };
        let arch = g.gguf.architecture().unwrap_or_default().to_owned();
        match built.layer.media_type.as_str() {
            MEDIA_TYPE_MODEL => {
                let ftype = g.gguf.quantization_level();
                if !quantize.is_empty() {
                    // Refused here, before any progress; accepted work runs in `quantize::apply`.
                    parse_quantize(quantize)?;
                    if !matches!(ftype.as_str(), "F16" | "BF16" | "F32") {
                        return Err(Error::BadRequest(QUANTIZE_SOURCE_ERROR.into()));
                    }
                }
                fill(&mut config.model_format, "gguf".into());
                fill(&mut config.model_family, arch.clone());
                fill(&mut config.model_type, g.gguf.parameter_size());
                fill(&mut config.file_type, ftype);
                arch::apply(&arch, config, parameters);
                config
                    .model_families
                    .get_or_insert_with(Vec::new)
                    .push(arch);
            }
            MEDIA_TYPE_DRAFT => {
                // Ollama refuses a quantized draft source with its own message, then any
                // other type outside F16/BF16/F32.
                let ftype = g.gguf.quantization_level();
                if !req.draft_quantize.is_empty()
                    && !matches!(ftype.as_str(), "F16" | "BF16" | "F32")
                {
                    return Err(Error::BadRequest(format!(
                        "draft quantization requires an unquantized draft model, got {ftype}"
                    )));
                }
                config.draft = Some(DraftConfig {
                    model_format: "gguf".into(),
                    architecture: arch,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn licenses(req: &CreateRequest) -> Result<Vec<String>> {
    match &req.license {
        None => Ok(Vec::new()),
        Some(Json::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Json::String(s)) => Ok(vec![s.clone()]),
        Some(Json::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::BadRequest("license must be a string or a list of strings".into())
            }),
        Some(Json::Null) => Ok(Vec::new()),
        Some(_) => Err(Error::BadRequest(
            "license must be a string or a list of strings".into(),
        )),
    }
}

fn write(
    store: &Store,
    req: &CreateRequest,
    plan: Plan,
    progress: &mut dyn FnMut(Progress),
) -> Result<ModelName> {
    let blobs = store.blobs();
    let mut layers: Vec<Built> = plan.base.into_iter().map(|(b, _)| b).collect();
    if !req.template.is_empty() {
        layers::set_template(blobs, &mut layers, &req.template)?;
    }
    if !req.system.is_empty() {
        layers::set_system(blobs, &mut layers, &req.system)?;
    }
    for l in &plan.licenses {
        layers.push(layers::text_layer(blobs, MEDIA_TYPE_LICENSE, l.as_bytes())?);
    }
    layers::set_parameters(blobs, &mut layers, Some(&plan.parameters))?;
    layers::set_messages(blobs, &mut layers, &req.messages)?;
    let config = layers::config_layer(blobs, &plan.config)?;
    for b in &layers {
        progress(Progress::status(b.status.clone()));
    }
    progress(Progress::status("writing manifest"));
    let manifest = Manifest::new(config, layers.into_iter().map(|b| b.layer).collect());
    let replaced: Vec<Digest> = match store.read(&plan.name) {
        Ok(Some(e)) => e.manifest.blobs().map(|l| l.digest.clone()).collect(),
        _ => Vec::new(),
    };
    let name = store.write_manifest(&plan.name, &manifest)?;
    // As Ollama (and our pull): blobs only the replaced manifest used go now, not at next prune.
    let kept: HashSet<&Digest> = manifest.blobs().map(|l| &l.digest).collect();
    let unused: Vec<Digest> = replaced.into_iter().filter(|d| !kept.contains(d)).collect();
    if !unused.is_empty() {
        store.remove_unreferenced(&unused)?;
    }
    Ok(name)
}
