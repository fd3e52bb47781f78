//! The engine's hot-path access to a context: logits rows written in place by the sampler (no
//! vocabulary-sized copy per step), device top-k candidate rows, and llama.cpp's generation
//! thread count.

use super::{sys, Context, Token};

/// One output row of the last decode.
pub enum Row<'a> {
    /// The whole vocabulary's logits; the sampler masks and penalises in place.
    Logits(&'a mut [f32]),
    /// The device's top-K of the row (backend_sampling.rs): candidate ids and their raw logits,
    /// same length, in no particular order.
    Top { ids: &'a [Token], logits: &'a [f32] },
}

impl Context {
    /// The rows of batch entries `want` (index, sampled on the device?), in the order given,
    /// valid until the next `decode`. None if a row is missing or two rows overlap (disjoint
    /// memory is what makes the `&mut` slices sound).
    pub fn output_rows(&mut self, want: &[(i32, bool)]) -> Option<Vec<Row<'_>>> {
        enum Ptr {
            Logits(*mut f32),
            Top(*const Token, *const f32, usize),
        }
        let mut ptrs = Vec::with_capacity(want.len());
        // (start, bytes, mutable) of every region handed out.
        let mut spans: Vec<(usize, usize, bool)> = Vec::with_capacity(2 * want.len());
        for &(i, device) in want {
            if device {
                let (ids, logits, n) = self.device_row(i)?;
                spans.push((ids as usize, n * std::mem::size_of::<Token>(), false));
                spans.push((logits as usize, n * std::mem::size_of::<f32>(), false));
                ptrs.push(Ptr::Top(ids, logits, n));
            } else {
                let p = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i) };
                if p.is_null() {
                    return None;
                }
                spans.push((p as usize, self.n_vocab * std::mem::size_of::<f32>(), true));
                ptrs.push(Ptr::Logits(p));
            }
        }
        // Shared rows may alias (llama.cpp hands every uncut row the same id list); a mutable
        // row may alias nothing.
        let overlap =
            |a: &(usize, usize, bool), b: &(usize, usize, bool)| a.0 < b.0 + b.1 && b.0 < a.0 + a.1;
        for (j, m) in spans.iter().enumerate().filter(|(_, s)| s.2) {
            if spans
                .iter()
                .enumerate()
                .any(|(k, s)| k != j && overlap(m, s))
            {
                return None;
            }
        }
        // SAFETY: each pointer addresses `n` (or n_vocab) elements of the context's output
        // buffer (llama.cpp's contract for the *_ith getters), no two regions overlap (checked
        // above for every mutable one), and the slices borrow `self` mutably, so no decode rewrites them meanwhile.
        Some(
            ptrs.into_iter()
                .map(|p| match p {
                    Ptr::Logits(p) => {
                        Row::Logits(unsafe { std::slice::from_raw_parts_mut(p, self.n_vocab) })
                    }
                    Ptr::Top(ids, logits, n) => Row::Top {
                        ids: unsafe { std::slice::from_raw_parts(ids, n) },
                        logits: unsafe { std::slice::from_raw_parts(logits, n) },
                    },
                })
                .collect(),
        )
    }

    /// Whole logits rows only (the numerics experiments).
    #[cfg(test)]
    pub fn logits_rows_mut(&mut self, idx: &[i32]) -> Option<Vec<&mut [f32]>> {
        let want: Vec<(i32, bool)> = idx.iter().map(|&i| (i, false)).collect();
        let rows = self.output_rows(&want)?;
        rows.into_iter()
            .map(|r| match r {
                Row::Logits(l) => Some(l),
                Row::Top { .. } => None,
            })
            .collect()
    }

    /// Threads llama.cpp uses for single-token (generation) batches.
    pub fn n_threads(&self) -> usize {
        unsafe { sys::llama_n_threads(self.ptr.as_ptr()) }.max(1) as usize
    }
}
