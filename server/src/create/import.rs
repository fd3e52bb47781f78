//! Turning uploaded files (`files`, `adapters`, `draft_files` of a create request) into model
//! layers. Only GGUF is imported: each file must already be a blob, start with the GGUF magic and
//! pass the bounded metadata reader (`crate::gguf`), so malformed or hostile files are refused
//! with 400 before anything is written. The layer references the uploaded blob itself: no second
//! copy of the data is made (split GGUFs excepted: their shards are merged, see `split`).

use std::collections::BTreeMap;
use std::io::Read;

use crate::error::{Error, Result};
use crate::gguf::{self, GgufFile, ReadOptions, Value};
use crate::store::manifest::{MEDIA_TYPE_ADAPTER, MEDIA_TYPE_MODEL, MEDIA_TYPE_PROJECTOR};
use crate::store::{BlobStore, Digest, Layer};

pub(crate) const NOT_GGUF: &str = "supplied file was not in GGUF format";
pub(crate) const FILE_PATH_MUST_BE_RELATIVE: &str = "file path must be relative";

/// A model-ish layer and the GGUF metadata it was classified by.
#[derive(Clone, Debug)]
pub(crate) struct GgufLayer {
    pub layer: Layer,
    pub gguf: GgufFile,
    /// The blob was written by this create (a merged split), not uploaded.
    pub new_blob: bool,
}

/// Go's `fs.ValidPath` (unrooted, slash-separated, no empty, `.` or `..` element), plus no
/// backslash or NUL so the key can never name anything outside a directory on any OS.
pub fn valid_rel_path(p: &str) -> bool {
    !p.is_empty()
        && !p.contains(['\\', '\0'])
        && p.split('/').all(|e| !e.is_empty() && e != "." && e != "..")
}

/// The most entries one files map may hold. Each GGUF's metadata is read and kept while the
/// create runs (tens of KB each), so the count bounds its time and memory; the largest split
/// models have a few dozen shards.
pub const MAX_FILES: usize = 1024;

/// Validates every key and digest of a files map (Ollama checks these before streaming).
pub(crate) fn check_files(files: &BTreeMap<String, String>) -> Result<()> {
    if files.len() > MAX_FILES {
        return Err(Error::BadRequest(format!(
            "too many files ({}); at most {MAX_FILES} per create",
            files.len()
        )));
    }
    for (path, digest) in files {
        if !valid_rel_path(path) {
            return Err(Error::BadRequest(FILE_PATH_MUST_BE_RELATIVE.into()));
        }
        if digest.is_empty() {
            return Err(Error::InvalidDigest);
        }
    }
    Ok(())
}

/// Which kind of file a files map holds, as Ollama decides it.
#[derive(Debug, PartialEq, Eq)]
enum FileKind {
    Gguf,
    Safetensors,
    Unknown,
}

fn file_kind(blobs: &BlobStore, files: &BTreeMap<String, String>) -> FileKind {
    for (path, digest) in files {
        if path.ends_with(".safetensors") {
            return FileKind::Safetensors;
        }
        if path.ends_with(".gguf") {
            return FileKind::Gguf;
        }
        if Digest::parse(digest).is_ok_and(|d| has_gguf_magic(blobs, &d)) {
            return FileKind::Gguf;
        }
    }
    FileKind::Unknown
}

fn has_gguf_magic(blobs: &BlobStore, d: &Digest) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(blobs.path(d))
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

/// Imports a files map. `forced` is the media type for adapters and drafts; otherwise each file
/// is classified by `general.type`. Returns the layers in path order.
pub(crate) fn import_files(
    blobs: &BlobStore,
    files: &BTreeMap<String, String>,
    forced: Option<&str>,
) -> Result<Vec<GgufLayer>> {
    match file_kind(blobs, files) {
        FileKind::Gguf => {}
        FileKind::Safetensors => {
            return Err(Error::BadRequest(
                "converting safetensors models is not supported yet; supply a GGUF file".into(),
            ))
        }
        FileKind::Unknown if files.is_empty() => {
            return Err(Error::BadRequest("no files provided to convert".into()))
        }
        FileKind::Unknown => return Err(Error::BadRequest("unknown type".into())),
    }
    let mut out = Vec::with_capacity(files.len());
    for (path, digest) in files {
        let digest = Digest::parse(digest)?;
        out.push(import_one(blobs, path, &digest, forced)?);
    }
    super::split::merge_splits(blobs, out)
}

fn import_one(
    blobs: &BlobStore,
    path: &str,
    digest: &Digest,
    forced: Option<&str>,
) -> Result<GgufLayer> {
    let Some(size) = blobs.size(digest)? else {
        return Err(Error::BadRequest(format!(
            "blob {digest} for file {path:?} was not uploaded"
        )));
    };
    if !has_gguf_magic(blobs, digest) {
        return Err(Error::BadRequest(NOT_GGUF.into()));
    }
    let g = gguf::read_path(&blobs.path(digest), ReadOptions::default())?;
    g.check_engine_facts()
        .map_err(|e| Error::InvalidGguf(format!("file {path:?}: {e}")))?;
    let media_type = forced.unwrap_or_else(|| media_type_for(&g));
    let mut layer = Layer::new(media_type, digest.clone(), size);
    layer.from = Some(path.to_owned());
    Ok(GgufLayer {
        layer,
        gguf: g,
        new_blob: false,
    })
}

/// Ollama's classification: `general.type` `adapter` → adapter; `projector`/`mmproj`, a
/// vision-only file, or an encoder-only `clip` file → projector; anything else → model.
pub(crate) fn media_type_for(g: &GgufFile) -> &'static str {
    let kind = g.get("general.type").and_then(Value::as_str).unwrap_or("");
    if kind == "adapter" {
        return MEDIA_TYPE_ADAPTER;
    }
    let blocks = g.arch_u64("block_count").unwrap_or(0);
    let flag = |k: &str| matches!(g.arch_value(k), Some(Value::Bool(true)));
    let projector = matches!(kind, "projector" | "mmproj")
        || (blocks == 0 && g.arch_u64("vision.block_count").unwrap_or(0) > 0)
        || (g.architecture() == Some("clip")
            && blocks == 0
            && (flag("has_vision_encoder") || flag("has_audio_encoder")));
    if projector {
        MEDIA_TYPE_PROJECTOR
    } else {
        MEDIA_TYPE_MODEL
    }
}
