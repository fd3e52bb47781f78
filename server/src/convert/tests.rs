//! Conversion unit tests on tiny generated checkpoints: output layout and data transforms read
//! back through the GGUF reader, and the refusals for malformed input.

use std::path::Path;

use serde_json::json;

use super::safetensors::{encode_header, Dtype};
use super::*;
use crate::gguf::{self, GgmlType, ReadOptions};

/// f32 tensors whose element i of tensor k is k*1000 + i, so data positions are checkable.
fn write_st(path: &Path, tensors: &[(&str, Vec<u64>)]) {
    let entries: Vec<(&str, Dtype, &[u64])> = tensors
        .iter()
        .map(|(n, s)| (*n, Dtype::F32, s.as_slice()))
        .collect();
    let mut out = encode_header(&entries);
    for (k, (_, shape)) in tensors.iter().enumerate() {
        let n: u64 = shape.iter().product();
        for i in 0..n {
            out.extend_from_slice(&((k * 1000) as f32 + i as f32).to_le_bytes());
        }
    }
    std::fs::write(path, out).unwrap();
}

fn tokenizer() -> serde_json::Value {
    json!({
        "added_tokens": [{"id": 3, "content": "<|end|>", "special": true}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "post_processor": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|end|>": 3}, "merges": ["a b"]}
    })
}

fn llama_dir(dir: &Path) {
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4, "intermediate_size": 8,
        "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
        "vocab_size": 4, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
        "eos_token_id": 3
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer().to_string()).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({"chat_template": "{{ messages }}", "eos_token": "<|end|>"}).to_string(),
    )
    .unwrap();
    write_st(
        &dir.join("model.safetensors"),
        &[
            ("model.embed_tokens.weight", vec![4, 4]),
            ("model.layers.0.self_attn.q_proj.weight", vec![4, 4]),
            ("model.layers.0.self_attn.k_proj.weight", vec![2, 4]),
            ("model.layers.0.input_layernorm.weight", vec![4]),
            ("model.layers.0.self_attn.rotary_emb.inv_freq", vec![1]),
        ],
    );
}

fn convert_dir(dir: &Path) -> Result<(gguf::GgufFile, Vec<u8>)> {
    let out = dir.join("out.gguf");
    let mut f = std::fs::File::create(&out)?;
    convert(&Source::from_dir(dir)?, "tiny", &mut f)?;
    drop(f);
    let bytes = std::fs::read(&out)?;
    std::fs::remove_file(&out)?;
    Ok((
        gguf::read_bytes(&bytes, ReadOptions { full_arrays: true })?,
        bytes,
    ))
}

fn f16s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(2)
        .map(|c| float::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}

#[test]
fn llama_layout_types_permutation_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    llama_dir(dir.path());
    let (g, bytes) = convert_dir(dir.path()).unwrap();
    let names: Vec<(&str, GgmlType, Vec<u64>)> = g
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.ggml_type, t.dims.clone()))
        .collect();
    // Sorted by source name; inv_freq dropped; the norm stays F32; dims in ggml order.
    assert_eq!(
        names,
        [
            ("token_embd.weight", GgmlType::F16, vec![4, 4]),
            ("blk.0.attn_norm.weight", GgmlType::F32, vec![4]),
            ("blk.0.attn_k.weight", GgmlType::F16, vec![4, 2]),
            ("blk.0.attn_q.weight", GgmlType::F16, vec![4, 4]),
        ]
    );
    let data = |name: &str| {
        let t = g.tensors.iter().find(|t| t.name == name).unwrap();
        let start = (g.data_offset + t.offset) as usize;
        f16s(&bytes[start..start + t.n_bytes as usize])
    };
    // One row per rotary half: the permutation is the identity here (see the next test).
    let q = data("blk.0.attn_q.weight");
    let rows: Vec<f32> = q.chunks(4).map(|r| r[0] - 1000.0).collect();
    assert_eq!(rows, [0.0, 4.0, 8.0, 12.0]);
    assert_eq!(data("token_embd.weight")[5], 5.0);
    assert_eq!(
        g.get("general.architecture").unwrap().as_str(),
        Some("llama")
    );
    assert_eq!(g.get("general.file_type").unwrap().as_u64(), Some(1));
    assert_eq!(
        g.get("llama.attention.head_count_kv").unwrap().as_u64(),
        Some(1)
    );
    assert_eq!(
        g.get("llama.rope.dimension_count").unwrap().as_u64(),
        Some(2)
    );
    assert_eq!(g.get("tokenizer.ggml.pre").unwrap().as_str(), Some("gpt-2"));
    assert_eq!(
        g.get("tokenizer.ggml.eos_token_id").unwrap().as_u64(),
        Some(3)
    );
    assert_eq!(
        g.get("tokenizer.ggml.add_bos_token"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        g.get("tokenizer.chat_template").unwrap().as_str(),
        Some("{{ messages }}")
    );
    let types = g
        .get("tokenizer.ggml.token_type")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(types.elem, crate::gguf::ValueType::I32);
    assert_eq!(bytes.len() % 32, 0, "file padded to the alignment");
}

#[test]
fn llama_q_rows_are_permuted_per_head() {
    let dir = tempfile::tempdir().unwrap();
    llama_dir(dir.path());
    // 8 q rows, 2 heads: within a head [0,1,2,3] → [0,2,1,3].
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
    config["hidden_size"] = json!(8);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    write_st(
        &dir.path().join("model.safetensors"),
        &[("model.layers.0.self_attn.q_proj.weight", vec![8, 1])],
    );
    let (g, bytes) = convert_dir(dir.path()).unwrap();
    let t = &g.tensors[0];
    let start = (g.data_offset + t.offset) as usize;
    let q = f16s(&bytes[start..start + 16]);
    assert_eq!(q, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
}

#[test]
fn gemma3_norms_shift_and_embedding_trim() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = json!({
        "architectures": ["Gemma3ForCausalLM"], "hidden_size": 4, "intermediate_size": 8,
        "num_attention_heads": 1, "num_key_value_heads": 1, "num_hidden_layers": 1,
        "head_dim": 4, "vocab_size": 4, "sliding_window": 8
    });
    std::fs::write(d.join("config.json"), config.to_string()).unwrap();
    std::fs::write(d.join("tokenizer.json"), tokenizer().to_string()).unwrap();
    write_st(
        &d.join("model.safetensors"),
        &[
            // 6 embedding rows: trimmed to len(vocab) + len(added_tokens) = 5 (the reference
            // counts an added token that is also in the vocab twice).
            ("model.embed_tokens.weight", vec![6, 4]),
            ("model.layers.0.pre_feedforward_layernorm.weight", vec![4]),
            ("model.layers.0.post_attention_layernorm.weight", vec![4]),
        ],
    );
    let (g, bytes) = convert_dir(d).unwrap();
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "token_embd.weight",
            "blk.0.post_attention_norm.weight",
            "blk.0.ffn_norm.weight"
        ]
    );
    assert_eq!(g.tensors[0].dims, [4, 5]);
    let t = &g.tensors[2];
    let start = (g.data_offset + t.offset) as usize;
    let vals: Vec<f32> = bytes[start..start + 16]
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(vals, [1001.0, 1002.0, 1003.0, 1004.0]);
    assert_eq!(
        g.get("gemma3.attention.sliding_window").unwrap().as_u64(),
        Some(8)
    );
    assert_eq!(
        g.get("gemma3.rope.freq_base").unwrap().as_f64(),
        Some(1_000_000.0)
    );
}

#[test]
fn sharded_checkpoint_follows_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    llama_dir(d);
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    write_st(
        &d.join("model-00001-of-00002.safetensors"),
        &[("model.norm.weight", vec![4])],
    );
    write_st(
        &d.join("model-00002-of-00002.safetensors"),
        &[("lm_head.weight", vec![4, 4])],
    );
    let index = |extra: bool| {
        let mut m = json!({
            "model.norm.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors"
        });
        if extra {
            m["model.embed_tokens.weight"] = json!("model-00003-of-00002.safetensors");
        }
        json!({"weight_map": m}).to_string()
    };
    std::fs::write(d.join("model.safetensors.index.json"), index(false)).unwrap();
    let (g, _) = convert_dir(d).unwrap();
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["output_norm.weight", "output.weight"]);
    std::fs::write(d.join("model.safetensors.index.json"), index(true)).unwrap();
    let err = convert_dir(d).unwrap_err().to_string();
    assert!(err.contains("missing or incomplete model files"), "{err}");
}

#[test]
fn malformed_input_is_refused_before_writing() {
    type Mutate = fn(&Path);
    let cases: Vec<(&str, Mutate, &str)> = vec![
        (
            "no config",
            |d| std::fs::remove_file(d.join("config.json")).unwrap(),
            "config.json is missing",
        ),
        (
            "unsupported arch",
            |d| {
                std::fs::write(
                    d.join("config.json"),
                    r#"{"architectures":["GPT2LMHeadModel"],"num_hidden_layers":1}"#,
                )
                .unwrap()
            },
            "unsupported architecture",
        ),
        (
            "huge header",
            |d| std::fs::write(d.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap(),
            "exceeds",
        ),
        (
            "header past EOF",
            |d| std::fs::write(d.join("model.safetensors"), 64u64.to_le_bytes()).unwrap(),
            "past the end of the file",
        ),
        (
            "bad JSON",
            |d| {
                let mut b = 4u64.to_le_bytes().to_vec();
                b.extend_from_slice(b"{{{{");
                std::fs::write(d.join("model.safetensors"), b).unwrap()
            },
            "not valid JSON",
        ),
        (
            "tensor past EOF",
            |d| {
                let mut b = encode_header(&[("model.norm.weight", Dtype::F32, &[4])]);
                b.extend_from_slice(&[0; 8]); // 8 of the 16 data bytes
                std::fs::write(d.join("model.safetensors"), b).unwrap()
            },
            "extends past the end of the file",
        ),
        (
            "wrong span",
            |d| {
                let h =
                    br#"{"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}}"#;
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(h);
                b.extend_from_slice(&[0; 16]);
                std::fs::write(d.join("model.safetensors"), b).unwrap()
            },
            "do not match",
        ),
        (
            "overlap",
            |d| {
                let h = br#"{"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b.weight":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(h);
                b.extend_from_slice(&[0; 16]);
                std::fs::write(d.join("model.safetensors"), b).unwrap()
            },
            "overlap",
        ),
        (
            "integer dtype",
            |d| {
                let h =
                    br#"{"model.norm.weight":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#;
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(h);
                b.extend_from_slice(&[0; 8]);
                std::fs::write(d.join("model.safetensors"), b).unwrap()
            },
            "only F32, F16 and BF16",
        ),
        (
            "unknown tensor",
            |d| {
                write_st(
                    &d.join("model.safetensors"),
                    &[("model.layers.0.mystery.weight", vec![2])],
                )
            },
            "cannot map tensor",
        ),
        (
            "layer past block_count",
            |d| {
                write_st(
                    &d.join("model.safetensors"),
                    &[("model.layers.7.mlp.up_proj.weight", vec![2, 2])],
                )
            },
            "cannot map tensor",
        ),
        (
            "no tokenizer",
            |d| std::fs::remove_file(d.join("tokenizer.json")).unwrap(),
            "neither tokenizer.json",
        ),
    ];
    for (what, mutate, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        llama_dir(dir.path());
        mutate(dir.path());
        let err = plan(&Source::from_dir(dir.path()).unwrap(), "x").err();
        let Some(err) = err else {
            panic!("{what}: converted")
        };
        assert!(matches!(err, Error::BadRequest(_)), "{what}: {err:?}");
        assert!(err.to_string().contains(want), "{what}: {err}");
    }
}

#[test]
fn gemma3_multimodal_wrapper_converts_its_text_model_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = json!({
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"hidden_size": 4, "intermediate_size": 8, "num_attention_heads": 1,
            "num_key_value_heads": 1, "num_hidden_layers": 1, "head_dim": 4, "vocab_size": 4,
            "sliding_window": 8},
        "vision_config": {"hidden_size": 16}
    });
    std::fs::write(d.join("config.json"), config.to_string()).unwrap();
    std::fs::write(d.join("tokenizer.json"), tokenizer().to_string()).unwrap();
    write_st(
        &d.join("model.safetensors"),
        &[
            ("language_model.model.norm.weight", vec![4]),
            (
                "model.language_model.layers.0.input_layernorm.weight",
                vec![4],
            ),
            (
                "multi_modal_projector.mm_input_projection_weight",
                vec![4, 4],
            ),
            ("vision_tower.vision_model.post_layernorm.weight", vec![4]),
        ],
    );
    let (g, _) = convert_dir(d).unwrap();
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["output_norm.weight", "blk.0.attn_norm.weight"]);
    assert_eq!(g.get("gemma3.embedding_length").unwrap().as_u64(), Some(4));
}
