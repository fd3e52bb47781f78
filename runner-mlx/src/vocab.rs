//! The checkpoint's tokenizer.json (the HF `tokenizers` crate) as runner-core's [`Vocabulary`].
//!
//! Token bytes: byte-level BPE vocabularies (GPT-2's byte↔char table: Llama 3, SmolLM2, Qwen)
//! map each token's characters back to bytes, so a token may be part of a UTF-8 character and
//! the stream holds it back as for GGUF models. Other tokenizer kinds are refused at load.

use runner_core::{Token, Vocabulary};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::Tokenizer;

pub struct Vocab {
    /// Parses control-token text as control tokens.
    special: Tokenizer,
    /// Treats control-token text as plain text.
    plain: Tokenizer,
    /// Each id's bytes, and whether it is a control (special added) token.
    pieces: Vec<(Vec<u8>, bool)>,
    eog: Vec<Token>,
}

/// GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to U+0100.. in order.
fn byte_decoder() -> HashMap<char, u8> {
    let printable: Vec<u8> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut map: HashMap<char, u8> = printable.iter().map(|&b| (char::from(b), b)).collect();
    let mut n = 0u32;
    for b in 0..=255u8 {
        if !printable.contains(&b) {
            map.insert(char::from_u32(256 + n).unwrap_or('\u{FFFD}'), b);
            n += 1;
        }
    }
    map
}

/// Texts llama.cpp also treats as end of generation when they are control tokens.
const EOG_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
];

impl Vocab {
    pub fn load(path: &Path, n_vocab: usize, eos: &[Token]) -> Result<Vocab, String> {
        let special = Tokenizer::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
        )
        .map_err(|e| e.to_string())?;
        let byte_level = json["decoder"]["type"] == "ByteLevel";
        if !byte_level {
            return Err(
                "tokenizer.json: only byte-level BPE tokenizers are supported by runner-mlx yet"
                    .into(),
            );
        }
        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        let decoder = byte_decoder();
        let added = special.get_added_tokens_decoder();
        let mut pieces = Vec::with_capacity(n_vocab);
        let mut eog: Vec<Token> = eos.to_vec();
        for id in 0..n_vocab as u32 {
            if let Some(a) = added.get(&id).filter(|a| a.special) {
                if EOG_TEXTS.contains(&a.content.as_str()) {
                    eog.push(id as Token);
                }
                pieces.push((a.content.clone().into_bytes(), true));
                continue;
            }
            let s = special.id_to_token(id).unwrap_or_default();
            let bytes = match added.get(&id) {
                Some(a) => a.content.clone().into_bytes(),
                None => s
                    .chars()
                    .map(|c| decoder.get(&c).copied().unwrap_or(b'?'))
                    .collect(),
            };
            pieces.push((bytes, false));
        }
        eog.sort_unstable();
        eog.dedup();
        Ok(Vocab {
            special,
            plain,
            pieces,
            eog,
        })
    }
}

impl Vocabulary for Vocab {
    fn n_vocab(&self) -> i32 {
        self.pieces.len() as i32
    }
    fn token_piece(&self, t: Token, special: bool) -> Vec<u8> {
        match self.pieces.get(t as usize) {
            Some((_, true)) if !special => Vec::new(),
            Some((b, _)) => b.clone(),
            None => Vec::new(),
        }
    }
    fn eog_tokens(&self) -> Vec<Token> {
        self.eog.clone()
    }
    fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Token>, String> {
        let t = if parse_special {
            &self.special
        } else {
            &self.plain
        };
        let enc = t.encode(text, add_special).map_err(|e| e.to_string())?;
        Ok(enc.get_ids().iter().map(|&i| i as Token).collect())
    }
    fn detokenize(&self, tokens: &[Token], render_special: bool) -> Vec<u8> {
        tokens
            .iter()
            .flat_map(|&t| self.token_piece(t, render_special))
            .collect()
    }
}
