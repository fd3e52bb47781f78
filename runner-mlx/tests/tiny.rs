//! Architecture coverage on tiny random-weight Hugging Face checkpoints generated here
//! (config.json, model.safetensors in HF names, the SmolLM2 tokenizer.json): llama with an untied lm_head
//! and qwen3 (per-head Q/K norms, head_dim ≠ hidden/heads, tied embeddings). runner-mlx's logits
//! must match an independent f64 reference of the same forward pass written below (HF layout,
//! non-traditional RoPE), through a prefill, a decode step with the cache, and a two-sequence
//! step.

mod support;

use serde_json::{json, Value};
use std::path::Path;

struct Cfg {
    qwen3: bool,
    hidden: usize,
    heads: usize,
    kv: usize,
    head_dim: usize,
    ff: usize,
    layers: usize,
    vocab: usize,
    theta: f64,
    eps: f64,
    /// MLX affine quantization (bits, group) of the embedding and every projection.
    quant: Option<(u32, usize)>,
}

/// The reference's view: every tensor dense (quantized ones as their dequantized values).
type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;
/// The file's view: (name, safetensors dtype, shape, little-endian bytes).
type FileTensors = Vec<(String, &'static str, Vec<usize>, Vec<u8>)>;

/// MLX's affine quantization of a [rows, cols] matrix: per `group` values along a row,
/// w ≈ scale · q + bias with q in [0, 2^bits), q packed into u32 words from the low bits up.
/// Returns (packed words, scales, biases, the dequantized matrix).
fn quantize(
    v: &[f32],
    cols: usize,
    bits: u32,
    group: usize,
) -> (Vec<u32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let levels = ((1u32 << bits) - 1) as f32;
    let (mut packed, mut scales, mut biases, mut deq) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let per_word = (32 / bits) as usize;
    for row in v.chunks(cols) {
        let mut qs = Vec::with_capacity(cols);
        for g in row.chunks(group) {
            let (lo, hi) = g
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            let scale = ((hi - lo) / levels).max(1e-8);
            scales.push(scale);
            biases.push(lo);
            for &x in g {
                let q = ((x - lo) / scale).round().clamp(0.0, levels) as u32;
                qs.push(q);
                deq.push(scale * q as f32 + lo);
            }
        }
        for w in qs.chunks(per_word) {
            packed.push(
                w.iter()
                    .enumerate()
                    .fold(0u32, |acc, (j, &q)| acc | (q << (bits as usize * j))),
            );
        }
    }
    (packed, scales, biases, deq)
}

/// Both views of the weights: quantized tensors go to the file packed, to the reference dense.
fn file_tensors(c: &Cfg, dense: &mut Tensors) -> FileTensors {
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut out = FileTensors::new();
    for (name, shape, v) in dense.iter_mut() {
        let quantized = name.ends_with("_proj.weight")
            || name == "lm_head.weight"
            || name == "model.embed_tokens.weight";
        match c.quant {
            Some((bits, group)) if quantized => {
                let (rows, cols) = (shape[0], shape[1]);
                let (p, sc, bi, deq) = quantize(v, cols, bits, group);
                let base = name.trim_end_matches(".weight");
                let words = cols * bits as usize / 32;
                let bytes = p.iter().flat_map(|x| x.to_le_bytes()).collect();
                out.push((name.clone(), "U32", vec![rows, words], bytes));
                out.push((
                    format!("{base}.scales"),
                    "F32",
                    vec![rows, cols / group],
                    f32s(&sc),
                ));
                out.push((
                    format!("{base}.biases"),
                    "F32",
                    vec![rows, cols / group],
                    f32s(&bi),
                ));
                *v = deq;
            }
            _ => out.push((name.clone(), "F32", shape.clone(), f32s(v))),
        }
    }
    out
}

/// Deterministic uniform values in [-scale, scale] (an LCG: the test needs no RNG crate).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn weights(c: &Cfg) -> Tensors {
    let mut t: Tensors = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let v = values(n, t.len() as u64 + 7, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        t.push((name, shape, v));
    };
    let (h, q, kvd) = (c.hidden, c.heads * c.head_dim, c.kv * c.head_dim);
    add(
        "model.embed_tokens.weight".into(),
        vec![c.vocab, h],
        1.0,
        0.0,
    );
    for i in 0..c.layers {
        let p = format!("model.layers.{i}");
        add(format!("{p}.input_layernorm.weight"), vec![h], 0.2, 1.0);
        add(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            0.2,
            1.0,
        );
        add(format!("{p}.self_attn.q_proj.weight"), vec![q, h], 0.3, 0.0);
        add(
            format!("{p}.self_attn.k_proj.weight"),
            vec![kvd, h],
            0.3,
            0.0,
        );
        add(
            format!("{p}.self_attn.v_proj.weight"),
            vec![kvd, h],
            0.3,
            0.0,
        );
        add(format!("{p}.self_attn.o_proj.weight"), vec![h, q], 0.2, 0.0);
        if c.qwen3 {
            add(
                format!("{p}.self_attn.q_norm.weight"),
                vec![c.head_dim],
                0.3,
                1.0,
            );
            add(
                format!("{p}.self_attn.k_norm.weight"),
                vec![c.head_dim],
                0.3,
                1.0,
            );
        }
        add(format!("{p}.mlp.gate_proj.weight"), vec![c.ff, h], 0.2, 0.0);
        add(format!("{p}.mlp.up_proj.weight"), vec![c.ff, h], 0.2, 0.0);
        add(format!("{p}.mlp.down_proj.weight"), vec![h, c.ff], 0.2, 0.0);
    }
    add("model.norm.weight".into(), vec![h], 0.2, 1.0);
    if !c.qwen3 {
        add("lm_head.weight".into(), vec![c.vocab, h], 0.5, 0.0);
    }
    t
}

fn write_checkpoint(dir: &Path, c: &Cfg, t: &FileTensors) {
    let mut header = serde_json::Map::new();
    let mut data: Vec<u8> = Vec::new();
    for (name, dtype, shape, bytes) in t {
        let start = data.len();
        data.extend(bytes);
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let h = Value::Object(header).to_string().into_bytes();
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(data);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let mut config = json!({
        "model_type": if c.qwen3 { "qwen3" } else { "llama" },
        "hidden_size": c.hidden, "num_attention_heads": c.heads, "num_key_value_heads": c.kv,
        "head_dim": c.head_dim, "intermediate_size": c.ff, "num_hidden_layers": c.layers,
        "vocab_size": c.vocab, "rope_theta": c.theta, "rms_norm_eps": c.eps,
        "tie_word_embeddings": c.qwen3, "eos_token_id": 2, "max_position_embeddings": 256,
    });
    if let Some((bits, group)) = c.quant {
        // As mlx-lm writes it.
        config["quantization"] = json!({"group_size": group, "bits": bits});
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        support::model_dir().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
}

/// The reference forward pass in f64: the last token's logits of `tokens`.
fn reference(c: &Cfg, t: &Tensors, tokens: &[i32]) -> Vec<f64> {
    let w = |name: &str| -> &Vec<f32> { &t.iter().find(|x| x.0 == name).unwrap().2 };
    let matvec = |m: &[f32], x: &[f64], rows: usize| -> Vec<f64> {
        let cols = x.len();
        (0..rows)
            .map(|r| (0..cols).map(|k| m[r * cols + k] as f64 * x[k]).sum())
            .collect()
    };
    let rms = |x: &[f64], g: &[f32]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let inv = 1.0 / (ms + c.eps).sqrt();
        x.iter().zip(g).map(|(v, &g)| v * inv * g as f64).collect()
    };
    let d = c.head_dim;
    // HF rotate_half RoPE on one head at `pos`.
    let rope = |x: &mut [f64], pos: usize| {
        for j in 0..d / 2 {
            let a = pos as f64 * c.theta.powf(-((2 * j) as f64) / d as f64);
            let (x0, x1) = (x[j], x[j + d / 2]);
            x[j] = x0 * a.cos() - x1 * a.sin();
            x[j + d / 2] = x1 * a.cos() + x0 * a.sin();
        }
    };
    let emb = w("model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&tk| {
            let r = tk as usize * c.hidden;
            emb[r..r + c.hidden].iter().map(|&v| v as f64).collect()
        })
        .collect();
    for l in 0..c.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (pos, x) in xs.iter().enumerate() {
            let h = rms(x, w(&p("input_layernorm.weight")));
            let mut q = matvec(w(&p("self_attn.q_proj.weight")), &h, c.heads * d);
            let mut k = matvec(w(&p("self_attn.k_proj.weight")), &h, c.kv * d);
            for (v, n, norm) in [(&mut q, c.heads, "q_norm"), (&mut k, c.kv, "k_norm")] {
                for hd in 0..n {
                    let head = &mut v[hd * d..(hd + 1) * d];
                    if c.qwen3 {
                        let normed = rms(head, w(&p(&format!("self_attn.{norm}.weight"))));
                        head.copy_from_slice(&normed);
                    }
                    rope(head, pos);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(matvec(w(&p("self_attn.v_proj.weight")), &h, c.kv * d));
        }
        for i in 0..xs.len() {
            let mut attn = vec![0.0; c.heads * d];
            for hd in 0..c.heads {
                let g = hd / (c.heads / c.kv);
                let q = &qs[i][hd * d..(hd + 1) * d];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &ks[j][g * d..(g + 1) * d];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for k in 0..d {
                        attn[hd * d + k] += ej / z * vs[j][g * d + k];
                    }
                }
            }
            let o = matvec(w(&p("self_attn.o_proj.weight")), &attn, c.hidden);
            let x = &mut xs[i];
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rms(x, w(&p("post_attention_layernorm.weight")));
            let g = matvec(w(&p("mlp.gate_proj.weight")), &h, c.ff);
            let u = matvec(w(&p("mlp.up_proj.weight")), &h, c.ff);
            let act: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = matvec(w(&p("mlp.down_proj.weight")), &act, c.hidden);
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
    }
    let last = rms(xs.last().unwrap(), w("model.norm.weight"));
    let head = if c.qwen3 {
        w("model.embed_tokens.weight")
    } else {
        w("lm_head.weight")
    };
    matvec(head, &last, c.vocab)
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, f64::max)
}

fn check(c: Cfg) {
    let dir = tempfile::tempdir().unwrap();
    let mut t = weights(&c);
    let file = file_tensors(&c, &mut t);
    write_checkpoint(dir.path(), &c, &file);
    let mut m = runner_mlx::load(dir.path()).expect("the tiny checkpoint loads");
    let prompt = [5, 77, 300, 12, 499, 1];
    let other = [9, 8, 7];
    let want = reference(&c, &t, &prompt);
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(
        scale > 0.5,
        "the reference logits are not trivial ({scale})"
    );
    let tol = 1e-4 * scale.max(1.0);

    // Prefill of five tokens, then a decode step through the cache.
    let mut a = m.model.new_cache();
    m.model.forward(&mut [(&mut a, &prompt[..5])]).unwrap();
    let step = m.model.forward(&mut [(&mut a, &prompt[5..])]).unwrap();
    let d = max_diff(&step, &want);
    assert!(d < tol, "prefill+decode differs from the reference by {d}");

    // The whole prompt beside another sequence in one step: each gets its own logits.
    let (mut b, mut o) = (m.model.new_cache(), m.model.new_cache());
    let both = m
        .model
        .forward(&mut [(&mut b, &prompt[..]), (&mut o, &other[..])])
        .unwrap();
    let d = max_diff(&both[..c.vocab], &want);
    assert!(
        d < tol,
        "the batched step differs from the reference by {d}"
    );
    let d = max_diff(&both[c.vocab..], &reference(&c, &t, &other));
    assert!(
        d < tol,
        "the second sequence differs from the reference by {d}"
    );
    assert_eq!((a.len(), b.len(), o.len()), (6, 6, 3));

    // Prefix reuse: cut back to four positions and continue as if from there.
    b.truncate(4);
    let again = m.model.forward(&mut [(&mut b, &prompt[4..])]).unwrap();
    let d = max_diff(&again, &want);
    assert!(d < tol, "after truncation the cache differs by {d}");
}

#[test]
fn a_tiny_llama_with_an_untied_head_matches_the_reference() {
    check(Cfg {
        qwen3: false,
        hidden: 64,
        heads: 4,
        kv: 2,
        head_dim: 16,
        ff: 96,
        layers: 2,
        vocab: 512,
        theta: 10000.0,
        eps: 1e-5,
        quant: None,
    });
}

#[test]
fn a_tiny_qwen3_with_qk_norms_matches_the_reference() {
    check(Cfg {
        qwen3: true,
        hidden: 64,
        heads: 4,
        kv: 2,
        head_dim: 32,
        ff: 96,
        layers: 2,
        vocab: 512,
        theta: 1_000_000.0,
        eps: 1e-6,
        quant: None,
    });
}

#[test]
fn tiny_mlx_affine_quantized_checkpoints_match_the_reference() {
    // llama at 4 bits, group 32 (untied head); qwen3 at 8 bits, group 64 (quantized tied
    // embedding as the head).
    for (qwen3, quant, head_dim) in [(false, (4, 32), 16), (true, (8, 64), 32)] {
        check(Cfg {
            qwen3,
            hidden: 64,
            heads: 4,
            kv: 2,
            head_dim,
            ff: 128,
            layers: 2,
            vocab: 512,
            theta: 10000.0,
            eps: 1e-5,
            quant: Some(quant),
        });
    }
}
