//! The runner's process life on its socket: bind (0600), answer the protocol while the engine
//! thread loads and runs, and shut down on SIGTERM/SIGINT or when the server's stdin pipe closes.
//!
//! Start-up order: bind and serve at once, so `/health` reports the load's progress; the engine
//! thread (the caller's `start`) loads the model, publishes [`Loaded`] and `ready` (or
//! `failed{kind,message}`, after which the process keeps answering `/health` until stopped).
//! Shutdown: stop accepting, raise the engine's abort flag, send `Job::Shutdown` so the engine
//! ends its streams with `Cancelled`, wait for it (5 s at most), remove the socket, exit 0.

use crate::http::{self, Loaded, State};
use crate::jobs::Job;
use hyper_util::rt::TokioIo;
use runner_protocol::{Health, RunnerError};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::watch;

/// Run a runner on `socket` until it is stopped; returns the process exit code. `start` spawns
/// the engine thread, which owns the jobs channel's receiving end.
pub fn run(
    socket: &Path,
    start: impl FnOnce(Arc<State>, Receiver<Job>) -> std::io::Result<JoinHandle<()>>,
) -> i32 {
    // Fail fast: a panic on any thread (the engine's above all) ends the process, so the server
    // sees the exit at once instead of a runner that is `ready` but never answers.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", crate::name());
            return 1;
        }
    };
    let code = rt.block_on(serve(socket, start));
    // Not a plain drop: tokio reads stdin (`parent_gone`) with a blocking read on a pool
    // thread that nothing can cancel, and dropping the runtime waits for it, so while the
    // server holds our stdin open a SIGTERM'd runner would hang until SIGKILL. Every stream
    // has had its final line by now; the pool threads die with the process.
    rt.shutdown_background();
    code
}

fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // Created 0600 from the start: no window in which others could connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let l = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    l
}

async fn serve(
    socket: &Path,
    start: impl FnOnce(Arc<State>, Receiver<Job>) -> std::io::Result<JoinHandle<()>>,
) -> i32 {
    let name = crate::name();
    let listener = match bind(socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{name}: cannot bind {}: {e}", socket.display());
            return 1;
        }
    };
    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel();
    let state = Arc::new(State {
        health: watch::Sender::new(Health::Loading { progress: 0.0 }),
        loaded: OnceLock::new(),
        jobs: Mutex::new(jobs_tx),
        shutting_down: Default::default(),
    });
    let engine = match start(state.clone(), jobs_rx) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{name}: cannot start the engine thread: {e}");
            return 1;
        }
    };

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: cannot watch SIGTERM: {e}");
            return 1;
        }
    };
    let parent_gone = parent_gone();
    tokio::pin!(parent_gone);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = &mut parent_gone => {
                eprintln!("{name}: stdin closed, the server is gone; shutting down");
                break;
            }
            conn = listener.accept() => {
                let Ok((stream, _)) = conn else { continue };
                let state = state.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| http::handle(req, state.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    }

    // Shutdown: no new connections; abort the decode in flight; let the engine end the streams.
    drop(listener);
    state.shutting_down.store(true, Ordering::SeqCst);
    if let Some(l) = state.loaded.get() {
        l.abort.store(true, Ordering::SeqCst);
    }
    if let Ok(jobs) = state.jobs.lock() {
        let _ = jobs.send(Job::Shutdown);
    }
    let joined = tokio::task::spawn_blocking(move || engine.join());
    let _ = tokio::time::timeout(Duration::from_secs(5), joined).await;
    // Give the connection tasks a moment to flush the final error lines.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = std::fs::remove_file(socket);
    0
}

/// The server holds our stdin pipe open for our whole life and never writes to it: EOF means it
/// died without stopping us (e.g. SIGKILL), so we shut down rather than linger as an orphan.
/// Only when stdin is a pipe; a terminal or /dev/null never resolves.
async fn parent_gone() {
    use std::os::unix::fs::FileTypeExt;
    use tokio::io::AsyncReadExt;
    let is_pipe = std::fs::metadata("/proc/self/fd/0").is_ok_and(|m| m.file_type().is_fifo());
    if !is_pipe {
        return std::future::pending().await;
    }
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Engine-thread helpers for the load's outcome.
impl State {
    /// Report load progress in [0, 1] (only forward); false once shutdown has begun, so a load
    /// that can stop early does.
    pub fn progress(&self, p: f32) -> bool {
        self.health.send_if_modified(|h| match h {
            Health::Loading { progress } if p > *progress => {
                *progress = p.min(1.0);
                true
            }
            _ => false,
        });
        !self.shutting_down.load(Ordering::Relaxed)
    }

    /// Publish the loaded model: the handlers start serving it.
    pub fn ready(&self, loaded: Loaded) {
        let _ = self.loaded.set(loaded);
        self.health.send_replace(Health::Ready);
    }

    /// The load failed: report it on `/health` and answer every job with the error until
    /// shutdown.
    pub fn failed(&self, e: RunnerError, jobs: Receiver<Job>) {
        eprintln!("{}: {}: {}", crate::name(), e.kind, e.message);
        self.health.send_replace(Health::Failed {
            kind: e.kind,
            message: e.message.clone(),
        });
        for job in jobs {
            if !job.fail(&e) {
                return;
            }
        }
    }
}
