//! The scheduler actor: the single task that owns loaded runners, the pending queue and the
//! keep-alive timers. Handlers reach it only through [`Cmd`]s sent by the `Scheduler` handle
//! and by leases.
//!
//! Invariants:
//! - Only this task mutates `entries` and `queue`; after every event it re-plans the queue in
//!   FIFO order (`dispatch`) and then starts or fires idle timers (`settle_idle`), so a request
//!   waiting for a slot always gets it before a keep-alive of 0 could unload the runner.
//! - At most one entry is loading at a time (the policy answers `WaitForRoom` otherwise), and a
//!   request that waits for room blocks later loads, so loads happen in arrival order.
//! - A runner leaves `entries` before it is stopped; every process it started is stopped and
//!   reaped before `finish` returns (stops, loads and exit watchers all live in `tasks`).
//! - Internal tasks hold only weak senders, so dropping every `Scheduler` handle and lease ends
//!   the actor (which then stops its runners).

use super::policy::{self, LoadedView, Plan, RunnerId};
use super::{KeepAlive, Lease, ModelRequest, RunningModel, SchedulerConfig};
use crate::error::{Error, Result};
use crate::runner::{ExitCause, Runner, SpawnConfig};
use runner_protocol::LoadOptions;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

mod budget;
mod failed;
mod idle;
mod place;
mod ps;

pub(super) enum Cmd {
    Acquire {
        // Boxed: a request is far larger than the other commands.
        req: Box<ModelRequest>,
        reply: oneshot::Sender<Result<Lease>>,
    },
    Release {
        id: RunnerId,
    },
    Loaded {
        id: RunnerId,
        result: Result<Runner>,
    },
    Exited {
        id: RunnerId,
    },
    Ps {
        reply: oneshot::Sender<Vec<RunningModel>>,
    },
    Unload {
        model: PathBuf,
        reply: oneshot::Sender<bool>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

struct Entry {
    name: String,
    digest: String,
    /// The request's own load options: what later requests are matched against
    /// (`policy::needs_reload`), so the placement's `main_gpu` never causes a reload.
    options: LoadOptions,
    /// The `main_gpu` the runner was spawned with (the request's, or the placement's choice).
    main_gpu: Option<u32>,
    kind: super::RunnerKind,
    /// The request's estimate; replaced by the runner's report for accounting once ready.
    memory: u64,
    /// `None` while loading.
    runner: Option<Runner>,
    /// When the runner became ready (a request queued before it waited for the load; after
    /// it, for a busy slot).
    ready_at: Option<Instant>,
    refcount: usize,
    /// The latest request's keep-alive (Ollama: last writer wins).
    keep_alive: KeepAlive,
    /// Set while idle with a finite keep-alive.
    idle_deadline: Option<Instant>,
    /// Named in `HERD_PIN`: never evicted for another model, never expires.
    pinned: bool,
}

impl Entry {
    fn memory(&self) -> u64 {
        match &self.runner {
            Some(r) if r.info().memory_bytes > 0 => r.info().memory_bytes,
            _ => self.memory,
        }
    }

    fn expires_in(&self, now: Instant) -> Option<Duration> {
        let d = self.keep_alive.duration()?;
        Some(match self.idle_deadline {
            Some(deadline) => deadline.saturating_duration_since(now),
            None => d,
        })
    }
}

struct Pending {
    req: ModelRequest,
    reply: oneshot::Sender<Result<Lease>>,
    /// When it was admitted (queue wait).
    since: Instant,
    /// Its load already ran out of memory once; it is being retried with the other models
    /// unloaded (`policy::plan_after_oom`), and a second failure is final.
    oom_retried: bool,
}

struct Actor {
    num_parallel: u32,
    default_keep_alive: KeepAlive,
    max_keep_alive: Option<Duration>,
    pins: crate::config::Pins,
    metrics: crate::metrics::Metrics,
    /// `OLLAMA_MAX_LOADED_MODELS` as configured (0 = 3 per GPU).
    max_loaded_models: usize,
    /// `HERD_MEMORY_BUDGET`.
    memory_override: Option<u64>,
    /// `OLLAMA_GPU_OVERHEAD`, per GPU.
    gpu_overhead: u64,
    /// Host RAM available when the scheduler started (the CPU-only budget).
    system_available: Option<u64>,
    /// Total memory of each GPU, from the latest runner that reported devices (none until then).
    gpu_totals: Vec<u64>,
    /// `OLLAMA_SCHED_SPREAD`.
    sched_spread: bool,
    /// The local GPUs' memory free of herd (`placement::baseline`); `None` = not known yet.
    gpus: Option<Vec<super::placement::GpuBase>>,
    /// What runners reported holding once ready, by load options (latest [`LEARNED_MAX`]):
    /// a later load with the same options is planned with this instead of the GGUF estimate.
    learned: VecDeque<(LoadOptions, u64)>,
    spawn: SpawnConfig,
    /// The MLX runner binary (`spawn.binary` is the llama.cpp one).
    mlx_binary: std::path::PathBuf,
    entries: BTreeMap<RunnerId, Entry>,
    queue: VecDeque<Pending>,
    next_id: RunnerId,
    tx: mpsc::WeakUnboundedSender<Cmd>,
    tasks: JoinSet<()>,
    cancel: CancellationToken,
}

pub(super) fn start(cfg: SchedulerConfig) -> mpsc::UnboundedSender<Cmd> {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Actor {
        num_parallel: cfg.num_parallel.max(1),
        default_keep_alive: cfg.default_keep_alive,
        max_keep_alive: cfg.max_keep_alive,
        pins: cfg.pins.clone(),
        metrics: cfg.metrics.clone(),
        max_loaded_models: cfg.max_loaded_models,
        memory_override: cfg.memory_budget,
        gpu_overhead: cfg.gpu_overhead,
        system_available: super::memory::system_available(),
        gpu_totals: cfg.gpu_totals.clone(),
        sched_spread: cfg.sched_spread,
        gpus: place::initial_gpus(&cfg.devices),
        learned: VecDeque::new(),
        spawn: cfg.spawn_config(),
        mlx_binary: cfg.mlx_runner_binary.clone(),
        entries: BTreeMap::new(),
        queue: VecDeque::new(),
        next_id: 1,
        tx: tx.downgrade(),
        tasks: JoinSet::new(),
        cancel: CancellationToken::new(),
    };
    tokio::spawn(actor.run(rx));
    tx
}

fn shutting_down() -> Error {
    Error::Internal("the server is shutting down".into())
}

/// A copy of a load error for each further request that was waiting on the same load.
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Runner(r) => Error::Runner(r.clone()),
        Error::RunnerExited(m) => Error::RunnerExited(m.clone()),
        Error::Load { model, source } => Error::Load {
            model: model.clone(),
            source: Box::new(copy_error(source)),
        },
        other => Error::Internal(other.to_string()),
    }
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        let shutdown_reply = loop {
            let next_expiry = self.entries.values().filter_map(|e| e.idle_deadline).min();
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    None => break None,
                    Some(Cmd::Shutdown { reply }) => break Some(reply),
                    Some(cmd) => self.handle(cmd),
                },
                _ = sleep_until(next_expiry.unwrap_or_else(Instant::now)), if next_expiry.is_some() => {
                    self.expire(Instant::now());
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
            }
            self.dispatch();
            self.settle_idle();
            self.publish();
        };
        self.finish(&mut rx).await;
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Acquire { mut req, reply } => {
                if req.options.parallel == 0 {
                    req.options.parallel = self.num_parallel;
                    // The estimate counted one slot's KV cache.
                    req.memory += req.kv_per_slot * u64::from(self.num_parallel - 1);
                }
                if let Err(e) = self.check_main_gpu(&req) {
                    let _ = reply.send(Err(e));
                    return;
                }
                self.queue.push_back(Pending {
                    req: *req,
                    reply,
                    since: Instant::now(),
                    oom_retried: false,
                });
            }
            Cmd::Release { id } => {
                if let Some(e) = self.entries.get_mut(&id) {
                    e.refcount = e.refcount.saturating_sub(1);
                }
            }
            Cmd::Loaded { id, result } => self.loaded(id, result),
            Cmd::Exited { id } => self.prune_exited(Some(id)),
            Cmd::Ps { reply } => {
                let _ = reply.send(self.ps());
            }
            Cmd::Unload { model, reply } => self.unload(model, reply),
            Cmd::Shutdown { .. } => unreachable!("handled by run"),
        }
    }

    fn views(&self, now: Instant) -> Vec<LoadedView<'_>> {
        self.entries
            .iter()
            .map(|(&id, e)| LoadedView {
                id,
                options: &e.options,
                loading: e.runner.is_none(),
                refcount: e.refcount,
                memory: e.memory(),
                expires_in: e.expires_in(now),
                pinned: e.pinned,
            })
            .collect()
    }

    /// The keep-alive a request gives its runner (`policy::effective_keep_alive`).
    fn keep_alive_for(&self, req: &ModelRequest, pinned: bool) -> KeepAlive {
        let requested = req.keep_alive.unwrap_or(self.default_keep_alive);
        policy::effective_keep_alive(requested, self.max_keep_alive, pinned)
    }

    /// The gauges of `metrics`: what is queued, leased and loaded, per model.
    fn publish(&self) {
        let mut state: BTreeMap<String, crate::metrics::ModelState> = BTreeMap::new();
        for p in &self.queue {
            state.entry(p.req.name.clone()).or_default().queued += 1;
        }
        for e in self.entries.values() {
            let s = state.entry(e.name.clone()).or_default();
            s.in_flight += e.refcount as i64;
            if let Some(r) = &e.runner {
                s.loaded += 1;
                s.memory += e.memory() as i64;
                s.memory_device += r.info().memory_device_bytes as i64;
            }
        }
        self.metrics.publish(&state);
    }

    /// Serves the queue in arrival order as far as the policy allows.
    fn dispatch(&mut self) {
        self.prune_exited(None);
        self.queue.retain(|p| !p.reply.is_closed());
        let mut load_blocked = false;
        let limits = self.limits();
        let mut i = 0;
        while i < self.queue.len() {
            let p = &self.queue[i];
            let plan = if p.oom_retried {
                policy::plan_after_oom(&p.req.options, &self.views(Instant::now()))
            } else {
                policy::plan(
                    &p.req.options,
                    self.predicted(&p.req),
                    &self.views(Instant::now()),
                    &limits,
                )
            };
            match plan {
                Plan::Reuse(id) => {
                    let p = self.queue.remove(i).expect("index in range");
                    self.grant(id, p);
                    continue;
                }
                Plan::Load | Plan::EvictThenLoad(_) if load_blocked => {}
                Plan::Load => self.start_load(i, Vec::new()),
                Plan::EvictThenLoad(ids) => self.start_load(i, ids),
                Plan::WaitBusy => {}
                Plan::WaitForRoom => load_blocked = true,
                Plan::Refuse => {
                    let p = self.queue.remove(i).expect("index in range");
                    let _ = p.reply.send(Err(self.no_room(&p.req.name)));
                    continue;
                }
                Plan::NeverFits {
                    required,
                    available,
                } => {
                    let p = self.queue.remove(i).expect("index in range");
                    tracing::warn!(model = %p.req.name, required, available, "model does not fit the memory budget");
                    let _ = p.reply.send(Err(Error::InsufficientMemory {
                        required: super::memory::human_bytes2(required),
                        available: super::memory::human_bytes2(available),
                    }));
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Why a request cannot be served while the pinned models stay loaded.
    fn no_room(&self, name: &str) -> Error {
        Error::NoRoom(format!(
            "model '{name}' cannot be loaded: the pinned models (HERD_PIN={}) fill \
             OLLAMA_MAX_LOADED_MODELS={} or the memory available",
            self.pins.shown(),
            self.limits().max_loaded
        ))
    }

    fn grant(&mut self, id: RunnerId, p: Pending) {
        let Some(pinned) = self.entries.get(&id).map(|e| e.pinned) else {
            return;
        };
        let keep_alive = self.keep_alive_for(&p.req, pinned);
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let Some(runner) = e.runner.clone() else {
            return;
        };
        e.refcount += 1;
        e.keep_alive = keep_alive;
        e.idle_deadline = None;
        self.metrics.queue_wait(&e.name, p.since.elapsed());
        // Waiting for a busy runner is not loading (Ollama's load_duration ends when its
        // scheduler hands the runner over; a slot is waited for later).
        let ready = e.ready_at.map_or(p.since, |r| r.max(p.since));
        let lease = Lease {
            runner,
            id,
            tx: self.tx.upgrade(),
            permit: None,
            metrics: self.metrics.clone(),
            busy_wait: ready.elapsed(),
        };
        // If the requester is gone the lease comes back and releases itself.
        let _ = p.reply.send(Ok(lease));
    }

    /// Starts the runner for `queue[i]`, after stopping `evict` (so their memory is free first).
    fn start_load(&mut self, i: usize, evict: Vec<RunnerId>) {
        let evicted: Vec<Runner> = evict
            .iter()
            .filter_map(|e| self.entries.remove(e))
            .filter_map(|e| {
                tracing::info!(model = %e.name, "evicting model to make room");
                e.runner
            })
            .collect();
        let req = &self.queue[i].req;
        let id = self.next_id;
        self.next_id += 1;
        let name = req.name.clone();
        // Placed once the evicted runners no longer count as holding GPU memory.
        let main_gpu = self.place(req, self.predicted(req));
        let options = LoadOptions {
            main_gpu,
            ..req.options.clone()
        };
        let pinned = self.pins.contains(&req.name);
        let keep_alive = self.keep_alive_for(req, pinned);
        self.entries.insert(
            id,
            Entry {
                name: req.name.clone(),
                digest: req.digest.clone(),
                options: req.options.clone(),
                main_gpu,
                kind: req.runner,
                memory: req.memory,
                runner: None,
                ready_at: None,
                refcount: 0,
                keep_alive,
                idle_deadline: None,
                pinned,
            },
        );
        tracing::info!(model = %name, main_gpu = ?main_gpu, "loading model");
        let mut spawn = self.spawn.clone();
        spawn.binary = super::runner_choice::binary(req.runner, &spawn.binary, &self.mlx_binary);
        let cancel = self.cancel.clone();
        let tx = self.tx.clone();
        let metrics = self.metrics.clone();
        self.tasks.spawn(async move {
            futures_util::future::join_all(evicted.iter().map(Runner::stop)).await;
            let started = Instant::now();
            let result = load(&spawn, &name, options, &cancel).await;
            match &result {
                Ok(_) => metrics.load(&name, Some(started.elapsed())),
                // A load cut short by shutdown is no failure of the model.
                Err(_) if cancel.is_cancelled() => {}
                Err(e) => {
                    metrics.load(&name, None);
                    tracing::warn!(model = %name, error = %e, "model load failed");
                }
            }
            // Clients see which model failed (several may load at once); shutdown is not a
            // load failure of this model.
            let result = result.map_err(|e| match e {
                e @ (Error::Runner(_) | Error::RunnerExited(_)) => Error::Load {
                    model: name.clone(),
                    source: Box::new(e),
                },
                other => other,
            });
            match tx.upgrade() {
                Some(tx) => {
                    if let Err(mpsc::error::SendError(Cmd::Loaded { result: Ok(r), .. })) =
                        tx.send(Cmd::Loaded { id, result })
                    {
                        r.stop().await;
                    }
                }
                None => {
                    if let Ok(r) = result {
                        r.stop().await;
                    }
                }
            }
        });
    }

    fn loaded(&mut self, id: RunnerId, result: Result<Runner>) {
        match result {
            Ok(runner) => match self.entries.get_mut(&id) {
                Some(e) => {
                    let options = e.options.clone();
                    e.runner = Some(runner.clone());
                    e.ready_at = Some(Instant::now());
                    self.learn(options, &runner);
                    self.learn_gpus(id);
                    let tx = self.tx.clone();
                    self.tasks.spawn(async move {
                        runner.exited().await;
                        if let Some(tx) = tx.upgrade() {
                            let _ = tx.send(Cmd::Exited { id });
                        }
                    });
                }
                None => self.stop_in_background(runner),
            },
            Err(err) => {
                if let Some(e) = self.entries.remove(&id) {
                    self.load_failed(e, err);
                }
            }
        }
    }

    /// Forgets runners whose process has exited or that were found broken (`only`: just that
    /// one, if so). A broken runner is still dying: its stop is awaited in the background.
    fn prune_exited(&mut self, only: Option<RunnerId>) {
        let dead: Vec<RunnerId> = self
            .entries
            .iter()
            .filter(|(id, _)| only.is_none_or(|o| o == **id))
            .filter(|(_, e)| e.runner.as_ref().is_some_and(|r| !r.is_usable()))
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            if let Some(e) = self.entries.remove(&id) {
                let exit = e.runner.as_ref().and_then(|r| r.exit_info());
                // Not exited yet: herd found it broken and is killing it.
                let cause = exit.as_ref().map_or(ExitCause::Unresponsive, |i| i.cause);
                if cause != ExitCause::Stopped {
                    self.metrics.runner_restart(&e.name, cause.label());
                }
                let why = exit.map(|i| i.message);
                tracing::warn!(model = %e.name, reason = why.as_deref().unwrap_or("stopped responding"), "runner unloaded");
                if let Some(r) = e.runner {
                    self.stop_in_background(r);
                }
            }
        }
    }

    /// Shutdown: cancel loads, fail waiters, stop every runner, and wait until all are reaped.
    async fn finish(&mut self, rx: &mut mpsc::UnboundedReceiver<Cmd>) {
        self.cancel.cancel();
        for p in self.queue.drain(..) {
            let _ = p.reply.send(Err(shutting_down()));
        }
        for (_, e) in std::mem::take(&mut self.entries) {
            if let Some(r) = e.runner {
                self.stop_in_background(r);
            }
        }
        while self.tasks.join_next().await.is_some() {}
        // A load that finished just before the cancel may have sent its runner here.
        rx.close();
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Loaded { result: Ok(r), .. } => {
                    r.stop().await;
                }
                Cmd::Acquire { reply, .. } => {
                    let _ = reply.send(Err(shutting_down()));
                }
                _ => {}
            }
        }
    }
}

/// Spawns and waits for one runner, unless the scheduler shuts down first.
async fn load(
    spawn: &SpawnConfig,
    name: &str,
    options: LoadOptions,
    cancel: &CancellationToken,
) -> Result<Runner> {
    let runner = Runner::spawn(spawn, name, options)?;
    let ready = tokio::select! {
        r = runner.wait_ready(spawn.load_timeout) => r,
        _ = cancel.cancelled() => Err(shutting_down()),
    };
    if ready.is_err() || cancel.is_cancelled() {
        runner.stop().await;
        return Err(ready.err().unwrap_or_else(shutting_down));
    }
    Ok(runner)
}
