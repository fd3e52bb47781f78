//! `HERD_RPC_*`: layers on other hosts through ggml RPC behind herd's tunnel (issue 20).
//! `RpcArgs` is the serving side (`herd serve`: `HERD_RPC_WORKERS`, its credentials);
//! `WorkerArgs` is `herd worker`. Both share the credential settings, named like `HERD_TLS_*`:
//! `HERD_RPC_TOKEN` (shared secret), `HERD_RPC_TLS_CERT`/`HERD_RPC_TLS_KEY` (this host's
//! certificate: the worker's server certificate, or the serving host's client certificate for
//! mutual TLS) and `HERD_RPC_TLS_CA` (the operator's CA: it signs the worker's certificate, and
//! with it set the worker requires client certificates it signed).

use clap::Args;
use std::path::PathBuf;

use super::parse::clean;
use super::Secrets;

/// The tunnel credentials of one end.
#[derive(Debug, Clone, Args, Default)]
pub struct RpcTls {
    /// Shared secret every tunnel connection must present (compared in constant time).
    #[arg(long = "rpc-token", env = "HERD_RPC_TOKEN", value_parser = parse_token, default_value = "",
          hide_env_values = true, hide_default_value = true)]
    pub token: Secrets,
    /// PEM certificate chain of this end (the worker's server certificate; on `serve`, a client
    /// certificate for mutual TLS).
    #[arg(long = "rpc-tls-cert", env = "HERD_RPC_TLS_CERT", value_parser = parse_file)]
    pub cert: Option<PathBuf>,
    /// PEM private key of HERD_RPC_TLS_CERT.
    #[arg(long = "rpc-tls-key", env = "HERD_RPC_TLS_KEY", value_parser = parse_file)]
    pub key: Option<PathBuf>,
    /// PEM certificate of the operator's CA: the serving side verifies workers against it; a
    /// worker with it set requires client certificates it signed.
    #[arg(long = "rpc-tls-ca", env = "HERD_RPC_TLS_CA", value_parser = parse_file)]
    pub ca: Option<PathBuf>,
}

impl RpcTls {
    pub fn token(&self) -> Option<&str> {
        self.token.0.first().map(String::as_str)
    }

    /// Both of cert/key or neither.
    pub fn identity(&self) -> Result<Option<(&PathBuf, &PathBuf)>, String> {
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            (Some(_), None) => Err("HERD_RPC_TLS_CERT is set but HERD_RPC_TLS_KEY is not".into()),
            (None, Some(_)) => Err("HERD_RPC_TLS_KEY is set but HERD_RPC_TLS_CERT is not".into()),
        }
    }

    /// The startup log's view (paths shown, the token only as set/unset).
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or_else(String::new, |p| p.display().to_string())
        };
        vec![
            (
                "HERD_RPC_TOKEN",
                if self.token().is_some() { "set" } else { "" }.to_string(),
            ),
            ("HERD_RPC_TLS_CERT", path(&self.cert)),
            ("HERD_RPC_TLS_CA", path(&self.ca)),
        ]
    }
}

/// `herd serve`'s side: the workers whose devices its runners add.
#[derive(Debug, Clone, Args, Default)]
pub struct RpcArgs {
    /// `herd worker` addresses (`host:port`, comma-separated) whose devices the runner adds;
    /// each is reached through a local tunnel end (TLS + HERD_RPC_TOKEN or a client
    /// certificate). Needs HERD_RPC_TLS_CA.
    #[arg(long = "rpc-workers", env = "HERD_RPC_WORKERS", value_parser = parse_workers, default_value = "")]
    pub workers: Workers,
    /// Share of the offloaded layers per offload device (llama.cpp's --tensor-split, e.g.
    /// `3,1`): workers' devices first, in HERD_RPC_WORKERS order, then local GPUs. Empty = by
    /// free memory.
    #[arg(long = "tensor-split", env = "HERD_TENSOR_SPLIT", value_parser = parse_tensor_split, default_value = "")]
    pub tensor_split: String,
    #[command(flatten)]
    pub tls: RpcTls,
}

impl RpcArgs {
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let workers: Vec<String> = self
            .workers
            .0
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        let mut v = vec![
            ("HERD_RPC_WORKERS", workers.join(",")),
            ("HERD_TENSOR_SPLIT", self.tensor_split.clone()),
        ];
        v.extend(self.tls.effective());
        v
    }
}

/// `herd worker --listen ADDR:PORT`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Address the tunnel listens on (TLS; the RPC server itself stays on loopback).
    #[arg(long, env = "HERD_RPC_LISTEN")]
    pub listen: std::net::SocketAddr,
    /// CPU threads of the RPC server's CPU device; 0 = one per available CPU.
    #[arg(long, env = "HERD_RPC_THREADS", default_value_t = 0)]
    pub threads: u32,
    /// Path of the runner-llamacpp binary that serves the devices (default: next to herd).
    #[arg(long, env = "HERD_RUNNER", value_parser = parse_file)]
    pub runner: Option<PathBuf>,
    #[command(flatten)]
    pub tls: RpcTls,
}

/// `HERD_RPC_WORKERS` entries, each `host:port`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workers(pub Vec<(String, u16)>);

fn parse_workers(raw: &str) -> Result<Workers, String> {
    let mut out = Vec::new();
    for w in clean(raw)
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let (host, port) = w
            .rsplit_once(':')
            .ok_or_else(|| format!("{w:?}: expected host:port"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{w:?}: bad port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{w:?}: expected host:port"));
        }
        out.push((host.to_string(), port));
    }
    if out.len() > 16 {
        return Err("at most 16 workers (ggml's GGML_RPC_MAX_SERVERS)".into());
    }
    Ok(Workers(out))
}

/// Comma-separated non-negative numbers, at least one above zero; kept as written (trimmed).
fn parse_tensor_split(raw: &str) -> Result<String, String> {
    let s = clean(raw);
    if s.is_empty() {
        return Ok(String::new());
    }
    let mut parts = Vec::new();
    for p in s.split(',').map(str::trim) {
        let v: f32 = p
            .parse()
            .ok()
            .filter(|v: &f32| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("{p:?}: expected a non-negative number"))?;
        parts.push((p, v));
    }
    if parts.len() > 16 || parts.iter().all(|(_, v)| *v == 0.0) {
        return Err("expected 1 to 16 shares, at least one above zero".into());
    }
    Ok(parts.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(","))
}

fn parse_token(raw: &str) -> Result<Secrets, String> {
    match clean(raw) {
        "" => Ok(Secrets::default()),
        t if t.len() < 16 => Err("HERD_RPC_TOKEN must be at least 16 characters".into()),
        t => Ok(Secrets(vec![t.to_string()])),
    }
}

fn parse_file(raw: &str) -> Result<PathBuf, String> {
    match clean(raw) {
        "" => Err("empty path".into()),
        s => Ok(PathBuf::from(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_parse_host_port_lists() {
        let ok = |s: &str| parse_workers(s).unwrap().0;
        assert_eq!(ok(""), vec![]);
        assert_eq!(
            ok("10.0.0.2:50052, gpu-b:7000"),
            vec![("10.0.0.2".into(), 50052), ("gpu-b".into(), 7000)]
        );
        assert_eq!(ok("[fd00::2]:9"), vec![("fd00::2".into(), 9)]);
        for bad in ["host", "host:", ":80", "h:0", "h:99999"] {
            assert!(parse_workers(bad).is_err(), "{bad}");
        }
        let many = vec!["h:1"; 17].join(",");
        assert!(parse_workers(&many).is_err());
    }

    #[test]
    fn tensor_splits_are_share_lists() {
        assert_eq!(parse_tensor_split("").unwrap(), "");
        assert_eq!(parse_tensor_split(" 3, 1 ").unwrap(), "3,1");
        assert_eq!(parse_tensor_split("0.6,0.4,0").unwrap(), "0.6,0.4,0");
        for bad in ["0,0", "a,1", "-1,2", "1,,2", "inf"] {
            assert!(parse_tensor_split(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_long_enough_and_never_shown() {
        assert!(parse_token("short").is_err());
        let t = parse_token("0123456789abcdef").unwrap();
        assert_eq!(format!("{t:?}"), "Secrets(1 redacted)");
        let tls = RpcTls {
            token: t,
            ..RpcTls::default()
        };
        assert_eq!(tls.effective()[0], ("HERD_RPC_TOKEN", "set".to_string()));
        assert!(RpcTls {
            cert: Some("c".into()),
            ..RpcTls::default()
        }
        .identity()
        .is_err());
    }
}
