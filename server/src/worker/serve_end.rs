//! The serving host's ends of the tunnels (`HERD_RPC_WORKERS`): one loopback listener per worker,
//! whose address the runner gets as `--rpc 127.0.0.1:L`. Each connection the runner opens is
//! carried to its worker over TLS after the hello (`handshake`); the worker's answer decides.
//!
//! Health: a worker is "up" after a probe (TLS + credential + its RPC server running) succeeds,
//! and "down" when a probe fails or the worker ends a piped connection (it died or restarted).
//! Only up workers reach a runner's load options, so after a worker dies the next load is
//! local-only instead of a runner that aborts in ggml's connect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::handshake::{self, Kind, Status};
use super::pipe::{pump, Ended};
use crate::config::RpcArgs;

const DIAL: Duration = Duration::from_secs(5);
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// The configured workers and their local tunnel ends.
pub struct RpcWorkers {
    ends: Vec<Arc<End>>,
    connector: TlsConnector,
    token: Option<String>,
}

impl std::fmt::Debug for RpcWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.ends.iter().map(|e| format!("{}:{}", e.host, e.port)))
            .finish()
    }
}

/// One worker.
pub struct End {
    pub host: String,
    pub port: u16,
    /// The loopback address the runner connects to.
    pub local: SocketAddr,
    up: AtomicBool,
    /// Bytes carried to and from the worker, over every connection (the bench's link traffic).
    pub sent: AtomicU64,
    pub received: AtomicU64,
}

impl RpcWorkers {
    /// Binds a loopback end per worker and starts its accept loop and the prober (inside a tokio
    /// runtime). `None` when no worker is configured. Workers start down until the first probe
    /// round (`probe_all`) finds them.
    pub fn start(args: &RpcArgs) -> Result<Option<Arc<RpcWorkers>>, String> {
        if args.workers.0.is_empty() {
            return Ok(None);
        }
        let Some(ca) = &args.tls.ca else {
            return Err("HERD_RPC_WORKERS needs HERD_RPC_TLS_CA (the CA that signed the workers' certificates)".into());
        };
        let identity = args.tls.identity()?;
        if identity.is_none() && args.tls.token().is_none() {
            return Err("HERD_RPC_WORKERS needs HERD_RPC_TOKEN or a client certificate (HERD_RPC_TLS_CERT/KEY)".into());
        }
        let connector =
            super::tls::connector(ca, identity.map(|(c, k)| (c.as_path(), k.as_path())))?;
        let mut ends = Vec::new();
        let mut listeners = Vec::new();
        for (host, port) in &args.workers.0 {
            let l = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| format!("tunnel end: {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            let local = l.local_addr().map_err(|e| e.to_string())?;
            ends.push(Arc::new(End {
                host: host.clone(),
                port: *port,
                local,
                up: AtomicBool::new(false),
                sent: AtomicU64::new(0),
                received: AtomicU64::new(0),
            }));
            listeners.push(TcpListener::from_std(l).map_err(|e| e.to_string())?);
        }
        let w = Arc::new(RpcWorkers {
            ends,
            connector,
            token: args.tls.token().map(str::to_owned),
        });
        for (end, l) in w.ends.iter().zip(listeners) {
            let (w, end) = (w.clone(), end.clone());
            tokio::spawn(async move { w.accept_loop(&end, l).await });
        }
        let p = w.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                p.probe_all().await;
            }
        });
        Ok(Some(w))
    }

    pub fn ends(&self) -> &[Arc<End>] {
        &self.ends
    }

    /// The runner's `--rpc` list: the local ends of the workers that are up, in configured order.
    pub fn endpoints(&self) -> Vec<String> {
        self.ends
            .iter()
            .filter(|e| e.up.load(Ordering::SeqCst))
            .map(|e| e.local.to_string())
            .collect()
    }

    /// One probe of every worker; logs each change of state.
    pub async fn probe_all(&self) {
        for end in &self.ends {
            let result = match self.dial(end, Kind::Probe).await {
                Ok(mut s) => {
                    let _ = s.shutdown().await;
                    Ok(())
                }
                Err(e) => Err(e),
            };
            set_up(end, result);
        }
    }

    async fn accept_loop(&self, end: &Arc<End>, listener: TcpListener) {
        loop {
            let Ok((local, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = local.set_nodelay(true);
            let remote = match self.dial(end, Kind::Connect).await {
                Ok(s) => s,
                Err(e) => {
                    set_up(end, Err(e));
                    continue; // dropping `local` closes the runner's connection
                }
            };
            let end = end.clone();
            tokio::spawn(async move {
                let ended = pump(local, remote, &end.sent, &end.received).await;
                if ended == Ended::B {
                    // ggml's server never closes first on its own: the worker went away.
                    set_up(&end, Err("the worker closed the tunnel".into()));
                }
            });
        }
    }

    /// TCP + TLS to the worker, then the hello and its answer.
    async fn dial(&self, end: &End, kind: Kind) -> Result<TlsStream<TcpStream>, String> {
        let name = ServerName::try_from(end.host.clone())
            .map_err(|e| format!("{}: not a host name: {e}", end.host))?;
        let attempt = async {
            let tcp = TcpStream::connect((end.host.as_str(), end.port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let mut tls = self
                .connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            tls.write_all(&handshake::hello(kind, self.token.as_deref()))
                .await
                .map_err(|e| format!("hello: {e}"))?;
            tls.flush().await.map_err(|e| format!("hello: {e}"))?;
            let mut status = [0u8; 1];
            tls.read_exact(&mut status)
                .await
                .map_err(|_| Status::Denied.describe().to_string())?;
            match Status::from_byte(status[0]) {
                Some(Status::Ok) => Ok(tls),
                Some(s) => Err(s.describe().to_string()),
                None => Err(format!("unknown answer {}", status[0])),
            }
        };
        tokio::time::timeout(DIAL, attempt)
            .await
            .map_err(|_| "no answer in time".to_string())?
    }
}

fn set_up(end: &End, result: Result<(), String>) {
    let now = result.is_ok();
    let was = end.up.swap(now, Ordering::SeqCst);
    match result {
        Ok(()) if !was => {
            tracing::info!(target: "herd", worker = %format!("{}:{}", end.host, end.port), local = %end.local, "RPC worker up")
        }
        Err(e) if was || !now => {
            if was {
                tracing::warn!(target: "herd", worker = %format!("{}:{}", end.host, end.port), error = %e, "RPC worker down");
            } else {
                tracing::debug!(worker = %format!("{}:{}", end.host, end.port), error = %e, "RPC worker unreachable");
            }
        }
        _ => {}
    }
}
