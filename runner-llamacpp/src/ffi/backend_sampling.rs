//! llama.cpp's backend ("device") sampling, used for one thing only: a top-K chain per sequence,
//! computed in the model's graph on the output device, so that a step copies K candidates (ids
//! and raw logits) per row to the host instead of the whole vocabulary. The host sampler
//! (sampling/device.rs) draws from those candidates.
//!
//! Invariants:
//! - Every chain llama.cpp can reach is owned here. A detached chain is kept until the next
//!   successful decode (the one that rebuilds the graph without it); attached ones drop after
//!   `llama_free` (they are fields of `Context`).
//! - llama.cpp initialises a chain for the backend once and asserts on a second time, so every
//!   attach uses a fresh chain.
//! - Attaching or detaching makes llama.cpp reserve its compute graph again at the next decode
//!   (`sched_need_reserve`): callers switch per request, not per step.

use super::{sys, Context, Token};
use std::ffi::CStr;
use std::ptr::NonNull;

/// One top-k step in a sampler chain (llama.cpp accepts only chains as backend samplers).
pub(super) struct DeviceChain {
    ptr: NonNull<sys::llama_sampler>,
}

impl DeviceChain {
    fn top_k(k: u32) -> DeviceChain {
        let ptr = unsafe {
            let mut p = sys::llama_sampler_chain_default_params();
            p.no_perf = true;
            let c = sys::llama_sampler_chain_init(p);
            // The chain takes ownership of the top-k sampler.
            sys::llama_sampler_chain_add(c, sys::llama_sampler_init_top_k(k as i32));
            c
        };
        DeviceChain {
            ptr: NonNull::new(ptr).expect("llama_sampler_chain_init returned NULL"),
        }
    }

    /// Whether the top-k runs on the output device. After the backend init llama.cpp names a
    /// sampler "+name" when the device supports its ops and "-name" when it does not (the chain
    /// then hands the whole row over, which is correct but saves nothing).
    fn on_backend(&self) -> bool {
        unsafe {
            let s = sys::llama_sampler_chain_get(self.ptr.as_ptr(), 0);
            if s.is_null() {
                return false;
            }
            let name = sys::llama_sampler_name(s);
            !name.is_null() && CStr::from_ptr(name).to_bytes().starts_with(b"+")
        }
    }
}

impl Drop for DeviceChain {
    fn drop(&mut self) {
        unsafe { sys::llama_sampler_free(self.ptr.as_ptr()) }
    }
}

// SAFETY: owned by one `Context`, which is used by one thread at a time.
unsafe impl Send for DeviceChain {}

/// The per-sequence chains of one context.
pub(super) struct DeviceSampling {
    /// Candidates per row; 0 = device sampling off.
    k: u32,
    /// Index = seq id; Some = attached.
    seqs: Vec<Option<DeviceChain>>,
    /// Detached, but possibly still referenced by the graph llama.cpp keeps for reuse.
    retired: Vec<DeviceChain>,
}

impl DeviceSampling {
    /// Chains for every sequence when `k` is Some (clamped to the vocabulary: llama.cpp's top-k
    /// needs k ≤ the row length), to be attached at context creation (`seq_configs`).
    pub(super) fn new(k: Option<u32>, n_seq: u32, n_vocab: usize) -> DeviceSampling {
        let k = k.unwrap_or(0).min(n_vocab.min(u32::MAX as usize) as u32);
        DeviceSampling {
            k,
            seqs: (0..n_seq)
                .map(|_| (k > 0).then(|| DeviceChain::top_k(k)))
                .collect(),
            retired: Vec::new(),
        }
    }

    /// `llama_context_params.samplers` entries for the attached chains (valid while `self` is).
    pub(super) fn seq_configs(&self) -> Vec<sys::llama_sampler_seq_config> {
        self.seqs
            .iter()
            .enumerate()
            .filter_map(|(seq, c)| {
                c.as_ref().map(|c| sys::llama_sampler_seq_config {
                    seq_id: seq as i32,
                    sampler: c.ptr.as_ptr(),
                })
            })
            .collect()
    }

    /// A decode succeeded: its graph was built without the retired chains.
    pub(super) fn decoded(&mut self) {
        self.retired.clear();
    }
}

impl Context {
    /// K of the device top-k, when device sampling is configured.
    pub fn device_top_k(&self) -> Option<usize> {
        (self.device.k > 0).then_some(self.device.k as usize)
    }

    /// Whether `seq`'s rows are sampled on the device in the next decode.
    pub fn device_sampling(&self, seq: i32) -> bool {
        usize::try_from(seq)
            .ok()
            .and_then(|s| self.device.seqs.get(s))
            .is_some_and(Option::is_some)
    }

    /// Whether the attached chains' top-k runs on the output device (false when none is
    /// attached).
    pub fn device_top_k_offloaded(&self) -> bool {
        self.device
            .seqs
            .iter()
            .flatten()
            .all(DeviceChain::on_backend)
            && self.device.seqs.iter().any(Option::is_some)
    }

    /// Detach every chain and stop attaching any: every row comes whole from now on.
    pub fn disable_device_sampling(&mut self) {
        for seq in 0..self.device.seqs.len() {
            self.set_device_sampling(seq as i32, false);
        }
        self.device.k = 0;
    }

    /// Attach (`on`) or detach `seq`'s top-k chain; returns whether it is attached now. A no-op
    /// when the state already matches or device sampling is not configured; otherwise the next
    /// decode reserves the graph again.
    pub fn set_device_sampling(&mut self, seq: i32, on: bool) -> bool {
        let k = self.device.k;
        let Some(slot) = usize::try_from(seq)
            .ok()
            .and_then(|s| self.device.seqs.get_mut(s))
        else {
            return false;
        };
        if slot.is_some() == on || k == 0 {
            return slot.is_some();
        }
        let ctx = self.ptr.as_ptr();
        if on {
            let chain = DeviceChain::top_k(k);
            // SAFETY: the chain lives in `self.device` until detached and then until the next
            // decode, or until after llama_free.
            if unsafe { sys::llama_set_sampler(ctx, seq, chain.ptr.as_ptr()) } {
                *slot = Some(chain);
            }
        } else if unsafe { sys::llama_set_sampler(ctx, seq, std::ptr::null_mut()) } {
            self.device.retired.extend(slot.take());
        }
        slot.is_some()
    }

    /// Batch entry `i`'s device candidates: (ids, raw logits), same length, in no particular
    /// order. None when the row was not sampled on the device. Pointers only: the caller turns
    /// them into slices (rows.rs).
    pub(super) fn device_row(&self, i: i32) -> Option<(*const Token, *const f32, usize)> {
        let ctx = self.ptr.as_ptr();
        unsafe {
            let logits = sys::llama_get_sampled_logits_ith(ctx, i);
            let n = sys::llama_get_sampled_logits_count_ith(ctx, i) as usize;
            let ids = sys::llama_get_sampled_candidates_ith(ctx, i);
            let n_ids = sys::llama_get_sampled_candidates_count_ith(ctx, i) as usize;
            if logits.is_null() || ids.is_null() || n == 0 {
                return None;
            }
            // No candidate list means the chain did not cut the row: llama.cpp then hands out
            // its list of every token id, which matches a whole-vocabulary logits row only.
            let consistent = n_ids == n || (n_ids == 0 && n == self.n_vocab);
            consistent.then_some((ids as *const Token, logits as *const f32, n))
        }
    }
}
