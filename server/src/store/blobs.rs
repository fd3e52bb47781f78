//! Content-addressed blobs under `<root>/blobs/sha256-<hex>`.
//!
//! Invariants:
//! - a path inside `blobs/` is only ever built from a validated `Digest` (or the fixed temp /
//!   partial suffixes appended to one), so no input string reaches the filesystem;
//! - a file named `sha256-<hex>` only ever appears by `rename` of a fully written, fsynced temp
//!   file whose sha256 equals `<hex>`: readers never see a partial or wrong blob;
//! - temp files (`.tmp-<random>`) live in the blobs dir (same filesystem, so rename is atomic)
//!   and are removed on every failure path, including a dropped future (client disconnect);
//! - symlinks are never followed: a symlink where a blob should be counts as no blob.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::digest::Digest;
use crate::error::{Error, Result};

/// Prefix of in-flight temp files (here and in manifest dirs). Starts with '.', so it is never a
/// valid name part nor a blob name.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

const COPY_BUF: usize = 1 << 20;
/// While streaming into a temp file, writeback of what was written is started after this many
/// bytes (one sync at a time, in the background), so the final fsync waits only for the tail.
const SYNC_EVERY: u64 = 64 << 20;

/// Removes the temp file on drop unless `keep` was called: the one cleanup path for every error,
/// early return, panic or cancelled future.
pub(crate) struct TempGuard {
    path: Option<PathBuf>,
}

impl TempGuard {
    /// A fresh, unused temp path inside `dir`.
    pub(crate) fn new_path(dir: &Path) -> PathBuf {
        dir.join(format!("{TEMP_PREFIX}{:016x}", rand::random::<u64>()))
    }
    pub(crate) fn new(path: PathBuf) -> TempGuard {
        TempGuard { path: Some(path) }
    }
    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().expect("temp guard already disarmed")
    }
    /// The file was renamed into place; nothing left to clean up.
    pub(crate) fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
    n: u64,
}

impl<W: std::io::Write> std::io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Fsyncs a directory so a completed rename survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Which file a path named when it was looked at (device, inode): survives renames, tells a
/// replaced file from the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId(u64, u64);

impl FileId {
    pub fn of(file: &std::fs::File) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata()?;
        Ok(FileId(m.dev(), m.ino()))
    }

    fn of_path(path: &Path) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path)?;
        Ok(FileId(m.dev(), m.ino()))
    }
}

#[derive(Clone, Debug)]
pub struct BlobStore {
    /// Shared, so that cloning the store (every request's `AppState`) allocates nothing.
    dir: std::sync::Arc<Path>,
}

impl BlobStore {
    /// Wraps an existing directory (`Store::open` creates it).
    pub fn new(dir: impl Into<PathBuf>) -> BlobStore {
        BlobStore {
            dir: std::sync::Arc::from(dir.into()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `blobs/sha256-<hex>`.
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.blob_file_name())
    }

    /// `blobs/sha256-<hex>-partial`: where a resumable download keeps its data (part state files
    /// append `-<n>`, see `partial_part_path`). Prune removes these when stale.
    pub fn partial_path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-partial", digest.blob_file_name()))
    }

    /// `blobs/sha256-<hex>-partial.lock`: held (flock) by the one process downloading the blob.
    pub fn lock_path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-partial.lock", digest.blob_file_name()))
    }

    /// `blobs/sha256-<hex>-partial-<n>`: per-part resume state of a download.
    pub fn partial_part_path(&self, digest: &Digest, part: usize) -> PathBuf {
        self.dir
            .join(format!("{}-partial-{part}", digest.blob_file_name()))
    }

    /// True iff a regular file (not a symlink) holds this blob.
    pub fn exists(&self, digest: &Digest) -> bool {
        self.size(digest).ok().flatten().is_some()
    }

    /// Size of the blob, `None` if absent (or not a regular file).
    pub fn size(&self, digest: &Digest) -> Result<Option<u64>> {
        match std::fs::symlink_metadata(self.path(digest)) {
            Ok(m) if m.file_type().is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Refreshes the blob's mtime so a freshly reused blob is inside prune's grace period.
    pub fn touch(&self, digest: &Digest) -> Result<()> {
        std::fs::File::open(self.path(digest))?.set_modified(SystemTime::now())?;
        Ok(())
    }

    /// Streams `reader` into the store, hashing as it goes; the blob appears under `expected`
    /// only if the content hashes to it. On mismatch: `Error::DigestMismatch` and nothing stored.
    /// Returns the byte count.
    pub async fn write_verified<R: AsyncRead + Unpin>(
        &self,
        expected: &Digest,
        reader: R,
    ) -> Result<u64> {
        let (temp, got, n) = self.stream_to_temp(reader).await?;
        if &got != expected {
            drop(temp);
            return Err(Error::DigestMismatch {
                expected: expected.to_string(),
                got: got.to_string(),
            });
        }
        self.commit(temp, &got).await?;
        Ok(n)
    }

    /// Streams `reader` into the store under whatever digest its content has (for content the
    /// server produces itself, e.g. a converted model). Returns (digest, byte count).
    pub async fn write_stream<R: AsyncRead + Unpin>(&self, reader: R) -> Result<(Digest, u64)> {
        let (temp, got, n) = self.stream_to_temp(reader).await?;
        self.commit(temp, &got).await?;
        Ok((got, n))
    }

    /// Stores small in-memory content (config, template, params layers). Synchronous: call from
    /// a blocking context. An existing identical blob is kept and its mtime refreshed.
    pub fn write_bytes(&self, bytes: &[u8]) -> Result<Digest> {
        use std::io::Write;
        let digest = Digest::of_bytes(bytes);
        if self.exists(&digest) {
            self.touch(&digest)?;
            return Ok(digest);
        }
        let temp = TempGuard::new(TempGuard::new_path(&self.dir));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp.path())?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(temp.path(), self.path(&digest))?;
        temp.keep();
        sync_dir(&self.dir)?;
        Ok(digest)
    }

    /// Stores content produced on the fly (a converted or merged GGUF): `fill` writes into a
    /// temp file in the blobs dir through a 1 MiB buffer that hashes as it goes; then fsync and
    /// rename. Synchronous. Nothing becomes visible when `fill` fails; an identical existing blob
    /// is kept (mtime refreshed). Returns the digest and size.
    pub fn write_with(
        &self,
        fill: impl FnOnce(&mut dyn std::io::Write) -> Result<()>,
    ) -> Result<(Digest, u64)> {
        let temp = TempGuard::new(TempGuard::new_path(&self.dir));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp.path())?;
        let mut w = HashingWriter {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            hash: Sha256::new(),
            n: 0,
        };
        fill(&mut w)?;
        let digest = Digest::from_sha256(w.hash.finalize().into());
        let file = w.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        if self.exists(&digest) {
            self.touch(&digest)?;
        } else {
            std::fs::rename(temp.path(), self.path(&digest))?;
            temp.keep();
            sync_dir(&self.dir)?;
        }
        Ok((digest, w.n))
    }

    /// Finishes a resumable download: hashes `partial_path(expected)`, and if it matches,
    /// fsyncs and renames it to the blob (the caller removes its `-partial-<n>` state files).
    /// On mismatch the partial is deleted (its bytes are useless) and `DigestMismatch` returned.
    pub async fn commit_partial(&self, expected: &Digest) -> Result<u64> {
        let partial = self.partial_path(expected);
        // No guard while hashing: a transient read error keeps the partial (its bytes stay
        // resumable); only a proven mismatch discards it.
        let mut file = tokio::fs::File::open(&partial).await?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; COPY_BUF];
        let mut total = 0u64;
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            total += n as u64;
        }
        let got = Digest::from_sha256(hasher.finalize().into());
        if &got != expected {
            drop(TempGuard::new(partial));
            return Err(Error::DigestMismatch {
                expected: expected.to_string(),
                got: got.to_string(),
            });
        }
        file.sync_all().await?;
        drop(file);
        self.commit(TempGuard::new(partial), expected).await?;
        Ok(total)
    }

    /// As `commit_partial`, for a download that hashed `partial_path(expected)` while writing
    /// it: `got` must be the sha256 of exactly the bytes in that file (the registry client's
    /// trailing hasher only hashes bytes after they were written, in file order). Saves the second
    /// full read of the blob. `hashed` identifies the file that was hashed: if another process
    /// (a second herd, or Ollama, on the same store) replaced the file at that path meanwhile,
    /// nothing is committed or deleted, since the bytes there are not the ones hashed.
    pub async fn commit_partial_hashed(
        &self,
        expected: &Digest,
        got: &Digest,
        hashed: FileId,
    ) -> Result<()> {
        let partial = self.partial_path(expected);
        if FileId::of_path(&partial).ok() != Some(hashed) {
            return Err(Error::Internal(format!(
                "the partial download of {expected} was replaced by another process; pull again"
            )));
        }
        if got != expected {
            drop(TempGuard::new(partial));
            return Err(Error::DigestMismatch {
                expected: expected.to_string(),
                got: got.to_string(),
            });
        }
        tokio::task::spawn_blocking({
            let partial = partial.clone();
            move || std::fs::File::open(partial)?.sync_all()
        })
        .await
        .map_err(|e| Error::Internal(format!("blob fsync task: {e}")))??;
        // A replacement between the check above and this rename is not excluded; the window is
        // the fsync, and each herd process downloads a digest once (the shared-download map).
        self.commit(TempGuard::new(partial), expected).await
    }

    async fn stream_to_temp<R: AsyncRead + Unpin>(
        &self,
        mut reader: R,
    ) -> Result<(TempGuard, Digest, u64)> {
        let temp = TempGuard::new(TempGuard::new_path(&self.dir));
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp.path())
            .await?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; COPY_BUF];
        let mut total = 0u64;
        // Background syncs share the open file description, so a writeback error one of them
        // consumes would not be reported again to the final fsync: each result is checked.
        let mut syncing: Option<tokio::task::JoinHandle<std::io::Result<()>>> = None;
        let mut unsynced = 0u64;
        loop {
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n]).await?;
            total += n as u64;
            unsynced += n as u64;
            if unsynced >= SYNC_EVERY && syncing.as_ref().is_none_or(|h| h.is_finished()) {
                if let Some(h) = syncing.take() {
                    join_sync(h).await?;
                }
                file.flush().await?;
                let f = file.try_clone().await?.into_std().await;
                syncing = Some(tokio::task::spawn_blocking(move || f.sync_data()));
                unsynced = 0;
            }
        }
        file.flush().await?;
        if let Some(h) = syncing.take() {
            join_sync(h).await?;
        }
        file.sync_all().await?;
        drop(file);
        Ok((temp, Digest::from_sha256(hasher.finalize().into()), total))
    }

    /// Renames a verified temp into place (replacing an identical existing blob is harmless and
    /// refreshes its mtime) and makes the rename durable.
    async fn commit(&self, temp: TempGuard, digest: &Digest) -> Result<()> {
        tokio::fs::rename(temp.path(), self.path(digest)).await?;
        temp.keep();
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || sync_dir(&dir))
            .await
            .map_err(|e| Error::Internal(format!("blob fsync task: {e}")))??;
        Ok(())
    }

    /// Renames Ollama's legacy `sha256:<hex>` blob files to `sha256-<hex>` (as Ollama's
    /// `fixBlobs` does at startup). Returns how many were renamed.
    pub fn fix_legacy_names(&self) -> Result<usize> {
        let mut renamed = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Some(rest) = name.strip_prefix("sha256:") else {
                continue;
            };
            if !entry.file_type()?.is_file() {
                continue;
            }
            std::fs::rename(entry.path(), self.dir.join(format!("sha256-{rest}")))?;
            renamed += 1;
        }
        Ok(renamed)
    }
}

async fn join_sync(h: tokio::task::JoinHandle<std::io::Result<()>>) -> Result<()> {
    h.await
        .map_err(|e| Error::Internal(format!("blob sync task: {e}")))??;
    Ok(())
}

#[cfg(test)]
mod tests;
