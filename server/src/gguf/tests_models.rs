//! Reads the two real test models (scripts/fetch-test-models) and checks facts known about them.
//! Each test prints a notice and passes when its model is absent, so CI without models stays green.

use std::path::PathBuf;

use super::*;

fn model(file: &str) -> Option<PathBuf> {
    // Same lookup as scripts/fetch-test-models: $HERD_CACHE, else ~/.cache/herd.
    let cache = std::env::var_os("HERD_CACHE")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/herd")))?;
    let path = cache.join("models").join(file);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not present (run scripts/fetch-test-models)",
            path.display()
        );
        None
    }
}

/// Tensors must be laid out back to back with alignment padding: this is what llama.cpp requires
/// and it cross-checks our block-size table for every type the file uses.
fn assert_contiguous(f: &GgufFile) {
    let mut expect = 0;
    for t in &f.tensors {
        assert_eq!(t.offset, expect, "{}", t.name);
        expect = (t.offset + t.n_bytes).next_multiple_of(f.alignment);
    }
    assert!(f.data_offset + expect >= f.file_size - f.alignment);
    assert!(f.data_offset + expect <= f.file_size + f.alignment);
}

#[test]
fn gemma3_270m_facts() {
    let Some(path) = model("gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let t0 = std::time::Instant::now();
    let f = read_path(&path, ReadOptions::default()).unwrap();
    eprintln!("gemma3: parsed metadata in {:?}", t0.elapsed());
    assert_eq!(f.architecture(), Some("gemma3"));
    assert_eq!(f.tensors.len(), 236);
    assert_eq!(f.file_type(), Some(15));
    assert_eq!(f.quantization_level(), "Q4_K_M");
    assert_eq!(f.embedding_length(), Some(640));
    assert_eq!(f.context_length(), Some(32768));
    assert_eq!(f.chat_template(), None);
    assert_eq!(f.capabilities(), ["completion"]);
    assert_contiguous(&f);
    let d = f.details();
    eprintln!(
        "gemma3: parameter_count {} parameter_size {}",
        f.parameter_count, d.parameter_size
    );
    assert_eq!(d.parameter_size, "268.10M");
    assert_eq!(d.family, "gemma3");
    let info = f.model_info(false);
    assert_eq!(info["general.parameter_count"], f.parameter_count);
    assert!(info["tokenizer.ggml.tokens"].is_null());
    assert!(!info.contains_key("general.name"));
    let kv = (
        f.block_count(),
        f.head_count(),
        f.head_count_kv(),
        f.key_length(),
    );
    eprintln!("gemma3: block_count/head_count/head_count_kv/key_length {kv:?}");
    assert!(kv.0.is_some() && kv.1.is_some() && kv.2.is_some() && kv.3.is_some());

    // Verbose: the 262k-entry vocabulary comes back whole.
    let full = read_path(&path, ReadOptions { full_arrays: true }).unwrap();
    let tokens = full
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .unwrap();
    let Some(ArrayValues::String(v)) = &tokens.values else {
        panic!("tokens not read")
    };
    assert_eq!(v.len() as u64, tokens.len);
    assert!(tokens.len > 200_000);
    assert_eq!(
        full.model_info(true)["tokenizer.ggml.tokens"]
            .as_array()
            .unwrap()
            .len(),
        v.len()
    );
}

#[test]
fn smollm2_135m_facts() {
    let Some(path) = model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let f = read_path(&path, ReadOptions::default()).unwrap();
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.embedding_length(), Some(576));
    assert!(f.chat_template().unwrap().contains("<|im_start|>"));
    assert_eq!(f.file_type(), Some(3));
    assert_eq!(f.quantization_level(), "Q4_1");
    assert_eq!(f.capabilities(), ["completion"]);
    assert_contiguous(&f);
    let d = f.details();
    eprintln!(
        "smollm2: parameter_count {} parameter_size {}",
        f.parameter_count, d.parameter_size
    );
    assert_eq!(d.parameter_size, human_number(f.parameter_count));
    assert!(d.parameter_size.ends_with('M'));
    assert!(!f.model_info(false).contains_key("tokenizer.chat_template"));
}
