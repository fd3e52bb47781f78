//! `herd create NAME --experimental` / `/api/create` with `"experimental": true`: a safetensors
//! checkpoint directory (the CLI's `files` map, Ollama's `filesForModel` rules) stored in
//! Ollama's MLX layout (`x/create`) for runner-mlx instead of converted to GGUF:
//! - one `application/vnd.ollama.image.tensor` layer per tensor, named by the tensor; an MLX
//!   quantized weight with its `.scales` (and `.biases` for affine, `.global_scale` for nvfp4)
//!   is one packed blob `X.weight` (tensors `X.weight`, `X.weight.scale`, `X.weight.bias`,
//!   `X.weight.global_scale`, `__metadata__` `quant_type` — `int4`, `int8`, `nvfp4`, `mxfp4`,
//!   `mxfp8` — and `group_size`), as Ollama's prequantized import writes it;
//! - one `application/vnd.ollama.image.json` layer per top-level `*.json` (the shard index
//!   excepted) and `chat_template.jinja`, named by the file — the uploaded blob itself;
//! - config blob `model_format: "safetensors"`, `file_type` the quantization, `capabilities`.
//!
//! Invariant: every refusal (missing config.json or tokenizer, unknown architecture, a header
//! longer than its file, tensor offsets past the end, shapes that disagree with config.json,
//! an undeterminable quantization) happens before the first blob is written, so a bad
//! checkpoint gets a 400 and leaves nothing stored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value as Json;

use super::layers::Built;
use crate::error::{Error, Result};
use crate::mlx::header::{self, Entry, Header, Part};
use crate::mlx::info;
use crate::store::manifest::{MEDIA_TYPE_JSON, MEDIA_TYPE_TENSOR};
use crate::store::{BlobStore, Digest, Layer};

/// The quantization types `--experimental -q` takes, as Ollama's x/quant names them: the
/// canonical type of a name or alias (`q4`/`fp4` are int4 and `q8`/`fp8` int8 there, affine —
/// not the fp formats).
pub fn parse_mlx_quantize(q: &str) -> Result<&'static str> {
    match q.trim().to_ascii_lowercase().as_str() {
        "int4" | "q4" | "fp4" => Ok("int4"),
        "int8" | "q8" | "fp8" => Ok("int8"),
        "nvfp4" => Ok("nvfp4"),
        "mxfp4" => Ok("mxfp4"),
        "mxfp8" => Ok("mxfp8"),
        _ => Err(Error::BadRequest(format!(
            "unsupported --quantize {q:?}: supported types are int4, int8, nvfp4, mxfp4, mxfp8"
        ))),
    }
}

/// One planned tensor blob: its layer name, tensors (name in blob, source entry, source file
/// index) and metadata.
struct BlobPlan {
    name: String,
    parts: Vec<(String, Entry, usize)>,
    metadata: BTreeMap<String, String>,
}

/// A checked checkpoint, ready to write.
pub(crate) struct Checkpoint {
    files: Vec<PathBuf>,
    blobs: Vec<BlobPlan>,
    json_files: Vec<(String, Option<Digest>, PathBuf)>,
    /// The quant type (`int4`, `nvfp4`, ...) when the checkpoint is MLX-quantized: the one with
    /// the fewest bits present (an nvfp4 model's mxfp8 embedding leaves it nvfp4).
    pub quantization: String,
    /// The Jinja chat template's tools/thinking (Ollama infers these at create).
    pub capabilities: Vec<String>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadRequest(msg.into())
}

/// A checkpoint file: the uploaded blob's digest (`None` for a file the quantizer wrote) and
/// where its bytes are.
pub(crate) type Paths = BTreeMap<String, (Option<Digest>, PathBuf)>;

/// The uploaded files as blobs of the store.
fn resolve(blobs: &BlobStore, files: &BTreeMap<String, String>) -> Result<Paths> {
    let mut paths = BTreeMap::new();
    for (path, digest) in files {
        let digest = Digest::parse(digest)?;
        if !blobs.exists(&digest) {
            return Err(bad(format!(
                "blob {digest} for file {path:?} was not uploaded"
            )));
        }
        let blob = blobs.path(&digest);
        paths.insert(path.clone(), (Some(digest), blob));
    }
    Ok(paths)
}

/// Checks a checkpoint (no writes).
fn check(paths: &Paths) -> Result<Checkpoint> {
    let (_, cfg_path) = paths.get("config.json").ok_or_else(|| {
        bad("config.json not found: a safetensors model directory needs config.json")
    })?;
    if std::fs::metadata(cfg_path)?.len() > 16 << 20 {
        return Err(bad("config.json is larger than 16 MiB"));
    }
    let config: Json = serde_json::from_slice(&std::fs::read(cfg_path)?)
        .map_err(|e| bad(format!("config.json: {e}")))?;
    let arch = info::arch(&config);
    if !info::SUPPORTED.contains(&arch.as_str()) {
        return Err(bad(format!(
            "unsupported architecture {arch:?}: herd's MLX runner serves llama, qwen3 and gemma3 text models"
        )));
    }
    if !paths.contains_key("tokenizer.json") {
        return Err(bad(
            "no tokenizer: tokenizer.json is required for a safetensors model",
        ));
    }
    // Tensor files, their headers, and every tensor name once.
    let mut files_out = Vec::new();
    let mut tensors: BTreeMap<String, (Entry, usize)> = BTreeMap::new();
    for (key, (_, path)) in paths {
        if !key.ends_with(".safetensors") {
            continue;
        }
        let h: Header = header::read_as(path, key)?;
        let idx = files_out.len();
        files_out.push(path.clone());
        for t in h.tensors {
            if tensors.contains_key(&t.name) {
                return Err(bad(format!(
                    "tensor {} appears in more than one file",
                    t.name
                )));
            }
            tensors.insert(t.name.clone(), (t, idx));
        }
    }
    if tensors.is_empty() {
        return Err(bad("the model has no tensors"));
    }
    check_shapes(&config, &tensors)?;
    let (blob_plans, quantization) = plan(&config, &tensors)?;
    let mut json_files = Vec::new();
    for (key, (digest, path)) in paths {
        let top = !key.contains('/');
        let is_json = key.ends_with(".json") && key != "model.safetensors.index.json";
        if top && (is_json || key == "chat_template.jinja") {
            json_files.push((key.clone(), digest.clone(), path.clone()));
        }
    }
    let capabilities = template_capabilities(paths)?;
    Ok(Checkpoint {
        files: files_out,
        blobs: blob_plans,
        json_files,
        quantization,
        capabilities,
    })
}

/// Ollama's create-time capabilities: completion, plus tools/thinking the chat template shows.
fn template_capabilities(paths: &Paths) -> Result<Vec<String>> {
    let mut caps = vec!["completion".to_owned()];
    let mut template = None;
    if let Some((_, p)) = paths.get("chat_template.jinja") {
        template = Some(String::from_utf8_lossy(&std::fs::read(p)?).into_owned());
    } else if let Some((_, p)) = paths.get("tokenizer_config.json") {
        if std::fs::metadata(p)?.len() <= 16 << 20 {
            let tc: Json = serde_json::from_slice(&std::fs::read(p)?)
                .map_err(|e| bad(format!("tokenizer_config.json: {e}")))?;
            template = tc["chat_template"].as_str().map(str::to_owned);
        }
    }
    if let Some(t) = template {
        if t.contains("tools") || t.contains("tool_call") {
            caps.push("tools".into());
        }
        if t.contains("<think>") && t.contains("</think>") {
            caps.push("thinking".into());
        }
    }
    Ok(caps)
}

/// The layer index in `model.layers.N.…`.
fn layer_index(name: &str) -> Option<u64> {
    let rest = name.split(".layers.").nth(1)?;
    rest.split('.').next()?.parse().ok()
}

/// Shapes config.json fixes: the embedding is `[vocab_size, hidden_size]` (rows only when
/// quantized: its columns are packed words), norms are `[hidden_size]`, and the layers are
/// exactly `0..num_hidden_layers`.
fn check_shapes(config: &Json, tensors: &BTreeMap<String, (Entry, usize)>) -> Result<()> {
    let need = |k: &str| {
        info::dim(config, k)
            .ok_or_else(|| bad(format!("config.json: `{k}` must be a positive integer")))
    };
    let (hidden, vocab, layers) = (
        need("hidden_size")?,
        need("vocab_size")?,
        need("num_hidden_layers")?,
    );
    let disagree = |name: &str, shape: &[u64], want: String| {
        bad(format!(
            "tensor {name} has shape {shape:?} but config.json implies {want}"
        ))
    };
    let mut seen = BTreeSet::new();
    for (name, (t, _)) in tensors {
        if let Some(i) = layer_index(name) {
            if i >= layers {
                return Err(bad(format!(
                    "tensor {name} is in layer {i} but config.json has num_hidden_layers {layers}"
                )));
            }
            seen.insert(i);
        }
        if name.ends_with("embed_tokens.weight") {
            let quantized = t.dtype == "U32";
            let ok =
                t.shape.len() == 2 && t.shape[0] == vocab && (quantized || t.shape[1] == hidden);
            if !ok {
                return Err(disagree(name, &t.shape, format!("[{vocab}, {hidden}]")));
            }
        }
        let norm = name.ends_with("input_layernorm.weight")
            || name.ends_with("post_attention_layernorm.weight")
            || name == "model.norm.weight";
        if norm && t.shape != [hidden] {
            return Err(disagree(name, &t.shape, format!("[{hidden}]")));
        }
    }
    if seen.len() as u64 != layers {
        return Err(bad(format!(
            "config.json has num_hidden_layers {layers} but the tensors hold {} layers",
            seen.len()
        )));
    }
    Ok(())
}

/// One blob per tensor, or per quantized group; returns the plans and the quantization level.
fn plan(
    config: &Json,
    tensors: &BTreeMap<String, (Entry, usize)>,
) -> Result<(Vec<BlobPlan>, String)> {
    let mut out = Vec::new();
    let mut level: Option<(u64, String)> = None;
    for (name, (t, file)) in tensors {
        let companion_of = |suffix: &str| {
            name.strip_suffix(suffix).is_some_and(|base| {
                tensors.contains_key(&format!("{base}.weight"))
                    && tensors.contains_key(&format!("{base}.scales"))
            })
        };
        if companion_of(".scales") || companion_of(".biases") || companion_of(".global_scale") {
            continue;
        }
        let base = name.strip_suffix(".weight");
        let scales = base.and_then(|b| tensors.get(&format!("{b}.scales")));
        let Some((s, sfile)) = scales else {
            out.push(BlobPlan {
                name: name.clone(),
                parts: vec![(name.clone(), t.clone(), *file)],
                metadata: BTreeMap::new(),
            });
            continue;
        };
        let base = base.unwrap_or_default();
        if t.dtype != "U32" {
            return Err(bad(format!(
                "quantized tensor {name} must be U32 words, not {}",
                t.dtype
            )));
        }
        let (ty, bits, group) = info::quant_params(config, base, t, s).ok_or_else(|| {
            bad(format!(
                "cannot determine the quantization of {name} from its shape {:?} and {} scales {:?} (fp formats need config.json's quantization mode)",
                t.shape, s.dtype, s.shape
            ))
        })?;
        if bits != 4 && bits != 8 {
            return Err(bad(format!(
                "tensor {name} is {bits}-bit: herd's MLX runner supports 4- and 8-bit weights"
            )));
        }
        if level.as_ref().is_none_or(|(b, _)| bits < *b) {
            level = Some((bits, ty.clone()));
        }
        let mut parts = vec![
            (name.clone(), t.clone(), *file),
            (format!("{name}.scale"), s.clone(), *sfile),
        ];
        let bias = tensors.get(&format!("{base}.biases"));
        let global = tensors.get(&format!("{base}.global_scale"));
        let affine = ty.starts_with("int");
        if affine != bias.is_some() || (global.is_some() && ty != "nvfp4") {
            return Err(bad(format!(
                "quantized tensor {name} ({ty}) {}",
                if affine {
                    "needs its .biases and has no .global_scale"
                } else {
                    "has no .biases (and only nvfp4 has a .global_scale)"
                }
            )));
        }
        if let Some((b, bfile)) = bias {
            parts.push((format!("{name}.bias"), b.clone(), *bfile));
        }
        if let Some((g, gfile)) = global {
            if g.elements() != 1 || g.dtype != "F32" {
                return Err(bad(format!(
                    "the global scale of {name} must be one F32 value, not {} {:?}",
                    g.dtype, g.shape
                )));
            }
            parts.push((format!("{name}.global_scale"), g.clone(), *gfile));
        }
        out.push(BlobPlan {
            name: name.clone(),
            parts,
            metadata: info::quant_metadata(&ty, group),
        });
    }
    Ok((out, level.map(|(_, t)| t).unwrap_or_default()))
}

impl Checkpoint {
    /// Writes the tensor blobs; returns tensor layers then json layers, in manifest order.
    pub(crate) fn write(self, blobs: &BlobStore) -> Result<Vec<Built>> {
        let files = self
            .files
            .iter()
            .map(std::fs::File::open)
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(self.blobs.len() + self.json_files.len());
        for b in &self.blobs {
            let parts: Vec<Part> = b
                .parts
                .iter()
                .map(|(name, e, f)| Part {
                    name: name.clone(),
                    src: e,
                    file: &files[*f],
                })
                .collect();
            let (digest, size) =
                blobs.write_with(|w| header::write_packed(w, &parts, &b.metadata))?;
            let mut layer = Layer::new(MEDIA_TYPE_TENSOR, digest.clone(), size);
            layer.name = Some(b.name.clone());
            out.push(Built {
                status: format!("creating new layer {digest}"),
                layer,
            });
        }
        for (name, digest, path) in self.json_files {
            let (digest, size, verb) = match digest {
                Some(d) => (d, std::fs::metadata(&path)?.len(), "using existing layer"),
                None => {
                    let file = std::fs::File::open(&path)?;
                    let (d, n) = blobs.write_with(|w| {
                        std::io::copy(&mut &file, w)?;
                        Ok(())
                    })?;
                    (d, n, "creating new layer")
                }
            };
            let mut layer = Layer::new(MEDIA_TYPE_JSON, digest.clone(), size);
            layer.name = Some(name);
            out.push(Built {
                status: format!("{verb} {digest}"),
                layer,
            });
        }
        Ok(out)
    }
}

/// The experimental import: check, quantize if asked (through `runner-mlx quantize`, then the
/// quantized checkpoint is checked like an uploaded one), write; fills the config blob's fields.
pub(crate) fn import(
    blobs: &BlobStore,
    files: &BTreeMap<String, String>,
    req: &super::CreateRequest,
    quantizer: &super::QuantizeOptions,
    config: &mut super::ConfigV2,
    progress: &mut dyn FnMut(super::Progress),
) -> Result<Vec<Built>> {
    let paths = resolve(blobs, files)?;
    let mut ck = check(&paths)?;
    let q = super::quantize::requested(req);
    // Holds the quantizer's output until its tensors are stored.
    let mut _work = None;
    if !q.is_empty() {
        let q = parse_mlx_quantize(q)?;
        if !ck.quantization.is_empty() {
            return Err(bad(format!(
                "the model is already quantized ({}); quantizing to {q} needs an F16, BF16 or F32 model",
                ck.quantization
            )));
        }
        progress(super::Progress::status(format!("quantizing model to {q}")));
        let work = super::mlx_quantize::run(blobs, &paths, q, quantizer)?;
        let out = super::mlx_quantize::outputs(work.path())?;
        ck = check(&out)?;
        _work = Some(work);
    }
    config.model_format = "safetensors".into();
    config.file_type.clone_from(&ck.quantization);
    config.capabilities.clone_from(&ck.capabilities);
    ck.write(blobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_names_follow_ollama() {
        for (q, want) in [
            ("int4", "int4"),
            ("Q4", "int4"),
            ("fp4", "int4"),
            ("q8", "int8"),
            ("INT8", "int8"),
            ("FP8", "int8"),
            ("nvfp4", "nvfp4"),
            ("NVFP4", "nvfp4"),
            ("mxfp4", "mxfp4"),
            ("MxFp8", "mxfp8"),
        ] {
            assert_eq!(parse_mlx_quantize(q).unwrap(), want, "{q}");
        }
        for q in ["q4_K_M", "fp16", "nvfp8", "mxfp6", ""] {
            let e = parse_mlx_quantize(q).unwrap_err().to_string();
            assert!(
                e.contains("supported types are int4, int8, nvfp4, mxfp4, mxfp8"),
                "{e}"
            );
        }
    }

    #[test]
    fn layer_indices() {
        assert_eq!(layer_index("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(layer_index("model.embed_tokens.weight"), None);
    }
}
