//! `Registry::push`: for each blob of the local manifest, `HEAD` (skip if present) → `POST
//! …/blobs/uploads/` (with `mount`/`from` when the layer records its origin; 201 = mounted) →
//! sequential `PATCH` chunks with `Content-Range` → `PUT ?digest=` → `PUT …/manifests/<tag>` with
//! the stored manifest bytes. Statuses: `retrieving manifest`, `pushing <12hex>`, `pushing
//! manifest`, `success`.
//!
//! Only blobs named by a parsed local manifest are read (their paths come from `Digest`), and
//! each must exist with the manifest's size, so a push can never read an arbitrary file.

use std::collections::HashSet;
use std::io::{Seek as _, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt as _;
use reqwest::header::{
    HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION,
};
use reqwest::{Method, StatusCode};
use tokio::io::AsyncReadExt as _;
use url::Url;

use super::client::{self, Session};
use super::policy;
use super::progress::{Progress, ProgressFn};
use super::Registry;
use crate::error::{Error, Result};
use crate::store::manifest::MEDIA_TYPE_MANIFEST;
use crate::store::{Layer, ModelName};

impl Registry {
    /// Pushes the local model `name` to its registry. `insecure` allows `http://` registries.
    pub async fn push(&self, name: &ModelName, insecure: bool, progress: ProgressFn) -> Result<()> {
        progress(Progress::status("retrieving manifest"));
        let store = self.store().clone();
        let lookup = name.clone();
        let entry = tokio::task::spawn_blocking(move || store.read(&lookup))
            .await
            .map_err(|e| Error::Internal(format!("manifest task: {e}")))??
            .ok_or_else(|| {
                Error::NotFound(format!("model '{}' not found", name.display_shortest()))
            })?;
        let session = Session::new(self.clone(), name, insecure).await?;
        let mut seen = HashSet::new();
        for layer in entry.manifest.blobs() {
            if seen.insert(layer.digest.clone()) {
                push_blob(&session, layer, &progress).await?;
            }
        }
        progress(Progress::status("pushing manifest"));
        let media = if entry.manifest.media_type.is_empty() {
            MEDIA_TYPE_MANIFEST.to_owned()
        } else {
            entry.manifest.media_type.clone()
        };
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_str(&media).map_err(|e| Error::Internal(e.to_string()))?,
        );
        let bytes = entry.bytes.clone();
        let body = move || Ok(reqwest::Body::from(bytes.clone()));
        let url = session.url(&format!("manifests/{}", name.tag()));
        let f = session
            .send(Method::PUT, url, false, h, Some(&body))
            .await?;
        client::check(f).await?;
        progress(Progress::status("success"));
        Ok(())
    }
}

async fn push_blob(session: &Session, layer: &Layer, progress: &ProgressFn) -> Result<()> {
    let d = &layer.digest;
    let blobs = session.reg.store().blobs().clone();
    match blobs.size(d)? {
        Some(n) if n == layer.size => {}
        _ => {
            return Err(Error::InvalidManifest(format!(
                "layer {d} is missing or has the wrong size in the local store"
            )))
        }
    }
    let total = layer.size;
    let f = session
        .send(
            Method::HEAD,
            session.blob_url(d),
            false,
            HeaderMap::new(),
            None,
        )
        .await?;
    if f.resp.status().is_success() {
        progress(Progress::blob("pushing", d, total, total));
        return Ok(());
    }
    progress(Progress::blob("pushing", d, total, 0));

    let mut url = session.url("blobs/uploads/");
    if let Some(from) = layer.from.as_deref().and_then(|f| ModelName::parse(f).ok()) {
        url.query_pairs_mut()
            .append_pair("mount", &d.to_string())
            .append_pair("from", &format!("{}/{}", from.namespace(), from.model()));
    }
    let empty = || Ok(reqwest::Body::from(Vec::new()));
    let f = session
        .send(Method::POST, url, false, HeaderMap::new(), Some(&empty))
        .await?;
    if f.resp.status() == StatusCode::CREATED {
        progress(Progress::blob("pushing", d, total, total));
        return Ok(());
    }
    let mut f = client::check(f).await?;
    let sent = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(Instant::now()));
    let chunk = session.reg.options().push_chunk.max(1);
    let mut offset = 0;
    while offset < total {
        let n = chunk.min(total - offset);
        let (loc, external) = upload_location(session, &f)?;
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        h.insert(CONTENT_LENGTH, HeaderValue::from(n));
        h.insert(
            CONTENT_RANGE,
            HeaderValue::from_str(&format!("{offset}-{}", offset + n - 1)).expect("ascii"),
        );
        let path = blobs.path(d);
        let (sent2, last2, progress2, d2) =
            (sent.clone(), last.clone(), progress.clone(), d.clone());
        let interval = session.reg.options().progress_interval;
        let base = offset;
        let body = move || -> Result<reqwest::Body> {
            let mut file = std::fs::File::open(&path)?;
            file.seek(SeekFrom::Start(base))?;
            let reader = tokio::fs::File::from_std(file).take(n);
            let (sent, last, progress, d) =
                (sent2.clone(), last2.clone(), progress2.clone(), d2.clone());
            sent.store(base, Ordering::Relaxed);
            let stream =
                tokio_util::io::ReaderStream::with_capacity(reader, 1 << 20).map(move |r| {
                    if let Ok(b) = &r {
                        let now =
                            sent.fetch_add(b.len() as u64, Ordering::Relaxed) + b.len() as u64;
                        let mut t = last.lock().unwrap();
                        if t.elapsed() >= interval {
                            *t = Instant::now();
                            progress(Progress::blob("pushing", &d, total, now));
                        }
                    }
                    r
                });
            Ok(reqwest::Body::wrap_stream(stream))
        };
        f = client::check(
            session
                .send(Method::PATCH, loc, external, h, Some(&body))
                .await?,
        )
        .await?;
        offset += n;
    }
    let (mut loc, external) = upload_location(session, &f)?;
    loc.query_pairs_mut().append_pair("digest", &d.to_string());
    let mut h = HeaderMap::new();
    h.insert(CONTENT_LENGTH, HeaderValue::from(0));
    let f = session
        .send(Method::PUT, loc, external, h, Some(&empty))
        .await?;
    client::check(f).await?;
    progress(Progress::blob("pushing", d, total, total));
    Ok(())
}

/// The upload URL from a `Location` (or `Docker-Upload-Location`) header, judged like a redirect:
/// our model bytes go only where a redirect could send us.
fn upload_location(session: &Session, f: &client::Fetched) -> Result<(Url, bool)> {
    let h = f.resp.headers();
    let loc = h
        .get("Docker-Upload-Location")
        .or_else(|| h.get(LOCATION))
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Error::Internal("registry gave no upload location".into()))?;
    let to = f
        .url
        .join(loc)
        .map_err(|e| Error::Internal(format!("invalid upload location: {e}")))?;
    let origin = if f.external {
        policy::Origin::Public
    } else {
        session.origin()
    };
    let kind = policy::redirect(&f.url, &to, origin).map_err(Error::Forbidden)?;
    Ok((to, f.external || kind == policy::Redirect::External))
}
