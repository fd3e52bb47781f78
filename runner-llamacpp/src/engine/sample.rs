//! Sampling one step's rows: each slot's sampler on its own row (whole logits or the device's
//! candidates), split over threads when the rows are large.

use super::Active;
use crate::ffi::Row;
use crate::sampling::Choice;

/// Logits one sampling worker should scan per step at least (about 4 rows of a 128k vocabulary):
/// below that, spawning the worker costs more than it saves.
const SAMPLING_PER_WORKER: usize = 1 << 19;

/// Sample every `(slot, row)` pair; the result is in the same order. With `threads` > 1 and a
/// large step, the pairs are split over scoped threads (the engine thread takes the first
/// share): each sampler owns its row and state, so the choices equal sequential sampling's.
pub(super) fn sample_all(work: &mut [(&mut Active, Row)], threads: usize) -> Vec<Option<Choice>> {
    let elems: usize = work
        .iter()
        .map(|(_, r)| match r {
            Row::Logits(l) => l.len(),
            Row::Top { ids, .. } => ids.len(),
        })
        .sum();
    let workers = threads.min(work.len()).min(elems / SAMPLING_PER_WORKER);
    if workers < 2 {
        return work.iter_mut().map(one).collect();
    }
    let per = work.len().div_ceil(workers);
    std::thread::scope(|s| {
        let mut chunks = work.chunks_mut(per);
        let first = chunks.next().unwrap_or_default();
        let handles: Vec<_> = chunks
            .map(|chunk| s.spawn(move || chunk.iter_mut().map(one).collect::<Vec<_>>()))
            .collect();
        let mut out: Vec<Option<Choice>> = first.iter_mut().map(one).collect();
        for h in handles {
            out.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

fn one((a, row): &mut (&mut Active, Row)) -> Option<Choice> {
    match row {
        Row::Logits(row) => {
            let lp = a.req.logprobs || a.req.top_logprobs > 0;
            a.sampler
                .sample(row, lp, a.req.top_logprobs.min(20) as usize)
        }
        Row::Top { ids, logits } => {
            debug_assert!(!a.needs_row, "a whole-row request got device candidates");
            a.sampler.sample_top(ids, logits)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{NoMask, Sampler};
    use crate::text::TextStream;
    use runner_protocol::Sampling;
    use runner_protocol::{CompletionRequest, Timings};

    fn active(seed: i64) -> Active {
        let req = CompletionRequest {
            sampling: Sampling {
                temperature: 0.9,
                seed,
                repeat_penalty: 1.1,
                ..Sampling::default()
            },
            logprobs: true,
            top_logprobs: 3,
            ..CompletionRequest::default()
        };
        Active {
            out: tokio::sync::mpsc::unbounded_channel().0,
            sampler: Sampler::new(&req.sampling, &[1, 2, 3], 64, Box::new(NoMask)),
            req,
            pending: Vec::new(),
            next: None,
            text: TextStream::new(&[]),
            lp_held: Vec::new(),
            limit: 100,
            timings: Timings::default(),
            logits_at: Some(0),
            needs_row: true,
        }
    }

    #[test]
    fn parallel_sampling_chooses_what_sequential_sampling_chooses() {
        let vocab = 150_000;
        let slots = 8;
        let rows: Vec<Vec<f32>> = (0..slots)
            .map(|s| {
                (0..vocab)
                    .map(|i| ((i * 31 + s * 7) % 997) as f32 / 97.0)
                    .collect()
            })
            .collect();
        let run = |threads: usize| {
            let mut act: Vec<Active> = (0..slots as i64).map(active).collect();
            let mut all = Vec::new();
            for _ in 0..4 {
                let mut r = rows.clone();
                let mut work: Vec<(&mut Active, Row)> = act
                    .iter_mut()
                    .zip(r.iter_mut().map(|r| Row::Logits(r.as_mut_slice())))
                    .collect();
                all.push(sample_all(&mut work, threads));
            }
            all
        };
        // 8 rows of 150k: three workers at 4 threads.
        assert!(slots * vocab / SAMPLING_PER_WORKER >= 2);
        let (seq, par) = (run(1), run(4));
        assert!(seq.iter().flatten().all(|c| c.is_some()));
        assert_eq!(seq, par);
    }
}
