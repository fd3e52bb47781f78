//! `Registry::pull`: manifest → every missing blob (shared, resumable downloads) → manifest bytes
//! written verbatim → layers only the replaced manifest used are removed. Emits Ollama's
//! statuses: `pulling manifest`, `pulling <12hex>` (total/completed), `verifying sha256 digest`,
//! `writing manifest`, `removing unused layers` (when any), `success`.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use reqwest::{Method, StatusCode};

use super::client::{self, Session};
use super::download;
use super::progress::{Progress, ProgressFn};
use super::Registry;
use crate::error::{Error, Result};
use crate::store::manifest::MEDIA_TYPE_MANIFEST;
use crate::store::{Digest, Layer, Manifest, ModelName};

/// Largest size a single blob may claim (16 TiB): keeps every sum far from overflow.
const MAX_BLOB_SIZE: u64 = 1 << 44;

/// Exact error Ollama gives for an unknown model.
pub const PULL_NOT_FOUND: &str = "pull model manifest: file does not exist";

impl Registry {
    /// Pulls `name` into the store. `insecure` allows `http://` registries.
    pub async fn pull(&self, name: &ModelName, insecure: bool, progress: ProgressFn) -> Result<()> {
        progress(Progress::status("pulling manifest"));
        let session = Arc::new(Session::new(self.clone(), name, insecure).await?);
        let bytes = tokio::time::timeout(self.options().request_timeout, fetch_manifest(&session))
            .await
            .map_err(|_| Error::Internal("registry did not send the manifest in time".into()))??;
        let manifest = self.check_manifest(&bytes)?;

        let mut seen = HashSet::new();
        let layers: Vec<&Layer> = manifest
            .layers
            .iter()
            .chain(std::iter::once(&manifest.config))
            .filter(|l| seen.insert(l.digest.clone()))
            .collect();
        // Start every missing blob at once; report them in manifest order.
        let jobs: Vec<(&Layer, Option<Arc<download::Inflight>>)> = layers
            .iter()
            .map(|l| {
                let blobs = self.store().blobs();
                if blobs.exists(&l.digest) {
                    download::remove_leftovers(blobs, &l.digest);
                    return (*l, None);
                }
                (*l, Some(download::start(&session, l)))
            })
            .collect();
        for (layer, job) in &jobs {
            let Some(job) = job else {
                progress(Progress::blob(
                    "pulling",
                    &layer.digest,
                    layer.size,
                    layer.size,
                ));
                continue;
            };
            let mut tick = tokio::time::interval(self.options().progress_interval);
            let wait = job.wait();
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    r = &mut wait => { r?; break; }
                    _ = tick.tick() => {
                        let done = job.completed.load(Ordering::Relaxed).min(job.total);
                        progress(Progress::blob("pulling", &layer.digest, job.total, done));
                    }
                }
            }
            progress(Progress::blob(
                "pulling",
                &layer.digest,
                layer.size,
                layer.size,
            ));
        }
        drop(jobs);

        progress(Progress::status("verifying sha256 digest"));
        // Downloads were verified before they became visible; a blob that vanished since
        // (concurrent delete) must not be referenced by the manifest we write.
        for l in &layers {
            if !self.store().blobs().exists(&l.digest) {
                return Err(Error::Internal(format!("blob {} disappeared", l.digest)));
            }
        }

        progress(Progress::status("writing manifest"));
        let store = self.store().clone();
        let (target, bytes2) = (name.clone(), bytes.clone());
        let new: HashSet<Digest> = layers.iter().map(|l| l.digest.clone()).collect();
        let unused = tokio::task::spawn_blocking(move || -> Result<Vec<Digest>> {
            let old = match store.read(&target) {
                Ok(Some(e)) => e.manifest.blobs().map(|l| l.digest.clone()).collect(),
                _ => Vec::new(),
            };
            store.write_manifest_bytes(&target, &bytes2)?;
            Ok(old.into_iter().filter(|d| !new.contains(d)).collect())
        })
        .await
        .map_err(|e| Error::Internal(format!("manifest task: {e}")))??;

        if !unused.is_empty() {
            progress(Progress::status("removing unused layers"));
            let store = self.store().clone();
            tokio::task::spawn_blocking(move || store.remove_unreferenced(&unused))
                .await
                .map_err(|e| Error::Internal(format!("prune task: {e}")))??;
        }
        progress(Progress::status("success"));
        Ok(())
    }

    /// Parses and bounds a registry manifest (digests are validated by `Manifest::parse`).
    fn check_manifest(&self, bytes: &[u8]) -> Result<Manifest> {
        let m = Manifest::parse(bytes)?;
        if m.layers.len() > self.options().max_layers {
            return Err(Error::InvalidManifest(format!(
                "{} layers (limit {})",
                m.layers.len(),
                self.options().max_layers
            )));
        }
        if let Some(l) = m.blobs().find(|l| l.size > MAX_BLOB_SIZE) {
            return Err(Error::InvalidManifest(format!(
                "layer {} claims {} bytes",
                l.digest, l.size
            )));
        }
        Ok(m)
    }
}

async fn fetch_manifest(session: &Session) -> Result<Vec<u8>> {
    let mut h = HeaderMap::new();
    h.insert(ACCEPT, HeaderValue::from_static(MEDIA_TYPE_MANIFEST));
    let url = session.url(&format!("manifests/{}", session.name.tag()));
    let f = session.send(Method::GET, url, false, h, None).await?;
    if f.resp.status() == StatusCode::NOT_FOUND {
        return Err(Error::NotFound(PULL_NOT_FOUND.into()));
    }
    let f = client::check(f).await?;
    let max = session.reg.options().max_manifest_bytes;
    client::read_limited(f.resp, max)
        .await
        .map_err(|e| Error::InvalidManifest(format!("manifest: {e}")))
}
