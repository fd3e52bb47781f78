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
    dir: PathBuf,
}

impl BlobStore {
    /// Wraps an existing directory (`Store::open` creates it).
    pub fn new(dir: impl Into<PathBuf>) -> BlobStore {
        BlobStore { dir: dir.into() }
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
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, BlobStore) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("blobs");
        std::fs::create_dir(&dir).unwrap();
        (t, BlobStore::new(dir))
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn write_verified_success() {
        let (_t, b) = store();
        let data = b"hello blob".repeat(100_000); // > one copy buffer
        let d = Digest::of_bytes(&data);
        let n = b.write_verified(&d, &data[..]).await.unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(std::fs::read(b.path(&d)).unwrap(), data);
        assert!(b.exists(&d));
        assert_eq!(b.size(&d).unwrap(), Some(data.len() as u64));
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
        // Writing the same content again is fine and leaves one file.
        b.write_verified(&d, &data[..]).await.unwrap();
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
    }

    #[tokio::test]
    async fn write_verified_mismatch_leaves_nothing() {
        let (_t, b) = store();
        let expected = Digest::of_bytes(b"expected");
        let err = b
            .write_verified(&expected, &b"actual"[..])
            .await
            .unwrap_err();
        let got = Digest::of_bytes(b"actual");
        assert_eq!(
            err.to_string(),
            format!("digest mismatch, expected \"{expected}\", got \"{got}\"")
        );
        assert!(matches!(err, Error::DigestMismatch { .. }));
        assert!(entries(b.dir()).is_empty());
        assert!(!b.exists(&expected) && !b.exists(&got));
    }

    /// Yields some bytes, then fails: the temp must not survive.
    struct FailingReader(usize);
    impl AsyncRead for FailingReader {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other("connection reset")));
            }
            self.0 -= 1;
            buf.put_slice(&[7u8; 1000]);
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn read_error_removes_temp() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"x");
        let err = b.write_verified(&d, FailingReader(5)).await.unwrap_err();
        assert!(err.to_string().contains("connection reset"), "{err}");
        assert!(entries(b.dir()).is_empty());
        let err = b.write_stream(FailingReader(0)).await.unwrap_err();
        assert!(matches!(err, Error::Io(_)));
        assert!(entries(b.dir()).is_empty());
    }

    #[tokio::test]
    async fn cancelled_write_removes_temp() {
        let (_t, b) = store();
        let (mut tx, rx) = tokio::io::duplex(64);
        tx.write_all(b"partial data").await.unwrap();
        let d = Digest::of_bytes(b"whatever");
        // The reader never finishes (tx stays open): time out = the handler future is dropped.
        let r = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            b.write_verified(&d, rx),
        )
        .await;
        assert!(r.is_err());
        assert!(entries(b.dir()).is_empty());
        drop(tx);
    }

    /// Past the background-sync threshold twice: the stored blob is every byte, in order.
    #[tokio::test]
    async fn long_streams_sync_in_the_background_and_store_every_byte() {
        let (_t, b) = store();
        let data: Vec<u8> = (0..2 * SYNC_EVERY + 5).map(|i| (i % 253) as u8).collect();
        let (d, n) = b.write_stream(&data[..]).await.unwrap();
        assert_eq!((d.clone(), n), (Digest::of_bytes(&data), data.len() as u64));
        assert!(std::fs::read(b.path(&d)).unwrap() == data);
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
    }

    #[tokio::test]
    async fn write_stream_names_by_content() {
        let (_t, b) = store();
        let (d, n) = b.write_stream(&b"converted"[..]).await.unwrap();
        assert_eq!(d, Digest::of_bytes(b"converted"));
        assert_eq!(n, 9);
        assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"converted");
    }

    #[test]
    fn write_bytes_stores_and_touches() {
        let (_t, b) = store();
        let d = b.write_bytes(b"{\"model_format\":\"gguf\"}").unwrap();
        assert_eq!(d, Digest::of_bytes(b"{\"model_format\":\"gguf\"}"));
        let old = SystemTime::now() - std::time::Duration::from_secs(7200);
        std::fs::File::open(b.path(&d))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(b.write_bytes(b"{\"model_format\":\"gguf\"}").unwrap(), d);
        let m = std::fs::metadata(b.path(&d)).unwrap().modified().unwrap();
        assert!(m > old + std::time::Duration::from_secs(3600));
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_blob_is_not_a_blob() {
        let (t, b) = store();
        let outside = t.path().join("secret");
        std::fs::write(&outside, b"secret").unwrap();
        let d = Digest::of_bytes(b"secret");
        std::os::unix::fs::symlink(&outside, b.path(&d)).unwrap();
        assert!(!b.exists(&d));
        assert_eq!(b.size(&d).unwrap(), None);
    }

    #[test]
    fn legacy_names_are_renamed() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"legacy");
        std::fs::write(b.dir().join(format!("sha256:{}", d.hex())), b"legacy").unwrap();
        std::fs::write(b.dir().join("unrelated"), b"x").unwrap();
        assert_eq!(b.fix_legacy_names().unwrap(), 1);
        assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"legacy");
        assert_eq!(
            entries(b.dir()),
            vec![d.blob_file_name(), "unrelated".into()]
        );
        assert_eq!(b.fix_legacy_names().unwrap(), 0);
    }

    #[tokio::test]
    async fn commit_partial_verifies() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"downloaded");
        std::fs::write(b.partial_path(&d), b"downloaded").unwrap();
        assert_eq!(b.commit_partial(&d).await.unwrap(), 10);
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);

        let (_t, b) = store();
        std::fs::write(b.partial_path(&d), b"corrupted!").unwrap();
        let err = b.commit_partial(&d).await.unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }));
        assert!(entries(b.dir()).is_empty());
        assert!(matches!(b.commit_partial(&d).await, Err(Error::Io(_))));
    }

    #[tokio::test]
    async fn commit_partial_hashed_trusts_only_a_matching_digest() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"downloaded");
        let write = |b: &BlobStore| {
            std::fs::write(b.partial_path(&d), b"downloaded").unwrap();
            FileId::of(&std::fs::File::open(b.partial_path(&d)).unwrap()).unwrap()
        };
        let id = write(&b);
        let other = Digest::of_bytes(b"other");
        let err = b.commit_partial_hashed(&d, &other, id).await.unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }));
        assert!(
            entries(b.dir()).is_empty(),
            "a mismatched partial is deleted"
        );
        let id = write(&b);
        b.commit_partial_hashed(&d, &d, id).await.unwrap();
        assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
        assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"downloaded");
    }

    #[tokio::test]
    async fn a_partial_replaced_by_another_process_is_neither_committed_nor_deleted() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"downloaded");
        let partial = b.partial_path(&d);
        std::fs::write(&partial, b"downloaded").unwrap();
        let hashed = FileId::of(&std::fs::File::open(&partial).unwrap()).unwrap();
        // Another process starts over: a new file (still incomplete) takes the path.
        let theirs = b.dir().join("theirs");
        std::fs::write(&theirs, b"down").unwrap();
        std::fs::rename(&theirs, &partial).unwrap();
        let err = b.commit_partial_hashed(&d, &d, hashed).await.unwrap_err();
        assert!(
            err.to_string().contains("replaced by another process"),
            "{err}"
        );
        assert!(!b.path(&d).exists(), "nothing committed");
        assert_eq!(
            std::fs::read(&partial).unwrap(),
            b"down",
            "theirs left alone"
        );
        // Also with a wrong digest: their file is not ours to delete.
        let other = Digest::of_bytes(b"other");
        assert!(b.commit_partial_hashed(&d, &other, hashed).await.is_err());
        assert!(partial.exists());
    }

    #[test]
    fn partial_paths_derive_from_digest() {
        let (_t, b) = store();
        let d = Digest::of_bytes(b"p");
        assert_eq!(
            b.partial_path(&d).file_name().unwrap().to_str().unwrap(),
            format!("sha256-{}-partial", d.hex())
        );
        assert_eq!(
            b.partial_part_path(&d, 3)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap(),
            format!("sha256-{}-partial-3", d.hex())
        );
    }
}
