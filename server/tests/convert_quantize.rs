//! Safetensors → GGUF conversion followed by create-time quantization, as `herd create -q` does
//! with a Hugging Face directory: the converter's F16 layer is rewritten by the real runner's
//! quantizer to Q8_0 and Q4_K_M; the manifest's model layer and config carry the new type and
//! the layer shrinks. Skips when runner-llamacpp is not built.

mod convert_support;
mod create_util;
mod quantize_support;

use std::collections::BTreeMap;

use convert_support::{checkpoint, Arch};
use server::convert::safetensors::Dtype;
use server::create::{create_model_with, CreateRequest, QuantizeOptions};
use server::gguf::{read_path, ReadOptions};
use server::store::manifest::MEDIA_TYPE_MODEL;

#[test]
fn converted_checkpoint_quantizes_to_q8_0_and_q4_k_m() {
    let Some(runner) = quantize_support::native_runner() else {
        return;
    };
    let t = create_util::store();
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path(), Arch::Llama, Dtype::BF16, 5);
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        let d = t.upload(&std::fs::read(e.path()).unwrap());
        files.insert(e.file_name().to_string_lossy().into_owned(), d.to_string());
    }
    let opts = QuantizeOptions {
        runner,
        threads: 1,
        ..Default::default()
    };
    let mut sizes = Vec::new();
    for (name, quantize, level, ftype) in [
        ("conv-f16", "", "F16", 1),
        ("conv-q8", "q8_0", "Q8_0", 7),
        ("conv-q4", "Q4_K_M", "Q4_K_M", 15),
    ] {
        let req = CreateRequest {
            model: name.into(),
            files: Some(files.clone()),
            quantize: quantize.into(),
            ..CreateRequest::default()
        };
        let mut statuses = Vec::new();
        create_model_with(&t.store, &req, &opts, &mut |p| statuses.push(p.status))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(statuses[0], "converting model", "{statuses:?}");
        assert_eq!(
            statuses
                .iter()
                .any(|s| s.starts_with("quantizing F16 model to")),
            !quantize.is_empty(),
            "{statuses:?}"
        );
        let m = t.read(name).unwrap().manifest;
        let layer = m
            .layers
            .iter()
            .find(|l| l.media_type == MEDIA_TYPE_MODEL)
            .unwrap();
        let g = read_path(&t.store.blobs().path(&layer.digest), ReadOptions::default()).unwrap();
        assert_eq!(g.file_type(), Some(ftype), "{name}");
        let config: serde_json::Value =
            serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
        assert_eq!(config["file_type"], level, "{name}");
        sizes.push(layer.size);
    }
    assert!(sizes[1] < sizes[0] * 3 / 4, "Q8_0 {sizes:?}");
    assert!(sizes[2] < sizes[1], "Q4_K_M {sizes:?}");
}
