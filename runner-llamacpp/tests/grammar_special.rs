//! A closing string that is ONE special token: a tiny llama GGUF, written here, whose vocabulary
//! has `<think>` and `</think>` as control tokens (plus `<unk>`, `<s>`, `</s>` and the 256 byte
//! tokens), loaded by the real runner.
//!
//! Random weights never emit a particular token on purpose, so the model is built to be
//! deterministic while staying a real llama graph: attention and FFN weights are random, but
//! their output projections are zero, so the residual stream that reaches the head is the
//! current token's embedding. Embeddings are one-hot (token t → dimension t) and the head row of
//! token u has a 1 at every dimension whose token is followed by u, so greedy decoding walks a
//! transition table we choose (`NEXT`): `<think>` → `a b c` → `</think>` → `"` → `q q q…`, and
//! `z` → `x y x y…`, which never reaches `</think>` (and a slight preference for `</s>` below
//! every successor). Then:
//! - sampled close: with `JsonSchema{enum ["ok"]}` closed by `</think>` the free text is the
//!   model's own (`abc`), the close is the single control token, and after it the schema holds
//!   (`"ok"`, then EOS is the only token the grammar leaves);
//! - never reached: a prompt whose walk never meets `</think>` gives exactly the free output.

mod common;

use common::*;
use runner_protocol::DoneReason;
use serde_json::{json, Value};
use std::path::Path;

const THINK: u32 = 3;
const END_THINK: u32 = 4;
const BYTE0: u32 = 5;
const VOCAB: usize = 5 + 256;
/// Width: one dimension per token, rounded up to a multiple of the head count.
const EMBD: usize = 264;
const HEADS: usize = 4;
const FF: usize = 64;

fn byte(c: u8) -> u32 {
    BYTE0 + u32::from(c)
}

/// Greedy transitions (token → next token); tokens not listed map to `</s>`, which nothing in
/// these prompts reaches.
fn next(t: u32) -> u32 {
    let table = [
        (THINK, byte(b'a')),
        (byte(b'a'), byte(b'b')),
        (byte(b'b'), byte(b'c')),
        (byte(b'c'), END_THINK),
        (END_THINK, byte(b'"')),
        (byte(b'"'), byte(b'q')),
        (byte(b'q'), byte(b'q')),
        (byte(b'z'), byte(b'x')),
        (byte(b'x'), byte(b'y')),
        (byte(b'y'), byte(b'x')),
    ];
    table
        .iter()
        .find(|(from, _)| *from == t)
        .map_or(2, |(_, to)| *to)
}

/// A minimal GGUF v3 writer: metadata values and F32 tensors.
#[derive(Default)]
struct Gguf {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, Vec<f32>)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Gguf {
    fn key(&mut self, k: &str, ty: u32) -> &mut Vec<u8> {
        self.n_kv += 1;
        put_str(&mut self.kv, k);
        self.kv.extend(ty.to_le_bytes());
        &mut self.kv
    }
    fn u32(&mut self, k: &str, v: u32) {
        self.key(k, 4).extend(v.to_le_bytes());
    }
    fn f32(&mut self, k: &str, v: f32) {
        self.key(k, 6).extend(v.to_le_bytes());
    }
    fn str(&mut self, k: &str, v: &str) {
        put_str(self.key(k, 8), v);
    }
    fn array<T>(&mut self, k: &str, ty: u32, items: &[T], put: impl Fn(&mut Vec<u8>, &T)) {
        let out = self.key(k, 9);
        out.extend(ty.to_le_bytes());
        out.extend((items.len() as u64).to_le_bytes());
        for i in items {
            put(out, i);
        }
    }
    /// `dims` innermost first (GGUF `ne`); `data` row-major over them.
    fn tensor(&mut self, name: &str, dims: &[usize], data: Vec<f32>) {
        assert_eq!(dims.iter().product::<usize>(), data.len(), "{name}");
        let dims = dims.iter().map(|&d| d as u64).collect();
        self.tensors.push((name.into(), dims, data));
    }

    fn write(&self, path: &Path) {
        const ALIGN: usize = 32;
        let pad = |v: &mut Vec<u8>| v.resize(v.len().div_ceil(ALIGN) * ALIGN, 0);
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(&self.kv);
        let mut data = Vec::new();
        for (name, dims, values) in &self.tensors {
            put_str(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(0u32.to_le_bytes()); // F32
            out.extend((data.len() as u64).to_le_bytes());
            data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            pad(&mut data);
        }
        pad(&mut out);
        out.extend(data);
        std::fs::write(path, out).unwrap();
    }
}

/// Small uniform values from a fixed LCG: the "random" weights.
fn random(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}

fn write_model(path: &Path) {
    let mut g = Gguf::default();
    g.str("general.architecture", "llama");
    g.str("general.name", "think-special-test");
    g.u32("general.alignment", 32);
    g.u32("llama.context_length", 256);
    g.u32("llama.embedding_length", EMBD as u32);
    g.u32("llama.block_count", 1);
    g.u32("llama.feed_forward_length", FF as u32);
    g.u32("llama.rope.dimension_count", (EMBD / HEADS) as u32);
    g.u32("llama.attention.head_count", HEADS as u32);
    g.u32("llama.attention.head_count_kv", HEADS as u32);
    g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5);
    g.u32("llama.vocab_size", VOCAB as u32);
    g.str("tokenizer.ggml.model", "llama");
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<think>", "</think>"]
        .map(String::from)
        .to_vec();
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    // unknown, control ×4, then bytes.
    let types: Vec<i32> = [2, 3, 3, 3, 3]
        .into_iter()
        .chain(std::iter::repeat_n(6, 256))
        .collect();
    g.array("tokenizer.ggml.tokens", 8, &tokens, |o, s| put_str(o, s));
    g.array("tokenizer.ggml.scores", 6, &vec![0f32; VOCAB], |o, v| {
        o.extend(v.to_le_bytes())
    });
    g.array("tokenizer.ggml.token_type", 5, &types, |o, v| {
        o.extend(v.to_le_bytes())
    });
    g.u32("tokenizer.ggml.unknown_token_id", 0);
    g.u32("tokenizer.ggml.bos_token_id", 1);
    g.u32("tokenizer.ggml.eos_token_id", 2);

    let mut seed = 7;
    let mut embd = vec![0f32; VOCAB * EMBD];
    let mut head = vec![0f32; VOCAB * EMBD];
    for t in 0..VOCAB {
        embd[t * EMBD + t] = 1.0;
        head[next(t as u32) as usize * EMBD + t] = 1.0;
        // A little `</s>` everywhere: below every chosen successor, above all else, so where
        // the grammar masks the successor and accepts, the response ends rather than picking
        // among ties.
        head[2 * EMBD + t] += 0.1;
    }
    g.tensor("token_embd.weight", &[EMBD, VOCAB], embd);
    g.tensor("output_norm.weight", &[EMBD], vec![1.0; EMBD]);
    g.tensor("output.weight", &[EMBD, VOCAB], head);
    g.tensor("blk.0.attn_norm.weight", &[EMBD], vec![1.0; EMBD]);
    for w in ["attn_q", "attn_k", "attn_v"] {
        let data = random(EMBD * EMBD, &mut seed);
        g.tensor(&format!("blk.0.{w}.weight"), &[EMBD, EMBD], data);
    }
    g.tensor(
        "blk.0.attn_output.weight",
        &[EMBD, EMBD],
        vec![0.0; EMBD * EMBD],
    );
    g.tensor("blk.0.ffn_norm.weight", &[EMBD], vec![1.0; EMBD]);
    g.tensor(
        "blk.0.ffn_gate.weight",
        &[EMBD, FF],
        random(EMBD * FF, &mut seed),
    );
    g.tensor(
        "blk.0.ffn_up.weight",
        &[EMBD, FF],
        random(EMBD * FF, &mut seed),
    );
    g.tensor("blk.0.ffn_down.weight", &[FF, EMBD], vec![0.0; FF * EMBD]);
    g.write(path);
}

fn request(prompt: &str, constraint: Option<Value>) -> Value {
    let mut v = greedy(prompt, 12);
    v["add_special"] = json!(false);
    if let Some(c) = constraint {
        v["constraint"] = c;
    }
    v
}

#[tokio::test]
async fn a_single_special_token_closes_the_thinking() {
    let _g = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("think.gguf");
    write_model(&model);
    let r = Runner::spawn(&model, &["--ctx-size", "256"]);
    r.wait_ready().await;

    // The vocabulary really has `</think>` as one control token.
    let (_, body) = call(
        &r.socket,
        "POST",
        "/tokenize",
        Some(json!({"content": "</think>", "add_special": false, "parse_special": true})),
    )
    .await;
    let toks: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(toks["tokens"], json!([END_THINK]), "{toks}");

    let schema = json!({"enum": ["ok"]});
    let c = json!({"type": "json_schema", "schema": schema, "thinking_close": ["</think>"]});

    // Sampled close. Free: the model's walk goes straight through the close and on.
    let free = complete(&r.socket, request("Q<think>", None)).await;
    assert_eq!(free.text, "abc</think>\"qqqqqqq");
    let out = complete(&r.socket, request("Q<think>", Some(c.clone()))).await;
    assert_eq!(out.text, "abc</think>\"ok\"", "{:?}", out.chunks);
    assert_eq!(out.reason, DoneReason::Stop);
    let (think, rest) = out.text.split_once("</think>").unwrap();
    assert_eq!(
        think,
        &free.text[..3],
        "free text before the close is the model's own"
    );
    let v: Value = serde_json::from_str(rest).unwrap();
    assert!(jsonschema::validator_for(&schema).unwrap().is_valid(&v));

    // Never reached: the walk loops without `</think>`, so the output is the free one.
    let free = complete(&r.socket, request("Qz", None)).await;
    assert_eq!(free.text, "xyxyxyxyxyxy");
    let out = complete(&r.socket, request("Qz", Some(c))).await;
    assert_eq!(out.text, free.text);
    assert_eq!(out.reason, DoneReason::Length);
}
