//! The engine's embedding job: one slot's sequence wiped before and after, and every device
//! sampling chain detached meanwhile, around [`crate::embed::run`].

use super::Engine;
use runner_protocol::{EmbedResponse, RunnerError};

use crate::ffi::Token;

impl Engine {
    /// Embeddings of each input on slot `i`'s sequence, which is wiped first and after.
    pub(super) fn embed(
        &mut self,
        i: usize,
        inputs: &[Vec<Token>],
    ) -> Result<EmbedResponse, RunnerError> {
        let seq = self.slots[i].seq;
        self.slots[i].cache.clear();
        self.ctx.seq_rm(seq, -1, -1);
        // With any chain attached, llama.cpp sizes its sampling buffers for every token of an
        // embedding batch (all are outputs), four vocabulary rows each: detach all meanwhile.
        let attached: Vec<i32> = self
            .slots
            .iter()
            .map(|s| s.seq)
            .filter(|&s| self.ctx.device_sampling(s))
            .collect();
        for &s in &attached {
            self.ctx.set_device_sampling(s, false);
        }
        self.ctx.set_embeddings(true);
        let r = crate::embed::run(&mut self.ctx, &mut self.batch, seq, inputs);
        self.ctx.set_embeddings(false);
        self.ctx.seq_rm(seq, -1, -1);
        for &s in &attached {
            self.ctx.set_device_sampling(s, true);
        }
        for k in 0..self.slots.len() {
            self.sync_device(k);
        }
        r
    }
}
