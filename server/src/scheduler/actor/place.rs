//! The actor's GPU placement (`placement.rs` decides): the GPUs' memory free of herd, learned
//! from device reports, and the `--main-gpu` each new llama.cpp runner is spawned with.
//!
//! Invariants: only llama.cpp runners are placed, and only their reports teach the GPUs (the
//! `--main-gpu` index is llama.cpp's; runner-mlx picks its own device). The choice is made when
//! the load starts, after the runners it evicts left `entries` and while no other runner is
//! loading (the policy starts one load at a time), so every runner that holds GPU memory then
//! has reported it.

use super::Actor;
use crate::error::Error;
use crate::scheduler::placement::{self, Ask, OutOfRange};
use crate::scheduler::{ModelRequest, RunnerId, RunnerKind};
use runner_protocol::DeviceMemory;

impl Actor {
    /// The request's own `main_gpu`, if it names a GPU that is not there: Ollama's 400.
    pub(super) fn check_main_gpu(&self, req: &ModelRequest) -> Result<(), Error> {
        self.choose_gpu(req, 0).map(|_| ()).map_err(out_of_range)
    }

    /// The `main_gpu` a new runner for `req` is spawned with (the request's own, else the
    /// placement's choice for `need` predicted bytes).
    pub(super) fn place(&self, req: &ModelRequest, need: u64) -> Option<u32> {
        // Out of range was refused at admission; GPUs learned since then leave it to the engine.
        self.choose_gpu(req, need).unwrap_or(req.options.main_gpu)
    }

    fn choose_gpu(&self, req: &ModelRequest, need: u64) -> Result<Option<u32>, OutOfRange> {
        if req.runner != RunnerKind::Llamacpp {
            return Ok(req.options.main_gpu);
        }
        // With RPC workers llama.cpp's device list starts with the remote devices.
        let known = self
            .gpus
            .as_ref()
            .filter(|_| req.options.rpc.is_empty())
            .map(|base| placement::accounted(base, |name| self.held_on(name)));
        let ask = Ask {
            main_gpu: req.options.main_gpu,
            need,
            spread: self.sched_spread || placement::leaves_split(&req.options),
            overhead: self.gpu_overhead,
        };
        placement::main_gpu(known.as_deref(), &ask)
    }

    /// Learns the GPUs from runner `id`'s report, now that it is ready and in `entries`.
    pub(super) fn learn_gpus(&mut self, id: RunnerId) {
        let Some(e) = self
            .entries
            .get(&id)
            .filter(|e| e.kind == RunnerKind::Llamacpp)
        else {
            return;
        };
        let Some(info) = e.runner.as_ref().map(|r| r.info()) else {
            return;
        };
        if info.devices.is_empty() {
            return;
        }
        let base = placement::baseline(&info.devices, |name| self.held_on(name));
        self.gpus = Some(base);
    }

    /// Bytes the loaded llama.cpp runners hold on device `name`, by their own reports.
    fn held_on(&self, name: &str) -> u64 {
        self.entries
            .values()
            .filter(|e| e.kind == RunnerKind::Llamacpp)
            .filter_map(|e| e.runner.as_ref())
            .flat_map(|r| r.info().devices.iter())
            .filter(|d| d.name == name)
            .map(DeviceMemory::held)
            .sum()
    }
}

/// The startup devices as the actor's first GPU baseline (no runner is loaded yet); `None`
/// when discovery found nothing (the runner has no `devices` subcommand, or it failed).
pub(super) fn initial_gpus(devices: &[DeviceMemory]) -> Option<Vec<placement::GpuBase>> {
    (!devices.is_empty()).then(|| placement::baseline(devices, |_| 0))
}

fn out_of_range(e: OutOfRange) -> Error {
    Error::MainGpuOutOfRange {
        requested: e.requested,
        gpus: e.gpus,
    }
}
