//! The engine's hot-path access to a context: logits rows written in place by the sampler (no
//! vocabulary-sized copy per step) and llama.cpp's generation thread count.

use super::{sys, Context};

impl Context {
    /// Mutable logits rows of the batch entries `idx` (each added with `logits = true`), in the
    /// order given, valid until the next `decode`. The sampler masks and penalises in place, so
    /// no step copies a vocabulary-sized row. None if an entry has no logits or two entries share
    /// a row (distinct rows are what makes the `&mut` slices disjoint).
    pub fn logits_rows_mut(&mut self, idx: &[i32]) -> Option<Vec<&mut [f32]>> {
        let mut ptrs = Vec::with_capacity(idx.len());
        for &i in idx {
            let p = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i) };
            if p.is_null() {
                return None;
            }
            ptrs.push(p);
        }
        let mut starts: Vec<usize> = ptrs.iter().map(|&p| p as usize).collect();
        starts.sort_unstable();
        let row = self.n_vocab * std::mem::size_of::<f32>();
        if starts.windows(2).any(|w| w[1] - w[0] < row) {
            return None;
        }
        // SAFETY: each pointer is a row of n_vocab floats in the context's logits buffer (llama.cpp
        // contract for llama_get_logits_ith), rows do not overlap (checked above), and the
        // returned slices borrow `self` mutably, so no decode can rewrite the buffer meanwhile.
        Some(
            ptrs.into_iter()
                .map(|p| unsafe { std::slice::from_raw_parts_mut(p, self.n_vocab) })
                .collect(),
        )
    }

    /// Threads llama.cpp uses for single-token (generation) batches.
    pub fn n_threads(&self) -> usize {
        unsafe { sys::llama_n_threads(self.ptr.as_ptr()) }.max(1) as usize
    }
}
