//! Speculative decoding's engine side (policy in engine/draft.rs): what the decoding slots draft
//! (`propose_all`: the grammar's forced text, else the n-gram drafter, else the draft model), how a forced grammar text is kept in the model's own tokenization (`restrict`),
//! and how a step's rows are verified (`verify`).

use super::draft_model::{DraftModel, Want};
use super::{draft, fail, on_token, sample, Active, Drafting, Slot};
use crate::ffi::{Model, Row, Token};
use crate::sampling::Choice;
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
    let cut = base + used;
    (cut < slot.cache.len()).then(|| {
        slot.cache.truncate(cut);
        cut
    })
}

/// Fill each decoding slot's draft, sharing the batch room (`capacity`) left after every slot's
/// sampled token equally among the decoding slots. Slots without a grammar or n-gram draft ask
/// the draft model, all in one batched draft run (constrained ones only when drafting under
/// grammar is on, as for the n-gram drafter).
pub(super) fn propose_all(
    model: &Model,
    slots: &mut [Slot],
    drafter: Option<&mut DraftModel>,
    d: &Drafting,
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
        let draft = propose(model, slot, d, n_ctx_seq, share);
        if let Some(a) = slot.active.as_mut() {
            a.draft = draft;
        }
    }
    let Some(dm) = drafter else { return };
    // Each asking slot's history gets its sampled token for the draft run, and loses it after.
    let mut asking: Vec<(usize, usize)> = Vec::new();
    for (i, slot) in slots.iter_mut().enumerate() {
        let Some(a) = slot.active.as_ref() else {
            continue;
        };
        let Some(t) = a.next else { continue };
        if !a.draft.is_empty() || (a.req.constraint.is_some() && !d.under_grammar) {
            continue;
        }
        let room = n_ctx_seq.saturating_sub(slot.cache.len() + 1);
        let n = draft::budget(dm.max(), a.reply.left(), room, share);
        if n > 0 {
            slot.cache.push(t);
            asking.push((i, n));
        }
    }
    if asking.is_empty() {
        return;
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
}

/// Draft tokens for one decoding slot (engine/draft.rs): what its grammar forces, else its
/// n-gram continuation, at most `share`. Also restricts the slot's next sample to the forced
/// text's first token (`restrict`).
fn propose(
    model: &Model,
    slot: &mut Slot,
    d: &Drafting,
    n_ctx_seq: usize,
    share: usize,
) -> Vec<Token> {
    let Some(a) = slot.active.as_mut() else {
        return Vec::new();
    };
    let Some(t) = a.next else {
        return Vec::new();
    };
    let forced = restrict(model, a);
    let left = a.reply.left();
    let room = n_ctx_seq.saturating_sub(slot.cache.len() + 1);
    let n = draft::budget(usize::MAX, left, room, share);
    if n == 0 {
        return Vec::new();
    }
    // The forced text's last token is left out: it stays free and often merges with the
    // model's next text, so drafting it mostly costs a rejected row.
    let mut out = match forced.split_last() {
        Some((_, head)) if d.grammar_ff => head.to_vec(),
        _ => Vec::new(),
    };
    if out.is_empty() && a.ngram > 0 {
        slot.cache.push(t);
        out = draft::ngram(&slot.cache, a.ngram);
        slot.cache.pop();
    }
    out.truncate(n);
    out
}

/// Forced text goes in the model's own tokenization: when the grammar forces text of two or
/// more tokens from the request's current state, its next sample may only choose the first.
/// (The mask alone allows every tokenization of it, and sampling among them picks splits the
/// model never saw, like `pro`+`per`+`ty`.) The last token of forced text stays free, since it
/// may merge with what the model writes next (`":`). A function of the grammar state alone, so
/// a step-by-step run and a drafted run choose the same tokens. Returns the forced tokens.
pub(super) fn restrict(model: &Model, a: &mut Active) -> Vec<Token> {
    if a.req.constraint.is_none() {
        return Vec::new();
    }
    let forced = forced_tokens(model, &a.sampler.forced());
    if forced.len() >= 2 {
        a.sampler.restrict_next(forced[0]);
    }
    forced
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
    model.tokenize(text, false, false).unwrap_or_default()
}
