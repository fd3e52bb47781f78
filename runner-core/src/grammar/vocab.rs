//! The llguidance token environment built from the loaded model's vocabulary.
//!
//! Each token's bytes are what the engine streams for it (`token_piece`), so the grammar sees the
//! same text the server does: byte-fallback pieces (`<0x0A>`) are their single byte, multi-byte
//! characters may span tokens. Control tokens (no text unless rendered specially) get llguidance's
//! special-token form, `0xFF` + their text, so plain text can never match them; the grammar names
//! them by id. EOS/EOG ids are the trie's end tokens: the mask allows them only where the grammar
//! accepts.

use crate::{Token, Vocabulary};
use std::collections::HashMap;
use std::sync::Arc;
use toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

pub struct Vocab {
    pub env: TokEnv,
    /// Text of each control token → its id (for closing strings that are one special token).
    pub specials: HashMap<String, u32>,
    pub eog: Vec<Token>,
}

/// Token bytes as the trie stores them, and whether the token is a control token.
/// `plain` is the piece without special rendering, `rendered` with it.
pub fn trie_word(plain: Vec<u8>, rendered: Vec<u8>) -> (Vec<u8>, bool) {
    if plain.is_empty() && !rendered.is_empty() {
        let mut w = Vec::with_capacity(rendered.len() + 1);
        w.push(TokTrie::SPECIAL_TOKEN_MARKER);
        w.extend_from_slice(&rendered);
        (w, true)
    } else {
        (plain, false)
    }
}

pub fn build(model: &dyn Vocabulary) -> Vocab {
    let n = model.n_vocab().max(0) as u32;
    let mut words = Vec::with_capacity(n as usize);
    let mut specials = HashMap::new();
    for t in 0..n as Token {
        let (w, special) = trie_word(model.token_piece(t, false), model.token_piece(t, true));
        if special {
            specials.insert(String::from_utf8_lossy(&w[1..]).into_owned(), t as u32);
        }
        words.push(w);
    }
    let eog = model.eog_tokens();
    let eos: Vec<u32> = eog.iter().map(|&t| t as u32).collect();
    let info = TokRxInfo::new(n, eos.first().copied().unwrap_or(0));
    let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
    Vocab {
        env: Arc::new(ApproximateTokEnv::new(trie)),
        specials,
        eog,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_tokens_get_the_special_marker_and_text_tokens_do_not() {
        assert_eq!(
            trie_word(b"ab".to_vec(), b"ab".to_vec()),
            (b"ab".to_vec(), false)
        );
        let (w, s) = trie_word(Vec::new(), b"<eos>".to_vec());
        assert!(s);
        assert_eq!(w, b"\xFF<eos>".to_vec());
        // A token with no text at all stays empty (the trie never offers it).
        assert_eq!(trie_word(Vec::new(), Vec::new()), (Vec::new(), false));
    }
}
