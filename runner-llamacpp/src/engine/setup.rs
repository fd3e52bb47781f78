//! The engine's switches: the builder calls `main` makes after `Engine::new`, one per runner
//! flag or loaded part (drafting, the draft model, the projector, step stats, the sampling
//! pool, padding, prewake, the first-token hold).

use super::sample;
use super::{draft_model, Drafting, Engine, StepStats};
use std::sync::Arc;

impl Engine {
    /// How slots draft tokens for speculative decoding.
    pub fn with_drafting(mut self, d: Drafting) -> Engine {
        if let Some(rho) = d.cost {
            self.cost = runner_core::draft::pace::StepCost::fixed(rho);
        }
        self.cost = std::mem::take(&mut self.cost).shaped(d.shaped);
        self.drafting = d;
        self
    }

    /// The draft model that drafts for slots the grammar and the n-gram drafter leave without
    /// a draft.
    pub fn with_draft_model(mut self, d: Option<draft_model::DraftModel>) -> Engine {
        self.drafter = d;
        self
    }

    /// The vision projector that evaluates the images of requests (`vision`).
    pub fn with_projector(mut self, projector: Option<Arc<crate::ffi::Projector>>) -> Engine {
        self.projector = projector;
        self
    }

    /// Print per-phase step timings every `every` decode steps (0 = off).
    pub fn with_step_stats(mut self, every: u32) -> Engine {
        self.stats = StepStats::new(every);
        if every > 0 {
            let threads = self.pool.as_ref().map_or(1, |p| p.current_num_threads());
            eprintln!("runner-llamacpp: step stats every {every} steps; sampling pool {threads}");
        }
        self
    }

    /// Sample large steps on `threads` threads instead of llama.cpp's thread count (0 = keep).
    /// Call before `with_step_stats`, which reports the pool's size.
    pub fn with_sample_threads(mut self, threads: usize) -> Engine {
        if threads > 0 {
            self.pool = sample::pool(threads);
        }
        self
    }

    /// Pad one-token decode steps to the last one's sequences (`plan::padding`).
    pub fn with_padding(mut self, on: bool) -> Engine {
        self.pad.on = on;
        self
    }

    /// Wake the sampling pool shortly before each decode step's logits land (`engine::prewake`).
    pub fn with_prewake(mut self, on: bool) -> Engine {
        self.prewake.on = on;
        self
    }

    pub fn with_first_token_hold(mut self, hold: bool) -> Engine {
        self.hold = hold;
        self
    }
}
