//! Bounds on the prompt work one request can cause, by `num_ctx`, before anything is rendered
//! or tokenized in full (issue 22 item 6). The runner keeps, of a prompt longer than its
//! context, the first `num_keep` tokens and the newest tail (Ollama's truncation); everything in
//! between is discarded. So text beyond what those tokens can span need not travel, render or
//! tokenize at all: a 50 MB prompt or a `context` of 200k ids is clipped to what the runner
//! could keep, and refused at once when truncation is off and it certainly overflows.
//!
//! Invariant: a token spans at most [`MAX_TOKEN_BYTES`] bytes of text, so `n` bytes hold at
//! least `n / MAX_TOKEN_BYTES` tokens. Clipping keeps at least `keep + 1` tokens' worth of head
//! and `limit + 1` of tail, so the tokens the runner keeps come from text that is unchanged,
//! away from the seam (tokenizers split locally). Pure functions, table-tested.

/// Longest text one token covers, with a wide margin: real vocabularies stay under ~128 bytes
/// (runs of spaces or `=`); special tokens parsed from text are shorter still.
pub const MAX_TOKEN_BYTES: usize = 256;

/// What the runner keeps of an over-long prompt: `limit` tokens in all, the first `keep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: usize,
    pub keep: usize,
}

impl Window {
    /// The window of a context of `num_ctx` with `num_keep` (negative = keep all, bounded to
    /// the context like the runner's `fit_prompt`).
    pub fn new(num_ctx: u32, num_keep: i64) -> Window {
        let limit = (num_ctx as usize).max(1);
        let keep = usize::try_from(num_keep).unwrap_or(limit).min(limit);
        Window { limit, keep }
    }

    /// Fewest tokens `bytes` of text can be.
    pub fn min_tokens(bytes: usize) -> usize {
        bytes / MAX_TOKEN_BYTES
    }

    /// Whether `bytes` of text certainly hold more tokens than the context.
    pub fn certainly_overflows(&self, bytes: usize) -> bool {
        Window::min_tokens(bytes) > self.limit
    }

    /// `text` cut to the head and tail the runner could keep, or `None` when it is short enough
    /// to pass whole.
    pub fn clip_text(&self, text: &str) -> Option<String> {
        let head = (self.keep + 1).saturating_mul(MAX_TOKEN_BYTES);
        let tail = (self.limit + 1).saturating_mul(MAX_TOKEN_BYTES);
        if text.len() <= head.saturating_add(tail) {
            return None;
        }
        let mut h = head;
        while !text.is_char_boundary(h) {
            h -= 1;
        }
        let mut t = text.len() - tail;
        while !text.is_char_boundary(t) {
            t += 1;
        }
        let mut out = String::with_capacity(h + text.len() - t);
        out.push_str(&text[..h]);
        out.push_str(&text[t..]);
        Some(out)
    }

    /// `ids` (a generate `context`) cut to the first `keep` and the newest `limit`.
    pub fn clip_ids<T: Copy>(&self, ids: &[T]) -> Vec<T> {
        if ids.len() <= self.keep + self.limit {
            return ids.to_vec();
        }
        let mut out = Vec::with_capacity(self.keep + self.limit);
        out.extend_from_slice(&ids[..self.keep]);
        out.extend_from_slice(&ids[ids.len() - self.limit..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        // (num_ctx, num_keep) → (limit, keep)
        let table = [
            ((512, 4), (512, 4)),
            ((512, -1), (512, 512)),
            ((512, 10_000), (512, 512)),
            ((0, 4), (1, 1)),
        ];
        for ((ctx, keep), want) in table {
            let w = Window::new(ctx, keep);
            assert_eq!((w.limit, w.keep), want, "{ctx} {keep}");
        }
        let w = Window::new(512, 4);
        assert!(!w.certainly_overflows(512 * MAX_TOKEN_BYTES));
        assert!(w.certainly_overflows(513 * MAX_TOKEN_BYTES));
    }

    #[test]
    fn clipped_text_keeps_head_and_tail() {
        let w = Window::new(4, 1);
        let (head, tail) = (2 * MAX_TOKEN_BYTES, 5 * MAX_TOKEN_BYTES);
        let short = "a".repeat(head + tail);
        assert_eq!(w.clip_text(&short), None);
        let text = format!(
            "{}{}{}",
            "h".repeat(head),
            "m".repeat(10_000),
            "t".repeat(tail)
        );
        let clipped = w.clip_text(&text).unwrap();
        assert_eq!(clipped, format!("{}{}", "h".repeat(head), "t".repeat(tail)));
        // Multi-byte characters are never split.
        let text = "é".repeat(10_000);
        let clipped = w.clip_text(&text).unwrap();
        assert!(clipped.chars().all(|c| c == 'é'));
        assert!(clipped.len() <= head + tail && clipped.len() >= head + tail - 2);
    }

    #[test]
    fn clipped_ids() {
        let w = Window::new(4, 1);
        let ids: Vec<i32> = (0..10).collect();
        assert_eq!(w.clip_ids(&ids), vec![0, 6, 7, 8, 9]);
        assert_eq!(w.clip_ids(&ids[..5]), vec![0, 1, 2, 3, 4]);
        assert_eq!(w.clip_ids::<i32>(&[]), Vec::<i32>::new());
    }
}
