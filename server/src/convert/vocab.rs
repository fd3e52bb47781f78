//! Tokenizer files → GGUF tokenizer metadata, as the reference converter writes it:
//! - BPE (`tokenizer.json`, GPT-2-style byte-level as SmolLM2, Llama 3, Qwen2/3 use):
//!   `tokenizer.ggml.model = "gpt2"`, the pre-tokenizer name, tokens with their types, merges;
//! - SentencePiece (`tokenizer.model`, as Llama 2 and Gemma 3 use): `model = "llama"`,
//!   `pre = "default"`, tokens, scores and types, with added tokens applied over the pieces.
//!
//! The reference names the BPE pre-tokenizer by hashing the token ids a full Hugging Face
//! tokenizer gives for a probe string. herd has no such tokenizer, so it recognises the
//! pre-tokenizer from tokenizer.json's `pre_tokenizer` structure (the split regexes are what
//! llama.cpp's name selects); `pre_tokenizer_name` lists the shapes it knows.

use serde_json::Value as Json;

use super::spm::{Piece, PieceType};
use crate::error::{Error, Result};
use crate::gguf::Value;

/// GGUF token types (llama.cpp's `llama_token_type`).
pub const NORMAL: i32 = 1;
pub const UNKNOWN: i32 = 2;
pub const CONTROL: i32 = 3;
pub const USER_DEFINED: i32 = 4;
pub const UNUSED: i32 = 5;
pub const BYTE: i32 = 6;

/// The Llama 3 split regex (llama.cpp pre-tokenizer `llama-bpe`).
const LLAMA3_REGEX: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/// The Qwen2 split regex (pre-tokenizer `qwen2`): single digits.
const QWEN2_REGEX: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

fn ty(j: &Json) -> Option<&str> {
    j.get("type").and_then(Json::as_str)
}

/// The llama.cpp pre-tokenizer name for a tokenizer.json `pre_tokenizer`, or `None` when the
/// shape is not one herd recognises.
pub fn pre_tokenizer_name(pre: &Json) -> Option<&'static str> {
    let byte_level = |j: &Json, regex: bool| {
        ty(j) == Some("ByteLevel")
            && j.get("add_prefix_space").and_then(Json::as_bool) != Some(true)
            && j.get("use_regex").and_then(Json::as_bool).unwrap_or(true) == regex
    };
    fn split_regex(j: &Json) -> Option<&str> {
        let plain = ty(j) == Some("Split")
            && j.get("behavior").and_then(Json::as_str) == Some("Isolated")
            && j.get("invert").and_then(Json::as_bool) != Some(true);
        if !plain {
            return None;
        }
        j.get("pattern")?.get("Regex")?.as_str()
    }
    if byte_level(pre, true) {
        return Some("gpt-2");
    }
    let parts = match ty(pre) {
        Some("Sequence") => pre.get("pretokenizers")?.as_array()?,
        _ => return None,
    };
    match parts.as_slice() {
        // StarCoder-family vocabularies (SmolLM, StarCoder2): digits split one by one, then the
        // GPT-2 regex. llama.cpp gives `smollm` and `starcoder` the same regexes.
        [d, b]
            if ty(d) == Some("Digits")
                && d.get("individual_digits").and_then(Json::as_bool) == Some(true)
                && byte_level(b, true) =>
        {
            Some("smollm")
        }
        [s, b] if byte_level(b, false) => match split_regex(s)? {
            LLAMA3_REGEX => Some("llama-bpe"),
            QWEN2_REGEX => Some("qwen2"),
            _ => None,
        },
        _ => None,
    }
}

/// The reference's heuristic for added tokens that should be control tokens.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

pub struct Vocab {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub scores: Option<Vec<f32>>,
}

/// BPE vocab from tokenizer.json; `vocab_size` is config.json's (ids past the tokenizer's are
/// `[PADn]` unused tokens, as in the reference).
pub fn bpe(tok: &Json, vocab_size: Option<u64>) -> Result<(Vocab, &'static str)> {
    let model = tok
        .get("model")
        .ok_or_else(|| Error::BadRequest("tokenizer.json has no model".into()))?;
    if ty(model) != Some("BPE") {
        return Err(Error::BadRequest(
            "tokenizer.json: only BPE tokenizers can be converted (or supply tokenizer.model)"
                .into(),
        ));
    }
    if model.get("byte_fallback").and_then(Json::as_bool) == Some(true) {
        return Err(Error::BadRequest(
            "tokenizer.json: byte-fallback (SentencePiece-style) BPE needs tokenizer.model".into(),
        ));
    }
    let pre = tok.get("pre_tokenizer").unwrap_or(&Json::Null);
    let pre_name = pre_tokenizer_name(pre).ok_or_else(|| {
        Error::BadRequest(
            "tokenizer.json: pre-tokenizer not recognised (herd knows the GPT-2, SmolLM/StarCoder, Llama 3 and Qwen2 shapes)".into(),
        )
    })?;
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| Error::BadRequest("tokenizer.json: model.vocab is not an object".into()))?;
    let added = tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut by_id: std::collections::HashMap<u64, &str> = std::collections::HashMap::new();
    let id_of = |v: &Json| {
        v.as_u64()
            .filter(|&i| i < 1 << 24)
            .ok_or_else(|| Error::BadRequest("tokenizer.json: token id out of range".into()))
    };
    for (t, id) in vocab {
        by_id.insert(id_of(id)?, t.as_str());
    }
    // Added token content → (special) for the type decision; added ids override the vocab's.
    let mut added_special: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for a in added {
        let (Some(content), Some(id)) = (a.get("content").and_then(Json::as_str), a.get("id"))
        else {
            return Err(Error::BadRequest(
                "tokenizer.json: malformed added token".into(),
            ));
        };
        by_id.insert(id_of(id)?, content);
        let special = a.get("special").and_then(Json::as_bool).unwrap_or(false);
        added_special.insert(content, special);
    }
    let max_id = by_id.keys().max().copied().unwrap_or(0);
    let n = vocab_size.unwrap_or(by_id.len() as u64);
    if !by_id.is_empty() && max_id >= n {
        return Err(Error::BadRequest(format!(
            "tokenizer.json has token id {max_id}, past config.json's vocab_size {n}"
        )));
    }
    let mut tokens = Vec::with_capacity(n as usize);
    let mut types = Vec::with_capacity(n as usize);
    for i in 0..n {
        match by_id.get(&i) {
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
            }
            Some(t) => match added_special.get(t) {
                Some(&special) if special || looks_special(t) => {
                    tokens.push((*t).to_owned());
                    types.push(CONTROL);
                }
                Some(_) => {
                    tokens.push(t.replace('\u{2581}', " "));
                    types.push(USER_DEFINED);
                }
                None => {
                    tokens.push((*t).to_owned());
                    types.push(NORMAL);
                }
            },
        }
    }
    Ok((
        Vocab {
            tokens,
            types,
            scores: None,
        },
        pre_name,
    ))
}

/// SentencePiece vocab: the pieces, `[PADn]` up to `vocab_size`, then added_tokens.json and
/// tokenizer_config.json's `added_tokens_decoder` written over them.
pub fn sentencepiece(
    pieces: &[Piece],
    vocab_size: Option<u64>,
    added_tokens: Option<&Json>,
    tokenizer_config: Option<&Json>,
) -> Result<Vocab> {
    let n = vocab_size.unwrap_or(pieces.len() as u64) as usize;
    if n > 1 << 24 {
        return Err(Error::BadRequest("vocab_size is too large".into()));
    }
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut types = vec![UNUSED; n];
    for (i, p) in pieces.iter().enumerate().take(n) {
        tokens[i] = p.text.clone();
        scores[i] = p.score;
        // The reference asks the processor IsUnknown/IsControl/IsUnused/IsByte: a user-defined
        // piece is none of those and counts as normal.
        types[i] = match p.kind {
            PieceType::Unknown => UNKNOWN,
            PieceType::Control => CONTROL,
            PieceType::Unused => UNUSED,
            PieceType::Byte => BYTE,
            PieceType::Normal | PieceType::UserDefined => NORMAL,
        };
    }
    if let Some(added) = added_tokens.and_then(Json::as_object) {
        for (text, id) in added {
            let Some(id) = id.as_u64().map(|i| i as usize).filter(|&i| i < n) else {
                continue;
            };
            tokens[id] = text.clone();
            scores[id] = -1000.0;
            types[id] = USER_DEFINED;
        }
    }
    let decoder = tokenizer_config
        .and_then(|t| t.get("added_tokens_decoder"))
        .and_then(Json::as_object);
    for (id, data) in decoder.into_iter().flatten() {
        let Some(id) = id.parse::<usize>().ok().filter(|&i| i < n) else {
            continue;
        };
        let content = data.get("content").and_then(Json::as_str).ok_or_else(|| {
            Error::BadRequest("tokenizer_config.json: added token without content".into())
        })?;
        let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
        if special || looks_special(content) {
            types[id] = CONTROL;
            tokens[id] = content.to_owned();
        } else {
            types[id] = USER_DEFINED;
            tokens[id] = content.replace('\u{2581}', " ");
        }
        scores[id] = -1000.0;
    }
    Ok(Vocab {
        tokens,
        types,
        scores: Some(scores),
    })
}

impl Vocab {
    /// tokens, scores (SentencePiece only) and token types.
    pub fn kvs(&self) -> Vec<(String, Value)> {
        let mut out = vec![(
            "tokenizer.ggml.tokens".to_owned(),
            self.tokens.clone().into(),
        )];
        if let Some(s) = &self.scores {
            out.push(("tokenizer.ggml.scores".into(), s.clone().into()));
        }
        out.push((
            "tokenizer.ggml.token_type".into(),
            self.types.clone().into(),
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pre_tokenizer_shapes() {
        let bl = |regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": regex});
        let split = |r: &str| json!({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": false});
        let digits = json!({"type": "Digits", "individual_digits": true});
        let seq = |v: Vec<Json>| json!({"type": "Sequence", "pretokenizers": v});
        let cases: Vec<(Json, Option<&str>)> = vec![
            (bl(true), Some("gpt-2")),
            (seq(vec![digits.clone(), bl(true)]), Some("smollm")),
            (seq(vec![split(LLAMA3_REGEX), bl(false)]), Some("llama-bpe")),
            (seq(vec![split(QWEN2_REGEX), bl(false)]), Some("qwen2")),
            (seq(vec![split("\\p{N}+"), bl(false)]), None),
            (
                seq(vec![
                    json!({"type": "Digits", "individual_digits": false}),
                    bl(true),
                ]),
                None,
            ),
            (
                json!({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}),
                None,
            ),
            (json!({"type": "Metaspace"}), None),
            (Json::Null, None),
        ];
        for (pre, want) in cases {
            assert_eq!(pre_tokenizer_name(&pre), want, "{pre}");
        }
    }

    #[test]
    fn bpe_types_and_padding() {
        let tok = json!({
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
            "added_tokens": [
                {"id": 3, "content": "<|end|>", "special": false},
                {"id": 4, "content": "<s>", "special": true},
                {"id": 5, "content": "x\u{2581}y", "special": false}
            ]
        });
        let (v, pre) = bpe(&tok, Some(8)).unwrap();
        assert_eq!(pre, "gpt-2");
        assert_eq!(
            v.tokens,
            ["a", "b", "ab", "<|end|>", "<s>", "x y", "[PAD6]", "[PAD7]"]
        );
        assert_eq!(
            v.types,
            [
                NORMAL,
                NORMAL,
                NORMAL,
                CONTROL,
                CONTROL,
                USER_DEFINED,
                UNUSED,
                UNUSED
            ]
        );
        assert!(
            bpe(&tok, Some(4)).is_err(),
            "ids past vocab_size are refused"
        );
    }
}
