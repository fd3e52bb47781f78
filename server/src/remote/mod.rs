//! Cloud and remote models: everything herd serves by asking another server.
//!
//! Two ways in, as in Ollama:
//! - a **stub** in the store (a manifest whose config has `remote_host` and `remote_model`, no
//!   model layer; what `ollama pull gpt-oss:120b-cloud` writes): `/api/generate` and
//!   `/api/chat` on it — and so the OpenAI and Anthropic layers, which run through those
//!   handlers — are sent to `remote_host` as Ollama's API client would (`stub`);
//! - an **explicit cloud reference** (`gpt-oss:20b:cloud`, `gpt-oss:20b-cloud`; `modelref`):
//!   the request is passed through unchanged but for the model name to `OLLAMA_CLOUD_BASE_URL`
//!   by one middleware in front of the routes (`cloud`).
//!
//! This module owns that decision's policy (`policy`: allowlist, signing, texts), the HTTP client
//! and the signing key; nothing here touches the scheduler, so a stub is never loaded and never
//! appears in `/api/ps`. Invariant: a request is signed only for the host Ollama would sign for
//! (ollama.com, the cloud override's host, or any stub host with `OLLAMA_AUTH`), and a client's
//! own `Authorization` header never leaves this server.

pub mod cloud;
mod lines;
pub mod modelref;
pub mod policy;
pub mod stub;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::OnceCell;

use crate::config::{CloudBase, RemoteArgs, Remotes};
use crate::error::{Error, Result};
use crate::store::registry::auth::{self, KeyPair};

/// Why cloud is off, for `/api/status` (`none`, `env`, `config`, `both`).
pub fn disabled_source(env: bool, config: bool) -> &'static str {
    match (env, config) {
        (true, true) => "both",
        (true, false) => "env",
        (false, true) => "config",
        (false, false) => "none",
    }
}

/// The remote settings and client, shared by every request (`AppState::remote`).
pub struct Remote {
    pub remotes: Vec<String>,
    pub cloud: CloudBase,
    /// `OLLAMA_NO_CLOUD`.
    pub no_cloud_env: bool,
    /// `disable_ollama_cloud` in `~/.ollama/server.json` (read once, at startup).
    pub no_cloud_config: bool,
    /// `OLLAMA_AUTH`: sign requests to every stub host.
    pub use_auth: bool,
    /// `~/.ollama`, holding `id_ed25519`; `None`: requests that must be signed fail.
    key_dir: Option<PathBuf>,
    key: OnceCell<KeyPair>,
    http: reqwest::Client,
}

impl Default for Remote {
    fn default() -> Self {
        Remote::new(
            &RemoteArgs {
                remotes: Remotes::default(),
                cloud_base_url: CloudBase::default(),
                no_cloud: false,
                auth: false,
            },
            None,
            false,
        )
    }
}

impl Remote {
    pub fn new(args: &RemoteArgs, key_dir: Option<PathBuf>, no_cloud_config: bool) -> Remote {
        // No total timeout: a generation streams for as long as it runs. Connecting is bounded,
        // so an unreachable host is an error, never a hang.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .expect("reqwest client with rustls");
        Remote {
            remotes: args.remotes.0.clone(),
            cloud: args.cloud_base_url.clone(),
            no_cloud_env: args.no_cloud,
            no_cloud_config,
            use_auth: args.auth,
            key_dir,
            key: OnceCell::new(),
            http,
        }
    }

    /// Reads `disable_ollama_cloud` from `<key_dir>/server.json`; absent or unreadable = false.
    pub fn server_json_disables_cloud(key_dir: &std::path::Path) -> bool {
        std::fs::read(key_dir.join("server.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("disable_ollama_cloud").and_then(|d| d.as_bool()))
            .unwrap_or(false)
    }

    pub fn cloud_disabled(&self) -> bool {
        self.no_cloud_env || self.no_cloud_config
    }

    /// 403 with Ollama's text when cloud is off.
    pub fn check_enabled(&self, operation: &str) -> Result<()> {
        if self.cloud_disabled() {
            return Err(Error::Forbidden(policy::disabled_message(operation)));
        }
        Ok(())
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The identity requests are signed with (`~/.ollama/id_ed25519`, created if absent as
    /// `herd serve` does at startup).
    pub async fn key(&self) -> Result<KeyPair> {
        auth::cached_keypair(
            &self.key,
            self.key_dir.clone(),
            "no key directory for signing requests",
        )
        .await
    }

    /// `Authorization` value over `challenge`.
    pub async fn sign(&self, challenge: &str) -> Result<String> {
        Ok(self.key().await?.sign(challenge.as_bytes()))
    }

    /// Ollama's sign-in URL for a 401 (this host's name and public key).
    pub async fn signin_url(&self) -> Result<String> {
        let key = self.key().await?;
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(policy::signin_url(&host, &key.public_base64()))
    }
}

/// Seconds since the epoch (the `ts` of a signed request).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The user agent of requests to remotes: the Ollama version herd implements (servers may gate
/// on it), then herd's own.
pub(crate) fn user_agent() -> String {
    format!(
        "ollama/{} ({} {}) herd/{}",
        crate::OLLAMA_COMPAT_VERSION,
        std::env::consts::ARCH,
        std::env::consts::OS,
        env!("CARGO_PKG_VERSION")
    )
}

/// A transport failure worded like Go's (`Post "URL": why`), with the cause chain.
pub(crate) fn transport_error(method: &str, url: &url::Url, e: &reqwest::Error) -> String {
    let mut why = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cur {
        why.push(c.to_string());
        cur = c.source();
    }
    let mut shown = url.clone();
    shown.set_query(None);
    let method = match method {
        "POST" => "Post",
        "GET" => "Get",
        m => m,
    };
    if why.is_empty() {
        format!("{method} \"{shown}\": {e}")
    } else {
        format!("{method} \"{shown}\": {}", why.join(": "))
    }
}
