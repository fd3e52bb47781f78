//! Pull and push against an OCI (Docker distribution v2) registry the way Ollama does
//! (shared/research/ollama.md §4): manifest by tag, blobs in parallel ranged parts with resumable
//! `-partial` state, ed25519-signed token auth, Ollama's NDJSON progress statuses.
//!
//! Trust boundary: everything a registry sends is hostile until checked. Digests reach the
//! filesystem only through `Digest` (manifest parsing validates them), sizes are checked against
//! the blob's HEAD and every ranged reply, bodies are bounded and never decompressed, redirects and
//! auth realms go through `policy`, and a blob becomes visible only after its sha256 verifies; the
//! manifest is written (verbatim) only after every blob it names is stored.
//!
//! `Registry` is created once per process (it owns the HTTP clients and the table of in-flight
//! downloads that lets concurrent pulls of one digest share one download) and is cheap to clone.

pub mod auth;
mod client;
mod download;
mod hashing;
mod partfile;
pub mod policy;
pub mod progress;
mod pull;
mod push;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::OnceCell;

pub use progress::{Progress, ProgressFn};

use super::{Digest, Store};
use crate::error::Result;

/// Tunables; `Default` is Ollama's behaviour. Tests shrink timeouts and part sizes.
#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// Directory holding `id_ed25519` (Ollama: `~/.ollama`). `None`: challenges cannot be
    /// answered and a 401 is an error.
    pub key_dir: Option<PathBuf>,
    pub user_agent: String,
    /// A part that delivers no byte for this long is restarted.
    pub stall_timeout: Duration,
    /// Retries per part (and per push chunk) after transport errors, with doubling backoff.
    pub retries: u32,
    pub backoff: Duration,
    /// Part size clamp (Ollama: 100 MB – 1000 MB of size/16).
    pub part_min: u64,
    pub part_max: u64,
    /// Refuse larger manifests / more layers (10⁶-layer manifests are a DoS, anchors.md §1).
    pub max_manifest_bytes: u64,
    pub max_layers: usize,
    /// Bytes per PATCH when pushing.
    pub push_chunk: u64,
    /// Interval between `pulling <digest>` progress lines (Ollama: 60 ms).
    pub progress_interval: Duration,
    /// Deadline for small exchanges (manifest, blob HEAD, token); blob parts use `stall_timeout`.
    pub request_timeout: Duration,
    /// Blobs downloaded at once (each with up to 16 parts); bounds connections for manifests
    /// with many layers.
    pub max_blobs_in_flight: usize,
    /// Parts of one blob fetched at once from a registry on a private or loopback address
    /// (public registries and CDNs get Ollama's 16). Fewer streams keep the bytes arriving in
    /// order, so they are hashed from memory instead of read back.
    pub lan_parts_in_flight: usize,
    /// Write whole blocks of downloads with `O_DIRECT` (`partfile`): about a third less CPU
    /// per GB here (no page-cache fill), but each part then waits on the disk, and on this
    /// machine's loopback benchmark the page cache plus overlapped writeback finished sooner;
    /// off by default.
    pub direct_io: bool,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            key_dir: None,
            user_agent: format!(
                "herd/{} ({} {})",
                crate::VERSION,
                std::env::consts::ARCH,
                std::env::consts::OS
            ),
            stall_timeout: Duration::from_secs(30),
            retries: 6,
            backoff: Duration::from_secs(1),
            part_min: policy::MIN_PART_SIZE,
            part_max: policy::MAX_PART_SIZE,
            max_manifest_bytes: 16 << 20,
            max_layers: 65_536,
            push_chunk: 64 << 20,
            progress_interval: Duration::from_millis(60),
            request_timeout: Duration::from_secs(60),
            max_blobs_in_flight: 8,
            lan_parts_in_flight: 4,
            direct_io: false,
        }
    }
}

/// The registry client (see module docs).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    opts: RegistryOptions,
    registry: reqwest::Client,
    public: reqwest::Client,
    key: OnceCell<auth::KeyPair>,
    /// Downloads in progress; an entry dies with its last waiter (which aborts the task).
    downloads: Mutex<HashMap<Digest, Weak<download::Inflight>>>,
    /// Blob bytes received from the network (resume and throughput accounting).
    downloaded: std::sync::atomic::AtomicU64,
    blob_slots: tokio::sync::Semaphore,
}

impl Registry {
    pub fn new(store: Store, opts: RegistryOptions) -> Result<Registry> {
        let (registry, public) = client::build_clients(&opts.user_agent)?;
        let slots = opts.max_blobs_in_flight.max(1);
        Ok(Registry {
            inner: Arc::new(Inner {
                store,
                opts,
                registry,
                public,
                key: OnceCell::new(),
                downloads: Mutex::new(HashMap::new()),
                downloaded: Default::default(),
                blob_slots: tokio::sync::Semaphore::new(slots),
            }),
        })
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn options(&self) -> &RegistryOptions {
        &self.inner.opts
    }

    /// Total blob bytes received from registries by this client.
    pub fn bytes_downloaded(&self) -> u64 {
        self.inner
            .downloaded
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The signing key, loaded (or created) on first use.
    async fn key(&self) -> Result<auth::KeyPair> {
        auth::cached_keypair(
            &self.inner.key,
            self.inner.opts.key_dir.clone(),
            "registry requires authentication but no key directory is set",
        )
        .await
    }
}
