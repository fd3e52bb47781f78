//! `/api/create` with a safetensors checkpoint in `files`: the checkpoint is converted to an F16
//! GGUF blob (the same bytes `server::convert` writes for the directory), imported as the model
//! layer with Ollama's progress lines, and bad checkpoints are refused with 400 before anything
//! is written (no manifest, no new blob).

mod convert_support;
mod create_util;

use std::collections::BTreeMap;
use std::path::Path;

use convert_support::{checkpoint, Arch};
use create_util::{store, TestStore};
use server::convert::safetensors::Dtype;
use server::convert::{convert, Source};
use server::create::CreateRequest;
use server::gguf::{self, ReadOptions};
use server::store::manifest::MEDIA_TYPE_MODEL;

/// Uploads every file of `dir` as a blob; returns the create `files` map.
fn upload_dir(t: &TestStore, dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let d = t.upload(&std::fs::read(e.path()).unwrap());
        files.insert(e.file_name().to_string_lossy().into_owned(), d.to_string());
    }
    files
}

fn req(files: BTreeMap<String, String>) -> CreateRequest {
    CreateRequest {
        model: "tiny-gemma".into(),
        files: Some(files),
        ..CreateRequest::default()
    }
}

#[test]
fn safetensors_checkpoint_converts_to_an_f16_model_layer() {
    let t = store();
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path(), Arch::Gemma3, Dtype::BF16, 3);
    let statuses = t.create(&req(upload_dir(&t, dir.path()))).unwrap();
    assert_eq!(statuses[0], "converting model", "{statuses:?}");
    assert!(
        statuses
            .iter()
            .any(|s| s.starts_with("creating new layer sha256:")),
        "{statuses:?}"
    );
    assert_eq!(statuses.last().unwrap(), "success");

    let entry = t.read("tiny-gemma").expect("manifest written");
    let layer = entry
        .manifest
        .layers
        .iter()
        .find(|l| l.media_type == MEDIA_TYPE_MODEL)
        .unwrap();
    let blob = std::fs::read(t.store.blobs().path(&layer.digest)).unwrap();
    let mut direct = Vec::new();
    convert(
        &Source::from_dir(dir.path()).unwrap(),
        "tiny-gemma",
        &mut direct,
    )
    .unwrap();
    assert!(blob == direct, "the layer is the converter's output");
    assert_eq!(layer.size, blob.len() as u64);
    let g = gguf::read_bytes(&blob, ReadOptions::default()).unwrap();
    assert_eq!(g.architecture(), Some("gemma3"));
    assert_eq!(g.quantization_level(), "F16");
    let config = t.blob_text(&entry.manifest.config.digest);
    assert!(config.contains(r#""file_type":"F16""#), "{config}");
    assert!(config.contains(r#""model_family":"gemma3""#), "{config}");
    // The Jinja chat template travels in the GGUF (no TEMPLATE layer was asked for).
    assert!(g.get("tokenizer.chat_template").is_some());
}

#[test]
fn bad_checkpoints_are_refused_with_400_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path(), Arch::Gemma3, Dtype::BF16, 3);
    let header =
        server::convert::safetensors::encode_header(&[("model.norm.weight", Dtype::F32, &[64])]);
    type Edit = Box<dyn Fn(&TestStore, &mut BTreeMap<String, String>)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "missing config.json",
            Box::new(|_, f| {
                f.remove("config.json");
            }),
            "config.json is missing",
        ),
        (
            "unsupported architecture",
            Box::new(|t, f| {
                let c = br#"{"architectures":["BertModel"],"num_hidden_layers":2}"#;
                f.insert("config.json".into(), t.upload(c).to_string());
            }),
            "unsupported architecture \"BertModel\"",
        ),
        (
            "malformed safetensors header",
            Box::new(|t, f| {
                let mut b = 40u64.to_le_bytes().to_vec();
                b.extend_from_slice(&[b'x'; 40]);
                f.insert("model.safetensors".into(), t.upload(&b).to_string());
            }),
            "header is not valid JSON",
        ),
        (
            "tensor past EOF",
            Box::new(move |t, f| {
                let mut b = header.clone();
                b.extend_from_slice(&[0; 100]); // 256 bytes needed
                f.insert("model.safetensors".into(), t.upload(&b).to_string());
            }),
            "extends past the end of the file",
        ),
    ];
    for (what, edit, want) in cases {
        let t = store();
        let mut files = upload_dir(&t, dir.path());
        edit(&t, &mut files);
        let before = t.blob_count();
        let err = t.create(&req(files)).unwrap_err();
        assert_eq!(err.status(), 400, "{what}: {err}");
        assert!(err.to_string().contains(want), "{what}: {err}");
        assert!(t.read("tiny-gemma").is_none(), "{what}: no manifest");
        assert_eq!(t.blob_count(), before, "{what}: no blob written");
        let temps = std::fs::read_dir(t.store.blobs().dir()).unwrap().count();
        assert_eq!(temps, before, "{what}: no temp file left");
    }
}
