//! runner-core: what every herd runner shares, whatever engine computes its logits.
//!
//! Owns the engine-independent half of a runner: token selection ([`sampling`], [`select`]),
//! streamed text with stop strings and UTF-8 holdback ([`text`]), speculative drafting policy
//! ([`draft`]), output constraints through
//! llguidance ([`grammar`]), the jobs the socket handlers hand to an engine thread ([`jobs`]), and
//! the runner protocol on the Unix socket ([`http`], [`serve`]), slot policy ([`slots`]) and each
//! request's answer stream ([`reply`]). An engine (runner-llamacpp,
//! runner-mlx) supplies its vocabulary ([`Vocabulary`]), its sampler chain
//! ([`sampling::Chain`]) and an engine thread that drains [`jobs::Job`]s.

pub mod draft;
pub mod embed_cut;
pub mod grammar;
pub mod http;
pub mod jobs;
pub mod reply;
pub mod sampling;
pub mod select;
pub mod serve;
pub mod slots;
pub mod text;

/// A token id, as every engine numbers its vocabulary (llama.cpp's `llama_token`).
pub type Token = i32;

/// One sampling candidate. Its layout is llama.cpp's `llama_token_data` (runner-llamacpp's
/// bindings use this type for it), so candidate arrays pass to llama.cpp's samplers as they are.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TokenData {
    pub id: Token,
    pub logit: f32,
    pub p: f32,
}

/// The loaded model's vocabulary, as the socket handlers and the grammar engine need it. It is
/// immutable after load and shared across threads.
pub trait Vocabulary: Send + Sync + 'static {
    fn n_vocab(&self) -> i32;
    /// The bytes token `t` streams as; `special` renders control tokens as their text.
    fn token_piece(&self, t: Token, special: bool) -> Vec<u8>;
    /// End-of-generation tokens (EOS, EOT, …).
    fn eog_tokens(&self) -> Vec<Token>;
    /// Tokenize `text`; `parse_special` lets control-token text become control tokens.
    fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Token>, String>;
    /// The bytes of `tokens` joined (control tokens as text only when `render_special`).
    fn detokenize(&self, tokens: &[Token], render_special: bool) -> Vec<u8>;
}

/// The running binary's name (`runner-llamacpp`, `runner-mlx`): the prefix of every line a
/// runner writes itself, which the server and the tests tell from the engine's own output.
pub fn name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::env::args_os()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "runner".into())
    })
}
