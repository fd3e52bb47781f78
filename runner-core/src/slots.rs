//! Engine-independent slot policy every runner applies to its per-sequence caches: which free
//! slot a prompt goes to, how much of that slot's cache it reuses, how a long prompt is cut to
//! fit a slot, and how a full slot is shifted. Pure functions; runner-llamacpp's plan.rs tests
//! them in its tables beside its own batch composition.

use crate::Token;

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Tokens of `cache` to keep for `prompt`: the common prefix, but never the whole prompt — the
/// last prompt token is always evaluated again so its logits exist.
pub fn reuse_len(cache: &[Token], prompt: &[Token], cache_prompt: bool) -> usize {
    if !cache_prompt {
        return 0;
    }
    common_prefix(cache, prompt).min(prompt.len().saturating_sub(1))
}

/// Among free slots (index, cached tokens), the one whose cache shares the longest prefix with
/// `prompt`; ties go to the emptiest cache (least to throw away), then the lowest index.
pub fn pick_slot<'a>(
    free: impl IntoIterator<Item = (usize, &'a [Token])>,
    prompt: &[Token],
) -> Option<usize> {
    free.into_iter()
        .map(|(i, cache)| (i, common_prefix(cache, prompt), cache.len()))
        .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(b.0.cmp(&a.0)))
        .map(|(i, _, _)| i)
}

/// A prompt that does not fit a slot and may not be truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub prompt: usize,
    pub limit: usize,
}

/// Fit `prompt` into a slot of `n_ctx` positions, leaving room for one generated token: unchanged
/// if it fits; else, when `truncate`, the first `num_keep` tokens plus the newest tail; else an
/// error.
pub fn fit_prompt(
    prompt: Vec<Token>,
    n_ctx: usize,
    num_keep: i32,
    truncate: bool,
) -> Result<Vec<Token>, Overflow> {
    let limit = n_ctx.saturating_sub(1).max(1);
    if prompt.len() <= limit {
        return Ok(prompt);
    }
    if !truncate {
        return Err(Overflow {
            prompt: prompt.len(),
            limit,
        });
    }
    let keep = keep_len(num_keep, prompt.len(), limit);
    let tail = limit - keep;
    let mut out = prompt[..keep].to_vec();
    out.extend_from_slice(&prompt[prompt.len() - tail..]);
    Ok(out)
}

/// `num_keep` bounded to the sequence (negative = keep all, as Ollama) and below `limit` with room
/// left for at least half of it to move.
fn keep_len(num_keep: i32, len: usize, limit: usize) -> usize {
    let want = if num_keep < 0 { len } else { num_keep as usize };
    want.min(len).min(limit / 2)
}

/// Context shift for a full slot of `len` tokens: keep the first `num_keep`, drop half of the
/// rest. Returns (first dropped position, number dropped).
pub fn shift(len: usize, num_keep: i32) -> (usize, usize) {
    let keep = keep_len(num_keep, len, len);
    let discard = ((len - keep) / 2).max(1);
    (keep, discard)
}

/// [`fit_prompt`] as the socket handlers take it (`http::FitPrompt`): the overflow as
/// `(prompt, limit)`.
pub fn fit(
    prompt: Vec<Token>,
    n_ctx: usize,
    num_keep: i32,
    truncate: bool,
) -> Result<Vec<Token>, (usize, usize)> {
    fit_prompt(prompt, n_ctx, num_keep, truncate).map_err(|o| (o.prompt, o.limit))
}
