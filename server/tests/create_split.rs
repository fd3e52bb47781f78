//! Split GGUFs: shards are validated like Ollama and merged into one file that is byte-identical
//! to the unsplit model.

mod create_util;

use server::create::CreateRequest;
use server::gguf::{GgmlType, GgufBuilder};
use server::store::manifest::MEDIA_TYPE_MODEL;
use server::store::Digest;

use create_util::{files, store};

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}

fn base() -> GgufBuilder {
    GgufBuilder::new()
        .kv("general.architecture", "llama")
        .kv("general.file_type", 1u32)
        .kv("llama.block_count", 1u32)
        .kv("tokenizer.ggml.tokens", vec!["a", "b", "c"])
}

/// The unsplit model, and its two shards as llama-gguf-split lays them out.
fn model_and_shards() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let t = |b: GgufBuilder, name: &str, seed: u8, n: u64| {
        b.tensor(name, GgmlType::F16, &[n], data(seed, 2 * n as usize))
    };
    let whole = t(
        t(
            t(base(), "token_embd.weight", 1, 40),
            "blk.0.attn_q.weight",
            2,
            7,
        ),
        "output.weight",
        3,
        16,
    );
    let split = |b: GgufBuilder, no: u16| {
        b.kv("split.no", no)
            .kv("split.count", 2u16)
            .kv("split.tensors.count", 3i32)
    };
    let first = t(
        t(split(base(), 0), "token_embd.weight", 1, 40),
        "blk.0.attn_q.weight",
        2,
        7,
    );
    let second = t(split(GgufBuilder::new(), 1), "output.weight", 3, 16);
    (
        whole.build().unwrap(),
        first.build().unwrap(),
        second.build().unwrap(),
    )
}

fn req(pairs: &[(&str, &Digest)]) -> CreateRequest {
    CreateRequest {
        model: "split".into(),
        files: files(pairs),
        ..CreateRequest::default()
    }
}

#[test]
fn shards_merge_into_the_unsplit_file() {
    let t = store();
    let (whole, a, b) = model_and_shards();
    let (a, b) = (t.upload(&a), t.upload(&b));
    // Key order must not matter: the second shard is listed first.
    let statuses = t
        .create(&req(&[
            ("m-00002-of-00002.gguf", &b),
            ("m-00001-of-00002.gguf", &a),
        ]))
        .unwrap();
    let m = t.read("split").unwrap().manifest;
    assert_eq!(m.layers.len(), 1);
    let l = &m.layers[0];
    assert_eq!(l.media_type, MEDIA_TYPE_MODEL);
    assert_eq!(l.from.as_deref(), Some("m-00001-of-00002.gguf"));
    assert_eq!(l.digest, Digest::of_bytes(&whole));
    assert_eq!(
        std::fs::read(t.store.blobs().path(&l.digest)).unwrap(),
        whole
    );
    assert!(statuses.contains(&format!("creating new layer {}", l.digest)));
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
    assert_eq!(config["file_type"], "F16");
    assert_eq!(config["model_type"], "63");
}

#[test]
fn bad_shard_sets_are_refused() {
    let t = store();
    let (_, a, b) = model_and_shards();
    let (a, b) = (t.upload(&a), t.upload(&b));
    let cases: Vec<(CreateRequest, &str)> = vec![
        (
            req(&[("m-00001-of-00002.gguf", &a)]),
            "split GGUF \"m-00001-of-00002.gguf\" has 1 shards, expected 2",
        ),
        (
            req(&[("model.gguf", &a), ("m-00002-of-00002.gguf", &b)]),
            "split GGUF \"model.gguf\" must use llama.cpp split filename pattern",
        ),
        (
            req(&[("m-00001-of-00003.gguf", &a)]),
            "split GGUF \"m-00001-of-00003.gguf\" filename count 3 does not match metadata count 2",
        ),
        (
            req(&[("m-00001-of-00002.gguf", &b), ("m-00002-of-00002.gguf", &a)]),
            "split GGUF \"m-00001-of-00002.gguf\" filename index 0 does not match metadata index 1",
        ),
    ];
    for (r, want) in cases {
        let err = t.create(&r).unwrap_err();
        assert_eq!(
            (err.status().as_u16(), err.to_string().as_str()),
            (400, want)
        );
    }
    assert!(t.read("split").is_none());
}
