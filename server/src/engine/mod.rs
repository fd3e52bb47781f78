//! The engine behind the API's `Inference` seam: between validated jobs and the scheduler.
//! It prepares a resolved model for inference (`model`: GGUF facts, compiled template), turns
//! resolved options into load and completion parameters (`plan`), renders prompts and drives
//! runners (`inference`, with chat truncation policy in `truncate` and the `num_ctx` bound on
//! prompt work in `bound`), and turns a runner's
//! completion into timed steps and parsed events (`completion`), shaped into wire chunks by
//! `respond`; `two_pass` is the `OLLAMA_FORMAT_TWO_PASS` rollback flow. Handlers own validation
//! and wire shapes; this module owns what happens to a job between them and a runner.

pub mod batch;
pub mod bound;
pub mod completion;
pub mod convert;
mod embed;
mod inference;
mod mlx_model;
pub mod model;
pub mod plan;
mod respond;
pub mod truncate;
pub mod two_pass;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use completion::{events, steps, Event, Step};
pub use model::Model;
pub use plan::Settings;

use crate::api::inference::ResolvedModel;
use crate::api::options::Options;
use crate::error::{Error, Result};
use crate::scheduler::{KeepAlive, Lease, Scheduler};

/// Prepared models kept in memory, keyed by manifest digest (a changed manifest is a new key).
const MODEL_CACHE: usize = 32;

/// Handle shared by the inference handlers. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    scheduler: Scheduler,
    settings: Settings,
    /// Prepared models by (manifest digest, full name): two names on one manifest (a copy, or
    /// the same Modelfile created twice) share every fact but the name `/api/ps` and errors show.
    models: Mutex<HashMap<(String, String), Arc<Model>>>,
}

impl Engine {
    pub fn new(scheduler: Scheduler, settings: Settings) -> Engine {
        Engine {
            inner: Arc::new(Inner {
                scheduler,
                settings,
                models: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.inner.scheduler
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The prepared form of a resolved model (GGUF facts, compiled template), cached by
    /// manifest digest and name.
    pub async fn prepare(&self, resolved: Arc<ResolvedModel>) -> Result<Arc<Model>> {
        let key = (resolved.digest.clone(), resolved.name.to_string());
        if let Some(m) = self.inner.models.lock().unwrap().get(&key).cloned() {
            return Ok(m);
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let model = Arc::new(Model::prepare_in(&resolved, inner.scheduler.runner_dir())?);
            let mut cache = inner.models.lock().unwrap();
            if cache.len() >= MODEL_CACHE {
                cache.clear();
            }
            cache.insert(key, model.clone());
            Ok(model)
        })
        .await
        .map_err(|e| Error::Internal(format!("model preparation task: {e}")))?
    }

    /// What of a prompt the runner would keep for `model` under `opts` (its context length
    /// after defaults and caps, and `num_keep`): the bound applied before rendering.
    pub fn window(&self, model: &Model, opts: &Options) -> bound::Window {
        let load = plan::load_options(opts, model, &self.inner.settings);
        bound::Window::new(load.ctx_size, opts.num_keep)
    }

    /// Waits for a runner slot for `model` loaded per `opts`. Returns the lease and how long
    /// scheduling and loading took (Ollama's `load_duration`).
    pub async fn acquire(
        &self,
        model: &Model,
        opts: &Options,
        keep_alive: Option<KeepAlive>,
    ) -> Result<(Lease, Duration)> {
        let start = Instant::now();
        let load = plan::load_options(opts, model, &self.inner.settings);
        let req = plan::model_request(model, load, keep_alive);
        let lease = self.inner.scheduler.acquire(req).await?;
        // load_duration: scheduling and loading, not waiting for a busy slot (which counts in
        // total_duration only, as in Ollama).
        let load = start.elapsed().saturating_sub(lease.busy_wait());
        Ok((lease, load.max(Duration::from_nanos(1))))
    }
}

/// Builds the engine `herd serve` runs: a scheduler over `config`'s runner binary, limits and
/// keep-alive, with runner sockets in a fresh private directory. Keep the returned directory
/// guard alive as long as the engine (dropping it removes the sockets' directory).
pub fn start(config: &crate::config::Config) -> std::io::Result<(Engine, tempfile::TempDir)> {
    let dir = crate::runner::create_runner_dir()?;
    let mut sc = crate::scheduler::SchedulerConfig::new(config.runner_path(), dir.path());
    sc.mlx_runner_binary = config.mlx_runner_path();
    sc.num_parallel = config.num_parallel;
    sc.max_loaded_models = config.max_loaded_models as usize;
    sc.memory_budget = config.memory_budget;
    sc.gpu_overhead = config.gpu_overhead;
    sc.max_queue = config.max_queue as usize;
    sc.default_keep_alive = config.keep_alive;
    sc.load_timeout = config.load_timeout.0;
    sc.liveness = config.liveness();
    sc.max_keep_alive = config.max_keep_alive.0;
    sc.pins = config.pin.clone();
    // Runners see an allow-listed copy of our environment, never all of it.
    sc.runner_env = crate::runner::runner_env(std::env::vars_os());
    // The GPUs as the runners will see them: the context tier, budget and model count.
    let devices = crate::scheduler::devices::discover(
        &sc.runner_binary,
        &sc.runner_env,
        std::time::Duration::from_secs(30),
    );
    sc.gpu_totals = crate::scheduler::devices::gpu_totals(&devices);
    for d in &devices {
        tracing::info!(device = %d.name, description = %d.description, kind = ?d.kind, total = d.total, free = d.free, "device");
    }
    sc.devices = devices;
    sc.sched_spread = config.sched_spread;
    let default_num_ctx =
        crate::scheduler::memory::default_num_ctx(&sc.gpu_totals, config.gpu_overhead);
    let fit_budget = (!sc.gpu_totals.is_empty()).then(|| {
        sc.gpu_totals
            .iter()
            .map(|t| t.saturating_sub(config.gpu_overhead))
            .sum()
    });
    let settings = Settings {
        context_length: config.context_length,
        flash_attention: config.flash_attention,
        kv_cache_type: config.kv_cache_type,
        format_two_pass: config.format_two_pass,
        rpc: crate::worker::RpcWorkers::start(&config.rpc).map_err(std::io::Error::other)?,
        tensor_split: config.rpc.tensor_split.clone(),
        draft_ngram: config.draft_ngram,
        draft_under_grammar: config.draft_under_grammar,
        mlx_draft_under_grammar: config.mlx_draft_under_grammar,
        default_num_ctx,
        fit_budget,
        num_parallel: config.num_parallel.max(1),
        cuda_gpu_totals: crate::scheduler::devices::cuda_totals(&sc.devices),
    };
    Ok((Engine::new(Scheduler::new(sc), settings), dir))
}
