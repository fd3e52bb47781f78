//! MLX's floating-point block formats end to end on tiny random-weight checkpoints: a dense
//! checkpoint quantized by `runner-mlx quantize` into nvfp4 (with its per-tensor global
//! multiplier), mxfp4 and mxfp8 must compute the same logits as the same weights dequantized
//! by an independent pure-Rust decoder (tests/support/fp_ref.rs) and loaded dense, and the
//! same greedy tokens; the quantized checkpoint in Ollama's tensor-blob layout (one blob per
//! weight, `X.weight.scale` / `X.weight.global_scale`, `__metadata__` quant_type) computes the
//! very same logits from the metadata alone; a weight whose declared format disagrees with its
//! shapes, or whose format cannot be determined, is a load error naming it.

#[path = "support/fp_ref.rs"]
mod fp_ref;
#[path = "support/tiny_model.rs"]
mod tiny_model;

use fp_ref::{f32_bytes, f32s, Tensor};
use runner_mlx::quantize::Scheme;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use tiny_model::{ascii_tokenizer, file_tensors, weights, write_checkpoint, Cfg};

/// llama with an untied lm_head (`tied` false) or qwen3 with the embedding as the head; every
/// width a multiple of 32 so that each fp mode quantizes every projection.
fn cfg(tied: bool) -> Cfg {
    Cfg {
        qwen3: tied,
        gemma: None,
        hidden: 64,
        heads: 4,
        kv: 2,
        head_dim: 16,
        ff: 128,
        layers: 2,
        vocab: 128,
        theta: 10000.0,
        eps: 1e-5,
        quant: None,
    }
}

const PROMPT: [i32; 6] = [5, 77, 30, 12, 99, 1];

/// The format config.json's `quantization` gives `prefix` (override, else global).
fn mode_of(config: &Value, prefix: &str) -> String {
    let q = &config["quantization"];
    let o = if q[prefix].is_object() { &q[prefix] } else { q };
    o["mode"].as_str().unwrap_or("affine").to_owned()
}

/// `dir`'s quantized checkpoint with every quantized weight dequantized by the Rust decoder,
/// written dense (f32) into `out`. Returns the global multipliers it applied.
fn dequantized_copy(dir: &Path, out: &Path) -> Vec<f32> {
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (t, _) = fp_ref::read(&dir.join("model.safetensors"));
    let mut dense: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut globals = Vec::new();
    for (name, (dtype, shape, bytes)) in &t {
        let Some(prefix) = name.strip_suffix(".weight") else {
            continue;
        };
        let Some((_, _, scales)) = t.get(&format!("{prefix}.scales")) else {
            dense.insert(name.clone(), (dtype.clone(), shape.clone(), bytes.clone()));
            continue;
        };
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let global = t.get(&format!("{prefix}.global_scale")).map(|g| f32s(&g.2));
        globals.extend(global.iter().flatten());
        let mode = mode_of(&config, prefix);
        let v = fp_ref::dequantize(&mode, &words, shape[0], scales, global.as_deref());
        let cols = v.len() / shape[0];
        dense.insert(
            name.clone(),
            ("F32".into(), vec![shape[0], cols], f32_bytes(&v)),
        );
    }
    for (name, tensor) in &t {
        if !name.ends_with(".weight")
            && !name.ends_with(".scales")
            && !name.ends_with("global_scale")
        {
            dense.insert(name.clone(), tensor.clone());
        }
    }
    std::fs::create_dir_all(out).unwrap();
    fp_ref::write(&out.join("model.safetensors"), &dense, &BTreeMap::new());
    let mut plain = config.clone();
    plain.as_object_mut().unwrap().remove("quantization");
    plain.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(out.join("config.json"), plain.to_string()).unwrap();
    std::fs::copy(dir.join("tokenizer.json"), out.join("tokenizer.json")).unwrap();
    globals
}

/// `dir`'s quantized checkpoint in Ollama's store layout under `out`: one blob per tensor (a
/// quantized weight with `X.weight.scale` and `X.weight.global_scale`, `__metadata__`
/// quant_type / group_size from `quant_type`), config.json without `quantization`, so the
/// blobs' metadata is all that tells the formats. `quant_type` maps (prefix, true mode) to the
/// type the blob claims.
fn ollama_layout(dir: &Path, out: &Path, quant_type: &dyn Fn(&str, &str) -> Option<String>) {
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (t, _) = fp_ref::read(&dir.join("model.safetensors"));
    std::fs::create_dir_all(out.join("tensors")).unwrap();
    let mut n = 0;
    for (name, tensor) in &t {
        let prefix = name.strip_suffix(".weight");
        let companion = [".scales", ".global_scale"]
            .iter()
            .any(|s| name.ends_with(s));
        if companion {
            continue;
        }
        let mut blob = BTreeMap::from([(name.clone(), tensor.clone())]);
        let mut meta = BTreeMap::new();
        if let Some(s) = prefix.and_then(|p| t.get(&format!("{p}.scales"))) {
            let p = prefix.unwrap();
            blob.insert(format!("{name}.scale"), s.clone());
            if let Some(g) = t.get(&format!("{p}.global_scale")) {
                blob.insert(format!("{name}.global_scale"), g.clone());
            }
            if let Some(q) = quant_type(p, &mode_of(&config, p)) {
                meta.insert("quant_type".to_owned(), q);
            }
        }
        fp_ref::write(
            &out.join(format!("tensors/{n:05}.safetensors")),
            &blob,
            &meta,
        );
        n += 1;
    }
    let mut plain = config.clone();
    plain.as_object_mut().unwrap().remove("quantization");
    plain.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(out.join("config.json"), plain.to_string()).unwrap();
    std::fs::copy(dir.join("tokenizer.json"), out.join("tokenizer.json")).unwrap();
}

fn logits(dir: &Path, tokens: &[i32]) -> Vec<f32> {
    let mut m = runner_mlx::load(dir, runner_mlx::Compute::F32).unwrap();
    let mut c = m.model.new_cache();
    m.model.forward(&mut [(&mut c, tokens)]).unwrap()
}

/// Up to `n` greedy tokens after `prompt`, through the cache.
fn greedy(dir: &Path, prompt: &[i32], n: usize) -> Vec<i32> {
    let mut m = runner_mlx::load(dir, runner_mlx::Compute::F32).unwrap();
    let mut c = m.model.new_cache();
    let mut l = m.model.forward(&mut [(&mut c, prompt)]).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let next = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as i32;
        out.push(next);
        l = m.model.forward(&mut [(&mut c, &[next])]).unwrap();
    }
    out
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn check_mode(mode: &str, tied: bool) {
    let root = tempfile::tempdir().unwrap();
    let (src, q, deq, blobs) = (
        root.path().join("src"),
        root.path().join("q"),
        root.path().join("deq"),
        root.path().join("blobs"),
    );
    std::fs::create_dir(&src).unwrap();
    let c = cfg(tied);
    let mut t = weights(&c);
    write_checkpoint(&src, &c, &file_tensors(&c, &mut t), &ascii_tokenizer());
    runner_mlx::quantize::run(&src, &q, Scheme::new(mode, None, None).unwrap()).unwrap();

    // Every projection and the embedding are quantized (MLX's names) in the declared modes.
    let (qt, _) = fp_ref::read(&q.join("model.safetensors"));
    let n_quant = qt.keys().filter(|k| k.ends_with(".scales")).count();
    assert_eq!(n_quant, 2 * 7 + 1 + usize::from(!tied), "{mode}");
    let ck = runner_mlx::checkpoint::Checkpoint::open(&q).unwrap();
    let modes: Vec<(&str, &str)> = ck
        .quants
        .iter()
        .map(|f| (f.prefix.as_str(), f.mode.name()))
        .collect();
    assert!(
        modes.contains(&("model.layers.1.mlp.down_proj", mode)),
        "{modes:?}"
    );
    assert!(
        modes.contains(&("model.embed_tokens", "mxfp8")),
        "{modes:?}"
    );

    let globals = dequantized_copy(&q, &deq);
    if mode == "nvfp4" {
        // One global multiplier per nvfp4 weight, far from 1: ignoring it would be wrong by
        // orders of magnitude.
        assert_eq!(globals.len(), 2 * 7, "{globals:?}");
        assert!(globals.iter().all(|&g| g > 0.0 && g < 1e-2), "{globals:?}");
    } else {
        assert!(globals.is_empty());
    }

    let want = logits(&deq, &PROMPT);
    let got = logits(&q, &PROMPT);
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f32::max);
    let d = max_diff(&got, &want);
    eprintln!("{mode} tied={tied}: logits max diff {d:e} (scale {scale})");
    assert!(scale > 0.5, "trivial logits ({scale})");
    assert!(
        d < 1e-4 * scale,
        "{mode}: logits differ by {d} (scale {scale})"
    );
    // Quantization changed the model (the comparison is not dense against dense).
    let orig = logits(&src, &PROMPT);
    assert!(
        max_diff(&orig, &want) > 1e-3 * scale,
        "{mode} changed nothing"
    );
    assert_eq!(greedy(&q, &PROMPT, 8), greedy(&deq, &PROMPT, 8), "{mode}");

    // Ollama's layout: the blobs' metadata alone gives the formats; the same logits.
    ollama_layout(&q, &blobs, &|_, m| Some(m.to_owned()));
    let d = max_diff(&logits(&blobs, &PROMPT), &got);
    assert!(d <= 1e-6 * scale, "{mode}: Ollama's layout differs by {d}");
}

#[test]
fn nvfp4_matches_its_dequantized_weights() {
    check_mode("nvfp4", false);
    check_mode("nvfp4", true);
}

#[test]
fn mxfp4_matches_its_dequantized_weights() {
    check_mode("mxfp4", false);
    check_mode("mxfp4", true);
}

#[test]
fn mxfp8_matches_its_dequantized_weights() {
    check_mode("mxfp8", true);
    check_mode("mxfp8", false);
}

#[test]
fn misdeclared_or_undeclared_formats_are_load_errors_naming_the_tensor() {
    let root = tempfile::tempdir().unwrap();
    let (src, q) = (root.path().join("src"), root.path().join("q"));
    std::fs::create_dir(&src).unwrap();
    let c = cfg(false);
    let mut t = weights(&c);
    write_checkpoint(&src, &c, &file_tensors(&c, &mut t), &ascii_tokenizer());
    runner_mlx::quantize::run(&src, &q, Scheme::new("nvfp4", None, None).unwrap()).unwrap();
    let err = |claim: &dyn Fn(&str, &str) -> Option<String>| {
        let d = tempfile::tempdir().unwrap();
        ollama_layout(&q, d.path(), claim);
        match runner_mlx::load(d.path(), runner_mlx::Compute::F32) {
            Ok(_) => panic!("loaded"),
            Err(e) => e,
        }
    };
    let target = "model.layers.0.self_attn.q_proj";
    // nvfp4 data claimed as mxfp4: mxfp4 has no global multiplier.
    let e = err(&|p, m| {
        Some(if p == target {
            "mxfp4".into()
        } else {
            m.into()
        })
    });
    assert!(e.contains(target) && e.contains("no global scale"), "{e}");
    // 8-bit mxfp8 data claimed as 4-bit mxfp4: twice the values per word, not one scale per
    // group of 32 any more.
    let emb = "model.embed_tokens";
    let e = err(&|p, m| Some(if p == emb { "mxfp4".into() } else { m.into() }));
    assert!(e.contains(emb) && e.contains("groups of 32"), "{e}");
    // ... as int4: affine needs float scales.
    let e = err(&|p, m| Some(if p == target { "int4".into() } else { m.into() }));
    assert!(e.contains(target) && e.contains("affine scales"), "{e}");
    // mxfp8 data claimed as nvfp4: a global scale would be fine, but 8-bit words are not.
    let e = err(&|_, m| {
        Some(if m == "mxfp8" {
            "nvfp4".into()
        } else {
            m.into()
        })
    });
    assert!(e.contains("words per row hold 128 values"), "{e}");
    // No metadata and no config: U8 scales cannot tell nvfp4 from mxfp4.
    let e = err(&|p, m| (p != target).then(|| m.into()));
    assert!(e.contains(target) && e.contains("cannot determine"), "{e}");
    // An unknown type.
    let e = err(&|p, m| Some(if p == target { "fp4".into() } else { m.into() }));
    assert!(
        e.contains(target) && e.contains("unknown quant_type"),
        "{e}"
    );
}
