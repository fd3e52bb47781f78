//! GPU placement of a new llama.cpp runner (Ollama's `pickBestFullFitByLibrary`): unless
//! `OLLAMA_SCHED_SPREAD` is set, a model that fits entirely on one GPU is loaded on the single
//! GPU with the most free memory (`--main-gpu i`, llama.cpp's split mode none), so several models
//! each get their own GPU and no cross-GPU traffic; otherwise llama.cpp splits its layers over
//! every GPU. Pure functions over numbers the actor keeps (`actor/place.rs`): no I/O, no clocks.
//!
//! Accounting: a device report (startup discovery, or a runner's `/info` once it is ready) gives
//! each GPU's free memory *after* the allocations of every herd runner loaded at that moment.
//! [`baseline`] adds those back, giving the GPU's memory free of herd; [`accounted`] subtracts
//! what the runners loaded now hold, as their own `/info` reports say. So a later report (which
//! also sees other processes' use) refreshes the baseline without counting any runner twice.

use runner_protocol::{DeviceKind, DeviceMemory, LoadOptions};

/// One local GPU as a device report showed it, with herd's runners' memory added back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuBase {
    /// The engine's device name (`CUDA0`): how runners' reports name the same GPU.
    pub name: String,
    pub total: u64,
    /// Free with none of herd's runners loaded.
    pub free: u64,
}

/// One local GPU as the scheduler accounts it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpu {
    /// llama.cpp's `--main-gpu` index: the position among the local GPUs.
    pub index: u32,
    pub total: u64,
    /// Free memory less what herd's loaded runners hold on it.
    pub free: u64,
}

/// What one load asks of placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// The request's own `main_gpu` option: it always wins.
    pub main_gpu: Option<u32>,
    /// Predicted bytes of the runner (its last report for these options, else the estimate).
    pub need: u64,
    /// Leave the split to llama.cpp: `OLLAMA_SCHED_SPREAD`, or see [`leaves_split`].
    pub spread: bool,
    /// `OLLAMA_GPU_OVERHEAD`: bytes of each GPU kept free.
    pub overhead: u64,
}

/// A request's `main_gpu` is not one of the known GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    pub requested: u32,
    pub gpus: usize,
}

/// The `--main-gpu` for a new runner: `Some(i)` = the whole model on GPU `i`, `None` = llama.cpp's
/// layer split over all GPUs. `gpus` is `None` when the GPUs are unknown (no device report yet,
/// or llama.cpp counts other devices too, as with RPC workers): a requested `main_gpu` then
/// passes unchecked. Ties in free memory go to the lowest index.
pub fn main_gpu(gpus: Option<&[Gpu]>, ask: &Ask) -> Result<Option<u32>, OutOfRange> {
    if let Some(g) = ask.main_gpu {
        return match gpus {
            // No GPU at all: nothing to choose, the model runs on the CPU (Ollama's llama-server
            // takes `-mg` on a CPU-only host too; clients send `main_gpu: 0` by habit).
            Some([]) => Ok(None),
            Some(list) if g as usize >= list.len() => Err(OutOfRange {
                requested: g,
                gpus: list.len(),
            }),
            _ => Ok(Some(g)),
        };
    }
    let Some(gpus) = gpus.filter(|l| l.len() >= 2) else {
        return Ok(None);
    };
    if ask.spread {
        return Ok(None);
    }
    // `max_by_key` keeps the last maximum; reversing the order makes that the lowest index.
    let best = gpus
        .iter()
        .rev()
        .max_by_key(|g| g.free)
        .expect("at least two GPUs");
    Ok((best.free.saturating_sub(ask.overhead) >= ask.need).then_some(best.index))
}

/// Whether a request leaves the split to llama.cpp whatever the GPUs: it names RPC workers
/// (their devices come first in llama.cpp's list: spreading over hosts is the point) or a tensor
/// split (`HERD_TENSOR_SPLIT`: the operator's own split), or it offloads no layer at all.
pub fn leaves_split(opts: &LoadOptions) -> bool {
    !opts.rpc.is_empty() || !opts.tensor_split.is_empty() || opts.gpu_layers == 0
}

/// A report's local GPUs in llama.cpp's `--main-gpu` order: the discrete GPUs in ggml's order,
/// or, when there is none, the integrated ones (llama.cpp's default device list). RPC devices
/// (`RPC…`) are another host's and CPU-like accelerators hold no layers.
pub fn local_gpus(devices: &[DeviceMemory]) -> Vec<&DeviceMemory> {
    let of = |kind: DeviceKind| -> Vec<&DeviceMemory> {
        devices
            .iter()
            .filter(|d| d.kind == kind && !d.name.starts_with("RPC"))
            .collect()
    };
    let gpus = of(DeviceKind::Gpu);
    if gpus.is_empty() {
        of(DeviceKind::Igpu)
    } else {
        gpus
    }
}

/// Each local GPU's memory free of herd, from a report taken while the runners whose holdings
/// `held(name)` sums were loaded (the reporting runner included).
pub fn baseline(report: &[DeviceMemory], held: impl Fn(&str) -> u64) -> Vec<GpuBase> {
    local_gpus(report)
        .into_iter()
        .map(|d| GpuBase {
            name: d.name.clone(),
            total: d.total,
            free: d.free.saturating_add(held(&d.name)).min(d.total),
        })
        .collect()
}

/// The GPUs now: each baseline less what the runners loaded now hold on it (`held(name)`).
pub fn accounted(base: &[GpuBase], held: impl Fn(&str) -> u64) -> Vec<Gpu> {
    base.iter()
        .zip(0u32..)
        .map(|(b, index)| Gpu {
            index,
            total: b.total,
            free: b.free.saturating_sub(held(&b.name)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpus(free: &[u64]) -> Vec<Gpu> {
        free.iter()
            .zip(0u32..)
            .map(|(&free, index)| Gpu {
                index,
                total: 80 * GIB,
                free,
            })
            .collect()
    }

    #[test]
    fn main_gpu_table() {
        let ask = |main_gpu, need, spread| Ask {
            main_gpu,
            need,
            spread,
            overhead: 0,
        };
        let two = gpus(&[10 * GIB, 30 * GIB]);
        let out = |requested, gpus| Err(OutOfRange { requested, gpus });
        // (known GPUs, ask) → main_gpu
        type Row<'a> = (Option<&'a [Gpu]>, Ask, Result<Option<u32>, OutOfRange>);
        let cases: Vec<Row> = vec![
            // Fits on one: the GPU with the most free memory.
            (Some(&two), ask(None, 5 * GIB, false), Ok(Some(1))),
            (Some(&two), ask(None, 30 * GIB, false), Ok(Some(1))),
            // Fits on none alone: llama.cpp's layer split.
            (Some(&two), ask(None, 31 * GIB, false), Ok(None)),
            // OLLAMA_SCHED_SPREAD (or a request that splits itself).
            (Some(&two), ask(None, GIB, true), Ok(None)),
            // One GPU, none, or unknown: nothing to choose.
            (Some(&two[..1]), ask(None, GIB, false), Ok(None)),
            (Some(&[]), ask(None, GIB, false), Ok(None)),
            (None, ask(None, GIB, false), Ok(None)),
            // The request's own main_gpu wins, even over spread and a better GPU.
            (Some(&two), ask(Some(0), 5 * GIB, false), Ok(Some(0))),
            (Some(&two), ask(Some(0), 50 * GIB, true), Ok(Some(0))),
            (Some(&two[..1]), ask(Some(0), GIB, false), Ok(Some(0))),
            // ... unless it names a GPU that is not there.
            (Some(&two), ask(Some(2), GIB, false), out(2, 2)),
            (Some(&two), ask(Some(7), GIB, true), out(7, 2)),
            (Some(&[]), ask(Some(0), GIB, false), Ok(None)),
            (Some(&[]), ask(Some(3), GIB, false), Ok(None)),
            // Unknown GPUs: passed through for the engine to judge.
            (None, ask(Some(3), GIB, false), Ok(Some(3))),
        ];
        for (known, a, want) in cases {
            assert_eq!(main_gpu(known, &a), want, "{known:?} {a:?}");
        }
        // Ties go to the lowest index.
        let tie = gpus(&[20 * GIB, 30 * GIB, 30 * GIB, 5 * GIB]);
        assert_eq!(main_gpu(Some(&tie), &ask(None, GIB, false)), Ok(Some(1)));
        let all = gpus(&[8 * GIB; 3]);
        assert_eq!(main_gpu(Some(&all), &ask(None, GIB, false)), Ok(Some(0)));
        // The overhead is kept free on the chosen GPU.
        let tight = Ask {
            overhead: 2 * GIB,
            ..ask(None, 29 * GIB, false)
        };
        assert_eq!(main_gpu(Some(&two), &tight), Ok(None));
        let roomy = Ask {
            overhead: GIB,
            ..ask(None, 29 * GIB, false)
        };
        assert_eq!(main_gpu(Some(&two), &roomy), Ok(Some(1)));
    }

    #[test]
    fn requests_that_split_themselves() {
        let base = LoadOptions::default();
        let with = |f: fn(&mut LoadOptions)| {
            let mut o = base.clone();
            f(&mut o);
            o
        };
        let cases = [
            (base.clone(), false),
            (with(|o| o.gpu_layers = 12), false),
            (with(|o| o.main_gpu = Some(1)), false),
            (with(|o| o.gpu_layers = 0), true),
            (with(|o| o.rpc = vec!["127.0.0.1:7411".into()]), true),
            (with(|o| o.tensor_split = "3,1".into()), true),
        ];
        for (opts, want) in cases {
            assert_eq!(leaves_split(&opts), want, "{opts:?}");
        }
    }

    fn dev(name: &str, kind: DeviceKind, free: u64, total: u64) -> DeviceMemory {
        DeviceMemory {
            name: name.into(),
            kind,
            free,
            total,
            ..DeviceMemory::default()
        }
    }

    #[test]
    fn local_gpus_in_main_gpu_order() {
        use DeviceKind::*;
        let names = |devs: &[DeviceMemory]| -> Vec<String> {
            local_gpus(devs).iter().map(|d| d.name.clone()).collect()
        };
        let cases: [(Vec<DeviceMemory>, &[&str]); 5] = [
            (
                vec![
                    dev("CPU", Cpu, 1, 2),
                    dev("CUDA0", Gpu, 1, 2),
                    dev("CUDA1", Gpu, 1, 2),
                ],
                &["CUDA0", "CUDA1"],
            ),
            // Another host's devices are not local GPUs.
            (
                vec![
                    dev("CPU", Cpu, 1, 2),
                    dev("RPC0", Gpu, 1, 2),
                    dev("CUDA0", Gpu, 1, 2),
                ],
                &["CUDA0"],
            ),
            // An integrated GPU counts only without a discrete one.
            (
                vec![dev("Vulkan0", Igpu, 1, 2), dev("CUDA0", Gpu, 1, 2)],
                &["CUDA0"],
            ),
            (
                vec![dev("CPU", Cpu, 1, 2), dev("Vulkan0", Igpu, 1, 2)],
                &["Vulkan0"],
            ),
            (vec![dev("CPU", Cpu, 1, 2), dev("BLAS", Accel, 1, 2)], &[]),
        ];
        for (devs, want) in cases {
            assert_eq!(names(&devs), want, "{devs:?}");
        }
    }

    #[test]
    fn baseline_and_accounting() {
        use DeviceKind::*;
        // Runner a (6 GiB on CUDA1) reports after loading; b (2 GiB on CUDA0) was already loaded.
        let report = [
            dev("CPU", Cpu, 30 * GIB, 64 * GIB),
            dev("CUDA0", Gpu, 20 * GIB, 24 * GIB),
            dev("CUDA1", Gpu, 10 * GIB, 24 * GIB),
        ];
        let held_ab = |name: &str| match name {
            "CUDA0" => 2 * GIB,
            "CUDA1" => 6 * GIB,
            _ => 0,
        };
        let base = baseline(&report, held_ab);
        assert_eq!(
            base.iter()
                .map(|b| (b.name.as_str(), b.free))
                .collect::<Vec<_>>(),
            [("CUDA0", 22 * GIB), ("CUDA1", 16 * GIB)]
        );
        // With both loaded the accounting gives back what the report said.
        let now = accounted(&base, held_ab);
        assert_eq!(
            now.iter().map(|g| (g.index, g.free)).collect::<Vec<_>>(),
            [(0, 20 * GIB), (1, 10 * GIB)]
        );
        // Once b is gone its 2 GiB on CUDA0 are free again.
        let now = accounted(&base, |n| if n == "CUDA1" { 6 * GIB } else { 0 });
        assert_eq!(now[0].free, 22 * GIB);
        // A report never makes a GPU freer than its total, and holdings never go below 0.
        let base = baseline(&report, |_| 100 * GIB);
        assert!(base.iter().all(|b| b.free == b.total));
        assert!(accounted(&base, |_| 100 * GIB).iter().all(|g| g.free == 0));
    }
}
