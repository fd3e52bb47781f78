//! Images in a prompt: tokenizing text and images together through the projector, and the
//! stand-in token ids that let the slot prefix cache treat an image like any other run of
//! tokens.
//!
//! Invariants:
//! - An image of `n` tokens occupies `n` consecutive entries of a job's tokens (and then of its
//!   slot's `cache`), each a negative stand-in id derived from the image's id (the hash of its
//!   bytes) and its offset in the image: no vocabulary id is negative, so a stand-in never
//!   equals a text token, and the same image at the same place matches position by position.
//! - `Media::at` is the index of the image's first token in the job's tokens; media are in
//!   increasing `at` order and never overlap.

use std::sync::Arc;

use runner_protocol::{CompletionRequest, ErrorKind, Prompt, RunnerError};

use std::time::Instant;

use super::{fail, Engine};
use crate::ffi::{ImageChunk, Part, Piece, Projector, Token};
use runner_core::jobs::{Media as JobMedia, MediaPrompt};
use std::future::Future;
use std::pin::Pin;

/// An image waiting to be evaluated.
pub struct Media {
    pub at: usize,
    pub chunk: ImageChunk,
}

impl Media {
    pub fn n_tokens(&self) -> usize {
        self.chunk.n_tokens
    }
}

/// The stand-in id of token `j` of the image with hex id `id`.
pub fn stand_in(id: &str, j: usize) -> Token {
    let h = u32::from_str_radix(id.get(..8).unwrap_or("0"), 16).unwrap_or(0);
    -1 - ((h.wrapping_add(j as u32) & 0x3fff_ffff) as Token)
}

/// Whether `t` is an image stand-in.
pub fn is_stand_in(t: Token) -> bool {
    t < 0
}

fn bad(msg: impl Into<String>) -> RunnerError {
    RunnerError::new(ErrorKind::BadRequest, msg)
}

/// The projector as runner-core's protocol layer sees it: it tokenizes prompts with images.
pub struct Images(pub Arc<Projector>);

impl MediaPrompt for Images {
    fn prompt<'a>(
        &'a self,
        r: &'a mut CompletionRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(Vec<Token>, JobMedia), RunnerError>> + Send + 'a>>
    {
        Box::pin(async move {
            let (tokens, media) = prompt(&self.0, r).await?;
            let media = media
                .into_iter()
                .map(|m| Box::new(m) as Box<dyn std::any::Any + Send>)
                .collect();
            Ok((tokens, media))
        })
    }
}

/// A job's media back as this engine made them ([`Images::prompt`] is their only source).
pub fn from_jobs(media: JobMedia) -> Vec<Media> {
    media
        .into_iter()
        .map(|m| {
            *m.downcast::<Media>()
                .expect("job media come from Images::prompt")
        })
        .collect()
}

/// Tokens and images of a text prompt with images (`r.images`, which this takes out of the
/// request: the pixels are not needed after tokenizing).
async fn prompt(
    projector: &Arc<Projector>,
    r: &mut CompletionRequest,
) -> Result<(Vec<Token>, Vec<Media>), RunnerError> {
    let projector = projector.clone();
    let Prompt::Text(text) = std::mem::take(&mut r.prompt) else {
        return Err(bad("images need a text prompt"));
    };
    let images = std::mem::take(&mut r.images);
    let (add_special, parse_special) = (r.add_special, r.parse_special);
    let out = tokio::task::spawn_blocking(move || {
        tokenize(&projector, &text, &images, add_special, parse_special).map(|t| (t, text))
    })
    .await
    .map_err(|e| RunnerError::new(ErrorKind::Internal, e.to_string()))??;
    r.prompt = Prompt::Text(out.1);
    Ok(out.0)
}

fn tokenize(
    projector: &Arc<Projector>,
    text: &str,
    images: &[runner_protocol::PromptImage],
    add_special: bool,
    parse_special: bool,
) -> Result<(Vec<Token>, Vec<Media>), RunnerError> {
    let mut parts = Vec::with_capacity(2 * images.len() + 1);
    let mut from = 0;
    for img in images {
        let at = img.offset;
        if at < from || at > text.len() || !text.is_char_boundary(at) {
            return Err(bad(format!(
                "image offset {at} is not a place in the prompt"
            )));
        }
        if at > from {
            parts.push(Part::Text(&text[from..at]));
        }
        parts.push(Part::Image {
            width: img.width,
            height: img.height,
            rgb: &img.rgb,
            id: &img.id,
        });
        from = at;
    }
    if from < text.len() {
        parts.push(Part::Text(&text[from..]));
    }
    let pieces = projector
        .tokenize(&parts, add_special, parse_special)
        .map_err(bad)?;
    let mut tokens = Vec::new();
    let mut media = Vec::new();
    let mut ids = images.iter().map(|i| i.id.as_str());
    for p in pieces {
        match p {
            Piece::Text(t) => tokens.extend(t),
            Piece::Image(chunk) => {
                let id = ids.next().unwrap_or("0");
                let at = tokens.len();
                tokens.extend((0..chunk.n_tokens).map(|j| stand_in(id, j)));
                media.push(Media { at, chunk });
            }
        }
    }
    if tokens.last().copied().is_some_and(is_stand_in) {
        return Err(bad("the prompt must not end with an image"));
    }
    Ok((tokens, media))
}

/// The most tokens one image takes with this projector (what the micro-batch must hold): the
/// count for a large probe image, since projectors grow an image's tokens with its size up to
/// their ceiling and fixed-resolution ones always give the same count.
pub fn max_image_tokens(projector: &Projector) -> Result<u32, String> {
    const SIDE: u32 = 2048;
    let rgb = vec![128u8; (SIDE * SIDE * 3) as usize];
    let pieces = projector.tokenize(
        &[Part::Image {
            width: SIDE,
            height: SIDE,
            rgb: &rgb,
            id: "probe",
        }],
        false,
        false,
    )?;
    let n = pieces
        .iter()
        .map(|p| match p {
            Piece::Image(c) => c.n_tokens,
            Piece::Text(_) => 0,
        })
        .max()
        .unwrap_or(0);
    u32::try_from(n).map_err(|_| "an image takes more tokens than a batch holds".to_string())
}

/// Where prefix reuse may end: never inside an image (its tokens are evaluated together), so a
/// reuse that ends in one backs off to the image's start.
pub fn reuse_boundary(reuse: usize, media: &[Media]) -> usize {
    media
        .iter()
        .find(|m| m.at < reuse && reuse < m.at + m.n_tokens())
        .map_or(reuse, |m| m.at)
}

/// A prompt's tokens as the sampler's penalty history: image stand-ins are no tokens of the
/// vocabulary, so penalties never see them.
pub fn text_history(tokens: &[Token], has_media: bool) -> std::borrow::Cow<'_, [Token]> {
    if has_media {
        tokens
            .iter()
            .copied()
            .filter(|&t| !is_stand_in(t))
            .collect::<Vec<_>>()
            .into()
    } else {
        tokens.into()
    }
}

impl Engine {
    /// A slot whose prompt has reached an image: it evaluates the image in a step of its own.
    pub(super) fn image_due(&self) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.active.as_ref().is_some_and(|a| {
                a.next.is_none() && a.media.front().is_some_and(|m| m.at == s.cache.len())
            })
        })
    }

    /// Encodes slot `i`'s next image with the projector and decodes its embeddings into the
    /// slot's sequence, in one micro-batch. A failure fails the request and forgets the
    /// sequence (its KV state is unknown).
    pub(super) fn eval_image(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return;
        };
        let Some(m) = a.media.pop_front() else {
            return;
        };
        let Some(projector) = self.projector.as_ref() else {
            return fail(
                slot,
                ErrorKind::BadRequest,
                "this model is missing data required for image input",
            );
        };
        let started = Instant::now();
        let n = m.n_tokens();
        let mut encoded = started;
        let res = projector.encode(&m.chunk).and_then(|embd| {
            encoded = Instant::now();
            let non_causal = projector.non_causal(&m.chunk);
            self.ctx
                .decode_embd(&embd, n, slot.cache.len() as i32, slot.seq, non_causal)
                .map_err(|e| format!("decoding the image's embeddings failed ({e:?})"))
        });
        if crate::ffi::log_debug() {
            eprintln!(
                "runner-llamacpp: slot {i}: image of {n} tokens: encode {:.1} ms, decode {:.1} ms",
                (encoded - started).as_secs_f64() * 1e3,
                encoded.elapsed().as_secs_f64() * 1e3
            );
        }
        match res {
            Ok(()) => {
                a.reply.timings.prompt_eval_duration_ns += started.elapsed().as_nanos() as u64;
                slot.cache.extend(a.pending.drain(..n));
            }
            Err(msg) => {
                fail(slot, ErrorKind::Internal, &msg);
                self.ctx.seq_rm(slot.seq, -1, -1);
                slot.cache.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_are_negative_distinct_per_position_and_stable() {
        let id = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let a: Vec<Token> = (0..4).map(|j| stand_in(id, j)).collect();
        assert!(a.iter().all(|&t| is_stand_in(t)));
        assert_eq!(a, (0..4).map(|j| stand_in(id, j)).collect::<Vec<_>>());
        assert_ne!(a[0], a[1]);
        assert_ne!(stand_in(id, 0), stand_in("00000000", 0));
        // The most a 30-bit hash plus an offset can give stays in range.
        assert!(stand_in("ffffffff", usize::MAX) < 0);
    }
}
