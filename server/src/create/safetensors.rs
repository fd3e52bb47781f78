//! `/api/create` with a safetensors checkpoint in `files` (config.json + model*.safetensors +
//! tokenizer files, as Ollama's CLI uploads a Hugging Face directory): convert it to an F16 GGUF
//! (`crate::convert`) written through the blob store, then continue as a GGUF import of that blob.
//!
//! Invariants: everything that can be refused (missing blobs, config.json, unsupported
//! architecture, malformed safetensors, tensors past EOF) is refused by `convert::plan` before the
//! first progress line, so the API still answers 400; the GGUF is streamed into a temp file in
//! the blobs dir while hashing, fsynced and renamed to its digest — a failure leaves nothing.

use std::collections::BTreeMap;

use super::import::GgufLayer;
use super::Progress;
use crate::convert::{self, Source};
use crate::error::{Error, Result};
use crate::gguf::{self, ReadOptions};
use crate::store::manifest::MEDIA_TYPE_MODEL;
use crate::store::{BlobStore, Digest, Layer};

/// Ollama's progress status while a checkpoint converts.
pub const CONVERTING: &str = "converting model";

/// Whether a create `files` map is a safetensors checkpoint (Ollama's rule: any `.safetensors`).
pub(crate) fn is_checkpoint(files: &BTreeMap<String, String>) -> bool {
    Source::is_safetensors(files.keys())
}

/// Converts the uploaded checkpoint; returns the one model layer (a new blob).
pub(crate) fn import_checkpoint(
    blobs: &BlobStore,
    files: &BTreeMap<String, String>,
    model_name: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<GgufLayer>> {
    let mut paths = BTreeMap::new();
    for (path, digest) in files {
        let digest = Digest::parse(digest)?;
        if !blobs.exists(&digest) {
            return Err(Error::BadRequest(format!(
                "blob {digest} for file {path:?} was not uploaded"
            )));
        }
        paths.insert(path.clone(), blobs.path(&digest));
    }
    let plan = convert::plan(&Source::new(paths), model_name)?;
    progress(Progress::status(CONVERTING));
    let (digest, size) = write_blob(blobs, &plan)?;
    // The converted file passes the same bounded reader as any uploaded GGUF.
    let g = gguf::read_path(&blobs.path(&digest), ReadOptions::default())?;
    Ok(vec![GgufLayer {
        layer: Layer::new(MEDIA_TYPE_MODEL, digest, size),
        gguf: g,
        new_blob: true,
    }])
}

/// Writes the converted GGUF as a blob: temp file → hash → fsync → rename.
fn write_blob(blobs: &BlobStore, plan: &convert::Plan) -> Result<(Digest, u64)> {
    blobs.write_with(|w| convert::write(plan, w).map(|_| ()))
}
