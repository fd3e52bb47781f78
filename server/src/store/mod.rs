//! The Ollama-compatible model store: `<root>/manifests/<host>/<namespace>/<model>/<tag>` and
//! `<root>/blobs/sha256-<hex>`, read and written exactly as Ollama does so an existing
//! `~/.ollama/models` works unchanged (DESIGN.md decisions 2 and 3).
//!
//! `Store` is the facade the API layer uses. Its methods are synchronous std::fs code: call them
//! from `tokio::task::spawn_blocking` (the store is cheap to clone). Blob streaming is async, on
//! `BlobStore` (`store.blobs()`).
//!
//! Invariants:
//! - every path is derived from a validated `ModelName` or `Digest`; nothing outside `root` is
//!   touched and no symlink inside the store is followed (the user-configured `root`, `blobs` and
//!   `manifests` directories themselves may be symlinks);
//! - a manifest is written only after every blob it references exists, via temp + fsync + rename;
//!   its bytes are stored verbatim (the `/api/tags` digest is the hash of those bytes);
//! - lookups are case-insensitive with ollama#18438 semantics and deterministic;
//! - writing to a name that differs only in case from an existing manifest overwrites that file;
//! - mutations (write, copy, delete, prune) are serialized by one lock per `Store::open` (clones
//!   share it; open the store once per process), so their refcount scans never interleave.
//!
//! Corrupt manifests (unparsable JSON): skipped by `list` with a warning; `delete` treats any
//! `sha256:<hex>` / `sha256-<hex>` text inside them as a reference; `prune` deletes no blob at all
//! while one exists, because a corrupt file may no longer name what it used (a re-pull can then
//! repair it without downloading again).

pub mod blobs;
pub mod check;
pub mod digest;
pub mod manifest;
pub mod name;
mod prune;
pub mod registry;
mod resolve;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

pub use blobs::BlobStore;
pub use digest::Digest;
pub use manifest::{Layer, Manifest};
pub use name::ModelName;
pub use prune::PruneReport;

use crate::error::{Error, Result};

/// One manifest on disk.
#[derive(Clone, Debug)]
pub struct ManifestEntry {
    /// Exact casing from the path.
    pub name: ModelName,
    pub manifest: Manifest,
    /// The file bytes, verbatim.
    pub bytes: Vec<u8>,
    /// Hex sha256 of `bytes`, no prefix (`/api/tags` `digest`).
    pub digest_hex: String,
    /// Layers plus config.
    pub size: u64,
    /// Manifest file mtime (`modified_at`).
    pub modified: SystemTime,
}

/// What `delete` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// The manifest actually removed (exact casing).
    pub name: ModelName,
    pub blobs_removed: usize,
    pub bytes_freed: u64,
}

#[derive(Clone, Debug)]
pub struct Store {
    /// Shared, so that cloning the store (every request's `AppState`) allocates nothing.
    root: Arc<Path>,
    blobs: BlobStore,
    lock: Arc<Mutex<()>>,
}

/// Result of reading every manifest file.
struct Scan {
    entries: Vec<ManifestEntry>,
    /// Raw bytes of manifest files that exist but do not parse.
    corrupt: Vec<Vec<u8>>,
}

impl Scan {
    /// Every digest any manifest may reference (see module docs for corrupt files).
    fn referenced(&self) -> HashSet<Digest> {
        let mut refs: HashSet<Digest> = self
            .entries
            .iter()
            .flat_map(|e| e.manifest.blobs().map(|l| l.digest.clone()))
            .collect();
        for bytes in &self.corrupt {
            refs.extend(digests_in_text(bytes));
        }
        refs
    }
}

/// Every `sha256[:-]<64 lowercase hex>` token in `bytes`.
fn digests_in_text(bytes: &[u8]) -> Vec<Digest> {
    const PREFIX: &[u8] = b"sha256";
    let mut out = Vec::new();
    let mut i = 0;
    while i + PREFIX.len() + 65 <= bytes.len() {
        if &bytes[i..i + PREFIX.len()] == PREFIX && matches!(bytes[i + 6], b':' | b'-') {
            if let Ok(hex) = std::str::from_utf8(&bytes[i + 7..i + 71]) {
                if let Ok(d) = Digest::parse(&format!("sha256:{hex}")) {
                    out.push(d);
                    i += 71;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

fn modified(meta: &std::fs::Metadata) -> SystemTime {
    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)
}

impl Store {
    /// Opens (creating if needed) the store at `root`: ensures `blobs/` and `manifests/` exist and
    /// renames legacy `sha256:<hex>` blob files. Reads no environment.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        std::fs::create_dir_all(root.join("blobs"))?;
        std::fs::create_dir_all(root.join("manifests"))?;
        let blobs = BlobStore::new(root.join("blobs"));
        let renamed = blobs.fix_legacy_names()?;
        if renamed > 0 {
            tracing::info!(renamed, "renamed legacy sha256: blob files");
        }
        Ok(Store {
            root: Arc::from(root),
            blobs,
            lock: Arc::new(Mutex::new(())),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    fn manifests_dir(&self) -> PathBuf {
        self.root.join("manifests")
    }

    fn manifest_path(&self, name: &ModelName) -> PathBuf {
        self.root.join(name.manifest_rel_path())
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // A panic while holding the lock leaves no in-memory state to repair.
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every parsable manifest, sorted by name (host, namespace, model, tag). Unparsable
    /// manifests are skipped with a warning.
    pub fn list(&self) -> Result<Vec<ManifestEntry>> {
        Ok(self.scan()?.entries)
    }

    fn scan(&self) -> Result<Scan> {
        let mut scan = Scan {
            entries: Vec::new(),
            corrupt: Vec::new(),
        };
        for name in resolve::manifest_names(&self.manifests_dir())? {
            match self.read_exact(&name) {
                Ok(Some(e)) => scan.entries.push(e),
                Ok(None) => {}
                Err(Error::InvalidManifest(why)) => {
                    tracing::warn!(model = %name, error = %why, "skipping unreadable manifest; its blobs are kept");
                    if let Ok(bytes) = std::fs::read(self.manifest_path(&name)) {
                        scan.corrupt.push(bytes);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(scan)
    }

    /// Canonicalizes `name` against the manifests on disk (ollama#18438; see
    /// `resolve::resolve_among`). Always returns a name; it exists only if `find` says so.
    pub fn resolve(&self, name: &ModelName) -> Result<ModelName> {
        resolve::resolve_on_disk(&self.manifests_dir(), name)
    }

    /// The exact-cased name of the manifest `name` refers to, if one exists.
    pub fn find(&self, name: &ModelName) -> Result<Option<ModelName>> {
        let resolved = self.resolve(name)?;
        Ok(self.is_manifest_file(&resolved).then_some(resolved))
    }

    fn is_manifest_file(&self, name: &ModelName) -> bool {
        std::fs::symlink_metadata(self.manifest_path(name)).is_ok_and(|m| m.file_type().is_file())
    }

    /// Reads the manifest `name` refers to (after `resolve`). `Ok(None)`: no such model;
    /// `Err(InvalidManifest)`: it exists but does not parse.
    pub fn read(&self, name: &ModelName) -> Result<Option<ManifestEntry>> {
        self.read_exact(&self.resolve(name)?)
    }

    /// Reads exactly this path's manifest, no case folding.
    fn read_exact(&self, name: &ModelName) -> Result<Option<ManifestEntry>> {
        let path = self.manifest_path(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => m,
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let manifest = Manifest::parse(&bytes)?;
        Ok(Some(ManifestEntry {
            name: name.clone(),
            size: manifest.total_size(),
            digest_hex: Digest::of_bytes(&bytes).hex().to_owned(),
            manifest,
            bytes,
            modified: modified(&meta),
        }))
    }

    /// Writes a manifest verbatim under `name` — or under the existing manifest it resolves to, so
    /// a case variant overwrites rather than duplicates. The bytes must parse and every blob they
    /// reference must already be stored. Returns the name written.
    pub fn write_manifest_bytes(&self, name: &ModelName, bytes: &[u8]) -> Result<ModelName> {
        let manifest = Manifest::parse(bytes)?;
        let _guard = self.lock();
        for layer in manifest.blobs() {
            if !self.blobs.exists(&layer.digest) {
                return Err(Error::InvalidManifest(format!(
                    "layer {} is not in the blob store",
                    layer.digest
                )));
            }
        }
        let target = self.resolve(name)?;
        self.write_file_atomic(&target, bytes)?;
        Ok(target)
    }

    /// `write_manifest_bytes` of the Ollama-identical serialization of `manifest`.
    pub fn write_manifest(&self, name: &ModelName, manifest: &Manifest) -> Result<ModelName> {
        self.write_manifest_bytes(name, &manifest.to_bytes())
    }

    fn write_file_atomic(&self, name: &ModelName, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let path = self.manifest_path(name);
        let dir = path.parent().expect("manifest path has a parent");
        std::fs::create_dir_all(dir)?;
        // create_dir_all follows symlinks; refuse a tree that leads out of the store.
        let mut d = self.manifests_dir();
        for part in &name.parts()[..3] {
            d.push(part);
            if !std::fs::symlink_metadata(&d)?.file_type().is_dir() {
                return Err(Error::Internal(format!(
                    "manifest directory for {name} is not a plain directory"
                )));
            }
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_file()) {
            return Err(Error::Internal(format!(
                "manifest for {name} is not a regular file"
            )));
        }
        let temp = blobs::TempGuard::new(blobs::TempGuard::new_path(dir));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp.path())?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(temp.path(), &path)?;
        temp.keep();
        blobs::sync_dir(dir)?;
        Ok(())
    }

    /// Copies `src`'s manifest bytes to `dst` (resolved like a write). `Ok(None)`: no such source.
    pub fn copy(&self, src: &ModelName, dst: &ModelName) -> Result<Option<ModelName>> {
        let Some(entry) = self.read(src)? else {
            return Ok(None);
        };
        self.write_manifest_bytes(dst, &entry.bytes).map(Some)
    }

    /// Removes the manifest `name` refers to, its now-empty parent directories, then each of its
    /// blobs that no remaining manifest references. `Ok(None)`: no such model. A corrupt manifest
    /// is removed without deleting any blob (which ones it used is unknown; prune reclaims them).
    pub fn delete(&self, name: &ModelName) -> Result<Option<Deleted>> {
        let _guard = self.lock();
        let Some(target) = self.find(name)? else {
            return Ok(None);
        };
        let path = self.manifest_path(&target);
        let own: Vec<Digest> = match self.read_exact(&target) {
            Ok(Some(e)) => e.manifest.blobs().map(|l| l.digest.clone()).collect(),
            Ok(None) => return Ok(None),
            Err(Error::InvalidManifest(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        std::fs::remove_file(&path)?;
        self.remove_empty_parents(&path);

        let refs = self.scan()?.referenced();
        let mut out = Deleted {
            name: target,
            blobs_removed: 0,
            bytes_freed: 0,
        };
        let mut seen = HashSet::new();
        for d in own {
            if refs.contains(&d) || !seen.insert(d.clone()) {
                continue;
            }
            let Some(size) = self.blobs.size(&d)? else {
                continue;
            };
            match std::fs::remove_file(self.blobs.path(&d)) {
                Ok(()) => {
                    out.blobs_removed += 1;
                    out.bytes_freed += size;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(out))
    }

    /// Removes each of `candidates` that no manifest references (a replaced manifest's old layers
    /// after a pull). Returns how many blobs were removed.
    pub fn remove_unreferenced(&self, candidates: &[Digest]) -> Result<usize> {
        let _guard = self.lock();
        let refs = self.scan()?.referenced();
        let mut removed = 0;
        for d in candidates {
            if refs.contains(d) || !self.blobs.exists(d) {
                continue;
            }
            match std::fs::remove_file(self.blobs.path(d)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(removed)
    }

    /// Removes the tag's model, namespace and host directories while empty; never `manifests/`.
    fn remove_empty_parents(&self, manifest_path: &Path) {
        let stop = self.manifests_dir();
        let mut dir = manifest_path.parent();
        while let Some(d) = dir {
            if d == stop || !d.starts_with(&stop) || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
}
