//! llama.cpp's token batch: what one decode evaluates (token, position, sequence, whether its
//! logits row is wanted), in buffers llama.cpp allocates and this value frees.

use super::{sys, Token};

/// A token batch with room for `capacity` entries, one sequence id each.
pub struct Batch {
    pub(super) raw: sys::llama_batch,
    capacity: usize,
}

// SAFETY: the batch's buffers are plain memory owned by this value.
unsafe impl Send for Batch {}

impl Batch {
    pub fn new(capacity: usize) -> Batch {
        let capacity = capacity.max(1);
        let mut raw = unsafe { sys::llama_batch_init(capacity as i32, 0, 1) };
        raw.n_tokens = 0;
        Batch { raw, capacity }
    }

    pub fn is_empty(&self) -> bool {
        self.raw.n_tokens == 0
    }
    pub fn len(&self) -> usize {
        self.raw.n_tokens as usize
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn clear(&mut self) {
        self.raw.n_tokens = 0;
    }

    /// Append a token; returns its index in the batch (the index to read its logits with), or
    /// None when the batch is full.
    pub fn push(&mut self, token: Token, pos: i32, seq: i32, logits: bool) -> Option<i32> {
        let i = self.raw.n_tokens as usize;
        if i >= self.capacity {
            return None;
        }
        unsafe {
            *self.raw.token.add(i) = token;
            *self.raw.pos.add(i) = pos;
            *self.raw.n_seq_id.add(i) = 1;
            *(*self.raw.seq_id.add(i)).add(0) = seq;
            *self.raw.logits.add(i) = logits as i8;
        }
        self.raw.n_tokens += 1;
        Some(i as i32)
    }

    /// Whether entry `i` (an index `push` returned) gets a logits row.
    pub fn set_logits(&mut self, i: i32, logits: bool) {
        if (0..self.raw.n_tokens).contains(&i) {
            unsafe { *self.raw.logits.add(i as usize) = logits as i8 }
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        unsafe { sys::llama_batch_free(self.raw) }
    }
}
