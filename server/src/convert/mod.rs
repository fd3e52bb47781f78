//! Hugging Face safetensors checkpoint → F16 GGUF, in Rust, for the Llama (incl. SmolLM and
//! Mistral-style), Qwen2, Qwen3 and Gemma 3 text architectures. The output matches the pinned
//! llama.cpp tree's `convert_hf_to_gguf.py --outtype f16` tensor for tensor (names, shapes,
//! types, bytes) and in the metadata the runner reads (server/tests/convert_golden.rs proves it).
//!
//! Shape of a conversion: `plan` reads config.json, the tokenizer files and every safetensors
//! header, and decides every key/value and output tensor — all refusals (unsupported
//! architecture, malformed header, tensor past EOF, unmappable tensor) happen there, before a byte
//! is written. `write` then emits the GGUF header and streams tensor data one bounded chunk at a
//! time (tensors.rs), so memory stays flat whatever the checkpoint size.

mod arch;
mod float;
pub mod safetensors;
mod special;
pub mod spm;
mod tensors;
mod vocab;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::gguf::{GgufBuilder, Value};
use arch::{Arch, Hparams};
use safetensors::Checkpoint;
use tensors::OutTensor;

pub use arch::Arch as Architecture;

/// GGUF data alignment the reference writer uses.
const ALIGNMENT: u64 = 32;
/// `LlamaFileType.MOSTLY_F16`.
const FILE_TYPE_F16: u32 = 1;
/// Upper bound for the small JSON files read whole (tokenizer.json of a 256k vocab is ~30 MB).
const MAX_JSON: u64 = 256 << 20;
const MAX_TOKENIZER_MODEL: u64 = 64 << 20;

/// The files of a checkpoint: relative path (as uploaded) → where the bytes are.
#[derive(Clone, Debug, Default)]
pub struct Source {
    files: BTreeMap<String, PathBuf>,
}

impl Source {
    pub fn new(files: BTreeMap<String, PathBuf>) -> Source {
        Source { files }
    }

    /// The top-level files of a directory.
    pub fn from_dir(dir: &Path) -> Result<Source> {
        let mut files = BTreeMap::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            // metadata() follows symlinks (Hugging Face cache snapshots are symlinks to blobs).
            if std::fs::metadata(e.path())?.is_file() {
                if let Some(name) = e.file_name().to_str() {
                    files.insert(name.to_owned(), e.path());
                }
            }
        }
        Ok(Source { files })
    }

    /// Whether a set of uploaded paths is a safetensors checkpoint (Ollama's test).
    pub fn is_safetensors<'a>(paths: impl IntoIterator<Item = &'a String>) -> bool {
        paths.into_iter().any(|p| p.ends_with(".safetensors"))
    }

    fn read(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let Some(path) = self.files.get(rel) else {
            return Ok(None);
        };
        let len = std::fs::metadata(path)?.len();
        if len > max {
            return Err(Error::BadRequest(format!(
                "{rel} is larger than {max} bytes"
            )));
        }
        Ok(Some(std::fs::read(path)?))
    }

    fn json(&self, rel: &str) -> Result<Option<Json>> {
        match self.read(rel, MAX_JSON)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::BadRequest(format!("{rel} is not valid JSON: {e}"))),
        }
    }

    /// The safetensors parts in the reference's order: the index's files, else the top-level
    /// `model*.safetensors`, sorted by name.
    fn parts(&self, index: Option<&Json>) -> Result<Vec<(String, PathBuf)>> {
        let names: Vec<String> = match index {
            Some(ix) => {
                let map = ix
                    .get("weight_map")
                    .and_then(Json::as_object)
                    .ok_or_else(|| {
                        Error::BadRequest("model.safetensors.index.json has no weight_map".into())
                    })?;
                let mut v: Vec<String> = map
                    .values()
                    .map(|f| f.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        Error::BadRequest(
                            "model.safetensors.index.json: weight_map values must be file names"
                                .into(),
                        )
                    })?;
                v.sort();
                v.dedup();
                v
            }
            None => self
                .files
                .keys()
                .filter(|k| {
                    !k.contains('/') && k.starts_with("model") && k.ends_with(".safetensors")
                })
                .cloned()
                .collect(),
        };
        if names.is_empty() {
            return Err(Error::BadRequest(
                "no model*.safetensors file in the checkpoint".into(),
            ));
        }
        names
            .into_iter()
            .map(|n| match self.files.get(&n) {
                Some(p) => Ok((n, p.clone())),
                None => Err(Error::BadRequest(format!(
                    "missing or incomplete model files: {n} was not uploaded"
                ))),
            })
            .collect()
    }
}

type Kvs = Vec<(String, Value)>;

/// Everything decided before writing.
pub struct Plan {
    pub arch: Arch,
    kvs: Kvs,
    tensors: Vec<OutTensor>,
    checkpoint: Checkpoint,
}

/// What a finished conversion wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    pub architecture: &'static str,
    pub tensors: usize,
    pub bytes: u64,
    /// The largest source tensor in bytes (the memory bound is stated against it).
    pub largest_tensor: u64,
}

impl Plan {
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    pub fn largest_source_tensor(&self) -> u64 {
        self.checkpoint
            .tensors()
            .map(|(_, t)| t.len)
            .max()
            .unwrap_or(0)
    }
}

/// Reads and validates everything; writes nothing. `name` becomes `general.name`.
pub fn plan(src: &Source, name: &str) -> Result<Plan> {
    let config = src
        .json("config.json")?
        .ok_or_else(|| Error::BadRequest("config.json is missing from the checkpoint".into()))?;
    let hp = Hparams::parse(&config)?;
    let index = src.json("model.safetensors.index.json")?;
    let checkpoint = Checkpoint::open(&src.parts(index.as_ref())?, index.as_ref())?;

    let mut kvs: Vec<(String, Value)> = vec![
        (
            "general.architecture".into(),
            Value::String(hp.arch.gguf_name().into()),
        ),
        ("general.type".into(), Value::String("model".into())),
        ("general.name".into(), Value::String(name.into())),
    ];
    kvs.extend(hp.kvs(FILE_TYPE_F16)?);
    kvs.push(("general.quantization_version".into(), Value::U32(2)));
    let (tok_kvs, n_vocab_real) = tokenizer_kvs(src, &hp, &config)?;
    kvs.extend(tok_kvs);

    let mut out = Vec::new();
    out.extend(tensors::llama3_rope_freqs(&hp)?);
    for (pi, part) in checkpoint.parts.iter().enumerate() {
        for (ti, t) in part.tensors.iter().enumerate() {
            if let Some(new_name) = arch::map_tensor_name(&hp, &t.name)? {
                out.push(tensors::plan_one(&hp, new_name, (pi, ti), t, n_vocab_real)?);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::BadRequest(
            "the checkpoint holds no convertible tensors".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = out.iter().find(|t| !seen.insert(t.name.as_str())) {
        return Err(Error::BadRequest(format!(
            "two tensors map to {:?}",
            dup.name
        )));
    }
    Ok(Plan {
        arch: hp.arch,
        kvs,
        tensors: out,
        checkpoint,
    })
}

/// The tokenizer keys, and the real vocab size Gemma 3 trims its embedding to.
fn tokenizer_kvs(src: &Source, hp: &Hparams, config: &Json) -> Result<(Kvs, Option<u64>)> {
    let tok_json = src.json("tokenizer.json")?;
    let tok_config = src.json("tokenizer_config.json")?;
    let jinja = src
        .read("chat_template.jinja", MAX_JSON)?
        .map(|b| {
            String::from_utf8(b)
                .map_err(|_| Error::BadRequest("chat_template.jinja is not UTF-8".into()))
        })
        .transpose()?;
    let ct_json = src.json("chat_template.json")?;
    let mut kvs: Vec<(String, Value)> = Vec::new();
    if hp.arch == Arch::Llama {
        if let Some(b) = tok_config
            .as_ref()
            .and_then(|t| t.get("add_prefix_space"))
            .and_then(Json::as_bool)
        {
            kvs.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(b)));
        }
    }
    let spm = src.read("tokenizer.model", MAX_TOKENIZER_MODEL)?;
    let (n_vocab, n_vocab_real);
    if let Some(model) = spm {
        let pieces = spm::parse_pieces(&model)?;
        let v = vocab::sentencepiece(
            &pieces,
            hp.vocab_size(),
            src.json("added_tokens.json")?.as_ref(),
            tok_config.as_ref(),
        )?;
        kvs.push(("tokenizer.ggml.model".into(), Value::String("llama".into())));
        kvs.push(("tokenizer.ggml.pre".into(), Value::String("default".into())));
        kvs.extend(v.kvs());
        n_vocab = Some(v.tokens.len() as u64);
        n_vocab_real = n_vocab;
    } else if let Some(tok) = &tok_json {
        let vocab_size = hp.get("vocab_size").and_then(|v| v.as_u64());
        let (v, pre) = vocab::bpe(tok, vocab_size)?;
        kvs.push(("tokenizer.ggml.model".into(), Value::String("gpt2".into())));
        kvs.push(("tokenizer.ggml.pre".into(), Value::String(pre.into())));
        kvs.extend(v.kvs());
        n_vocab = None;
        let count = |k: &str| {
            tok.get(k).and_then(|x| {
                x.as_object()
                    .map(|m| m.len())
                    .or(x.as_array().map(Vec::len))
            })
        };
        let model_vocab = tok
            .get("model")
            .and_then(|m| m.get("vocab"))
            .and_then(Json::as_object)
            .map(|m| m.len());
        n_vocab_real = Some((model_vocab.unwrap_or(0) + count("added_tokens").unwrap_or(0)) as u64);
    } else {
        return Err(Error::BadRequest(
            "the checkpoint has neither tokenizer.json nor tokenizer.model".into(),
        ));
    }
    let sv = special::SpecialVocab::load(&special::Inputs {
        tokenizer: tok_json.as_ref(),
        tokenizer_config: tok_config.as_ref(),
        config,
        chat_template_jinja: jinja,
        chat_template_json: ct_json.as_ref(),
        load_merges: n_vocab.is_none(),
        n_vocab,
    })?;
    kvs.extend(sv.kvs());
    let mut set = |k: &str, v: Value| match kvs.iter_mut().find(|(n, _)| n == k) {
        Some(slot) => slot.1 = v,
        None => kvs.push((k.to_owned(), v)),
    };
    // The reference's per-architecture tweaks after the vocab is written.
    if hp.arch == Arch::Llama && hp.get("vocab_size").and_then(|v| v.as_u64()) == Some(49152) {
        set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    }
    if hp.arch == Arch::Gemma3 && n_vocab.is_some() {
        set("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    }
    Ok((kvs, n_vocab_real))
}

/// Writes the planned GGUF to `w`. Returns what was written.
pub fn write(plan: &Plan, w: &mut dyn Write) -> Result<Converted> {
    let mut builder = GgufBuilder::new();
    for (k, v) in &plan.kvs {
        builder = builder.kv(k, v.clone());
    }
    // The builder with no tensors emits magic, version, counts and key/values: the header
    // prefix. The tensor count and tensor infos are patched in here.
    let mut head = builder.build()?;
    head[8..16].copy_from_slice(&(plan.tensors.len() as u64).to_le_bytes());
    let mut offset = 0u64;
    let mut offsets = Vec::with_capacity(plan.tensors.len());
    for t in &plan.tensors {
        head.extend_from_slice(&(t.name.len() as u64).to_le_bytes());
        head.extend_from_slice(t.name.as_bytes());
        let dims = t.dims();
        head.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.out_type.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.n_bytes()).next_multiple_of(ALIGNMENT);
    }
    head.resize((head.len() as u64).next_multiple_of(ALIGNMENT) as usize, 0);
    w.write_all(&head)?;
    let mut written = 0u64;
    for (t, off) in plan.tensors.iter().zip(offsets) {
        w.write_all(&vec![0; (off - written) as usize])?;
        let (part, st) = match t.src {
            Some((pi, ti)) => {
                let p = &plan.checkpoint.parts[pi];
                (Some(p), Some(&p.tensors[ti]))
            }
            None => (None, None),
        };
        tensors::write_data(t, part, st, w)?;
        written = off + t.n_bytes();
    }
    // The reference pads the file to the alignment after the last tensor too.
    w.write_all(&vec![
        0;
        (written.next_multiple_of(ALIGNMENT) - written)
            as usize
    ])?;
    Ok(Converted {
        architecture: plan.arch.gguf_name(),
        tensors: plan.tensors.len(),
        bytes: head.len() as u64 + written.next_multiple_of(ALIGNMENT),
        largest_tensor: plan.largest_source_tensor(),
    })
}

/// `plan` then `write`.
pub fn convert(src: &Source, name: &str, w: &mut dyn Write) -> Result<Converted> {
    let p = plan(src, name)?;
    write(&p, w)
}

#[cfg(test)]
mod tests;
