//! The actor's memory accounting: the limits in force (budget and model count depend on the
//! GPUs runners have reported) and what each set of load options was measured to hold, so a
//! reload is planned with the runner's own report rather than the GGUF estimate.

use super::Actor;
use crate::runner::Runner;
use crate::scheduler::memory;
use crate::scheduler::policy::{self, Limits};
use crate::scheduler::ModelRequest;
use runner_protocol::{DeviceKind, LoadOptions};

/// How many load-option sets keep their measured size.
const LEARNED_MAX: usize = 64;

impl Actor {
    /// The limits now.
    pub(super) fn limits(&self) -> Limits {
        Limits {
            max_loaded: memory::max_loaded(self.max_loaded_models, self.gpu_totals.len()),
            memory_budget: memory::budget(
                self.memory_override,
                self.gpu_overhead,
                &self.gpu_totals,
                self.system_available,
            ),
        }
    }

    /// Bytes a request's runner will hold: the last report for the same options, else the
    /// estimate.
    pub(super) fn predicted(&self, req: &ModelRequest) -> u64 {
        self.learned
            .iter()
            .find(|(o, _)| !policy::needs_reload(o, &req.options))
            .map_or(req.memory, |(_, m)| *m)
    }

    /// Records a ready runner's report: its GPUs (when it lists devices) and what it holds.
    pub(super) fn learn(&mut self, options: LoadOptions, runner: &Runner) {
        let info = runner.info();
        if !info.devices.is_empty() {
            self.gpu_totals = info
                .devices
                .iter()
                .filter(|d| d.kind != DeviceKind::Cpu)
                .map(|d| d.total)
                .collect();
        }
        if info.memory_bytes > 0 {
            self.learned.retain(|(o, _)| *o != options);
            self.learned.push_front((options, info.memory_bytes));
            self.learned.truncate(LEARNED_MAX);
        }
    }
}
