//! Image token budgets for dynamic-resolution projectors (gemma4v): how many tokens an image
//! costs, decided here in the server and enforced by resizing the pixels to an exact grid of
//! the projector's token cells before they reach a runner.
//!
//! The pinned llama.cpp mtmd takes its token limits only when the projector is loaded
//! (`mtmd_context_params`), so per-request budgets cannot be handed to it. It does keep an
//! image's size when that size is already a multiple of its cell (patch × pooling kernel) and
//! inside its load-time pixel limits; the runner loads dynamic projectors with a minimum of one
//! token (`LoadOptions::image_min_tokens`), so the grid chosen here is the one it evaluates.
//!
//! Invariants:
//! - A grid is `gx × gy` cells with `1 ≤ gx, gy ≤ Geometry::max_cells` (the learned position
//!   table holds that many patches per side; beyond it the encoder would read past the table)
//!   and `gx · gy ≤` the budget, which is at most `Geometry::max_tokens` (what the runner's
//!   micro-batch is sized for).
//! - The grid keeps the image's aspect ratio as the publisher's processor does (both sides
//!   scaled by one factor, rounded down to whole cells), so a budget FILLS: an image is scaled
//!   up or down to the largest such grid within the budget, not merely clamped.
//! - Everything here is a pure function of sizes; the table tests pin the policy.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// The publisher's budgets (Gemma 4's `max_soft_tokens` choices), smallest first.
pub const LADDER: [u32; 5] = [70, 140, 280, 560, 1120];

/// What the server needs to know of a dynamic-resolution projector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Pixels per token cell side (patch size × pooling kernel).
    pub cell: u32,
    /// Most tokens per image (mtmd's own ceiling for the projector type).
    pub max_tokens: u32,
    /// Most cells per side (position table length ÷ pooling kernel).
    pub max_cells: u32,
}

impl Geometry {
    /// The geometry of a projector GGUF, or `None` when its image size is fixed (or it is of a
    /// type this server does not resize for). gemma4v: cell = `clip.vision.patch_size` ×
    /// `clip.vision.projector.scale_factor` (default 3, as mtmd reads it), 70–1120 tokens,
    /// positions from `v.position_embd.weight` (`[n_embd, positions, 2]`).
    pub fn of(mmproj: &GgufFile) -> Option<Geometry> {
        let kind = mmproj
            .get("clip.projector_type")
            .or_else(|| mmproj.get("clip.vision.projector_type"))
            .and_then(|v| v.as_str())?;
        if kind != "gemma4v" {
            return None;
        }
        let patch = mmproj.get("clip.vision.patch_size")?.as_u64()?;
        let merge = mmproj
            .get("clip.vision.projector.scale_factor")
            .and_then(|v| v.as_u64())
            .unwrap_or(3);
        let positions = mmproj
            .tensors
            .iter()
            .find(|t| t.name == "v.position_embd.weight")
            .and_then(|t| t.dims.get(1).copied())?;
        let cell = u32::try_from(patch.checked_mul(merge)?).ok()?;
        let max_cells = u32::try_from(positions / merge.max(1)).ok()?;
        (cell > 0 && max_cells > 0).then_some(Geometry {
            cell,
            max_tokens: *LADDER.last().unwrap_or(&1120),
            max_cells,
        })
    }
}

/// A request's budget options (`image_min_tokens` / `image_max_tokens`), validated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub min: Option<u32>,
    pub max: Option<u32>,
}

impl Budget {
    pub fn is_set(&self) -> bool {
        self.min.is_some() || self.max.is_some()
    }

    /// The request's bounds against the projector: `min ≤ max ≤ max_tokens`.
    pub fn check(&self, g: &Geometry) -> Result<()> {
        let over = |n: u32, what: &str| {
            Err(Error::BadRequest(format!(
                "{what} {n} is more than this model's projector takes per image ({})",
                g.max_tokens
            )))
        };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) if lo > hi => Err(Error::BadRequest(format!(
                "image_min_tokens {lo} is more than image_max_tokens {hi}"
            ))),
            (_, Some(hi)) if hi > g.max_tokens => over(hi, "image_max_tokens"),
            (Some(lo), _) if lo > g.max_tokens => over(lo, "image_min_tokens"),
            _ => Ok(()),
        }
    }

    /// The token budget one `w`×`h` image gets: `max` when named (the budget fills);
    /// otherwise the image's own choice on the ladder ([`select`]), raised to `min`.
    pub fn for_image(&self, w: u32, h: u32, g: &Geometry) -> u32 {
        match self.max {
            Some(hi) => hi,
            None => select(w, h, g).max(self.min.unwrap_or(0)).min(g.max_tokens),
        }
    }
}

/// The largest aspect-preserving grid within `budget` tokens for a `w`×`h` image (see the
/// module invariants): both sides scaled by `sqrt(budget / (w·h))` cells per pixel (less
/// where the position table bounds the longer side) and rounded down, each clamped to
/// `[1, max_cells]`, then the longer side cut back if clamping the shorter one up to a whole
/// cell pushed the product over the budget.
pub fn grid(w: u32, h: u32, budget: u32, g: &Geometry) -> (u32, u32) {
    let budget = budget.clamp(1, g.max_tokens.max(1));
    let (wf, hf) = (f64::from(w.max(1)), f64::from(h.max(1)));
    // Cells per pixel: the budget's scale, lowered so the longer side fits the position table
    // (which keeps the aspect ratio when the table, not the budget, is the bound).
    let cap = f64::from(g.max_cells);
    let s = (f64::from(budget) / (wf * hf))
        .sqrt()
        .min(cap / wf)
        .min(cap / hf);
    // The epsilon keeps exact fits (a square image on a square budget) from flooring below.
    let side = |x: f64| ((x * s + 1e-9).floor() as u64).clamp(1, u64::from(g.max_cells)) as u32;
    let (mut gx, mut gy) = (side(wf), side(hf));
    while u64::from(gx) * u64::from(gy) > u64::from(budget) {
        if gx >= gy {
            gx = (budget / gy).max(1);
        } else {
            gy = (budget / gx).max(1);
        }
    }
    (gx, gy)
}

/// The budget an image picks for itself when the request names none: the ladder rung whose
/// grid, in pixels, is closest to the image's own area (by ratio, so a 2× upscale and a 2×
/// downscale are equally far; a tie goes to the larger rung, which loses less detail).
/// Rungs above the projector's ceiling are never picked.
pub fn select(w: u32, h: u32, g: &Geometry) -> u32 {
    let area = f64::from(w.max(1)) * f64::from(h.max(1));
    let cell = f64::from(g.cell) * f64::from(g.cell);
    let mut best = (f64::INFINITY, LADDER[0]);
    for &b in LADDER.iter().filter(|&&b| b <= g.max_tokens) {
        let (gx, gy) = grid(w, h, b, g);
        let px = f64::from(gx) * f64::from(gy) * cell;
        let d = (px / area).ln().abs();
        if d <= best.0 + 1e-12 {
            best = (d, b);
        }
    }
    best.1
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
