//! The draft-model drafter (the Modelfile's `DRAFT` layer, `--draft-model`): a second, smaller
//! model with the target's vocabulary, loaded beside it with a context of its own, proposes up
//! to `draft_num_predict` tokens per step for every decoding slot, greedily, in one batched draft
//! decode per drafted position across the slots. The target verifies them (engine/speculative.rs)
//! by the acceptance rule every drafter shares (engine/draft.rs), so drafting changes speed only,
//! never which tokens a request gets.
//!
//! Invariants:
//! - `cache[seq]` is the token at draft KV position `i` of sequence `seq`, for every `i`, as
//!   `Slot::cache` is for the target. Before drafting, a sequence is brought to the slot's
//!   history by cutting it back to their common prefix and decoding the rest (the tokens the
//!   target accepted or a new prompt): a moved, shifted or reused slot needs no bookkeeping here.
//! - A draft ends at the first token the draft model is unsure of ([`P_MIN`]), and every slot's
//!   draft of a step where the first one ends (a step keeps the shortest draft anyway).
//! - After drafting steps that kept nothing the draft model pauses (`draft::pause_after`).
//! - Drafting never fails a request: a draft decode that fails forgets that sequence (it is
//!   rebuilt from the history next time) and the slot decodes without a draft this step.

use super::draft;
use crate::ffi::{Batch, Context, ContextParams, Model, ModelParams, Row, Token};
use std::path::Path;
use std::sync::Arc;

/// Token ids below this are control tokens whose text may differ between two builds of one
/// vocabulary (llama.cpp's speculative check starts at the same id).
const CHECK_FROM: i32 = 5;
/// Largest difference in vocabulary size a draft may have (padding rows, added tokens):
/// llama.cpp's own bound for speculative pairs.
const MAX_VOCAB_DIFF: i32 = 128;
/// A slot's draft stops at the first token the draft model gives less than this probability
/// (llama.cpp's speculative `p_min` default). An unsure draft is mostly rejected, and each
/// drafted position costs a draft decode plus a verified row: on an H200, a self-draft that
/// drafted regardless (4 per step, 2.8 % accepted) ran at 0.19x the undrafted rate.
const P_MIN: f32 = 0.75;

/// One slot's drafting request for a step.
pub struct Want<'a> {
    pub seq: i32,
    /// The slot's tokens in the target KV, then its sampled token: the draft continues it.
    pub history: &'a [Token],
    /// Most draft tokens this slot takes this step.
    pub n: usize,
}

pub struct DraftModel {
    ctx: Context,
    model: Arc<Model>,
    batch: Batch,
    cache: Vec<Vec<Token>>,
    /// Most draft tokens per step (the model's `draft_num_predict`).
    max: usize,
    /// Draft tokens are chosen among the ids both vocabularies have.
    n_vocab: usize,
    /// Pauses after drafting steps that kept nothing.
    pause: draft::Pause,
}

impl DraftModel {
    /// Loads the draft GGUF at `path` with `params` and a context like the target's (`cp`), and
    /// checks that it speaks the target's vocabulary.
    pub fn load(
        path: &Path,
        target: &Model,
        params: &ModelParams,
        cp: &ContextParams,
        max: usize,
    ) -> Result<DraftModel, String> {
        if !path.is_file() {
            return Err(format!("draft model {} does not exist", path.display()));
        }
        let model = Arc::new(Model::load(path, params, |_| true)?);
        compatible(target, &model)?;
        let ctx = Context::with_device_top_k(model.clone(), cp, None)?;
        let n_vocab = target.n_vocab().min(model.n_vocab()).max(0) as usize;
        Ok(DraftModel {
            batch: Batch::new(cp.n_batch.max(cp.n_seq_max) as usize),
            cache: vec![Vec::new(); cp.n_seq_max as usize],
            ctx,
            model,
            max,
            n_vocab,
            pause: draft::Pause::default(),
        })
    }

    /// Most draft tokens per step.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The draft context's memory, per buffer (for `/info`'s totals).
    pub fn memory(&self) -> Vec<crate::ffi::BufferMemory> {
        self.ctx.memory_breakdown()
    }

    /// Greedy draft tokens continuing each `w.history`, in `wants`' order, all of one length
    /// (at most every `w.n`; empty for all when one slot's first token is unsure).
    pub fn draft(&mut self, wants: &[Want]) -> Vec<Vec<Token>> {
        let mut out: Vec<Vec<Token>> = vec![Vec::new(); wants.len()];
        // Catch up: each sequence to its history, the last history token's row giving the
        // first draft token.
        let mut todo: Vec<(usize, usize)> = Vec::new(); // (want, next history index to decode)
        for (k, w) in wants.iter().enumerate() {
            if w.n == 0 || w.history.is_empty() || self.slot(w.seq).is_none() {
                continue;
            }
            let cache = &self.cache[w.seq as usize];
            let common = cache
                .iter()
                .zip(w.history)
                .take_while(|(a, b)| a == b)
                .count();
            // The last history token is always decoded again: its row is the first draft.
            let keep = common.min(w.history.len() - 1);
            self.forget_after(w.seq, keep);
            // (`forget_after` may have dropped the whole sequence.)
            todo.push((k, self.cache[w.seq as usize].len()));
        }
        while !todo.is_empty() {
            self.batch.clear();
            let mut pushed: Vec<(usize, usize, usize)> = Vec::new(); // (want, from, to)
            let mut rows: Vec<(usize, i32)> = Vec::new();
            for &(k, from) in &todo {
                let w = &wants[k];
                let mut i = from;
                while i < w.history.len() {
                    let last = i + 1 == w.history.len();
                    let Some(idx) = self.batch.push(w.history[i], i as i32, w.seq, last) else {
                        break;
                    };
                    if last {
                        rows.push((k, idx));
                    }
                    i += 1;
                }
                if i > from {
                    pushed.push((k, from, i));
                }
                if i < w.history.len() {
                    break; // The batch is full.
                }
            }
            if pushed.is_empty() {
                break;
            }
            let seqs: Vec<i32> = pushed.iter().map(|&(k, _, _)| wants[k].seq).collect();
            let ok = self.decode(&seqs);
            if ok {
                for &(k, from, to) in &pushed {
                    let w = &wants[k];
                    self.cache[w.seq as usize].extend_from_slice(&w.history[from..to]);
                }
                for (k, tok) in self.confident(&rows) {
                    out[k].push(tok);
                }
            }
            // A failed sequence drafts nothing this step; the rest go on where they stopped.
            todo.retain_mut(|(k, from)| match pushed.iter().find(|p| p.0 == *k) {
                None => true,
                Some(&(_, _, to)) if ok && to < wants[*k].history.len() => {
                    *from = to;
                    true
                }
                Some(_) => false,
            });
        }
        // Extend: one batched decode per further draft position. A step keeps every slot's
        // draft at the shortest one (speculative::equalize), so all stop where the first ends
        // (unsure, end of generation, or its `n`): further positions would be decoded for
        // nothing.
        let limit = wants.iter().map(|w| w.n).min().unwrap_or(0);
        let mut len = out.iter().map(Vec::len).min().unwrap_or(0);
        while len > 0 && len < limit && !out.iter().any(|d| self.model.is_eog(d[len - 1])) {
            self.batch.clear();
            let mut rows = Vec::new();
            let mut seqs = Vec::new();
            for (k, w) in wants.iter().enumerate() {
                let pos = self.cache[w.seq as usize].len() as i32;
                let Some(idx) = self.batch.push(out[k][len - 1], pos, w.seq, true) else {
                    break;
                };
                rows.push((k, idx));
                seqs.push(w.seq);
            }
            if rows.len() < wants.len() {
                break; // The batch is full.
            }
            if !self.decode(&seqs) {
                len = 0;
                break;
            }
            for (k, w) in wants.iter().enumerate() {
                self.cache[w.seq as usize].push(out[k][len - 1]);
            }
            let sure = self.confident(&rows);
            if sure.len() < rows.len() {
                break;
            }
            for (k, tok) in sure {
                out[k].push(tok);
            }
            len += 1;
        }
        for d in &mut out {
            d.truncate(len.min(limit));
        }
        out
    }

    /// Whether the draft model sits this step out (`draft::Pause`); counts the step down.
    pub fn paused(&mut self) -> bool {
        self.pause.sit_out()
    }

    /// A drafting step's outcome: the common draft length its decoding slots kept.
    pub fn kept(&mut self, common: usize) {
        self.pause.kept(common);
    }

    fn slot(&self, seq: i32) -> Option<usize> {
        usize::try_from(seq).ok().filter(|&s| s < self.cache.len())
    }

    /// Drop draft KV positions `keep..` of `seq`.
    fn forget_after(&mut self, seq: i32, keep: usize) {
        let cache = &mut self.cache[seq as usize];
        if cache.len() > keep {
            if !self.ctx.seq_rm(seq, keep as i32, -1) {
                self.ctx.seq_rm(seq, -1, -1);
                cache.clear();
                return;
            }
            cache.truncate(keep);
        }
    }

    /// Decode the batch; on failure forget every sequence in it (their KV state is unknown).
    fn decode(&mut self, seqs: &[i32]) -> bool {
        if self.ctx.decode(&self.batch).is_ok() {
            return true;
        }
        for &seq in seqs {
            self.ctx.seq_rm(seq, -1, -1);
            self.cache[seq as usize].clear();
        }
        false
    }

    /// The most likely token of each listed row of the last decode, where its probability is
    /// at least [`P_MIN`].
    fn confident(&mut self, rows: &[(usize, i32)]) -> Vec<(usize, Token)> {
        let want: Vec<(i32, bool)> = rows.iter().map(|&(_, i)| (i, false)).collect();
        let n = self.n_vocab;
        let Some(got) = self.ctx.output_rows(&want) else {
            return Vec::new();
        };
        rows.iter()
            .zip(got)
            .filter_map(|(&(k, _), row)| match row {
                Row::Logits(l) => best(&l[..n.min(l.len())])
                    .filter(|&(_, p)| p >= P_MIN)
                    .map(|(t, _)| (k, t)),
                Row::Top { .. } => None,
            })
            .collect()
    }
}

/// The index of the largest logit (the first of equals) and its softmax probability; None for
/// an empty row.
fn best(logits: &[f32]) -> Option<(Token, f32)> {
    let mut top: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if top.is_none_or(|(_, b)| v > b) {
            top = Some((i, v));
        }
    }
    let (i, max) = top?;
    if max == f32::NEG_INFINITY {
        return Some((i as Token, 0.0));
    }
    // p(top) = 1 / sum(exp(l - max)); the sum is at least 1 (the top's own term).
    let sum: f32 = logits.iter().map(|&v| (v - max).exp()).sum();
    Some((i as Token, 1.0 / sum))
}

/// Whether `draft` can draft for `target`: the same end-of-generation tokens, vocabularies of
/// nearly one size, and the same text for every shared token id from [`CHECK_FROM`] on.
pub fn compatible(target: &Model, draft: &Model) -> Result<(), String> {
    let (nt, nd) = (target.n_vocab(), draft.n_vocab());
    if (nt - nd).abs() > MAX_VOCAB_DIFF {
        return Err(format!(
            "the draft model's vocabulary has {nd} tokens, the model's {nt}: a draft model must \
             share the model's tokenizer"
        ));
    }
    if target.eog_tokens() != draft.eog_tokens() {
        return Err(
            "the draft model ends generation on other tokens than the model: a draft \
                    model must share the model's tokenizer"
                .into(),
        );
    }
    if let Some(t) = (CHECK_FROM..nt.min(nd))
        .find(|&t| target.token_piece(t, true) != draft.token_piece(t, true))
    {
        return Err(format!(
            "token {t} is {:?} in the model and {:?} in the draft model: a draft model must \
             share the model's tokenizer",
            String::from_utf8_lossy(&target.token_piece(t, true)),
            String::from_utf8_lossy(&draft.token_piece(t, true))
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::best;

    #[test]
    fn best_is_the_first_largest_with_its_probability() {
        let ln3 = 3f32.ln();
        type Case<'a> = (&'a [f32], Option<(i32, f32)>);
        let cases: &[Case] = &[
            (&[], None),
            (&[0.5], Some((0, 1.0))),
            // exp(ln 3) : 1 : 0 -> 3/4.
            (&[0.0, ln3, f32::NEG_INFINITY], Some((1, 0.75))),
            (&[2.0, 1.0, 2.0], Some((0, 1.0 / (2.0 + (-1f32).exp())))),
            (&[f32::NEG_INFINITY, -1.0], Some((1, 1.0))),
            (&[1.0; 4], Some((0, 0.25))),
        ];
        for &(row, want) in cases {
            let got = best(row);
            assert_eq!(got.map(|g| g.0), want.map(|w| w.0), "{row:?}");
            if let (Some(g), Some(w)) = (got, want) {
                assert!((g.1 - w.1).abs() < 1e-6, "{row:?}: p {} vs {}", g.1, w.1);
            }
        }
    }
}
