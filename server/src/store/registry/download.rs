//! One blob download: ranged parts written into `blobs/sha256-<hex>-partial`, each part's
//! progress in `-partial-<n>` (Ollama's JSON: `{"N","Offset","Size","Completed"}`), so a killed
//! process resumes where it stopped. Up to 16 parts in flight; a silent part is restarted; transport
//! errors retry with doubling backoff; protocol violations (wrong range, too many bytes) fail at
//! once. Bytes reach the data file through `partfile` (whole blocks with direct I/O when
//! `RegistryOptions::direct_io` is set and the filesystem allows). The sha256 is computed while the parts land (`hashing::Trailing`, no
//! second pass over the blob) and the finished file becomes the blob only through
//! `BlobStore::commit_partial_hashed`; the file is synced every second so the final fsync is
//! short.
//!
//! Parts in flight: Ollama's 16 for a public registry or CDN (per-connection throughput over the
//! internet is the limit); `lan_parts_in_flight` for a registry on a private or loopback address,
//! where one stream already saturates the link and in-order bytes can be hashed from memory.
//!
//! Invariants: a part's `Completed` is written only after the bytes it counts were written to the
//! data file, so it never overstates what is on disk; nothing is read from the network past the
//! bytes requested; the task is aborted when the last pull waiting on it goes away.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use futures_util::{StreamExt as _, TryStreamExt as _};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use reqwest::{Method, StatusCode};
use tokio::sync::watch;
use url::Url;

use super::client::{self, Session};
use super::hashing::Trailing;
use super::partfile::{open_nofollow, write_state_to, DataFile, PartState, PartWriter};
use super::policy::{self, Origin};
use crate::error::{Error, Result};
use crate::store::blobs::FileId;
use crate::store::{BlobStore, Digest, Layer};

/// How often written data is pushed towards the disk while downloading.
const WRITEBACK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A download shared by every pull that needs this digest.
pub(crate) struct Inflight {
    pub total: u64,
    pub completed: Arc<AtomicU64>,
    done: watch::Receiver<Option<Result<(), String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Inflight {
    /// Waits for the download to finish (blob stored and verified) or fail.
    pub async fn wait(&self) -> Result<()> {
        let mut rx = self.done.clone();
        let r = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| Error::Internal("download task ended unexpectedly".into()))?;
        match r.as_ref().expect("waited for Some") {
            Ok(()) => Ok(()),
            Err(msg) => Err(Error::Internal(msg.clone())),
        }
    }

    fn failed(&self) -> bool {
        matches!(&*self.done.borrow(), Some(Err(_)))
    }
}

/// Joins the download of `layer` in flight, or starts one.
pub(crate) fn start(session: &Arc<Session>, layer: &Layer) -> Arc<Inflight> {
    let inner = &session.reg.inner;
    let mut map = inner.downloads.lock().unwrap();
    map.retain(|_, w| w.strong_count() > 0);
    if let Some(existing) = map.get(&layer.digest).and_then(|w| w.upgrade()) {
        if !existing.failed() {
            return existing;
        }
    }
    let completed = Arc::new(AtomicU64::new(0));
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn({
        let session = session.clone();
        let layer = layer.clone();
        let completed = completed.clone();
        async move {
            let r = download(&session, &layer, &completed).await;
            let _ = tx.send(Some(r.map_err(|e| e.to_string())));
        }
    });
    let inflight = Arc::new(Inflight {
        total: layer.size,
        completed,
        done: rx,
        task,
    });
    map.insert(layer.digest.clone(), Arc::downgrade(&inflight));
    inflight
}

/// The cross-process side of "one download per digest" (within a process the shared-download
/// map gives it): an exclusive flock on `-partial.lock`, so a second herd on the same store waits
/// instead of writing the same `-partial` files, then finds the blob stored. Whoever gets the
/// lock checks for the blob first; the file is removed before the lock is released, so a waiter
/// may hold the lock of an unlinked file while a newcomer locks a new one — both then see the
/// finished blob, or (after a failure) both download, which `commit_partial_hashed` keeps safe.
struct DigestLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl DigestLock {
    async fn acquire(blobs: &BlobStore, d: &Digest) -> Result<DigestLock> {
        let path = blobs.lock_path(d);
        let p = path.clone();
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let f = open_nofollow(&p, true)?;
            rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
            Ok(f)
        })
        .await
        .map_err(|e| Error::Internal(format!("download lock task: {e}")))??;
        Ok(DigestLock { _file: file, path })
    }
}

impl Drop for DigestLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a blob's bytes come from: the URL after redirects, and whether it is off-registry.
struct Source {
    url: Url,
    external: bool,
    total: u64,
}

async fn download(session: &Session, layer: &Layer, completed: &AtomicU64) -> Result<()> {
    let blobs = session.reg.store().blobs().clone();
    let d = &layer.digest;
    if blobs.exists(d) {
        completed.store(layer.size, Ordering::Relaxed);
        return Ok(());
    }
    let _lock = DigestLock::acquire(&blobs, d).await?;
    if blobs.exists(d) {
        // Another process (a second herd on this store) downloaded it meanwhile.
        completed.store(layer.size, Ordering::Relaxed);
        return Ok(());
    }
    let _slot = session
        .reg
        .inner
        .blob_slots
        .acquire()
        .await
        .map_err(|_| Error::Internal("registry client closed".into()))?;
    let src = tokio::time::timeout(
        session.reg.options().request_timeout,
        locate(session, layer),
    )
    .await
    .map_err(|_| Error::Internal(format!("registry did not answer for blob {}", layer.digest)))??;
    let partial = blobs.partial_path(d);
    settle_partial(session, &partial).await?;
    let parts = {
        let (blobs, d, total) = (blobs.clone(), d.clone(), src.total);
        let (min, max) = (
            session.reg.options().part_min,
            session.reg.options().part_max,
        );
        tokio::task::spawn_blocking(move || load_or_create(&blobs, &d, total, min, max))
            .await
            .map_err(|e| Error::Internal(format!("partial state task: {e}")))??
    };
    completed.store(parts.iter().map(|p| p.completed).sum(), Ordering::Relaxed);
    let n_parts = parts.len();
    let file = Arc::new(DataFile::open(&partial, session.reg.options().direct_io)?);
    {
        let mut open = open_partials().lock().unwrap();
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(partial, Arc::downgrade(&file));
    }
    let trail = Arc::new(Trailing::new(
        parts.iter().map(|p| (p.offset, p.size, p.completed)),
    ));
    let in_flight = if src.external || session.origin() == Origin::Public {
        policy::MAX_PARTS_IN_FLIGHT
    } else {
        session.reg.options().lan_parts_in_flight.max(1)
    };
    let src = Arc::new(src);
    let fetch = futures_util::stream::iter(parts.into_iter().filter(|p| p.completed < p.size))
        .map(|p| run_part(session, &blobs, d, &src, p, completed, &file, &trail))
        .buffer_unordered(in_flight)
        .try_collect::<Vec<()>>();
    let writeback = async {
        loop {
            tokio::time::sleep(WRITEBACK_EVERY).await;
            let f = file.clone();
            let _ = tokio::task::spawn_blocking(move || f.buffered.sync_data()).await;
        }
    };
    tokio::select! {
        r = fetch => { r?; }
        () = writeback => {}
    }
    let got = {
        let (file, trail) = (file.clone(), trail.clone());
        tokio::task::spawn_blocking(move || trail.finish(&file))
            .await
            .map_err(|e| Error::Internal(format!("hash task: {e}")))??
            .ok_or_else(|| Error::Internal(format!("download of {d} ended incomplete")))?
    };
    let hashed = FileId::of(&file.buffered)?;
    drop(file);
    match blobs.commit_partial_hashed(d, &got, hashed).await {
        Ok(()) => {
            remove_states(&blobs, d, n_parts);
            Ok(())
        }
        Err(Error::DigestMismatch { expected, got }) => {
            remove_states(&blobs, d, n_parts);
            Err(Error::Internal(format!(
                "digest mismatch, file must be downloaded again: want {expected}, got {got}"
            )))
        }
        Err(e) => Err(e),
    }
}

/// `-partial` data files open in this process (whichever `Registry` opened them), each alive
/// while a write to it may still run, including a flush of an aborted download that is still on
/// the blocking pool.
fn open_partials() -> &'static Mutex<HashMap<PathBuf, Weak<DataFile>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<DataFile>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// Waits until no write of an earlier (aborted) download into `partial` can still land: the
/// part records must not be read before its last flush updated them (the bytes would be
/// fetched again).
async fn settle_partial(session: &Session, partial: &Path) -> Result<()> {
    let deadline = tokio::time::Instant::now() + session.reg.options().request_timeout;
    loop {
        let busy = {
            let open = open_partials().lock().unwrap();
            open.get(partial).is_some_and(|w| w.strong_count() > 0)
        };
        if !busy {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Internal(
                "an earlier download of this blob is still writing".into(),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// HEADs the blob (following allowed redirects) to learn where its bytes live and its size,
/// which must match the manifest's (a size lie is refused before any byte is fetched). When a
/// redirect target cannot answer HEAD (presigned CDN URLs are often GET-only) or gives no size, a
/// one-byte ranged GET asks instead.
async fn locate(session: &Session, layer: &Layer) -> Result<Source> {
    let url = session.blob_url(&layer.digest);
    let f = session
        .send(Method::HEAD, url.clone(), false, HeaderMap::new(), None)
        .await?;
    if f.resp.status() == StatusCode::NOT_FOUND && !f.external {
        return Err(Error::NotFound(format!(
            "blob {} not found in registry",
            layer.digest
        )));
    }
    let head_size = f
        .resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (f, size) = match head_size {
        Some(n) if f.resp.status().is_success() => (f, n),
        _ if f.external || f.resp.status().is_success() => probe(session, url).await?,
        _ => {
            return Err(client::check(f).await.err().unwrap_or_else(|| {
                Error::Internal(format!("registry gave no size for blob {}", layer.digest))
            }))
        }
    };
    if size != layer.size {
        return Err(Error::Internal(format!(
            "registry reports {size} bytes for blob {}, manifest says {}",
            layer.digest, layer.size
        )));
    }
    Ok(Source {
        url: f.url,
        external: f.external,
        total: size,
    })
}

/// `GET` with `Range: bytes=0-0`: the total from `Content-Range` (or `Content-Length` of a 200,
/// whose body is then dropped unread).
async fn probe(session: &Session, url: Url) -> Result<(client::Fetched, u64)> {
    let mut h = HeaderMap::new();
    h.insert(RANGE, HeaderValue::from_static("bytes=0-0"));
    let f = client::check(session.send(Method::GET, url, false, h, None).await?).await?;
    let hdr = |name| {
        f.resp
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let size = if f.resp.status() == StatusCode::PARTIAL_CONTENT {
        hdr(CONTENT_RANGE)
            .and_then(|cr| cr.rsplit_once('/').and_then(|(_, t)| t.parse::<u64>().ok()))
    } else {
        hdr(CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok())
    };
    let size = size.ok_or_else(|| Error::Internal("registry gave no blob size".into()))?;
    Ok((f, size))
}

fn write_state(path: &Path, st: &PartState) -> std::io::Result<()> {
    write_state_to(&open_nofollow(path, true)?, st)
}

fn read_state(path: &Path) -> Option<PartState> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > 4096 {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Removes download leftovers of a blob that is already stored (a process killed between the
/// rename and the state cleanup leaves them).
pub(crate) fn remove_leftovers(blobs: &BlobStore, d: &Digest) {
    let _ = std::fs::remove_file(blobs.partial_path(d));
    remove_states(blobs, d, 0);
}

fn remove_states(blobs: &BlobStore, d: &Digest, at_least: usize) {
    let mut i = 0;
    loop {
        let p = blobs.partial_part_path(d, i);
        let gone =
            matches!(std::fs::remove_file(&p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if gone && i >= at_least {
            break;
        }
        i += 1;
    }
}

/// Resumes the on-disk partial when its data file and every part record agree with today's
/// part plan; otherwise starts over with a fresh sparse data file.
fn load_or_create(
    blobs: &BlobStore,
    d: &Digest,
    total: u64,
    min: u64,
    max: u64,
) -> Result<Vec<PartState>> {
    let plan = policy::parts(total, policy::part_size(total, min, max));
    let data: PathBuf = blobs.partial_path(d);
    let data_ok =
        std::fs::symlink_metadata(&data).is_ok_and(|m| m.file_type().is_file() && m.len() == total);
    if data_ok {
        let states: Option<Vec<PartState>> = plan
            .iter()
            .enumerate()
            .map(|(i, &(offset, size))| {
                read_state(&blobs.partial_part_path(d, i)).filter(|s| {
                    s.n == i && s.offset == offset && s.size == size && s.completed <= size
                })
            })
            .collect();
        if let Some(states) = states {
            return Ok(states);
        }
    }
    remove_states(blobs, d, plan.len());
    match std::fs::remove_file(&data) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let f = open_nofollow(&data, true)?;
    f.set_len(total)?;
    let states: Vec<PartState> = plan
        .iter()
        .enumerate()
        .map(|(n, &(offset, size))| PartState {
            n,
            offset,
            size,
            completed: 0,
        })
        .collect();
    for st in &states {
        write_state(&blobs.partial_part_path(d, st.n), st)?;
    }
    Ok(states)
}

enum PartError {
    /// Transport trouble: try again after a backoff.
    Retry(Error),
    /// The registry broke the protocol or the disk failed: give up now.
    Fatal(Error),
}

#[allow(clippy::too_many_arguments)]
async fn run_part(
    session: &Session,
    blobs: &BlobStore,
    d: &Digest,
    src: &Source,
    st: PartState,
    completed: &AtomicU64,
    file: &Arc<DataFile>,
    trail: &Arc<Trailing>,
) -> Result<()> {
    let state = open_nofollow(&blobs.partial_part_path(d, st.n), false)?;
    let mut w = PartWriter::new(file.clone(), state, trail.clone(), st, completed);
    let opts = session.reg.options();
    let mut attempt = 0;
    loop {
        match fetch_once(session, src, &mut w).await {
            Ok(()) => return Ok(()),
            Err(PartError::Fatal(e)) => return Err(e),
            // Every failure counts, progress or not: a registry dripping a few bytes per stall
            // must not keep a part alive forever.
            Err(PartError::Retry(e)) => {
                if attempt >= opts.retries {
                    return Err(e);
                }
                tracing::debug!(digest = %d, part = w.st.n, attempt, error = %e, "retrying part");
                tokio::time::sleep(policy::backoff(opts.backoff, attempt)).await;
                attempt += 1;
            }
        }
    }
}

async fn fetch_once(
    session: &Session,
    src: &Source,
    w: &mut PartWriter<'_>,
) -> Result<(), PartError> {
    let st = w.st;
    let start = st.offset + st.completed;
    let end = st.offset + st.size - 1;
    if st.completed >= st.size {
        return Ok(());
    }
    let mut h = HeaderMap::new();
    h.insert(
        RANGE,
        HeaderValue::from_str(&format!("bytes={start}-{end}")).expect("ascii"),
    );
    let f = session
        .send(Method::GET, src.url.clone(), src.external, h, None)
        .await
        .map_err(|e| match e {
            Error::Forbidden(_) => PartError::Fatal(e),
            e => PartError::Retry(e),
        })?;
    let status = f.resp.status();
    let whole = start == 0 && end + 1 == src.total;
    match status {
        StatusCode::PARTIAL_CONTENT => {
            let cr = f
                .resp
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let want = format!("bytes {start}-{end}/");
            let tail = cr.strip_prefix(&want);
            if tail.is_none_or(|t| t != "*" && t != src.total.to_string()) {
                return Err(PartError::Fatal(Error::Internal(format!(
                    "registry answered range {start}-{end} with Content-Range {cr:?}"
                ))));
            }
        }
        StatusCode::OK if whole => {}
        s if s.is_server_error()
            || s == StatusCode::TOO_MANY_REQUESTS
            || s == StatusCode::REQUEST_TIMEOUT =>
        {
            return Err(PartError::Retry(client::status_error(s, b"")));
        }
        _ => {
            return Err(PartError::Fatal(
                client::check(f).await.err().unwrap_or_else(|| {
                    Error::Internal(format!("unexpected status {status} for a blob range"))
                }),
            ));
        }
    }
    let want = end - start + 1;
    if let Some(n) = f.resp.content_length() {
        if n != want {
            return Err(PartError::Fatal(Error::Internal(format!(
                "registry sent {n} bytes for a {want}-byte range"
            ))));
        }
    }
    let stall = session.reg.options().stall_timeout;
    let counter = &session.reg.inner.downloaded;
    let mut stream = f.resp.bytes_stream();
    let mut received = 0u64;
    loop {
        let next = match tokio::time::timeout(stall, stream.next()).await {
            Err(_) => {
                w.flush().await.map_err(PartError::Fatal)?;
                return Err(PartError::Retry(Error::Internal(format!(
                    "part {} stalled for {stall:?}",
                    st.n
                ))));
            }
            Ok(n) => n,
        };
        match next {
            None => break,
            Some(Err(e)) => {
                w.flush().await.map_err(PartError::Fatal)?;
                return Err(PartError::Retry(client::net_error(&src.url, e)));
            }
            Some(Ok(chunk)) => {
                received += chunk.len() as u64;
                if received > want {
                    w.discard();
                    return Err(PartError::Fatal(Error::Internal(format!(
                        "registry sent more than the {want} bytes requested"
                    ))));
                }
                // Counted once staged: a cancelled download persists what it staged.
                w.push(&chunk);
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if w.full() {
                    w.flush().await.map_err(PartError::Fatal)?;
                }
            }
        }
    }
    w.flush().await.map_err(PartError::Fatal)?;
    if received < want {
        return Err(PartError::Retry(Error::Internal(format!(
            "part {} ended after {received} of {want} bytes",
            st.n
        ))));
    }
    Ok(())
}
