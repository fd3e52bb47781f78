//! Startup garbage collection (Ollama's `PruneLayers`, run unless `OLLAMA_NOPRUNE`): removes what
//! is older than a grace period and provably unused — unreferenced blobs, stale download
//! partials, leftover temp files — and empty manifest directories.
//!
//! Only names this store recognises are touched (`sha256-<hex>`, `sha256-<hex>-partial*`,
//! `.tmp-*`, and `sha256-<non-digest>` temp files left by Ollama's own writer); anything else in
//! `blobs/` is left alone. Nothing is followed through a symlink. While any manifest is corrupt no
//! blob is removed (see `store` module docs).

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::blobs::TEMP_PREFIX;
use super::digest::Digest;
use super::Store;
use crate::error::Result;

/// Counts of what `prune` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub blobs_removed: usize,
    pub bytes_freed: u64,
    pub partials_removed: usize,
    pub temps_removed: usize,
    pub dirs_removed: usize,
    /// Unparsable manifests found; when non-zero, no blob was removed.
    pub corrupt_manifests: usize,
}

pub(super) enum Kind {
    Blob(Digest),
    Partial,
    Temp,
    Other,
}

pub(super) fn classify(name: &str) -> Kind {
    if let Some(d) = Digest::from_blob_file_name(name) {
        return Kind::Blob(d);
    }
    if name.starts_with(TEMP_PREFIX) {
        return Kind::Temp;
    }
    match name.strip_prefix("sha256-") {
        Some(rest) if rest.contains("-partial") => Kind::Partial,
        Some(_) => Kind::Temp,
        None => Kind::Other,
    }
}

impl Store {
    /// Removes unreferenced blobs, partials and temp files whose mtime is older than
    /// `older_than`, plus empty manifest directories. The server calls this at startup with one
    /// hour unless `OLLAMA_NOPRUNE` is set.
    pub fn prune(&self, older_than: Duration) -> Result<PruneReport> {
        let _guard = self.lock();
        let cutoff = SystemTime::now()
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let scan = self.scan()?;
        let refs = scan.referenced();
        let mut report = PruneReport {
            corrupt_manifests: scan.corrupt.len(),
            ..PruneReport::default()
        };

        for entry in std::fs::read_dir(self.blobs.dir())? {
            let entry = entry?;
            let ft = entry.file_type()?;
            if ft.is_dir() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let meta = entry.metadata()?; // lstat: DirEntry::metadata does not follow symlinks
            if meta.modified().is_ok_and(|m| m > cutoff) {
                continue;
            }
            let counter = match classify(&name) {
                Kind::Blob(d) if report.corrupt_manifests == 0 && !refs.contains(&d) => {
                    report.bytes_freed += meta.len();
                    &mut report.blobs_removed
                }
                Kind::Partial => &mut report.partials_removed,
                Kind::Temp => &mut report.temps_removed,
                Kind::Blob(_) | Kind::Other => continue,
            };
            match std::fs::remove_file(entry.path()) {
                Ok(()) => *counter += 1,
                Err(e) => tracing::warn!(file = %name, error = %e, "prune: could not remove"),
            }
        }

        let manifests = self.manifests_dir();
        prune_manifest_tree(&manifests, 0, cutoff, &mut report)?;
        if report != PruneReport::default() {
            tracing::info!(?report, "pruned model store");
        }
        Ok(report)
    }
}

/// Removes stale temp files and empty directories below `dir` (depth 0 = `manifests/`, never
/// removed itself). Returns whether `dir` is now empty.
fn prune_manifest_tree(
    dir: &Path,
    depth: usize,
    cutoff: SystemTime,
    report: &mut PruneReport,
) -> Result<bool> {
    let mut empty = true;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let path = entry.path();
        if ft.is_dir() && depth < 3 {
            if prune_manifest_tree(&path, depth + 1, cutoff, report)?
                && std::fs::remove_dir(&path).is_ok()
            {
                report.dirs_removed += 1;
                continue;
            }
        } else if ft.is_file()
            && entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX)
            && entry.metadata()?.modified().is_ok_and(|m| m <= cutoff)
            && std::fs::remove_file(&path).is_ok()
        {
            report.temps_removed += 1;
            continue;
        }
        empty = false;
    }
    Ok(empty)
}
