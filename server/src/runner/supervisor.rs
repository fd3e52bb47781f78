//! Starting, watching and stopping one runner process.
//!
//! Invariants:
//! - The child runs in its own process group with a clean, explicit environment; it is signalled
//!   as a group and always reaped by the task that owns its `Child` (no zombies).
//! - [`Runner::exited`] resolves as soon as that task has reaped the child; every request method
//!   and every completion stream races against it, so a dead runner is reported within
//!   milliseconds, not when some socket read times out.
//! - Readiness is `/health` polling raced against exit and against a stall deadline that moves
//!   forward whenever reported load progress increases (Ollama's `OLLAMA_LOAD_TIMEOUT`).
//! - Dropping the last handle to a live runner kills its group (SIGKILL); [`Runner::stop`] is the
//!   graceful path (SIGTERM, grace period, SIGKILL, reap).
//! - The child's stdin is a pipe the server never writes to and holds open while the child
//!   lives: EOF on it means the server is gone (a parent-death signal that needs no FFI).

use super::client::{CompletionStream, RunnerClient};
use super::exit::{self, ExitCause, ExitFacts};
use super::liveness::{self, Liveness};
use super::output::{self, Tail};
use crate::error::{Error, Result};
use futures_util::StreamExt;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use runner_protocol::{
    CompletionChunk, CompletionRequest, DetokenizeRequest, DetokenizeResponse, EmbedRequest,
    EmbedResponse, Health, Info, LoadOptions, RunnerError, TokenizeRequest, TokenizeResponse,
};
use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, Instant};

/// How runners are started; one per server, shared by every spawn.
#[derive(Debug, Clone)]
pub struct SpawnConfig {
    pub binary: PathBuf,
    /// Private (0700) directory for sockets; see [`create_runner_dir`].
    pub dir: PathBuf,
    /// The runner's whole environment; see [`runner_env`].
    pub env: Vec<(OsString, OsString)>,
    /// Appended after the load flags and `--socket`.
    pub extra_args: Vec<String>,
    /// Stall deadline while loading: reset on every progress increase. `None` = wait forever.
    pub load_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// Interval between `/health` polls while loading.
    pub health_interval: Duration,
    /// Deadlines once ready (progress within a completion, health probes).
    pub liveness: Liveness,
}

impl SpawnConfig {
    pub fn new(binary: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            dir: dir.into(),
            env: Vec::new(),
            extra_args: Vec::new(),
            load_timeout: Some(Duration::from_secs(300)),
            stop_grace: Duration::from_secs(10),
            health_interval: Duration::from_millis(100),
            liveness: Liveness::default(),
        }
    }
}

/// How a runner process ended.
#[derive(Debug, Clone)]
pub struct ExitInfo {
    /// E.g. `exit status: 1` or `signal: 9 (SIGKILL)`.
    pub status: String,
    /// Ollama-style message plus the end of the output tail; what clients see.
    pub message: String,
    pub cause: ExitCause,
}

/// A started runner process. Cheap to clone; all clones refer to the same process.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    name: String,
    options: LoadOptions,
    pid: u32,
    pub(super) client: RunnerClient,
    pub(super) exit: watch::Receiver<Option<ExitInfo>>,
    tail: Tail,
    info: OnceLock<Info>,
    stop_grace: Duration,
    health_interval: Duration,
    liveness: Liveness,
    /// Why herd killed a live but broken runner; set (once) before the SIGKILL, so the exit
    /// watcher reports it and the scheduler stops granting the runner at once.
    fault: Arc<OnceLock<String>>,
    /// Set by [`Runner::stop`]: a runner going down on purpose is not probed any more (and its
    /// exit is `ExitCause::Stopped`).
    stopping: Arc<AtomicBool>,
}

impl Inner {
    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Declares a live process broken: records `reason` (the first one wins) and SIGKILLs its
    /// group; the exit watcher then reaps it and publishes the reason.
    pub(super) fn mark_faulty(&self, reason: String) {
        if self.exit.borrow().is_some() {
            return;
        }
        if self.fault.set(reason.clone()).is_ok() {
            tracing::info_span!("runner", model = %self.name, pid = self.pid)
                .in_scope(|| tracing::warn!(%reason, "runner stopped responding; killing it"));
        }
        let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
    }
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("name", &self.inner.name)
            .field("pid", &self.inner.pid)
            .field("socket", &self.inner.client.socket())
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.exit.borrow().is_none() {
            let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
    }
}

/// Bytes of output tail quoted in an error message (the full tail is in the log).
const TAIL_IN_MESSAGE: usize = 1024;
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transport error waits for the exit notification that explains it.
const EXIT_EXPLAINS_WITHIN: Duration = Duration::from_millis(250);

static NEXT_SOCKET: AtomicU64 = AtomicU64::new(0);
static NO_INFO: LazyLock<Info> = LazyLock::new(Info::default);

fn with_tail(msg: String, tail: &Tail) -> String {
    let t = tail.last(TAIL_IN_MESSAGE);
    if t.is_empty() {
        msg
    } else {
        format!("{msg}: {t}")
    }
}

impl Runner {
    /// Spawns the runner and waits until it is ready (see [`Runner::wait_ready`]).
    pub async fn start(cfg: &SpawnConfig, name: &str, options: LoadOptions) -> Result<Runner> {
        let runner = Runner::spawn(cfg, name, options)?;
        runner.wait_ready(cfg.load_timeout).await?;
        Ok(runner)
    }

    /// Spawns the runner process without waiting for it to load.
    pub fn spawn(cfg: &SpawnConfig, name: &str, options: LoadOptions) -> Result<Runner> {
        let mode = std::fs::metadata(&cfg.dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(Error::Internal(format!(
                "runner directory {} must be private (0700), has {:o}",
                cfg.dir.display(),
                mode & 0o777
            )));
        }
        let n = NEXT_SOCKET.fetch_add(1, Ordering::Relaxed);
        let socket = cfg.dir.join(format!("runner-{n}.sock"));
        let _ = std::fs::remove_file(&socket);
        let mut child = tokio::process::Command::new(&cfg.binary)
            .args(options.to_args())
            .arg("--socket")
            .arg(&socket)
            .args(&cfg.extra_args)
            .env_clear()
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Error::RunnerExited(format!(
                    "failed to start runner {}: {e}",
                    cfg.binary.display()
                ))
            })?;
        let pid = child.id().unwrap_or_default();
        let span = tracing::info_span!("runner", model = %name, pid);
        span.in_scope(|| tracing::info!(socket = %socket.display(), "runner started"));
        let tail = Tail::default();
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|o| output::forward(o, "stdout", span.clone(), tail.clone())),
            child
                .stderr
                .take()
                .map(|e| output::forward(e, "stderr", span.clone(), tail.clone())),
        ]
        .into_iter()
        .flatten()
        .collect();

        // Held open until the child exits: if the server dies without stopping its runners, the
        // runner sees EOF on stdin and can exit instead of lingering as an orphan.
        let stdin = child.stdin.take();
        let (exit_tx, exit_rx) = watch::channel(None);
        let watch_tail = tail.clone();
        let watch_socket = socket.clone();
        let fault: Arc<OnceLock<String>> = Arc::default();
        let watch_fault = fault.clone();
        let stopping: Arc<AtomicBool> = Arc::default();
        let watch_stopping = stopping.clone();
        let oom_before = exit::oom_kills();
        tokio::spawn(async move {
            let _stdin = stdin;
            let waited = child.wait().await;
            let facts = ExitFacts {
                signal: waited
                    .as_ref()
                    .ok()
                    .and_then(std::os::unix::process::ExitStatusExt::signal),
                stopped_by_herd: watch_stopping.load(Ordering::SeqCst),
                unresponsive: watch_fault.get().is_some(),
                oom_kills: exit::oom_kills().saturating_sub(oom_before),
            };
            let status = match waited {
                Ok(s) => s.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            // The pipes close with the process; give the readers a moment to log the last lines.
            let _ = timeout(
                Duration::from_millis(200),
                futures_util::future::join_all(readers),
            )
            .await;
            let _ = std::fs::remove_file(&watch_socket);
            let message = match watch_fault.get() {
                Some(reason) => {
                    format!("llama runner stopped responding ({reason}) and was killed")
                }
                None => format!("llama runner process has terminated: {status}"),
            };
            let message = with_tail(message, &watch_tail);
            span.in_scope(|| tracing::info!(%status, "runner exited"));
            let cause = exit::classify(facts);
            let _ = exit_tx.send(Some(ExitInfo {
                status,
                message,
                cause,
            }));
        });

        Ok(Runner {
            inner: Arc::new(Inner {
                name: name.to_string(),
                options,
                pid,
                client: RunnerClient::new(socket),
                exit: exit_rx,
                tail,
                info: OnceLock::new(),
                stop_grace: cfg.stop_grace,
                health_interval: cfg.health_interval,
                liveness: cfg.liveness,
                fault,
                stopping,
            }),
        })
    }

    /// Polls `/health` until ready, then fetches `/info`. Fails with the exit message if the
    /// process dies, with the runner's typed error if it reports `failed`, or after
    /// `stall_timeout` without load progress; on failure the process is stopped and reaped.
    pub async fn wait_ready(&self, stall_timeout: Option<Duration>) -> Result<()> {
        let mut deadline = stall_timeout.map(|t| Instant::now() + t);
        let mut progress = 0.0f32;
        loop {
            let poll = async {
                sleep(self.inner.health_interval).await;
                timeout(HEALTH_TIMEOUT, self.inner.client.health()).await
            };
            let stall = async {
                match deadline {
                    Some(d) => sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                info = self.exited() => return Err(Error::RunnerExited(info.message)),
                _ = stall => {
                    self.stop().await;
                    let msg = format!(
                        "timed out waiting for llama runner to start - progress {progress:.2}"
                    );
                    return Err(Error::RunnerExited(with_tail(msg, &self.inner.tail)));
                }
                health = poll => match health {
                    Ok(Ok(Health::Ready)) => break,
                    Ok(Ok(Health::Loading { progress: p })) if p > progress => {
                        progress = p;
                        deadline = stall_timeout.map(|t| Instant::now() + t);
                    }
                    Ok(Ok(Health::Failed { kind, message })) => {
                        self.stop().await;
                        return Err(Error::Runner(RunnerError { kind, message }));
                    }
                    // Not listening yet, or too busy to answer: keep polling.
                    _ => {}
                },
            }
        }
        let info = self.guarded(self.inner.client.info()).await?;
        let _ = self.inner.info.set(info);
        if let Some(every) = self.inner.liveness.probe_interval {
            let probe_timeout = self.inner.liveness.probe_timeout;
            tokio::spawn(liveness::probe(
                Arc::downgrade(&self.inner),
                every,
                probe_timeout,
            ));
        }
        self.span()
            .in_scope(|| tracing::info!(memory = self.info().memory_bytes, "runner ready"));
        Ok(())
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("runner", model = %self.inner.name, pid = self.inner.pid)
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    pub fn options(&self) -> &LoadOptions {
        &self.inner.options
    }

    pub fn socket(&self) -> &Path {
        self.inner.client.socket()
    }

    /// What the runner reported at readiness (`Info::default()` before that).
    pub fn info(&self) -> &Info {
        self.inner.info.get().unwrap_or(&NO_INFO)
    }

    /// The last ~8 KiB the runner printed.
    pub fn output_tail(&self) -> String {
        self.inner.tail.text()
    }

    /// How the process ended, if it has.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.inner.exit.borrow().clone()
    }

    /// False once the process has exited or herd has found it broken (and is killing it):
    /// such a runner must not be given new requests.
    pub fn is_usable(&self) -> bool {
        self.inner.fault.get().is_none() && self.exit_info().is_none()
    }

    /// Resolves as soon as the process has exited and been reaped.
    pub async fn exited(&self) -> ExitInfo {
        let mut rx = self.inner.exit.clone();
        let info = match rx.wait_for(Option::is_some).await {
            Ok(info) => info.clone(),
            Err(_) => None,
        };
        info.unwrap_or_else(lost_supervision)
    }

    /// SIGTERM to the process group, up to the grace period, SIGKILL, then wait for the reap.
    /// Idempotent; returns how the process ended.
    pub async fn stop(&self) -> ExitInfo {
        if let Some(info) = self.exit_info() {
            return info;
        }
        self.inner.stopping.store(true, Ordering::SeqCst);
        let pgid = Pid::from_raw(self.inner.pid as i32);
        let _ = killpg(pgid, Signal::SIGTERM);
        match timeout(self.inner.stop_grace, self.exited()).await {
            Ok(info) => info,
            Err(_) => {
                self.span()
                    .in_scope(|| tracing::warn!("runner ignored SIGTERM; sending SIGKILL"));
                let _ = killpg(pgid, Signal::SIGKILL);
                self.exited().await
            }
        }
    }

    /// Runs a request unless the process is gone, racing it against exit; a transport failure
    /// is replaced by the exit message when the process turns out to have died.
    async fn guarded<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        if let Some(info) = self.exit_info() {
            return Err(Error::RunnerExited(info.message));
        }
        let r = tokio::select! {
            r = fut => r,
            info = self.exited() => return Err(Error::RunnerExited(info.message)),
        };
        match r {
            Err(Error::RunnerExited(m)) => Err(self.explain(m).await),
            other => other,
        }
    }

    async fn explain(&self, transport: String) -> Error {
        match timeout(EXIT_EXPLAINS_WITHIN, self.exited()).await {
            Ok(info) => Error::RunnerExited(info.message),
            Err(_) => Error::RunnerExited(transport),
        }
    }

    pub async fn health(&self) -> Result<Health> {
        self.guarded(self.inner.client.health()).await
    }

    pub async fn embed(&self, req: &EmbedRequest) -> Result<EmbedResponse> {
        self.guarded(self.inner.client.embed(req)).await
    }

    pub async fn tokenize(&self, req: &TokenizeRequest) -> Result<TokenizeResponse> {
        self.guarded(self.inner.client.tokenize(req)).await
    }

    pub async fn detokenize(&self, req: &DetokenizeRequest) -> Result<DetokenizeResponse> {
        self.guarded(self.inner.client.detokenize(req)).await
    }

    /// Starts a completion. The stream ends with `Err(RunnerExited)` at once if the process
    /// dies mid-stream, and kills the runner (then ends the same way) if it stays silent past
    /// the progress deadline or its stream breaks while the process lives (a runner that cut a
    /// stream is not trusted with the next request). Dropping the stream cancels the request.
    pub async fn completion(&self, req: &CompletionRequest) -> Result<CompletionStream> {
        let stream = self
            .within_progress(self.guarded(self.inner.client.completion(req)))
            .await?;
        let (body, guard) = stream.into_parts();
        let watched = futures_util::stream::unfold(
            (body, Some(self.clone())),
            |(mut body, runner)| async move {
                let runner = runner?;
                let item = loop {
                    let item = tokio::select! {
                        item = runner.within_progress(async { Ok(body.next().await) }) => item,
                        info = runner.exited() => Err(Error::RunnerExited(info.message)),
                    };
                    // A prefill heartbeat only re-arms the progress deadline.
                    if !matches!(item, Ok(Some(Ok(CompletionChunk::Progress { .. })))) {
                        break item;
                    }
                };
                match item {
                    Ok(None) => None,
                    Ok(Some(Ok(c @ CompletionChunk::Token { .. }))) => {
                        Some((Ok(c), (body, Some(runner))))
                    }
                    Ok(Some(Err(Error::RunnerExited(m)))) => {
                        let e = match runner.explain(m).await {
                            Error::RunnerExited(m) if runner.exit_info().is_none() => {
                                runner
                                    .kill_for(format!("its completion stream broke: {m}"))
                                    .await
                            }
                            e => e,
                        };
                        Some((Err(e), (body, None)))
                    }
                    Ok(Some(Err(Error::Internal(m)))) => {
                        let e = runner.kill_for(m).await;
                        Some((Err(e), (body, None)))
                    }
                    Ok(Some(terminal)) => Some((terminal, (body, None))),
                    Err(e) => Some((Err(e), (body, None))),
                }
            },
        );
        let s = CompletionStream::new(watched);
        Ok(match guard {
            Some(g) => s.with_guard(g),
            None => s,
        })
    }

    /// `fut` bounded by the progress deadline; past it the runner is killed as stuck.
    async fn within_progress<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let Some(limit) = self.inner.liveness.progress_timeout else {
            return fut.await;
        };
        match timeout(limit, fut).await {
            Ok(r) => r,
            Err(_) => Err(self.kill_for(liveness::no_progress(limit)).await),
        }
    }

    /// Kills a live but broken runner and returns the error its requests end with: the exit
    /// message once reaped, or the reason alone if even SIGKILL cannot reap it in time (a
    /// process stuck in the kernel).
    async fn kill_for(&self, reason: String) -> Error {
        self.inner.mark_faulty(reason);
        match timeout(self.inner.stop_grace, self.exited()).await {
            Ok(info) => Error::RunnerExited(info.message),
            Err(_) => Error::RunnerExited(format!(
                "llama runner stopped responding ({}) and was killed",
                self.inner.fault.get().map_or("", String::as_str)
            )),
        }
    }
}

fn lost_supervision() -> ExitInfo {
    ExitInfo {
        status: "unknown".into(),
        message: "llama runner process is no longer supervised".into(),
        cause: ExitCause::Signal,
    }
}
