//! Output constraints (DESIGN 6): llguidance grammars over the model's vocabulary, applied as a
//! [`TokenMask`] to the logits before sampling.
//!
//! Owns: the token environment (built once per process from the one loaded model), the compile
//! cache (one compiled matcher per grammar text, i.e. per (schema, closing strings); requests get a
//! clone that shares its warm lexer caches), and [`GrammarMask`], which measures its own per-token
//! mask time and reports p50/p99 on stderr when the request ends.
//! Invariants: the mask allows an EOS/EOG token only where the grammar accepts; a grammar error
//! mid-request leaves only EOG tokens allowed, so the request ends instead of running unconstrained.

pub mod gate;
mod lark;
mod vocab;
mod worker;

use crate::sampling::TokenMask;
use crate::{Token, Vocabulary};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use runner_protocol::{Constraint, ErrorKind, RunnerError};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;
use toktrie::TokEnv;
use worker::MaskWorker;

/// Compiled grammars kept; a full cache is emptied (schemas rarely vary per model in practice).
const CACHE_CAP: usize = 64;

pub struct Grammars {
    factory: ParserFactory,
    specials: HashMap<String, u32>,
    eog: Vec<Token>,
    cache: Mutex<HashMap<String, Matcher>>,
}

/// The process's grammar state. A runner process serves exactly one model, so the first caller's
/// model is the only one; building the vocabulary trie takes a moment, so call this off the async
/// threads.
pub fn for_model(model: &dyn Vocabulary) -> Result<&'static Grammars, RunnerError> {
    static G: OnceLock<Result<Grammars, String>> = OnceLock::new();
    G.get_or_init(|| {
        let started = Instant::now();
        let v = vocab::build(model);
        let g = Grammars::new(v.env, v.specials, v.eog);
        eprintln!(
            "{}: grammar engine ready ({} tokens) in {} ms",
            crate::name(),
            model.n_vocab(),
            started.elapsed().as_millis()
        );
        g
    })
    .as_ref()
    .map_err(|e| RunnerError::new(ErrorKind::Internal, e.clone()))
}

impl Grammars {
    pub fn new(
        env: TokEnv,
        specials: HashMap<String, u32>,
        eog: Vec<Token>,
    ) -> Result<Grammars, String> {
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| format!("cannot set up the grammar engine: {e}"))?;
        factory.quiet();
        Ok(Grammars {
            factory,
            specials,
            eog,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The Lark text for a constraint (also the cache key).
    pub fn grammar_text(&self, c: &Constraint) -> Result<String, RunnerError> {
        let (schema, closing) = match c {
            Constraint::Json { thinking_close } => (lark::any_json_object(), thinking_close),
            Constraint::JsonSchema {
                schema,
                thinking_close,
            } => (schema.clone(), thinking_close),
        };
        let special = |s: &str| self.specials.get(s).copied();
        let max = self.specials.keys().map(String::len).max().unwrap_or(0);
        let cut: Vec<Vec<lark::Part>> = closing
            .iter()
            .map(|s| lark::segments(s, special, max))
            .collect();
        let plain = |p: &Vec<lark::Part>| {
            p.len() <= 1 || p.iter().all(|x| matches!(x, lark::Part::Text(_)))
        };
        if cut.iter().all(plain) {
            return Ok(lark::grammar(&schema, closing, special));
        }
        let unsupported = || {
            RunnerError::new(
                ErrorKind::BadRequest,
                format!(
                    "closing strings {closing:?}: a close mixing control tokens and text must be \
                     the only one and start with a control token followed by text"
                ),
            )
        };
        let [parts] = cut.as_slice() else {
            return Err(unsupported());
        };
        let others: Vec<u32> = self
            .specials
            .values()
            .copied()
            .filter(|&id| Some(&lark::Part::Special(id)) != parts.first())
            .filter(|&id| !self.eog.contains(&(id as Token)))
            .collect();
        lark::mixed_grammar(&schema, parts, &others).ok_or_else(unsupported)
    }

    /// A fresh mask for one request. An unusable schema is the caller's error (`BadRequest`,
    /// with llguidance's message, which names the unsupported keyword).
    pub fn mask(&self, c: &Constraint) -> Result<GrammarMask, RunnerError> {
        if let Constraint::JsonSchema { schema, .. } = c {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(RunnerError::new(
                    ErrorKind::BadRequest,
                    "invalid JSON schema: expected an object",
                ));
            }
        }
        let text = self.grammar_text(c)?;
        // A deep clone: a plain `clone` shares the template's lexer (and its derivative cache)
        // behind one mutex, so concurrent requests with the same schema computed their masks
        // one at a time (H200, 16 constrained streams: llguidance's time per mask 0.8 ms against
        // 0.13 ms at one stream, decode at 0.78 of free).
        let cached = self
            .cache
            .lock()
            .ok()
            .and_then(|m| m.get(&text).map(Matcher::deep_clone));
        let matcher = match cached {
            Some(m) => m,
            None => {
                let parser = self
                    .factory
                    .create_parser(TopLevelGrammar::from_lark(text.clone()));
                let m = Matcher::new(parser);
                if let Some(e) = m.get_error() {
                    return Err(RunnerError::new(
                        ErrorKind::BadRequest,
                        format!("unsupported JSON schema: {}", first_line(&e)),
                    ));
                }
                if let Ok(mut cache) = self.cache.lock() {
                    if cache.len() >= CACHE_CAP {
                        cache.clear();
                    }
                    cache.insert(text, m.deep_clone());
                }
                m
            }
        };
        Ok(GrammarMask {
            worker: MaskWorker::start(matcher),
            outstanding: 1,
            ff_outstanding: 1,
            forced: Vec::new(),
            eog: self.eog.clone(),
            times_ns: Vec::new(),
            engine_ns: Vec::new(),
            failed: false,
            current: None,
            spent_ns: 0,
            wait_ns: Vec::new(),
            defer: gate::on(),
            queued: None,
        })
    }

    #[cfg(test)]
    pub fn cached(&self) -> usize {
        self.cache.lock().map(|c| c.len()).unwrap_or(0)
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// One request's grammar state. The matcher lives on a [`MaskWorker`] thread that computes the
/// next mask while the engine decodes, so `apply` usually finds it ready.
pub struct GrammarMask {
    worker: MaskWorker,
    /// Requests (the start and each `commit`) whose results `apply` has not taken yet.
    outstanding: usize,
    /// Commands (and the start) whose forced-bytes results `forced` has not taken yet.
    ff_outstanding: usize,
    /// The bytes forced from the current state, once `ff_outstanding` is 0.
    forced: Vec<u8>,
    eog: Vec<Token>,
    /// Each `apply` on the decode thread: waiting for the mask + writing it into the logits (the
    /// time constrained decoding adds to a step).
    times_ns: Vec<u64>,
    /// llguidance's own time per mask (consume + compute), on the worker, overlapped with decode.
    engine_ns: Vec<u64>,
    failed: bool,
    /// The current state's mask and its allowed ids, once fetched from the worker (by
    /// `dense_bits` or `apply_sparse`); `commit` moves to the next state.
    current: Option<Ready>,
    /// Time this state's mask has cost the decode thread so far (pushed to `times_ns` on commit).
    spent_ns: u64,
    /// Of that, each state's wait for the worker's mask (zero when it was ready).
    wait_ns: Vec<u64>,
    /// Commits wait for `TokenMask::flush` (the gate is on: `gate` says why).
    defer: bool,
    /// A committed token not yet sent to the worker (`defer`).
    queued: Option<u32>,
}

/// The current state's mask as the worker handed it over.
struct Ready {
    mask: Result<toktrie::SimpleVob, String>,
    /// Its allowed ids (ascending) when at most [`SPARSE_MAX`], else None.
    ids: Option<Vec<u32>>,
}

/// At most this many allowed tokens go to the sampler as a list instead of a rewritten row
/// (JSON states outside strings allow a handful; writing -inf over a 262k row costs ~50 µs).
const SPARSE_MAX: usize = 4096;

/// The ids `words` allows, ascending, when there are at most [`SPARSE_MAX`] of them (the
/// worker's part of a mask, `worker::Computed`).
fn sparse_of(words: &[u32]) -> Option<Vec<u32>> {
    let count: usize = words.iter().map(|w| w.count_ones() as usize).sum();
    if count > SPARSE_MAX {
        return None;
    }
    let mut ids = Vec::with_capacity(count);
    for (k, &w) in words.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            ids.push((k * 32) as u32 + w.trailing_zeros());
            w &= w - 1;
        }
    }
    Some(ids)
}

/// Sets the logits of tokens the mask words forbid (and any past the mask) to -inf.
fn write_mask(words: &[u32], logits: &mut [f32]) {
    // Word at a time: all-allowed and all-forbidden words are one step each.
    let n = logits.len();
    for (k, &w) in words.iter().enumerate() {
        let lo = (k * 32).min(n);
        let hi = (lo + 32).min(n);
        match w {
            u32::MAX => {}
            0 => logits[lo..hi].fill(f32::NEG_INFINITY),
            w => {
                for (b, l) in logits[lo..hi].iter_mut().enumerate() {
                    if w & (1 << b) == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
    // Tokens past the mask (padding ids llama.cpp may report) are never allowed.
    let covered = (words.len() * 32).min(n);
    logits[covered..].fill(f32::NEG_INFINITY);
}

impl GrammarMask {
    /// The mask for the current state from the worker (requesting it if no commit did); an
    /// error in any outstanding result wins, since the matcher is then unusable.
    fn take_mask(&mut self) -> Ready {
        self.send_queued();
        if self.outstanding == 0 {
            // After an end-of-generation commit (never consumed): same state again.
            self.worker.request(None);
            self.outstanding = 1;
        }
        let mut ready = Ready {
            mask: Err(String::new()),
            ids: None,
        };
        let started = Instant::now();
        while self.outstanding > 0 {
            let c = self.worker.take();
            self.outstanding = self.outstanding.saturating_sub(c.covers);
            self.engine_ns.push(c.engine_ns);
            if !matches!(&ready.mask, Err(e) if !e.is_empty()) {
                ready = Ready {
                    mask: c.mask,
                    ids: c.ids,
                };
            }
        }
        self.wait_ns.push(started.elapsed().as_nanos() as u64);
        ready
    }

    /// Sends a commit held back for `flush` (every wait for the worker's results comes after).
    fn send_queued(&mut self) {
        if let Some(t) = self.queued.take() {
            self.worker.request(Some(t));
        }
    }

    /// Fetches the current state's mask into `current`, once per state.
    fn fetch(&mut self) {
        if self.current.is_none() {
            self.current = Some(self.take_mask());
        }
    }

    /// Allow only end-of-generation tokens.
    fn only_eog(&self, logits: &mut [f32]) {
        let keep: Vec<(usize, f32)> = self
            .eog
            .iter()
            .filter_map(|&t| logits.get(t as usize).map(|&l| (t as usize, l)))
            .collect();
        logits.fill(f32::NEG_INFINITY);
        for (i, l) in keep {
            logits[i] = l;
        }
    }
}

impl TokenMask for GrammarMask {
    fn apply(&mut self, logits: &mut [f32]) {
        if let Some(ids) = self.apply_sparse(logits) {
            crate::sampling::keep_only(logits, &ids);
        }
    }

    fn apply_sparse(&mut self, logits: &mut [f32]) -> Option<Vec<Token>> {
        let started = Instant::now();
        if self.failed {
            self.only_eog(logits);
            return None;
        }
        self.fetch();
        let n = logits.len();
        let sparse = match self.current.as_ref().expect("fetched above") {
            Ready {
                mask: Ok(_),
                ids: Some(ids),
            } => {
                // Ids past the row (padding a mask may cover) are never allowed.
                let end = ids.partition_point(|&t| (t as usize) < n);
                Some(ids[..end].iter().map(|&t| t as Token).collect())
            }
            Ready {
                mask: Ok(mask),
                ids: None,
            } => {
                write_mask(mask.as_slice(), logits);
                None
            }
            Ready { mask: Err(e), .. } => {
                eprintln!("{}: grammar error, ending the response: {e}", crate::name());
                self.failed = true;
                self.only_eog(logits);
                None
            }
        };
        self.spent_ns += started.elapsed().as_nanos() as u64;
        sparse
    }

    fn dense_bits(&mut self) -> Option<&[u32]> {
        if self.failed {
            return None;
        }
        let started = Instant::now();
        self.fetch();
        self.spent_ns += started.elapsed().as_nanos() as u64;
        match self.current.as_ref() {
            Some(Ready {
                mask: Ok(mask),
                ids: None,
            }) => Some(mask.as_slice()),
            _ => None,
        }
    }

    fn commit(&mut self, token: Token) {
        if self.current.take().is_some() {
            self.times_ns.push(std::mem::take(&mut self.spent_ns));
        }
        if self.failed || self.eog.contains(&token) {
            return;
        }
        // A rejected token comes back as the next step's error (the request then ends).
        self.send_queued();
        if self.defer {
            self.queued = Some(token as u32);
        } else {
            self.worker.request(Some(token as u32));
        }
        self.outstanding += 1;
        self.ff_outstanding += 1;
    }

    fn flush(&mut self) {
        self.send_queued();
    }

    fn forced(&mut self) -> Vec<u8> {
        if self.failed {
            return Vec::new();
        }
        self.send_queued();
        while self.ff_outstanding > 0 {
            let f = self.worker.take_forced();
            self.ff_outstanding = self.ff_outstanding.saturating_sub(f.covers);
            self.forced = f.bytes;
        }
        self.forced.clone()
    }
}

impl Drop for GrammarMask {
    fn drop(&mut self) {
        let (Some((p50, p99, max)), Some((e50, e99, _))) =
            (percentiles(&self.times_ns), percentiles(&self.engine_ns))
        else {
            return;
        };
        let us = |ns: u64| ns as f64 / 1e3;
        let (w50, w99, _) = percentiles(&self.wait_ns).unwrap_or_default();
        eprintln!(
            "{}: grammar mask: tokens={} p50_us={:.1} p99_us={:.1} max_us={:.1} \
             engine_p50_us={:.1} engine_p99_us={:.1} wait_p50_us={:.1} wait_p99_us={:.1}",
            crate::name(),
            self.times_ns.len(),
            us(p50),
            us(p99),
            us(max),
            us(e50),
            us(e99),
            us(w50),
            us(w99)
        );
    }
}

/// (p50, p99, max) by nearest rank; None when empty.
pub fn percentiles(ns: &[u64]) -> Option<(u64, u64, u64)> {
    if ns.is_empty() {
        return None;
    }
    let mut v = ns.to_vec();
    v.sort_unstable();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some((rank(0.50), rank(0.99), v[v.len() - 1]))
}

#[cfg(test)]
mod tests;
