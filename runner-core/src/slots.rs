//! Engine-independent slot policy every runner applies to its per-sequence caches: which free
//! slot a prompt goes to, how much of that slot's cache it reuses, how a long prompt is cut to
//! fit a slot, and how a full slot is shifted. Pure functions; runner-llamacpp's plan.rs tests
//! them in its tables beside its own batch composition.

use crate::Token;
use runner_protocol::RunnerError;

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

/// What a request lets the runner do with a prompt longer than its slot (`truncate`, `shift`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Keep the first `num_keep` tokens and the newest tail (Ollama's default).
    Truncate,
    /// `truncate: false`: refuse, as llama-server refuses a prompt that does not fit.
    Refuse,
    /// `shift: false` with truncation on: Ollama refuses too, since its runner, launched
    /// without context shift, cannot take a truncated prompt either.
    RefuseWithoutShift,
}

impl Cut {
    pub fn for_request(truncate: bool, shift: bool) -> Cut {
        match (truncate, shift) {
            (false, _) => Cut::Refuse,
            (true, false) => Cut::RefuseWithoutShift,
            (true, true) => Cut::Truncate,
        }
    }
}

/// A prompt that does not fit a slot and may not be truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub prompt: usize,
    /// Most prompt tokens the slot takes (its positions less one for the generated token).
    pub limit: usize,
    pub cut: Cut,
}

impl Overflow {
    /// The refusal a client of Ollama gets for this overflow (runner-protocol's texts).
    pub fn error(&self) -> RunnerError {
        match self.cut {
            Cut::RefuseWithoutShift => RunnerError::longer_than_context(),
            Cut::Refuse | Cut::Truncate => {
                RunnerError::exceeds_context(self.prompt, self.limit + 1)
            }
        }
    }
}

/// Fit `prompt` into a slot of `n_ctx` positions, as Ollama does (`completionPromptForRequest`):
/// unchanged if it leaves room for one generated token; else, when `cut` is [`Cut::Truncate`],
/// the first `num_keep` tokens (negative = all, at most the slot less one) and the newest tail,
/// cut to what the old runners' first context shift left: `n_ctx - (n_ctx - keep) / 2`
/// tokens, so half of the rest is free for the answer; else an error.
pub fn fit_prompt(
    prompt: Vec<Token>,
    n_ctx: usize,
    num_keep: i32,
    cut: Cut,
) -> Result<Vec<Token>, Overflow> {
    let limit = n_ctx.saturating_sub(1).max(1);
    if prompt.len() <= limit {
        return Ok(prompt);
    }
    if cut != Cut::Truncate {
        return Err(Overflow {
            prompt: prompt.len(),
            limit,
            cut,
        });
    }
    let keep = usize::try_from(num_keep).unwrap_or(prompt.len()).min(limit);
    let kept = n_ctx
        .saturating_sub((n_ctx.saturating_sub(keep) / 2).max(1))
        .max(1);
    let discard = prompt.len() - kept;
    let mut out = prompt[..keep].to_vec();
    out.extend_from_slice(&prompt[keep + discard..]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_and_shift_choose_how_a_long_prompt_is_cut() {
        let cases = [
            (true, true, Cut::Truncate),
            (true, false, Cut::RefuseWithoutShift),
            (false, true, Cut::Refuse),
            (false, false, Cut::Refuse),
        ];
        for (truncate, shift, want) in cases {
            assert_eq!(
                Cut::for_request(truncate, shift),
                want,
                "{truncate} {shift}"
            );
        }
    }

    #[test]
    fn overflows_read_as_ollama_reports_them() {
        let o = |cut| Overflow {
            prompt: 410,
            limit: 255,
            cut,
        };
        // llama-server's body, which Ollama forwards as its error string (fields in its order).
        assert_eq!(
            o(Cut::Refuse).error().message,
            r#"{"error":{"code":400,"message":"request (410 tokens) exceeds the available context size (256 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":410,"n_ctx":256}}"#
        );
        assert_eq!(
            o(Cut::RefuseWithoutShift).error().message,
            "the prompt is longer than the context length currently available to the model; \
             shorten the prompt, adjust the context length in settings, or use a model with a \
             longer context length"
        );
    }
}
