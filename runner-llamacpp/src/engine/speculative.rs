//! Speculative decoding's engine side (policy in engine/draft.rs): what the decoding slots draft
//! (`propose_all`: the grammar's forced text, else the n-gram drafter, else the draft model), how a forced grammar text is kept in the model's own tokenization (`restrict`),
//! and how a step's rows are verified (`verify`).

use super::draft_model::{DraftModel, Want};
use super::{draft, fail, on_token, sample, Active, Drafting, Slot};
use crate::ffi::{Model, Row, Token};
use crate::sampling::Choice;
use runner_core::draft::pace;
use runner_protocol::ErrorKind;

/// Sample a decoding slot's rows in order: its first row (`first`, already sampled), then each
/// draft token's row while the token sampled before it equals that draft token. Returns the
/// cache length to cut the slot's KV back to when draft tokens were rejected (`cache` is cut
/// already).
pub(super) fn verify(
    model: &Model,
    slot: &mut Slot,
    first: Option<Choice>,
    rows: Vec<Row>,
) -> Option<usize> {
    let a = slot.active.as_mut()?;
    let draft = std::mem::take(&mut a.draft);
    a.draft_rows.clear();
    let from_ngram = std::mem::take(&mut a.ngram_draft);
    // The cache holds the sampled token, then the draft tokens.
    let base = slot.cache.len() - draft.len();
    let mut rows = rows.into_iter();
    let mut choice = first;
    let mut used = 0;
    loop {
        let Some(c) = choice else {
            fail(
                slot,
                ErrorKind::Internal,
                "no token could be sampled (all masked)",
            );
            break;
        };
        let t = c.token;
        on_token(model, slot, c);
        let Some(a) = slot.active.as_mut() else { break };
        if used == draft.len() || t != draft[used] {
            break;
        }
        // `t` is the next draft token, already in the KV: its row is the next step's.
        let Some(mut row) = rows.next() else { break };
        a.next = None;
        restrict(model, a);
        a.reply.timings.accepted += 1;
        used += 1;
        choice = sample::one(a, &mut row);
    }
    if let Some(a) = slot.active.as_mut().filter(|_| from_ngram) {
        a.pace.observe(draft.len(), used);
    }
    let cut = base + used;
    (cut < slot.cache.len()).then(|| {
        slot.cache.truncate(cut);
        cut
    })
}

/// Cut every decoding slot's draft to the step's common length (`draft::common_len`): with one
/// KV stream per sequence, llama.cpp evaluates a batch whose sequences bring different token
/// counts as one pass per distinct count (`split_equal`), each reading all the weights again, so
/// unequal drafts would turn one step into several. Runs after `propose_all`.
pub(super) fn equalize(slots: &mut [Slot]) {
    let keep = common_draft(slots);
    for a in slots.iter_mut().filter_map(|s| s.active.as_mut()) {
        a.draft.truncate(keep);
        if a.draft.is_empty() {
            a.forced_run = false;
        }
    }
}

/// Fill each decoding slot's draft, sharing the batch room (`capacity`) left after every slot's
/// sampled token equally among the decoding slots. Slots without a grammar or n-gram draft ask
/// the draft model, all in one batched draft run (constrained ones only when drafting under
/// grammar is on, as for the n-gram drafter). `cost` sets how long an n-gram draft pays.
pub(super) fn propose_all(
    model: &Model,
    slots: &mut [Slot],
    drafter: Option<&mut DraftModel>,
    d: &Drafting,
    cost: &pace::StepCost,
    n_ctx_seq: usize,
    capacity: usize,
) {
    let decoders = slots
        .iter()
        .filter(|s| s.active.as_ref().is_some_and(|a| a.next.is_some()))
        .count();
    if decoders == 0 {
        return;
    }
    let share = capacity.saturating_sub(decoders) / decoders;
    for slot in slots.iter_mut() {
        let draft = propose(model, slot, d, n_ctx_seq, share, (cost, decoders));
        if let Some(a) = slot.active.as_mut() {
            a.draft = draft;
        }
    }
    let Some(dm) = drafter else { return };
    // Each asking slot's history gets its sampled token for the draft run, and loses it after.
    // The step keeps the shortest draft of its decoding slots (`equalize`), so the draft model
    // runs only when every decoding slot without a draft asks it.
    let mut asking: Vec<(usize, usize)> = Vec::new();
    let mut every = true;
    for (i, slot) in slots.iter().enumerate() {
        let Some(a) = slot.active.as_ref().filter(|a| a.next.is_some()) else {
            continue;
        };
        if !a.draft.is_empty() {
            continue;
        }
        let room = n_ctx_seq.saturating_sub(slot.cache.len() + 1);
        let n = draft::budget(dm.max(), a.reply.left(), room, share);
        if n == 0 || (a.req.constraint.is_some() && !d.under_grammar) {
            every = false;
            break;
        }
        asking.push((i, n));
    }
    if asking.is_empty() || !every || dm.paused() {
        return;
    }
    for &(i, _) in &asking {
        let slot = &mut slots[i];
        if let Some(t) = slot.active.as_ref().and_then(|a| a.next) {
            slot.cache.push(t);
        }
    }
    let wants: Vec<Want> = asking
        .iter()
        .map(|&(i, n)| Want {
            seq: slots[i].seq,
            history: &slots[i].cache,
            n,
        })
        .collect();
    let mut drafts = dm.draft(&wants).into_iter();
    for (i, _) in asking {
        let slot = &mut slots[i];
        slot.cache.pop();
        if let Some(a) = slot.active.as_mut() {
            a.draft = drafts.next().unwrap_or_default();
        }
    }
    dm.kept(common_draft(slots));
}

/// The draft length the step's decoding slots keep (`draft::common_len` of their drafts).
fn common_draft(slots: &[Slot]) -> usize {
    let lens: Vec<usize> = slots
        .iter()
        .filter_map(|s| s.active.as_ref().filter(|a| a.next.is_some()))
        .map(|a| a.draft.len())
        .collect();
    draft::common_len(&lens)
}

/// Draft tokens for one decoding slot (engine/draft.rs): what its grammar forces, else its
/// n-gram continuation as long as it pays at the step's cost with `decoders` decoding slots
/// (runner-core's `draft::ngram_paced`), at most `share`.
/// Also restricts the slot's next sample to the forced text's first token (`restrict`).
fn propose(
    model: &Model,
    slot: &mut Slot,
    d: &Drafting,
    n_ctx_seq: usize,
    share: usize,
    (cost, decoders): (&pace::StepCost, usize),
) -> Vec<Token> {
    let Some(a) = slot.active.as_mut() else {
        return Vec::new();
    };
    a.forced_run = false;
    a.ngram_draft = false;
    let Some(t) = a.next else {
        return Vec::new();
    };
    restrict(model, a);
    let left = a.reply.left();
    let room = n_ctx_seq.saturating_sub(slot.cache.len() + 1);
    let n = draft::budget(usize::MAX, left, room, share);
    if n == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    if d.grammar_ff && !a.forced.is_empty() {
        out.extend(a.forced.iter().take(n));
        // Without log-probabilities no row of the run but its last is needed.
        a.forced_run = !(a.req.logprobs || a.req.top_logprobs > 0);
    }
    if out.is_empty() && a.ngram > 0 {
        let k = a.ngram.min(n);
        out = draft::ngram_paced(&mut slot.cache, t, k, &mut a.pace, cost, decoders);
        a.ngram_draft = !out.is_empty();
    }
    out.truncate(n);
    out
}

/// Forced text goes in the model's own tokenization: when the grammar forces text of two or
/// more tokens, it is tokenized once, where it starts, and the next samples may only choose its
/// tokens in order (`Active::forced`; the mask alone allows every tokenization, and sampling
/// among them picks splits the model never saw, like `pro`+`per`+`ty`). The last token stays
/// free, since it may merge with what the model writes next (`":`). A function of the grammar
/// state and the tokens chosen alone, so a step-by-step run and a drafted run choose the same
/// tokens. Called once before each sample.
pub(super) fn restrict(model: &Model, a: &mut Active) {
    if a.req.constraint.is_none() {
        return;
    }
    if a.forced.is_empty() {
        let mut forced = forced_tokens(model, &a.sampler.forced());
        if forced.len() >= 2 {
            forced.pop();
            a.forced = forced.into();
        }
    }
    if let Some(&t) = a.forced.front() {
        a.sampler.restrict_next(t);
    }
}

/// A slot whose draft this step was a forced run (`Active::forced_run`, one row at its end):
/// its tokens are what the rows before that one would sample, so they are taken in order
/// (streamed, with stop strings and limits) and the last row is left to sample, restricted to
/// what is forced after them. Returns the cache length to cut back to when the request ended
/// inside the run (`cache` is cut already).
pub(super) fn take_forced(model: &Model, slot: &mut Slot) -> Option<usize> {
    let a = slot.active.as_mut()?;
    if !a.forced_run || a.logits_at.is_none() {
        return None;
    }
    a.forced_run = false;
    let run = std::mem::take(&mut a.draft);
    // The cache holds the sampled token, then the run.
    let base = slot.cache.len() - run.len();
    let mut used = 0;
    for &t in &run {
        let Some(a) = slot.active.as_mut() else { break };
        let c = a.sampler.take_forced(t);
        on_token(model, slot, c);
        let Some(a) = slot.active.as_mut() else { break };
        // `t` is in the KV already: its row (or the last one) decides the next token.
        a.next = None;
        a.reply.timings.accepted += 1;
        used += 1;
    }
    match slot.active.as_mut() {
        Some(a) => {
            restrict(model, a);
            None
        }
        None => {
            let cut = base + used;
            (cut < slot.cache.len()).then(|| {
                slot.cache.truncate(cut);
                cut
            })
        }
    }
}

/// The model's tokens for text a grammar forces: its plain text up to any special token (`0xFF`
/// marker) or cut UTF-8 character, tokenized as text. A tokenization the model would not choose
/// only costs rejected drafts.
pub(super) fn forced_tokens(model: &Model, bytes: &[u8]) -> Vec<Token> {
    let plain = &bytes[..bytes.iter().position(|&b| b == 0xFF).unwrap_or(bytes.len())];
    let text = match std::str::from_utf8(plain) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&plain[..e.valid_up_to()]).unwrap_or_default(),
    };
    if text.is_empty() {
        return Vec::new();
    }
    // Only tokens that spell the forced text (a tokenizer may add a leading space): each is
    // one the mask allows.
    let mut at = 0;
    let mut out = model.tokenize(text, false, false).unwrap_or_default();
    let good = out
        .iter()
        .take_while(|&&t| {
            let piece = model.token_piece(t, false);
            let ok = !piece.is_empty() && text.as_bytes()[at..].starts_with(&piece);
            at += piece.len();
            ok
        })
        .count();
    out.truncate(good);
    out
}
