//! One completion request's answer stream, as every engine thread drives it: the generation
//! budget (num_predict, or 10 × the slot's context when unbounded), end-of-generation tokens,
//! stop strings with their holdback ([`TextStream`]), log-probabilities held with their text,
//! the first token chunk's prompt length, and the final `done` chunk with the counters.
//!
//! Invariants: a `Reply` sends at most one final chunk (`done` or `error`), and only by being
//! consumed (`finish`, `fail`); log-probabilities leave together with the text they belong to,
//! so a client never sees a token's logprob before (or without) its text.

use crate::sampling::Choice;
use crate::text::TextStream;
use crate::{Token, Vocabulary};
use runner_protocol::{
    CompletionChunk, CompletionRequest, DoneReason, ErrorKind, RunnerError, Timings, TokenLogprob,
    TopLogprob,
};
use tokio::sync::mpsc::UnboundedSender;

/// Tokens a request may generate: `num_predict`, at most 10 × the context (Ollama's
/// `boundedNumPredict`: "unlimited", a negative `num_predict`, is that bound too).
pub fn budget(num_predict: i32, n_ctx: usize) -> u32 {
    let limit = (10 * n_ctx).min(i32::MAX as usize) as u32;
    match num_predict {
        n if n < 0 => limit,
        n => (n as u32).min(limit),
    }
}

pub struct Reply {
    out: UnboundedSender<CompletionChunk>,
    text: TextStream,
    logprobs: bool,
    /// Logprobs of tokens whose text is still held back.
    lp_held: Vec<TokenLogprob>,
    limit: u32,
    /// The whole prompt's length, until the first token chunk carries it.
    announce: Option<u32>,
    pub timings: Timings,
}

impl Reply {
    /// The reply to `req`, whose prompt of `prompt_len` tokens reuses `reuse` cached ones. None
    /// when the budget is zero: the `done` chunk has been sent already.
    pub fn new(
        out: UnboundedSender<CompletionChunk>,
        req: &CompletionRequest,
        prompt_len: usize,
        reuse: usize,
        n_ctx_seq: usize,
    ) -> Option<Reply> {
        let timings = Timings {
            cached_tokens: reuse as u32,
            prompt_eval_count: (prompt_len - reuse) as u32,
            ..Timings::default()
        };
        let limit = budget(req.num_predict, n_ctx_seq);
        if limit == 0 {
            let _ = out.send(CompletionChunk::Done {
                done_reason: DoneReason::Length,
                timings,
            });
            return None;
        }
        Some(Reply {
            out,
            text: TextStream::new(&req.stop),
            logprobs: req.logprobs || req.top_logprobs > 0,
            lp_held: Vec::new(),
            limit,
            announce: Some(prompt_len as u32),
            timings,
        })
    }

    /// The client has gone (its stream was dropped).
    pub fn is_closed(&self) -> bool {
        self.out.is_closed()
    }

    /// A probe of [`Reply::is_closed`] that another thread may call while the engine computes
    /// (an abort callback watching for the client leaving mid-step).
    pub fn closed_probe(&self) -> impl Fn() -> bool + Send + 'static {
        let out = self.out.clone();
        move || out.is_closed()
    }

    /// Tokens the request may still generate before its budget ends it.
    pub fn left(&self) -> u32 {
        self.limit.saturating_sub(self.timings.eval_count)
    }

    /// A prefill heartbeat: `processed` prompt positions are in the cache.
    pub fn progress(&self, processed: u32) {
        let _ = self.out.send(CompletionChunk::Progress { processed });
    }

    /// Stream the chosen token (`eog`: it ends generation). Some(reason) when the request is
    /// over; the caller then calls [`Reply::finish`] with it.
    pub fn token(&mut self, vocab: &dyn Vocabulary, eog: bool, c: &Choice) -> Option<DoneReason> {
        self.timings.eval_count += 1;
        if eog {
            return Some(DoneReason::Stop);
        }
        let piece = vocab.token_piece(c.token, true);
        if self.logprobs {
            let entry = |t: Token, logprob: f32| {
                let bytes = vocab.token_piece(t, true);
                (String::from_utf8_lossy(&bytes).into_owned(), logprob, bytes)
            };
            let (token, logprob, bytes) = entry(c.token, c.logprob.unwrap_or(f32::NEG_INFINITY));
            self.lp_held.push(TokenLogprob {
                token,
                logprob,
                bytes,
                top_logprobs: c
                    .top
                    .iter()
                    .map(|&(id, lp)| {
                        let (token, logprob, bytes) = entry(id, lp);
                        TopLogprob {
                            token,
                            logprob,
                            bytes,
                        }
                    })
                    .collect(),
            });
        }
        let step = self.text.push(&piece);
        if !step.text.is_empty() {
            let logprobs = std::mem::take(&mut self.lp_held);
            let _ = self.out.send(CompletionChunk::Token {
                content: step.text,
                logprobs,
                prompt_tokens: self.announce.take(),
            });
        }
        if step.stopped {
            return Some(DoneReason::Stop);
        }
        (self.timings.eval_count >= self.limit).then_some(DoneReason::Length)
    }

    /// End the request: release held text (unless a stop string ended it), then `done`.
    pub fn finish(mut self, reason: DoneReason) {
        let rest = self.text.finish();
        if !rest.is_empty() {
            let _ = self.out.send(CompletionChunk::Token {
                content: rest,
                logprobs: std::mem::take(&mut self.lp_held),
                prompt_tokens: self.announce.take(),
            });
        }
        let _ = self.out.send(CompletionChunk::Done {
            done_reason: reason,
            timings: self.timings,
        });
    }

    /// End the request with an error line.
    pub fn fail(self, kind: ErrorKind, message: impl Into<String>) {
        let _ = self.out.send(CompletionChunk::Error {
            error: RunnerError::new(kind, message),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Letters;
    impl Vocabulary for Letters {
        fn n_vocab(&self) -> i32 {
            26
        }
        fn token_piece(&self, t: Token, _: bool) -> Vec<u8> {
            vec![b'a' + t as u8]
        }
        fn eog_tokens(&self) -> Vec<Token> {
            vec![25]
        }
        fn tokenize(&self, _: &str, _: bool, _: bool) -> Result<Vec<Token>, String> {
            Ok(Vec::new())
        }
        fn detokenize(&self, t: &[Token], _: bool) -> Vec<u8> {
            t.iter().map(|&t| b'a' + t as u8).collect()
        }
    }

    fn pick(t: Token) -> Choice {
        Choice {
            token: t,
            logprob: Some(-0.5),
            top: vec![(t, -0.5)],
        }
    }

    fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<CompletionChunk>) -> Vec<String> {
        let mut v = Vec::new();
        while let Ok(c) = rx.try_recv() {
            v.push(match c {
                CompletionChunk::Token {
                    content, logprobs, ..
                } => format!("{content}/{}", logprobs.len()),
                CompletionChunk::Done {
                    done_reason,
                    timings,
                } => format!("done {done_reason:?} {}", timings.eval_count),
                other => format!("{other:?}"),
            });
        }
        v
    }

    #[test]
    fn the_budget_is_num_predict_or_ten_contexts() {
        assert_eq!(budget(-1, 512), 5120);
        assert_eq!(budget(-2, 100), 1000);
        assert_eq!(budget(7, 512), 7);
        assert_eq!(budget(0, 512), 0);
        assert_eq!(budget(6000, 512), 5120, "bounded like unlimited");
    }

    #[test]
    fn stops_hold_text_and_logprobs_back_and_the_budget_ends_with_length() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let req = CompletionRequest {
            stop: vec!["cd".into()],
            logprobs: true,
            num_predict: 10,
            ..CompletionRequest::default()
        };
        let mut r = Reply::new(tx, &req, 5, 2, 64).unwrap();
        assert_eq!(r.left(), 10);
        assert_eq!(r.token(&Letters, false, &pick(0)), None); // "a"
        assert_eq!(r.left(), 9);
        assert_eq!(r.token(&Letters, false, &pick(2)), None); // "c" held: may start "cd"
        assert_eq!(drain(&mut rx), ["a/1"]);
        assert_eq!(r.token(&Letters, false, &pick(3)), Some(DoneReason::Stop));
        r.finish(DoneReason::Stop);
        assert_eq!(drain(&mut rx), ["done Stop 3"]);

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let req = CompletionRequest {
            num_predict: 2,
            ..CompletionRequest::default()
        };
        let mut r = Reply::new(tx, &req, 1, 0, 64).unwrap();
        assert_eq!(r.token(&Letters, false, &pick(1)), None);
        assert_eq!(r.token(&Letters, false, &pick(1)), Some(DoneReason::Length));
        r.finish(DoneReason::Length);
        assert_eq!(drain(&mut rx), ["b/0", "b/0", "done Length 2"]);

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut r = Reply::new(tx, &CompletionRequest::default(), 1, 0, 64).unwrap();
        assert_eq!(r.left(), 640, "unbounded: 10 contexts");
        assert_eq!(r.token(&Letters, true, &pick(25)), Some(DoneReason::Stop));
        r.finish(DoneReason::Stop);
        assert_eq!(
            drain(&mut rx),
            ["done Stop 1"],
            "an EOG token streams no text"
        );

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let req = CompletionRequest {
            num_predict: 0,
            ..CompletionRequest::default()
        };
        assert!(Reply::new(tx, &req, 3, 0, 64).is_none());
        assert_eq!(drain(&mut rx), ["done Length 0"]);
    }

    #[test]
    fn the_closed_probe_sees_the_client_leave() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let r = Reply::new(tx, &CompletionRequest::default(), 1, 0, 64).unwrap();
        let probe = r.closed_probe();
        assert!(!probe() && !r.is_closed());
        drop(rx);
        assert!(probe() && r.is_closed());
    }
}
