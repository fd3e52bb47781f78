//! The host-side sampler chain: llama.cpp's samplers run over candidate arrays the runner builds
//! itself, never over a context.

use super::{sys, Token, TokenData};
use std::ptr::NonNull;

/// A llama.cpp sampler chain applied to candidate arrays the runner builds itself (so masks and
/// penalties run on the logits first). The chain never sees the context: `select` applies, and
/// `accept` is called exactly once per chosen token by the caller.
pub struct SamplerChain {
    ptr: NonNull<sys::llama_sampler>,
}

// SAFETY: owned exclusively; used by one thread at a time.
unsafe impl Send for SamplerChain {}

impl Default for SamplerChain {
    fn default() -> Self {
        Self::new()
    }
}

impl SamplerChain {
    pub fn new() -> SamplerChain {
        let ptr = unsafe {
            let mut p = sys::llama_sampler_chain_default_params();
            p.no_perf = true;
            sys::llama_sampler_chain_init(p)
        };
        SamplerChain {
            ptr: NonNull::new(ptr).expect("llama_sampler_chain_init returned NULL"),
        }
    }

    fn add(&mut self, s: *mut sys::llama_sampler) {
        if !s.is_null() {
            unsafe { sys::llama_sampler_chain_add(self.ptr.as_ptr(), s) }
        }
    }
    pub fn top_k(&mut self, k: i32) {
        self.add(unsafe { sys::llama_sampler_init_top_k(k) })
    }
    pub fn top_p(&mut self, p: f32) {
        self.add(unsafe { sys::llama_sampler_init_top_p(p, 1) })
    }
    pub fn min_p(&mut self, p: f32) {
        self.add(unsafe { sys::llama_sampler_init_min_p(p, 1) })
    }
    pub fn typical(&mut self, p: f32) {
        self.add(unsafe { sys::llama_sampler_init_typical(p, 1) })
    }
    pub fn temp(&mut self, t: f32) {
        self.add(unsafe { sys::llama_sampler_init_temp(t) })
    }
    pub fn dist(&mut self, seed: u32) {
        self.add(unsafe { sys::llama_sampler_init_dist(seed) })
    }

    /// Run the chain over `cands`; returns the selected token id, if the chain selected one.
    pub fn select(&mut self, cands: &mut [TokenData]) -> Option<Token> {
        let mut arr = sys::llama_token_data_array {
            data: cands.as_mut_ptr(),
            size: cands.len(),
            selected: -1,
            sorted: false,
        };
        unsafe {
            sys::llama_sampler_apply(self.ptr.as_ptr(), &mut arr);
            if arr.selected < 0 || arr.selected as usize >= arr.size || arr.data.is_null() {
                return None;
            }
            // Samplers may point `data` at their own buffer; read through the returned array.
            Some((*arr.data.add(arr.selected as usize)).id)
        }
    }

    pub fn accept(&mut self, t: Token) {
        unsafe { sys::llama_sampler_accept(self.ptr.as_ptr(), t) }
    }
}

impl Drop for SamplerChain {
    fn drop(&mut self) {
        unsafe { sys::llama_sampler_free(self.ptr.as_ptr()) }
    }
}
