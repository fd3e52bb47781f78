//! Sampling one step's rows: each slot's sampler on its own row (whole logits or the device's
//! candidates), on a pool of threads when the rows are large.

use super::Active;
use crate::ffi::Row;
use crate::sampling::Choice;
use rayon::prelude::*;

/// Logits a step must scan at least (two rows of a 128k vocabulary) before its rows go to the
/// pool: below that, handing them over costs more than it saves. Waking the pool's sleeping
/// threads alone takes ~0.25 ms in the H200 VM, as long as 16 rows of the device's 256
/// candidates take on one thread (native/gpu-results.md, runs E, G, H).
const PARALLEL_MIN: usize = 1 << 18;

/// The sampling threads: llama.cpp's thread count, since those cores wait while the engine
/// samples (on a GPU they wait anyway). None with one thread.
pub(super) fn pool(threads: usize) -> Option<rayon::ThreadPool> {
    if threads < 2 {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("sample-{i}"))
        .build()
        .ok()
}

/// Sample every `(slot, row)` pair; the result is in the same order, with the rows' summed
/// sampling time in ns (`timed`; 0 otherwise), which against the step's wall time shows how
/// well the pool spreads them. With a pool and a large step every row is its own task: each
/// sampler owns its row and state, so the choices equal sequential sampling's.
pub(super) fn sample_all(
    work: &mut [(&mut Active, Row)],
    pool: Option<&rayon::ThreadPool>,
    timed: bool,
) -> (Vec<Option<Choice>>, u64) {
    let elems: usize = work
        .iter()
        .map(|(_, r)| match r {
            Row::Logits(l) => l.len(),
            Row::Top { ids, .. } => ids.len(),
        })
        .sum();
    let one_of = |(a, row): &mut (&mut Active, Row)| {
        let started = timed.then(std::time::Instant::now);
        let c = one(a, row);
        (c, started.map_or(0, |t| t.elapsed().as_nanos() as u64))
    };
    let timed: Vec<(Option<Choice>, u64)> = match pool {
        Some(p) if work.len() > 1 && elems >= PARALLEL_MIN => {
            p.install(|| work.par_iter_mut().with_max_len(1).map(one_of).collect())
        }
        _ => work.iter_mut().map(one_of).collect(),
    };
    let ns = timed.iter().map(|(_, ns)| ns).sum();
    (timed.into_iter().map(|(c, _)| c).collect(), ns)
}

/// Sample one row with the slot's sampler.
pub(super) fn one(a: &mut Active, row: &mut Row) -> Option<Choice> {
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
    use crate::sampling::Sampler;
    use runner_core::reply::Reply;
    use runner_core::sampling::NoMask;
    use runner_protocol::CompletionRequest;
    use runner_protocol::Sampling;

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
            num_predict: 100,
            ..CompletionRequest::default()
        };
        let out = tokio::sync::mpsc::unbounded_channel().0;
        Active {
            reply: Reply::new(out, &req, 3, 0, 64).expect("a nonzero budget"),
            sampler: Sampler::new(&req.sampling, &[1, 2, 3], 64, Box::new(NoMask)),
            req,
            pending: Vec::new(),
            media: Default::default(),
            next: None,
            logits_at: Some(0),
            needs_row: true,
            draft: Vec::new(),
            draft_rows: Vec::new(),
            forced: Default::default(),
            forced_run: false,
            ngram: 0,
            pace: Default::default(),
            ngram_draft: false,
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
        let pool = pool(4);
        let run = |pool: Option<&rayon::ThreadPool>| {
            let mut act: Vec<Active> = (0..slots as i64).map(active).collect();
            let mut all = Vec::new();
            for _ in 0..4 {
                let mut r = rows.clone();
                let mut work: Vec<(&mut Active, Row)> = act
                    .iter_mut()
                    .zip(r.iter_mut().map(|r| Row::Logits(r.as_mut_slice())))
                    .collect();
                all.push(sample_all(&mut work, pool, false).0);
            }
            all
        };
        assert!(slots * vocab >= PARALLEL_MIN);
        let (seq, par) = (run(None), run(pool.as_ref()));
        assert!(seq.iter().flatten().all(|c| c.is_some()));
        assert_eq!(seq, par);
    }
}
