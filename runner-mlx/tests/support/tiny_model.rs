//! Tiny random-weight Hugging Face checkpoints (llama, qwen3, gemma3 text; f32 or MLX affine
//! quantized) written by the tests, and an independent f64 reference of their forward pass
//! (HF layout, non-traditional RoPE) to check runner-mlx against. Shared by runner-mlx's
//! tests/tiny.rs and the server's tests/mlx_e2e.rs (by path), so it needs only serde_json.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::Path;

/// gemma3 text's extras over llama.
#[derive(Clone, Copy)]
pub struct Gemma {
    /// Sliding window (positions a query sees, itself included).
    pub window: usize,
    /// Layer i is global when (i + 1) % global_every == 0.
    pub global_every: usize,
    pub local_theta: f64,
    /// Linear rope_scaling factor of the global layers (1: none).
    pub rope_factor: f64,
    pub query_pre_attn_scalar: f64,
    pub attn_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
}

#[derive(Clone, Copy)]
pub struct Cfg {
    pub qwen3: bool,
    pub gemma: Option<Gemma>,
    pub hidden: usize,
    pub heads: usize,
    pub kv: usize,
    pub head_dim: usize,
    pub ff: usize,
    pub layers: usize,
    pub vocab: usize,
    pub theta: f64,
    pub eps: f64,
    /// MLX affine quantization (bits, group) of the embedding and every projection.
    pub quant: Option<(u32, usize)>,
}

impl Cfg {
    fn tied(&self) -> bool {
        self.qwen3 || self.gemma.is_some()
    }
    fn qk_norm(&self) -> bool {
        self.qwen3 || self.gemma.is_some()
    }
}

/// The reference's view: every tensor dense (quantized ones as their dequantized values).
pub type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;
/// The file's view: (name, safetensors dtype, shape, little-endian bytes).
pub type FileTensors = Vec<(String, &'static str, Vec<usize>, Vec<u8>)>;

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
pub fn file_tensors(c: &Cfg, dense: &mut Tensors) -> FileTensors {
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

/// `x` rounded to the nearest f16 value (|x| in f16's normal range, else 0), so that a GGUF
/// conversion to F16 weights is lossless.
fn f16_grid(x: f32) -> f32 {
    if x.abs() < 6.2e-5 {
        return 0.0;
    }
    let step = 2f32.powi(x.abs().log2().floor() as i32 - 10);
    (x / step).round() * step
}

/// Deterministic uniform values in [-scale, scale] on the f16 grid (an LCG: the test needs no
/// RNG crate).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f16_grid(((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
        })
        .collect()
}

pub fn weights(c: &Cfg) -> Tensors {
    let mut t: Tensors = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let v = values(n, t.len() as u64 + 7, scale)
            .into_iter()
            .map(|x| f16_grid(x + offset))
            .collect();
        t.push((name, shape, v));
    };
    let (h, q, kvd) = (c.hidden, c.heads * c.head_dim, c.kv * c.head_dim);
    // gemma3 stores w of a (1 + w) norm scale: centre its norms on 0, the others on 1.
    let norm = if c.gemma.is_some() { 0.0 } else { 1.0 };
    // gemma3 multiplies the embedding by sqrt(hidden): smaller rows keep the current token's
    // own row from deciding every next token (tied head).
    let emb = if c.gemma.is_some() { 0.25 } else { 1.0 };
    add(
        "model.embed_tokens.weight".into(),
        vec![c.vocab, h],
        emb,
        0.0,
    );
    for i in 0..c.layers {
        let p = format!("model.layers.{i}");
        add(format!("{p}.input_layernorm.weight"), vec![h], 0.2, norm);
        // gemma3's post-attention norm scales the attention's output up to (1 + 2): the
        // layers, not the scaled embedding, then decide the next token.
        let post = if c.gemma.is_some() { 2.0 } else { norm };
        add(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            0.2,
            post,
        );
        if c.gemma.is_some() {
            add(
                format!("{p}.pre_feedforward_layernorm.weight"),
                vec![h],
                0.2,
                norm,
            );
            add(
                format!("{p}.post_feedforward_layernorm.weight"),
                vec![h],
                0.2,
                2.0,
            );
        }
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
        if c.qk_norm() {
            for n in ["q_norm", "k_norm"] {
                add(
                    format!("{p}.self_attn.{n}.weight"),
                    vec![c.head_dim],
                    0.3,
                    norm,
                );
            }
        }
        add(format!("{p}.mlp.gate_proj.weight"), vec![c.ff, h], 0.2, 0.0);
        add(format!("{p}.mlp.up_proj.weight"), vec![c.ff, h], 0.2, 0.0);
        add(format!("{p}.mlp.down_proj.weight"), vec![h, c.ff], 0.2, 0.0);
    }
    add("model.norm.weight".into(), vec![h], 0.2, norm);
    if !c.tied() {
        add("lm_head.weight".into(), vec![c.vocab, h], 0.5, 0.0);
    }
    t
}

/// The ids of [`ascii_tokenizer`]'s control tokens.
pub const ASCII_BOS: usize = 96;
pub const ASCII_EOS: usize = 97;
/// Its one merged token, `~~`.
pub const ASCII_TILDES: usize = 98;
/// Its vocabulary size (the checkpoint's vocab_size must be at least this).
pub const ASCII_VOCAB: usize = 99;

/// A byte-level BPE tokenizer.json over printable ASCII and newline: id i < 95 is the byte
/// 0x20 + i, 95 is `\n`, then `<bos>` and `<eos>` (control), and one merge, `~~` (llama.cpp
/// needs merges). A text of those bytes without `~~` tokenizes to one token per byte.
pub fn ascii_tokenizer() -> Value {
    let mut vocab = serde_json::Map::new();
    for i in 0..95u32 {
        vocab.insert(byte_char(0x20 + i as u8).to_string(), json!(i));
    }
    vocab.insert(byte_char(b'\n').to_string(), json!(95));
    let special = |id: usize, s: &str| {
        json!({"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true})
    };
    vocab.insert("<bos>".into(), json!(ASCII_BOS));
    vocab.insert("<eos>".into(), json!(ASCII_EOS));
    vocab.insert("~~".into(), json!(ASCII_TILDES));
    let level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    json!({"version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(ASCII_BOS, "<bos>"), special(ASCII_EOS, "<eos>")],
        "normalizer": null, "pre_tokenizer": level, "post_processor": null, "decoder": level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": ["~ ~"]}})
}

/// GPT-2's byte-level character for a byte (printable ASCII but the space map to themselves).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// The text of an [`ascii_tokenizer`] token id (None for the control tokens).
pub fn ascii_piece(id: usize) -> Option<String> {
    match id {
        0..=94 => Some(char::from(0x20 + id as u8).to_string()),
        95 => Some("\n".into()),
        ASCII_TILDES => Some("~~".into()),
        _ => None,
    }
}

/// The token ids of an ASCII text under [`ascii_tokenizer`].
pub fn ascii_ids(text: &str) -> Vec<i32> {
    text.bytes()
        .map(|b| match b {
            b'\n' => 95,
            0x20..=0x7E => (b - 0x20) as i32,
            _ => panic!("{b:#x} is not in the ASCII tokenizer"),
        })
        .collect()
}

/// Writes config.json, model.safetensors and `tokenizer` as tokenizer.json into `dir`.
pub fn write_checkpoint(dir: &Path, c: &Cfg, t: &FileTensors, tokenizer: &Value) {
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
    let model_type = match (c.qwen3, c.gemma.is_some()) {
        (_, true) => "gemma3_text",
        (true, _) => "qwen3",
        _ => "llama",
    };
    let mut config = json!({
        "model_type": model_type,
        "hidden_size": c.hidden, "num_attention_heads": c.heads, "num_key_value_heads": c.kv,
        "head_dim": c.head_dim, "intermediate_size": c.ff, "num_hidden_layers": c.layers,
        "vocab_size": c.vocab, "rope_theta": c.theta, "rms_norm_eps": c.eps,
        "tie_word_embeddings": c.tied(), "eos_token_id": 2, "max_position_embeddings": 256,
    });
    if let Some(g) = c.gemma {
        config["architectures"] = json!(["Gemma3ForCausalLM"]);
        config["eos_token_id"] = json!(ASCII_EOS);
        config["sliding_window"] = json!(g.window);
        // HF's current form (the shim's period is derived from it).
        let types: Vec<&str> = (0..c.layers)
            .map(|i| {
                if (i + 1) % g.global_every == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        config["layer_types"] = json!(types);
        config["rope_local_base_freq"] = json!(g.local_theta);
        config["query_pre_attn_scalar"] = json!(g.query_pre_attn_scalar);
        config["hidden_activation"] = json!("gelu_pytorch_tanh");
        config["attn_logit_softcapping"] = json!(g.attn_softcap);
        config["final_logit_softcapping"] = json!(g.final_softcap);
        if g.rope_factor != 1.0 {
            config["rope_scaling"] = json!({"rope_type": "linear", "factor": g.rope_factor});
        }
    }
    if let Some((bits, group)) = c.quant {
        // As mlx-lm writes it.
        config["quantization"] = json!({"group_size": group, "bits": bits});
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
}

/// The reference forward pass in f64: the last token's logits of `tokens`.
pub fn reference(c: &Cfg, t: &Tensors, tokens: &[i32]) -> Vec<f64> {
    let w = |name: &str| -> &Vec<f32> { &t.iter().find(|x| x.0 == name).unwrap().2 };
    let matvec = |m: &[f32], x: &[f64], rows: usize| -> Vec<f64> {
        let cols = x.len();
        (0..rows)
            .map(|r| (0..cols).map(|k| m[r * cols + k] as f64 * x[k]).sum())
            .collect()
    };
    // gemma3's norms scale by (1 + w).
    let shift = if c.gemma.is_some() { 1.0 } else { 0.0 };
    let rms = |x: &[f64], g: &[f32]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let inv = 1.0 / (ms + c.eps).sqrt();
        x.iter()
            .zip(g)
            .map(|(v, &g)| v * inv * (g as f64 + shift))
            .collect()
    };
    let d = c.head_dim;
    // HF rotate_half RoPE on one head at `pos` (positions divided by `factor`).
    let rope = |x: &mut [f64], pos: usize, theta: f64, factor: f64| {
        for j in 0..d / 2 {
            let a = pos as f64 / factor * theta.powf(-((2 * j) as f64) / d as f64);
            let (x0, x1) = (x[j], x[j + d / 2]);
            x[j] = x0 * a.cos() - x1 * a.sin();
            x[j + d / 2] = x1 * a.cos() + x0 * a.sin();
        }
    };
    let cap = |x: f64, c: Option<f64>| c.map_or(x, |c| c * (x / c).tanh());
    let gelu_tanh = |x: f64| {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    };
    let emb = w("model.embed_tokens.weight");
    let emb_scale = if c.gemma.is_some() {
        (c.hidden as f64).sqrt()
    } else {
        1.0
    };
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&tk| {
            let r = tk as usize * c.hidden;
            emb[r..r + c.hidden]
                .iter()
                .map(|&v| v as f64 * emb_scale)
                .collect()
        })
        .collect();
    let attn_scale = c.gemma.map_or(1.0 / (d as f64).sqrt(), |g| {
        g.query_pre_attn_scalar.powf(-0.5)
    });
    for l in 0..c.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        // (window, rope base, rope factor) of this layer.
        let (window, theta, factor) = match c.gemma {
            Some(g) if (l + 1) % g.global_every != 0 => (Some(g.window), g.local_theta, 1.0),
            Some(g) => (None, c.theta, g.rope_factor),
            None => (None, c.theta, 1.0),
        };
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (pos, x) in xs.iter().enumerate() {
            let h = rms(x, w(&p("input_layernorm.weight")));
            let mut q = matvec(w(&p("self_attn.q_proj.weight")), &h, c.heads * d);
            let mut k = matvec(w(&p("self_attn.k_proj.weight")), &h, c.kv * d);
            for (v, n, norm) in [(&mut q, c.heads, "q_norm"), (&mut k, c.kv, "k_norm")] {
                for hd in 0..n {
                    let head = &mut v[hd * d..(hd + 1) * d];
                    if c.qk_norm() {
                        let normed = rms(head, w(&p(&format!("self_attn.{norm}.weight"))));
                        head.copy_from_slice(&normed);
                    }
                    rope(head, pos, theta, factor);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(matvec(w(&p("self_attn.v_proj.weight")), &h, c.kv * d));
        }
        for i in 0..xs.len() {
            let first = window.map_or(0, |w| (i + 1).saturating_sub(w));
            let mut attn = vec![0.0; c.heads * d];
            for hd in 0..c.heads {
                let g = hd / (c.heads / c.kv);
                let q = &qs[i][hd * d..(hd + 1) * d];
                let scores: Vec<f64> = (first..=i)
                    .map(|j| {
                        let k = &ks[j][g * d..(g + 1) * d];
                        let s = q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * attn_scale;
                        cap(s, c.gemma.and_then(|g| g.attn_softcap))
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, ej) in (first..=i).zip(&e) {
                    for k in 0..d {
                        attn[hd * d + k] += ej / z * vs[j][g * d + k];
                    }
                }
            }
            let mut o = matvec(w(&p("self_attn.o_proj.weight")), &attn, c.hidden);
            let x = &mut xs[i];
            let pre_ffn = if c.gemma.is_some() {
                o = rms(&o, w(&p("post_attention_layernorm.weight")));
                "pre_feedforward_layernorm.weight"
            } else {
                "post_attention_layernorm.weight"
            };
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rms(x, w(&p(pre_ffn)));
            let g = matvec(w(&p("mlp.gate_proj.weight")), &h, c.ff);
            let u = matvec(w(&p("mlp.up_proj.weight")), &h, c.ff);
            let act: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(&g, u)| {
                    let a = if c.gemma.is_some() {
                        gelu_tanh(g)
                    } else {
                        g / (1.0 + (-g).exp())
                    };
                    a * u
                })
                .collect();
            let mut down = matvec(w(&p("mlp.down_proj.weight")), &act, c.hidden);
            if c.gemma.is_some() {
                down = rms(&down, w(&p("post_feedforward_layernorm.weight")));
            }
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
    }
    let last = rms(xs.last().unwrap(), w("model.norm.weight"));
    let head = if c.tied() {
        w("model.embed_tokens.weight")
    } else {
        w("lm_head.weight")
    };
    matvec(head, &last, c.vocab)
        .into_iter()
        .map(|l| cap(l, c.gemma.and_then(|g| g.final_softcap)))
        .collect()
}

/// Greedy continuation of `prompt` by the reference: up to `n` tokens, ending early at one of
/// `stop` (not included).
pub fn reference_greedy(c: &Cfg, t: &Tensors, prompt: &[i32], n: usize, stop: &[i32]) -> Vec<i32> {
    let mut seq = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let l = reference(c, t, &seq);
        let next = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as i32;
        if stop.contains(&next) {
            break;
        }
        out.push(next);
        seq.push(next);
    }
    out
}
