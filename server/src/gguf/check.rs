//! Metadata the engine trusts without checking: llama.cpp indexes its vocabulary with the special
//! token ids, sizes its context from `<arch>.context_length` and its embedding table from the
//! tokenizer, so a file that lies about them crashes or misbehaves inside the runner. This check
//! refuses such a file with a message naming the key, at create and again before a load.
//!
//! Invariant: only facts the file states are compared; an absent key is the engine's business
//! (adapters and projectors have no tokenizer), so every well-formed GGUF passes.

use super::reader::GgufFile;
use super::value::Value;

/// llama.cpp's `llama_token` is an `int32_t`.
const MAX_VOCAB: u64 = i32::MAX as u64;

impl GgufFile {
    /// `Err(reason)` when the metadata contradicts itself or names an impossible size or id.
    pub fn check_engine_facts(&self) -> Result<(), String> {
        let key = |suffix: &str| {
            self.architecture()
                .map_or_else(|| suffix.to_owned(), |a| format!("{a}.{suffix}"))
        };
        if let Some(v) = self.arch_value("context_length") {
            match v.as_u64() {
                Some(n) if (1..=u64::from(u32::MAX)).contains(&n) => {}
                _ => {
                    return Err(format!(
                        "{} must be between 1 and 2^32-1",
                        key("context_length")
                    ))
                }
            }
        }
        let tokens = match self.get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => Some(a.len),
            _ => None,
        };
        let declared = match self.arch_value("vocab_size") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_VOCAB).contains(&n) => Some(n),
                _ => {
                    return Err(format!(
                        "{} must be between 1 and 2^31-1",
                        key("vocab_size")
                    ))
                }
            },
        };
        if let Some(n) = tokens {
            if n == 0 || n > MAX_VOCAB {
                return Err("tokenizer.ggml.tokens must hold between 1 and 2^31-1 tokens".into());
            }
        }
        if let (Some(t), Some(d)) = (tokens, declared) {
            if t != d {
                return Err(format!(
                    "{} is {d} but tokenizer.ggml.tokens holds {t} tokens",
                    key("vocab_size")
                ));
            }
        }
        let vocab = tokens.or(declared);
        if let Some(vocab) = vocab {
            for (k, v) in &self.kvs {
                if !(k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id")) {
                    continue;
                }
                // Negative ids mean "none" in some converters; llama.cpp refuses their type.
                if let Some(id) = v.as_u64() {
                    if id >= vocab {
                        return Err(format!("{k} is {id}, outside the vocabulary of {vocab}"));
                    }
                }
            }
        }
        let embd = self.arch_value("embedding_length").and_then(Value::as_u64);
        for name in ["token_embd.weight", "output.weight"] {
            let Some(t) = self.tensors.iter().find(|t| t.name == name) else {
                continue;
            };
            if let (Some(e), Some(&d0)) = (embd, t.dims.first()) {
                if d0 != e {
                    return Err(format!(
                        "tensor {name} rows are {d0} wide but {} is {e}",
                        key("embedding_length")
                    ));
                }
            }
            if let (Some(v), Some(&d1)) = (vocab, t.dims.get(1)) {
                if d1 != v {
                    return Err(format!(
                        "tensor {name} has {d1} rows but the vocabulary holds {v} tokens"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::gguf::{self, GgufBuilder, ReadOptions, Value};

    /// A llama-shaped header (8 tokens, 16-wide embeddings, token_embd 16×8) with `set` replacing
    /// or adding keys and `extra` adding tensors.
    fn model(set: &[(&str, Value)], extra: &[(&str, [u64; 2])]) -> gguf::GgufFile {
        let tokens: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        let base: Vec<(&str, Value)> = vec![
            ("general.architecture", "llama".into()),
            ("llama.context_length", 2048u32.into()),
            ("llama.embedding_length", 16u32.into()),
            ("tokenizer.ggml.tokens", tokens.into()),
            ("tokenizer.ggml.bos_token_id", 1u32.into()),
            ("tokenizer.ggml.eos_token_id", 2u32.into()),
        ];
        let mut b = GgufBuilder::new();
        for (k, v) in &base {
            let v = set.iter().find(|(s, _)| s == k).map_or(v, |(_, v)| v);
            b = b.kv(k, v.clone());
        }
        for (k, v) in set
            .iter()
            .filter(|(k, _)| !base.iter().any(|(b, _)| b == k))
        {
            b = b.kv(k, v.clone());
        }
        b = b.zeros_f32("token_embd.weight", &[16, 8]);
        for (name, dims) in extra {
            b = b.zeros_f32(name, dims);
        }
        gguf::read_bytes(&b.build().unwrap(), ReadOptions::default()).unwrap()
    }

    /// (what, keys to set, the refusal or `None`).
    type Case = (
        &'static str,
        Vec<(&'static str, Value)>,
        Option<&'static str>,
    );

    #[test]
    fn engine_facts_table() {
        let cases: Vec<Case> =
            vec![
            ("well formed", vec![], None),
            (
                "bos 2^31-1",
                vec![("tokenizer.ggml.bos_token_id", Value::U32(i32::MAX as u32))],
                Some("tokenizer.ggml.bos_token_id is 2147483647, outside the vocabulary of 8"),
            ),
            (
                "eos == vocab",
                vec![("tokenizer.ggml.eos_token_id", Value::U32(8))],
                Some("tokenizer.ggml.eos_token_id is 8, outside the vocabulary of 8"),
            ),
            ("last id", vec![("tokenizer.ggml.padding_token_id", Value::U32(7))], None),
            ("negative id", vec![("tokenizer.ggml.sep_token_id", Value::I32(-1))], None),
            (
                "context 0",
                vec![("llama.context_length", Value::U32(0))],
                Some("llama.context_length must be between 1 and 2^32-1"),
            ),
            (
                "context 2^40",
                vec![("llama.context_length", Value::U64(1 << 40))],
                Some("llama.context_length must be between 1 and 2^32-1"),
            ),
            (
                "vocab_size 2^32-1",
                vec![("llama.vocab_size", Value::U32(u32::MAX))],
                Some("llama.vocab_size must be between 1 and 2^31-1"),
            ),
            (
                "vocab_size disagrees",
                vec![("llama.vocab_size", Value::U32(9))],
                Some("llama.vocab_size is 9 but tokenizer.ggml.tokens holds 8 tokens"),
            ),
            ("vocab_size agrees", vec![("llama.vocab_size", Value::U32(8))], None),
            (
                "embedding width disagrees",
                vec![("llama.embedding_length", Value::U32(32))],
                Some("tensor token_embd.weight rows are 16 wide but llama.embedding_length is 32"),
            ),
        ];
        for (what, set, want) in cases {
            let got = model(&set, &[]).check_engine_facts().err();
            assert_eq!(got.as_deref(), want, "{what}");
        }
        let got = model(&[], &[("output.weight", [16, 9])]).check_engine_facts();
        assert_eq!(
            got.unwrap_err(),
            "tensor output.weight has 9 rows but the vocabulary holds 8 tokens"
        );
        // A projector or adapter states none of these facts: nothing to contradict.
        let bare = GgufBuilder::new().kv("general.architecture", "clip");
        let bare = gguf::read_bytes(&bare.build().unwrap(), ReadOptions::default()).unwrap();
        assert_eq!(bare.check_engine_facts(), Ok(()));
    }
}
