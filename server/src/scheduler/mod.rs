//! The scheduler: which runners are loaded, who may use them, and when they go.
//!
//! One actor task (`actor.rs`) owns the loaded runners, the pending queue and the keep-alive
//! timers; HTTP handlers talk to it through the cloneable [`Scheduler`] handle. Decisions are the
//! pure functions in `policy.rs`; memory predictions are `memory.rs`; which GPU a new runner is
//! pinned to is `placement.rs`; `keep_alive.rs` parses Ollama's keep-alive values.
//!
//! Contract for callers:
//! - Every request passes bounded admission: at most `max_queue` requests pending or holding a
//!   lease; beyond that [`Scheduler::acquire`] fails at once with [`Error::QueueFull`].
//! - A [`Lease`] is one of a runner's `parallel` slots. Dropping it releases the slot and
//!   (re)starts the runner's keep-alive timer; keep-alive 0 unloads the runner right then.
//! - The latest request's keep-alive replaces the runner's (Ollama).
//! - A runner that exits, or that stopped answering (see `runner::liveness`; it is then killed),
//!   is forgotten at once: outstanding leases fail fast, and requests still waiting for it are
//!   served by a fresh runner (the next acquire loads one).

mod actor;
pub mod devices;
pub mod keep_alive;
pub mod memory;
pub mod placement;
pub mod policy;
pub mod runner_choice;

pub use keep_alive::{load_timeout_from_env_value, KeepAlive};
pub use memory::MemoryInputs;
pub use policy::RunnerId;
pub use runner_choice::RunnerKind;

use crate::error::{Error, Result};
use crate::runner::{CompletionStream, Liveness, Runner, SpawnConfig};
use actor::Cmd;
use runner_protocol::{CompletionRequest, LoadOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Scheduler settings; the config module fills them from `OLLAMA_*` variables.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// `OLLAMA_NUM_PARALLEL`: slots per runner when a request's `LoadOptions::parallel` is 0.
    pub num_parallel: u32,
    /// `OLLAMA_MAX_LOADED_MODELS`; 0 = 3 per GPU that runners report (3 without GPUs).
    pub max_loaded_models: usize,
    /// `OLLAMA_MAX_QUEUE`: requests pending or active at once (at least 1).
    pub max_queue: usize,
    /// `OLLAMA_KEEP_ALIVE`: used when a request has none.
    pub default_keep_alive: KeepAlive,
    /// `OLLAMA_LOAD_TIMEOUT`: load stall deadline, reset on progress. `None` = no limit.
    pub load_timeout: Option<Duration>,
    /// `HERD_MEMORY_BUDGET`: bytes all loaded runners may use together (estimates before load,
    /// their own reports after), a hard limit; `None` = from the devices (`memory::budget`).
    pub memory_budget: Option<u64>,
    /// `OLLAMA_GPU_OVERHEAD`: bytes of each GPU left out of the budget.
    pub gpu_overhead: u64,
    /// Total memory of each GPU found at startup (`devices::discover`); runners' `/info`
    /// replaces it once one has loaded.
    pub gpu_totals: Vec<u64>,
    /// The devices found at startup (`devices::discover`; empty = unknown): where the first
    /// runner is placed. Runners' `/info` refresh them.
    pub devices: Vec<runner_protocol::DeviceMemory>,
    /// `OLLAMA_SCHED_SPREAD`: every model over all GPUs, never pinned to the one it fits on.
    pub sched_spread: bool,
    /// Runner executable (runner-llamacpp, or the fake runner in tests).
    pub runner_binary: PathBuf,
    /// The runner for safetensors models (`HERD_MLX_RUNNER`; runner-mlx).
    pub mlx_runner_binary: PathBuf,
    /// Private 0700 directory for runner sockets (`runner::create_runner_dir`).
    pub runner_dir: PathBuf,
    /// The runners' environment (`runner::runner_env(std::env::vars_os())`).
    pub runner_env: Vec<(OsString, OsString)>,
    /// Extra flags appended to every runner's command line.
    pub runner_args: Vec<String>,
    /// SIGTERM → SIGKILL grace period when stopping a runner.
    pub stop_grace: Duration,
    /// `HERD_PROGRESS_TIMEOUT`, `HERD_HEALTH_INTERVAL`, `HERD_HEALTH_TIMEOUT`: when a ready
    /// runner that stopped answering is killed.
    pub liveness: Liveness,
    /// `HERD_MAX_KEEP_ALIVE`: caps every keep-alive (forever included); `None` = no cap.
    pub max_keep_alive: Option<Duration>,
    /// `HERD_PIN`: models never evicted for another model and never expired.
    pub pins: crate::config::Pins,
    /// Where queue, load, runner and token metrics go.
    pub metrics: crate::metrics::Metrics,
}

impl SchedulerConfig {
    /// Ollama's defaults around the two paths that have none.
    pub fn new(runner_binary: impl Into<PathBuf>, runner_dir: impl Into<PathBuf>) -> Self {
        let runner_binary: PathBuf = runner_binary.into();
        // Default: runner-mlx beside the configured runner (the config sets it explicitly).
        let mlx_runner_binary = runner_binary.with_file_name(crate::config::MLX_RUNNER_BIN);
        Self {
            mlx_runner_binary,
            num_parallel: 1,
            max_loaded_models: 0,
            max_queue: 512,
            default_keep_alive: KeepAlive::DEFAULT,
            load_timeout: Some(Duration::from_secs(300)),
            memory_budget: None,
            gpu_overhead: 0,
            gpu_totals: Vec::new(),
            devices: Vec::new(),
            sched_spread: false,
            runner_binary,
            runner_dir: runner_dir.into(),
            runner_env: Vec::new(),
            runner_args: Vec::new(),
            stop_grace: Duration::from_secs(5),
            liveness: Liveness::default(),
            max_keep_alive: None,
            pins: crate::config::Pins::default(),
            metrics: crate::metrics::Metrics::default(),
        }
    }

    fn spawn_config(&self) -> SpawnConfig {
        let mut s = SpawnConfig::new(&self.runner_binary, &self.runner_dir);
        s.env = self.runner_env.clone();
        s.extra_args = self.runner_args.clone();
        s.load_timeout = self.load_timeout;
        s.stop_grace = self.stop_grace;
        s.liveness = self.liveness;
        s
    }
}

/// What a handler asks for.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// Display name for `/api/ps` and logs, e.g. `smollm2:latest`.
    pub name: String,
    /// Manifest digest for `/api/ps`.
    pub digest: String,
    /// Load options; `options.model` (the blob path) identifies the model. `parallel` 0 = the
    /// configured `num_parallel`.
    pub options: LoadOptions,
    /// `None` = the configured default.
    pub keep_alive: Option<KeepAlive>,
    /// Predicted bytes (`memory::estimate`) for `options.parallel` slots (one when it is 0).
    pub memory: u64,
    /// Which runner binary serves it (from the model's format).
    pub runner: RunnerKind,
    /// One slot's KV cache bytes: the scheduler adds one per extra slot when it fills
    /// `parallel` from `OLLAMA_NUM_PARALLEL`.
    pub kv_per_slot: u64,
}

/// One loaded model as `/api/ps` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningModel {
    pub name: String,
    pub digest: String,
    /// Blob path.
    pub model: PathBuf,
    /// Bytes in use: the runner's own report, else the estimate.
    pub size: u64,
    /// Of which on accelerators (runner's report).
    pub size_vram: u64,
    pub context_length: u32,
    /// When the keep-alive timer unloads it; `None` = never. While leased: now + keep-alive.
    pub expires_at: Option<SystemTime>,
    pub pid: u32,
    /// Leases held now.
    pub active: usize,
    pub options: LoadOptions,
    /// Layers per device, as the runner reports them (`/info`).
    pub placement: Vec<runner_protocol::LayerPlacement>,
}

/// Handle to the scheduler actor. Cheap to clone; the actor shuts its runners down when the
/// last handle drops or on [`Scheduler::shutdown`].
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::UnboundedSender<Cmd>,
    /// The private 0700 runner directory (the engine prepares MLX model dirs under it).
    runner_dir: PathBuf,
    admission: Arc<Semaphore>,
    metrics: crate::metrics::Metrics,
}

fn gone() -> Error {
    Error::Internal("the scheduler has shut down".into())
}

impl Scheduler {
    /// Starts the actor; call inside a tokio runtime.
    pub fn new(cfg: SchedulerConfig) -> Self {
        let admission = Arc::new(Semaphore::new(cfg.max_queue.max(1)));
        let metrics = cfg.metrics.clone();
        let runner_dir = cfg.runner_dir.clone();
        let tx = actor::start(cfg);
        Self {
            tx,
            runner_dir,
            admission,
            metrics,
        }
    }

    /// The private runner directory (sockets, prepared model directories).
    pub fn runner_dir(&self) -> &Path {
        &self.runner_dir
    }

    /// The registry this scheduler (and the server around it) reports to.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Waits for a slot on a runner for `req`, loading (and evicting) as needed. Fails at once
    /// with `QueueFull` when `max_queue` requests are already pending or active. Dropping the
    /// future gives up the place in the queue.
    pub async fn acquire(&self, req: ModelRequest) -> Result<Lease> {
        let permit = self
            .admission
            .clone()
            .try_acquire_owned()
            .map_err(|_| Error::QueueFull)?;
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Acquire {
                req: Box::new(req),
                reply,
            })
            .map_err(|_| gone())?;
        let mut lease = rx.await.map_err(|_| gone())??;
        lease.permit = Some(permit);
        Ok(lease)
    }

    /// Loaded models, longest remaining keep-alive first.
    pub async fn ps(&self) -> Vec<RunningModel> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Cmd::Ps { reply }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// Unloads the runner(s) of the model at blob path `model`: at once if idle (returns after
    /// the process is gone), else when its last lease drops. Returns whether it was loaded.
    pub async fn unload(&self, model: &Path) -> bool {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Unload {
            model: model.to_path_buf(),
            reply,
        };
        if self.tx.send(cmd).is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Stops every runner (SIGTERM to each group, grace, SIGKILL, reap) and fails pending
    /// requests; later acquires fail. Returns when every process is gone.
    pub async fn shutdown(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Cmd::Shutdown { reply }).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A slot on a ready runner. Derefs to the [`Runner`]; dropping it releases the slot.
pub struct Lease {
    runner: Runner,
    id: RunnerId,
    tx: Option<mpsc::UnboundedSender<Cmd>>,
    permit: Option<OwnedSemaphorePermit>,
    metrics: crate::metrics::Metrics,
    /// How long the request waited, with its runner ready, for one of its slots to free.
    busy_wait: std::time::Duration,
}

impl Lease {
    /// How long the request waited, with its runner ready, for one of its slots to free.
    pub fn busy_wait(&self) -> std::time::Duration {
        self.busy_wait
    }

    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    pub fn runner_id(&self) -> RunnerId {
        self.id
    }

    /// The recorder for one completion on this lease's model; `started` is when the HTTP
    /// request arrived (time to first token counts from there).
    pub fn meter(&self, started: std::time::Instant) -> crate::metrics::CompletionMeter {
        self.metrics.completion(self.runner.name(), started)
    }

    /// Starts a completion whose stream owns this lease, so the slot is held exactly as long as
    /// the stream lives.
    pub async fn into_completion(self, req: &CompletionRequest) -> Result<CompletionStream> {
        let stream = self.runner.completion(req).await?;
        Ok(stream.with_guard(self))
    }
}

impl std::ops::Deref for Lease {
    type Target = Runner;

    fn deref(&self) -> &Runner {
        &self.runner
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("runner", &self.runner)
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Cmd::Release { id: self.id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send + 'static>() {}
    fn sync<T: Sync>() {}

    #[test]
    fn handles_cross_tasks() {
        // Handlers hold these across awaits and axum bodies need `Send + 'static` streams.
        send::<Scheduler>();
        sync::<Scheduler>();
        send::<Lease>();
        sync::<Lease>();
        send::<CompletionStream>();
        send::<RunningModel>();
    }
}
