//! The accept loop: hyper-util's auto (HTTP/1.1 + h2) connection builder serving the axum app,
//! plain or over TLS (`tls`), with every connection held to the same bounds:
//! - a header-read timeout (slowloris; also bounds an idle HTTP/1 keep-alive connection),
//! - a body transfer rule (`body`: no gap longer than the body timeout, a minimum average rate
//!   after it), a slow body is answered 408 and its connection closed,
//! - an idle timeout (`conn`): a connection with no request in flight for that long is closed
//!   gracefully — the bound HTTP/2 otherwise lacks; h2 keep-alive pings find dead peers,
//! - a cap on open connections. At the cap the loop stops accepting: new connections wait in
//!   the kernel's accept backlog (they are not refused) until a connection closes, and the
//!   descriptors reserved beside the cap stay free for the store, runners and blob files.
//!
//! Graceful shutdown stops accepting, asks every connection to finish (GOAWAY / close after the
//! current response), waits for them a bounded grace period, then returns.

mod body;
mod conn;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

pub use body::{is_too_slow, BodyPolicy, BodyTooSlow};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once at startup, and returns the soft limit
/// now in force. Every connection costs a descriptor; the common 1024 default let 300 trickling
/// bodies (plus runners' sockets and blob files) starve `/api/version` (issue 22 item 5).
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(hard.max(soft))
}

/// Descriptors kept out of the connection cap: the store's blob and manifest files, each
/// runner's socket connections and pipes, the listener, logs.
pub const RESERVED_FDS: u64 = 256;

/// The default connection cap for an open-file limit: what is left after [`RESERVED_FDS`],
/// at least 16, at most 65536 (each connection also costs memory).
pub fn default_max_connections(nofile: u64) -> usize {
    nofile.saturating_sub(RESERVED_FDS).clamp(16, 65_536) as usize
}

#[derive(Clone)]
pub struct ServeOptions {
    /// A connection must deliver a complete request head within this time (also bounds how long
    /// an idle keep-alive connection waits for its next request, and a TLS handshake).
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight requests (long streams) before dropping them.
    pub shutdown_grace: Duration,
    /// How request bodies must arrive.
    pub body: BodyPolicy,
    /// A connection with no request in flight for this long is closed (HTTP/1 and h2).
    pub idle_timeout: Duration,
    /// Most connections open at once; further ones wait in the accept backlog.
    pub max_connections: usize,
    /// Serve HTTPS instead of plain HTTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            body: BodyPolicy::default(),
            idle_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(1024),
            tls: None,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(opts.idle_timeout))
        .keep_alive_timeout(Duration::from_secs(20));
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        // At the cap, wait for a connection to close before accepting another.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning on the error.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Token streams are many small writes; don't let Nagle batch them.
        let _ = stream.set_nodelay(true);
        let (app, builder, opts, stop) = (app.clone(), builder.clone(), opts.clone(), stop.clone());
        tracker.spawn(async move {
            let _permit = permit;
            match &opts.tls {
                None => serve_conn(stream, app, &builder, &opts, stop).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(opts.header_read_timeout, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(tls)) => serve_conn(tls, app, &builder, &opts, stop).await,
                        // A plain-HTTP request or a scanner on the TLS port: close it.
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    tracker.close();
    stop.cancel();
    tracing::info!("shutting down: waiting for in-flight requests");
    tokio::select! {
        () = tracker.wait() => {}
        () = tokio::time::sleep(opts.shutdown_grace) => {
            tracing::warn!(grace = ?opts.shutdown_grace, "in-flight requests did not finish; closing them");
        }
    }
    Ok(())
}

/// Serves one connection: each request's body is held to the body policy and counted in flight
/// until its response body ends; the connection closes gracefully when idle or on shutdown.
async fn serve_conn<I>(
    io: I,
    app: Router,
    builder: &auto::Builder<TokioExecutor>,
    opts: &ServeOptions,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(conn::Activity::default());
    let policy = opts.body;
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let guard = activity.begin();
            let req = req.map(|b| axum::body::Body::new(body::RateBody::new(b, policy)));
            let app = app.clone();
            async move {
                let resp = app
                    .oneshot(req)
                    .await
                    .unwrap_or_else(|e: Infallible| match e {});
                Ok::<_, Infallible>(resp.map(|b| conn::Tracked::new(b, guard)))
            }
        })
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = activity.idle_for(opts.idle_timeout), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = stop.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn connection_caps() {
        use super::default_max_connections as cap;
        let table = [
            (0, 16),
            (256, 16),
            (1024, 768),
            (65_536, 65_280),
            (1 << 20, 65_536),
        ];
        for (nofile, want) in table {
            assert_eq!(cap(nofile), want, "{nofile}");
        }
    }
}
