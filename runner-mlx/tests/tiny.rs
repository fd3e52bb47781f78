//! Architecture coverage on tiny random-weight Hugging Face checkpoints generated here
//! (tests/support/tiny_model.rs: config.json, model.safetensors in HF names, a tokenizer.json):
//! llama with an untied lm_head, qwen3 (per-head Q/K norms, head_dim ≠ hidden/heads, tied
//! embeddings) and gemma3 text ((1 + w) norms, post-norms, GELU-tanh, scaled embedding,
//! sliding-window layers with their own RoPE base beside global ones with linear rope scaling,
//! soft-capping). runner-mlx's logits must match the independent f64 reference there through a
//! prefill, a decode step with the cache, a two-sequence prefill and decode step and a truncated
//! cache.

#[path = "support/tiny_model.rs"]
mod tiny_model;

use tiny_model::{ascii_tokenizer, file_tensors, reference, weights, write_checkpoint, Cfg, Gemma};

fn max_diff_f64(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, f64::max)
}

fn check(c: Cfg) {
    check_prompt(c, &[5, 77, 300, 12, 499, 1]);
}

fn check_prompt(c: Cfg, prompt: &[i32]) {
    check_prompt_in(c, prompt, runner_mlx::Compute::F32);
}

fn f32_of(c: runner_mlx::Compute) -> bool {
    c == runner_mlx::Compute::F32
}

/// The checks of `check_prompt` with the model computing in `compute`: float32 within 1e-4 of
/// the logits' scale, bfloat16 (8 bits of mantissa) within 8e-2 (measured: 2 % dense, 4.5 %
/// with 4-bit weights whose f32 scales become bf16; a dtype or constant bug is off by far more).
fn check_prompt_in(c: Cfg, prompt: &[i32], compute: runner_mlx::Compute) {
    let dir = tempfile::tempdir().unwrap();
    let mut t = weights(&c);
    let file = file_tensors(&c, &mut t);
    write_checkpoint(dir.path(), &c, &file, &ascii_tokenizer());
    let mut m = runner_mlx::load(dir.path(), compute).expect("the tiny checkpoint loads");
    if c.quant.is_none() && !f32_of(compute) {
        // Dense weights are held in the compute dtype: half float32's bytes.
        let full = runner_mlx::load(dir.path(), runner_mlx::Compute::F32).unwrap();
        let (h, f) = (m.model.size_bytes(), full.model.size_bytes());
        assert!(
            h * 10 < f * 6,
            "bf16 weights take {h} bytes against f32's {f}"
        );
    }
    let other = [9, 8, 7];
    let want = reference(&c, &t, prompt);
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(
        scale > 0.5,
        "the reference logits are not trivial ({scale})"
    );
    let f32 = f32_of(compute);
    let tol = if f32 { 1e-4 } else { 8e-2 } * scale.max(1.0);
    if let Some(g) = c.gemma.filter(|_| f32) {
        // The prompt is longer than the window, and the window changes the logits.
        assert!(prompt.len() > g.window);
        let mut wide = c;
        wide.gemma = Some(Gemma {
            window: prompt.len(),
            ..g
        });
        let d = max_diff_f64(&reference(&wide, &t, prompt), &want);
        assert!(d > 100.0 * tol, "the window changes the logits by only {d}");
    }
    let n = prompt.len();

    // Prefill of all but the last token, then a decode step through the cache.
    let mut a = m.model.new_cache();
    m.model.forward(&mut [(&mut a, &prompt[..n - 1])]).unwrap();
    let step = m.model.forward(&mut [(&mut a, &prompt[n - 1..])]).unwrap();
    let d = max_diff(&step, &want);
    assert!(d < tol, "prefill+decode differs from the reference by {d}");

    // A decode step of two sequences at different positions (one batched RoPE, per-sequence
    // attention): each gets its own logits.
    let (mut p, mut q) = (m.model.new_cache(), m.model.new_cache());
    m.model.forward(&mut [(&mut p, &prompt[..n - 1])]).unwrap();
    m.model.forward(&mut [(&mut q, &other[..2])]).unwrap();
    let both = m
        .model
        .forward(&mut [(&mut q, &other[2..]), (&mut p, &prompt[n - 1..])])
        .unwrap();
    let d = max_diff(&both[c.vocab..], &want);
    assert!(d < tol, "a two-sequence decode step differs by {d}");
    let d = max_diff(&both[..c.vocab], &reference(&c, &t, &other));
    assert!(d < tol, "its other sequence differs by {d}");

    // The whole prompt beside another sequence in one step: each gets its own logits.
    let (mut b, mut o) = (m.model.new_cache(), m.model.new_cache());
    let both = m
        .model
        .forward(&mut [(&mut b, prompt), (&mut o, &other[..])])
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
    assert_eq!((a.len(), b.len(), o.len()), (n, n, 3));

    // Prefix reuse: cut back to four positions and continue as if from there.
    b.truncate(4);
    let again = m.model.forward(&mut [(&mut b, &prompt[4..])]).unwrap();
    let d = max_diff(&again, &want);
    assert!(d < tol, "after truncation the cache differs by {d}");
}

/// A tiny llama with an untied head.
const LLAMA: Cfg = Cfg {
    gemma: None,
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
};

#[test]
fn a_tiny_llama_with_an_untied_head_matches_the_reference() {
    check(LLAMA);
}

#[test]
fn a_tiny_qwen3_with_qk_norms_matches_the_reference() {
    check(Cfg {
        gemma: None,
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
            gemma: None,
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

/// gemma3's sliding window (4), global layers (every 3rd) and their RoPE, without soft-caps.
const GEMMA: Gemma = Gemma {
    window: 4,
    global_every: 3,
    local_theta: 10000.0,
    rope_factor: 2.0,
    query_pre_attn_scalar: 24.0,
    attn_softcap: None,
    final_softcap: None,
};
/// Longer than the window.
const GEMMA_PROMPT: [i32; 14] = [5, 77, 300, 12, 499, 1, 40, 41, 260, 3, 9, 400, 17, 88];

/// gemma3 text: 3 layers (two sliding with a window of 4, one global with linear rope
/// scaling), 14 prompt tokens. f32 through the fused attention with a window mask; then 4-bit
/// with both soft-caps (the unfused attention path).
#[test]
fn tiny_gemma3_text_checkpoints_match_the_reference() {
    for (quant, softcap) in [(None, None), (Some((4, 32)), Some((3.0, 5.0)))] {
        let g = Gemma {
            attn_softcap: softcap.map(|s| s.0),
            final_softcap: softcap.map(|s| s.1),
            ..GEMMA
        };
        check_prompt(
            Cfg {
                qwen3: false,
                gemma: Some(g),
                hidden: 64,
                heads: 4,
                kv: 2,
                head_dim: 32,
                ff: 128,
                layers: 3,
                vocab: 512,
                theta: 1_000_000.0,
                eps: 1e-6,
                quant,
            },
            &GEMMA_PROMPT,
        );
    }
}

/// bfloat16 compute (`--compute bf16`) on every architecture and path: llama dense and with a
/// 4-bit untied head, qwen3 at 8 bits with Q/K norms, gemma3 with both soft-caps (the unfused
/// attention, GELU-tanh and the scaled embedding's constants in bf16).
#[test]
fn bf16_compute_tracks_the_reference_on_every_architecture() {
    let base = Cfg {
        ff: 128,
        quant: Some((4, 32)),
        ..LLAMA
    };
    let bf16 = runner_mlx::Compute::Bf16;
    let short = [5, 77, 300, 12, 499, 1];
    check_prompt_in(
        Cfg {
            quant: None,
            ..base
        },
        &short,
        bf16,
    );
    check_prompt_in(base, &short, bf16);
    check_prompt_in(
        Cfg {
            qwen3: true,
            head_dim: 32,
            quant: Some((8, 64)),
            ..base
        },
        &short,
        bf16,
    );
    let gemma = Gemma {
        attn_softcap: Some(3.0),
        final_softcap: Some(5.0),
        ..GEMMA
    };
    check_prompt_in(
        Cfg {
            gemma: Some(gemma),
            head_dim: 32,
            layers: 3,
            theta: 1_000_000.0,
            eps: 1e-6,
            quant: None,
            ..base
        },
        &GEMMA_PROMPT,
        bf16,
    );
}
