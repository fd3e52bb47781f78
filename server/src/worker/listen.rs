//! `herd worker --listen ADDR:PORT`: one `runner-llamacpp rpc-server` child on a loopback port
//! (restarted if it exits), fronted by the TLS listener on ADDR:PORT. Per connection: TLS
//! handshake (client certificate verified when HERD_RPC_TLS_CA is set), then the hello with the
//! token (HERD_RPC_TOKEN), both within `HANDSHAKE`; only then is a loopback connection to the RPC
//! server opened and bytes piped. One piped client at a time, as ggml's server serves one.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::handshake::{self, Kind, Status};
use super::pipe::{pump, Ended};
use crate::config::WorkerArgs;

/// How long a client has for the TLS handshake and its hello.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long an accepted client waits for the previous one to finish (a runner reconnects at once).
const SESSION_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for the RPC server to accept (it may be starting).
const RPC_CONNECT: Duration = Duration::from_secs(10);

struct Worker {
    acceptor: TlsAcceptor,
    token: Option<String>,
    /// The RPC server's current loopback port (0 while it is down).
    rpc_port: AtomicU16,
    session: tokio::sync::Mutex<()>,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let token = args.tls.token().map(str::to_owned);
    let ca = args.tls.ca.clone();
    if token.is_none() && ca.is_none() {
        bail!("herd worker needs a credential: HERD_RPC_TOKEN, or HERD_RPC_TLS_CA to require client certificates");
    }
    let Some((cert, key)) = args.tls.identity().map_err(anyhow::Error::msg)? else {
        bail!("herd worker needs HERD_RPC_TLS_CERT and HERD_RPC_TLS_KEY (its TLS certificate)");
    };
    let acceptor = super::tls::acceptor(cert, key, ca.as_deref()).map_err(anyhow::Error::msg)?;
    let runner = args
        .runner
        .clone()
        .unwrap_or_else(crate::config::default_runner_path);
    if !runner.is_file() {
        bail!("runner binary {} not found (HERD_RUNNER)", runner.display());
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let worker = Arc::new(Worker {
        acceptor,
        token,
        rpc_port: AtomicU16::new(0),
        session: tokio::sync::Mutex::new(()),
    });
    let w = worker.clone();
    tokio::spawn(async move { supervise_rpc_server(&w, &runner, args.threads).await });
    tracing::info!(
        target: "herd",
        listen = %listener.local_addr()?,
        mtls = ca.is_some(),
        "herd worker listening (ggml RPC server on loopback only)"
    );
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (conn, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let w = worker.clone();
                tokio::spawn(async move { serve(&w, conn, peer).await });
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
        }
    }
    tracing::info!(target: "herd", "herd worker stopping");
    Ok(())
}

/// Keeps one RPC server child running on a fresh loopback port; its stdin pipe is held so it
/// exits with the worker.
async fn supervise_rpc_server(w: &Worker, runner: &std::path::Path, threads: u32) {
    loop {
        let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            Ok(a) => a.port(),
            Err(e) => {
                tracing::error!(error = %e, "no loopback port for the RPC server");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let child = tokio::process::Command::new(runner)
            .args([
                "rpc-server",
                "--port",
                &port.to_string(),
                "--threads",
                &threads.to_string(),
            ])
            .stdin(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, runner = %runner.display(), "cannot start the RPC server");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Held until the child exits (`wait` would close it): its EOF tells the child to go.
        let _stdin = child.stdin.take();
        w.rpc_port.store(port, Ordering::SeqCst);
        tracing::info!(target: "herd", port, pid = child.id(), "ggml RPC server started on 127.0.0.1");
        let status = child.wait().await;
        w.rpc_port.store(0, Ordering::SeqCst);
        tracing::error!(?status, "the ggml RPC server exited; restarting it");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn serve(w: &Worker, conn: TcpStream, peer: SocketAddr) {
    let _ = conn.set_nodelay(true);
    let mut tls = match tokio::time::timeout(HANDSHAKE, w.acceptor.accept(conn)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "refused: TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, "refused: no TLS handshake in time");
            return;
        }
    };
    let hello = tokio::time::timeout(HANDSHAKE, handshake::read_hello(&mut tls)).await;
    let kind = match hello {
        Ok(Ok((kind, token))) if handshake::token_ok(w.token.as_deref(), &token) => kind,
        Ok(Ok(_)) => return refuse(tls, peer, Status::Denied, "wrong or missing token").await,
        Ok(Err(e)) => return refuse(tls, peer, Status::Denied, &e).await,
        Err(_) => return refuse(tls, peer, Status::Denied, "no hello in time").await,
    };
    if kind == Kind::Probe {
        let status = if w.rpc_port.load(Ordering::SeqCst) == 0 {
            Status::Unavailable
        } else {
            Status::Ok
        };
        let _ = tls.write_all(&[status as u8]).await;
        let _ = tls.shutdown().await;
        return;
    }
    let Ok(_session) = tokio::time::timeout(SESSION_WAIT, w.session.lock()).await else {
        return refuse(
            tls,
            peer,
            Status::Busy,
            "another client holds the RPC server",
        )
        .await;
    };
    let Some(rpc) = connect_rpc(w).await else {
        return refuse(
            tls,
            peer,
            Status::Unavailable,
            "the RPC server is not running",
        )
        .await;
    };
    if tls.write_all(&[Status::Ok as u8]).await.is_err() || tls.flush().await.is_err() {
        return;
    }
    tracing::debug!(%peer, "tunnel open");
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let ended = pump(tls, rpc, &up, &down).await;
    tracing::debug!(
        %peer,
        to_rpc = up.load(Ordering::Relaxed),
        from_rpc = down.load(Ordering::Relaxed),
        by_client = ended == Ended::A,
        "tunnel closed"
    );
}

async fn refuse<S: tokio::io::AsyncWrite + Unpin>(
    mut tls: S,
    peer: SocketAddr,
    status: Status,
    why: &str,
) {
    tracing::warn!(%peer, reason = why, "refused");
    let _ = tls.write_all(&[status as u8]).await;
    let _ = tls.shutdown().await;
}

async fn connect_rpc(w: &Worker) -> Option<TcpStream> {
    let deadline = tokio::time::Instant::now() + RPC_CONNECT;
    loop {
        let port = w.rpc_port.load(Ordering::SeqCst);
        if port != 0 {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", port)).await {
                let _ = s.set_nodelay(true);
                return Some(s);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
