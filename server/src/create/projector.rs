//! Legacy LLaVA projectors: a `clip` GGUF with a vision encoder but no projector type (files
//! from llama.cpp's early llava converter) is refused by the runner's mtmd loader ("unknown
//! projector type"). As Ollama's create does (`addDefaultLlavaProjectorType`), an uploaded one
//! is rewritten with `clip.projector_type = "mlp"`, the type those converters produced.

use super::import::GgufLayer;
use super::split;
use crate::error::Result;
use crate::gguf::{self, GgufFile, ReadOptions, Value};
use crate::store::manifest::MEDIA_TYPE_PROJECTOR;
use crate::store::{BlobStore, Layer};

/// Ollama's progress line for the rewrite.
pub const STATUS: &str = "updating GGUF projector metadata";

/// A vision `clip` file that names no projector type, in either key.
pub(crate) fn needs_default_type(g: &GgufFile) -> bool {
    g.architecture() == Some("clip")
        && matches!(g.get("clip.has_vision_encoder"), Some(Value::Bool(true)))
        && g.get("clip.projector_type").is_none()
        && g.get("clip.vision.projector_type").is_none()
}

/// Rewrites each projector layer of `layers` that `needs_default_type`; returns how many were.
pub(crate) fn add_default_types(blobs: &BlobStore, layers: &mut [GgufLayer]) -> Result<usize> {
    let mut updated = 0;
    for l in layers
        .iter_mut()
        .filter(|l| l.layer.media_type == MEDIA_TYPE_PROJECTOR && needs_default_type(&l.gguf))
    {
        let extra = [("clip.projector_type", Value::String("mlp".into()))];
        let digest = split::write_merged(blobs, std::slice::from_ref(l), &extra)?;
        let size = blobs.size(&digest)?.unwrap_or_default();
        let mut layer = Layer::new(MEDIA_TYPE_PROJECTOR, digest.clone(), size);
        layer.from = l.layer.from.clone();
        *l = GgufLayer {
            layer,
            gguf: gguf::read_path(&blobs.path(&digest), ReadOptions::default())?,
            new_blob: true,
        };
        updated += 1;
    }
    Ok(updated)
}
