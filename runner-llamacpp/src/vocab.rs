//! The GGUF model's vocabulary as runner-core's [`Vocabulary`] (llama.cpp's tokenizer, which it
//! documents as thread-safe).

use crate::ffi::{Model, Token};
use runner_core::Vocabulary;

impl Vocabulary for Model {
    fn n_vocab(&self) -> i32 {
        Model::n_vocab(self)
    }
    fn token_piece(&self, t: Token, special: bool) -> Vec<u8> {
        Model::token_piece(self, t, special)
    }
    fn eog_tokens(&self) -> Vec<Token> {
        Model::eog_tokens(self)
    }
    fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Token>, String> {
        Model::tokenize(self, text, add_special, parse_special)
    }
    fn detokenize(&self, tokens: &[Token], render_special: bool) -> Vec<u8> {
        Model::detokenize(self, tokens, render_special)
    }
}
