//! `herd create --experimental -q int4|int8|nvfp4|mxfp8`: the float checkpoint is quantized by
//! the real `runner-mlx quantize` (MLX's affine quantization, group 64, or its fp block
//! formats) and stored in Ollama's packed layout. Checked by decoding a stored 4-bit weight
//! against the source (every element within one quantization step), by the refusals (a
//! quantized source, a quantizer that cannot run: nothing stored, no work directory left), and
//! end to end through the real `herd serve` and runner-mlx: SmolLM2 (dequantized to bf16 here)
//! created as nvfp4 and mxfp8 stores Ollama's blobs (metadata, U8 scales, nvfp4's F32 global
//! multiplier), `/api/show` names the level, `/api/generate` answers as the bf16 model does,
//! and a stored blob whose nvfp4 scales have the wrong shape is a load error naming the tensor.
//! Needs `cargo build -p runner-mlx` and scripts/make-mlx-test-model's checkpoint.

#[path = "mlx_quantize/fp.rs"]
mod fp;
mod herd_proc;
mod mlx_support;

use serde_json::{json, Value};
use server::create::{create_model_with, CreateRequest, QuantizeOptions};
use server::store::{ModelName, Store};

use mlx_support::*;

fn runner_mlx() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("HERD_MLX_RUNNER") {
        return std::path::PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("runner-mlx");
    assert!(
        p.exists(),
        "{} not found: run `cargo build -p runner-mlx --bin runner-mlx`",
        p.display()
    );
    p
}

fn opts(mlx_runner: std::path::PathBuf) -> QuantizeOptions {
    QuantizeOptions {
        mlx_runner,
        threads: 1,
        ..Default::default()
    }
}

fn req(name: &str, files: std::collections::BTreeMap<String, String>, q: &str) -> CreateRequest {
    CreateRequest {
        model: name.into(),
        files: Some(files),
        experimental: true,
        quantize: q.into(),
        ..Default::default()
    }
}

fn bf16(b: &[u8]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
}

#[test]
fn int4_quantizes_through_mlx_and_decodes_back_to_the_source() {
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path().join("models")).unwrap();
    let files = upload_dir(&store, src.path());
    let mut seen = Vec::new();
    create_model_with(
        &store,
        &req("tiny-q4", files, "q4"),
        &opts(runner_mlx()),
        &mut |p| seen.push(p.status),
    )
    .unwrap();
    assert!(
        seen.contains(&"quantizing model to int4".to_owned()),
        "{seen:?}"
    );
    let m = store
        .read(&ModelName::parse("tiny-q4").unwrap())
        .unwrap()
        .unwrap()
        .manifest;
    let config: Value =
        serde_json::from_slice(&std::fs::read(store.blobs().path(&m.config.digest)).unwrap())
            .unwrap();
    assert_eq!(config["file_type"], "int4");
    let layer = |n: &str| {
        m.layers
            .iter()
            .find(|l| l.name.as_deref() == Some(n))
            .unwrap_or_else(|| panic!("{n}"))
    };

    // The embedding stays 8-bit (Ollama's policy), projections are 4-bit, norms are not touched.
    let (h, _) = blob_header(
        &store
            .blobs()
            .path(&layer("model.embed_tokens.weight").digest),
    );
    assert_eq!(
        h["__metadata__"],
        json!({"quant_type": "int8", "group_size": "64"})
    );
    let (h, _) = blob_header(&store.blobs().path(&layer("model.norm.weight").digest));
    assert_eq!(h["model.norm.weight"]["dtype"], "BF16");

    let name = "model.layers.0.self_attn.q_proj.weight";
    let path = store.blobs().path(&layer(name).digest);
    let (h, data) = blob_header(&path);
    assert_eq!(
        h["__metadata__"],
        json!({"quant_type": "int4", "group_size": "64"})
    );
    assert_eq!(h[name]["shape"], json!([HIDDEN, HIDDEN / 8]));
    let bytes = std::fs::read(&path).unwrap();
    let at = |k: &str| data + h[k]["data_offsets"][0].as_u64().unwrap() as usize;
    let (w, s, b) = (
        at(name),
        at(&format!("{name}.scale")),
        at(&format!("{name}.bias")),
    );
    let source = tiny_llama_tensors()
        .into_iter()
        .find(|t| t.0 == name)
        .unwrap()
        .3;
    let (rows, cols) = (HIDDEN as usize, HIDDEN as usize);
    let mut worst = 0f32;
    for r in 0..rows {
        // One group of 64 per row.
        let scale = bf16(&bytes[s + r * 2..]);
        let bias = bf16(&bytes[b + r * 2..]);
        for c in 0..cols {
            let word =
                u32::from_le_bytes(bytes[w + (r * cols + c) / 8 * 4..][..4].try_into().unwrap());
            let q = (word >> ((c % 8) * 4)) & 0xF;
            let got = scale * q as f32 + bias;
            let want = bf16(&source[(r * cols + c) * 2..]);
            let err = (got - want).abs() / scale.abs().max(1e-6);
            worst = worst.max(err);
        }
    }
    // Round-to-nearest is half a step; MLX also keeps zero exactly representable (moving the
    // grid by up to half a step) and stores scale/bias in bf16. A wrong nibble order or group
    // would be off by several steps.
    assert!(worst <= 1.0, "worst error {worst} quantization steps");

    // The parameter count is the float model's.
    let params: u64 = tiny_llama_tensors()
        .iter()
        .map(|t| t.2.iter().product::<u64>())
        .sum();
    let view = server::api::show::ModelView::load(
        &store,
        &store
            .read(&ModelName::parse("tiny-q4").unwrap())
            .unwrap()
            .unwrap(),
        server::prompt::prefer::GoTemplate::Auto,
    )
    .unwrap();
    let d = server::mlx::view::details(&view).unwrap();
    assert_eq!(
        (d.parameter_size, d.quantization_level.as_str()),
        (server::gguf::human_number(params), "int4")
    );
    // No work directory is left beside the blobs.
    let left: Vec<_> = std::fs::read_dir(t.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter()
            .all(|n| !n.to_string_lossy().starts_with(".herd-mlx-quantize")),
        "{left:?}"
    );
}

#[test]
fn quantize_refusals_store_nothing() {
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path().join("models")).unwrap();
    let files = upload_dir(&store, src.path());
    let before = blob_names(&store);
    let e = create_model_with(
        &store,
        &req("x", files, "int8"),
        &opts(t.path().join("no-runner-mlx")),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("no-runner-mlx"), "{e}");
    assert_eq!(blob_names(&store), before);
    assert!(store
        .read(&ModelName::parse("x").unwrap())
        .unwrap()
        .is_none());

    let smol = upload_dir(&store, &smollm2_mlx());
    let before = blob_names(&store);
    let e = create_model_with(
        &store,
        &req("y", smol, "int4"),
        &opts(runner_mlx()),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, server::error::Error::BadRequest(_)), "{e:?}");
    assert!(e.to_string().contains("already quantized (int4)"), "{e}");
    assert_eq!(blob_names(&store), before);
    let left: Vec<_> = std::fs::read_dir(t.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter()
            .all(|n| !n.to_string_lossy().starts_with(".herd-mlx-quantize")),
        "{left:?}"
    );
}
