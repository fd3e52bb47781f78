//! Read-only integrity check of a store (what `herd doctor` reports): manifests that do not parse
//! or point at missing or wrongly sized blobs, blobs no manifest references, leftover partial
//! downloads and temp files, and — only when asked, since it reads every byte — blobs whose
//! content does not hash to their name.
//!
//! Nothing is created, renamed or removed (unlike `Store::open`, which creates directories and
//! renames legacy names): the check can run beside a live server. Digests named inside corrupt
//! manifests count as referenced, as they do for `prune`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;

use super::digest::Digest;
use super::manifest::Manifest;
use super::prune::{classify, Kind};
use crate::error::Result;

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A manifest file that does not parse.
    CorruptManifest { model: String, why: String },
    /// A manifest names a blob that is not in `blobs/`.
    MissingBlob { model: String, digest: Digest },
    /// A referenced blob's size differs from the manifest's.
    WrongSize {
        model: String,
        digest: Digest,
        want: u64,
        got: u64,
    },
    /// A blob whose content hashes to something else (`verify` only).
    Corrupt { digest: Digest, actual: Digest },
    /// A blob no manifest references (prune removes it after an hour).
    Orphan { digest: Digest, size: u64 },
    /// An unfinished download (a later pull resumes it; prune removes it when stale).
    Partial { file: String },
    /// A writer's leftover temp file.
    Temp { file: String },
}

impl Problem {
    /// True when the store cannot serve what its manifests promise.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Problem::CorruptManifest { .. }
                | Problem::MissingBlob { .. }
                | Problem::WrongSize { .. }
                | Problem::Corrupt { .. }
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::CorruptManifest { model, why } => {
                write!(f, "manifest {model} does not parse: {why}")
            }
            Problem::MissingBlob { model, digest } => {
                write!(f, "manifest {model} references missing blob {digest}")
            }
            Problem::WrongSize {
                model,
                digest,
                want,
                got,
            } => write!(
                f,
                "manifest {model}: blob {digest} is {got} bytes, the manifest says {want}"
            ),
            Problem::Corrupt { digest, actual } => {
                write!(
                    f,
                    "blob {digest} is corrupt: its content hashes to {actual}"
                )
            }
            Problem::Orphan { digest, size } => {
                write!(
                    f,
                    "blob {digest} ({size} bytes) is referenced by no manifest"
                )
            }
            Problem::Partial { file } => write!(f, "unfinished download {file}"),
            Problem::Temp { file } => write!(f, "leftover temp file {file}"),
        }
    }
}

/// What the check saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub manifests: usize,
    pub blobs: usize,
    pub blob_bytes: u64,
    /// Blobs re-hashed (0 unless `verify`).
    pub verified: usize,
    pub problems: Vec<Problem>,
}

/// Checks the store at `root` (which must exist); `verify` re-hashes every blob.
pub fn check(root: &Path, verify: bool) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let mut refs = HashSet::new();
    // digest → (size the first manifest names, that manifest), to check against the blob file.
    let mut wanted: BTreeMap<Digest, Vec<(String, u64)>> = BTreeMap::new();
    let manifests_dir = root.join("manifests");
    let names = if manifests_dir.is_dir() {
        super::resolve::manifest_names(&manifests_dir)?
    } else {
        Vec::new()
    };
    for name in names {
        report.manifests += 1;
        let model = name.display_shortest();
        let bytes = std::fs::read(root.join(name.manifest_rel_path()))?;
        match Manifest::parse(&bytes) {
            Ok(m) => {
                for layer in m.blobs() {
                    refs.insert(layer.digest.clone());
                    wanted
                        .entry(layer.digest.clone())
                        .or_default()
                        .push((model.clone(), layer.size));
                }
            }
            Err(e) => {
                refs.extend(super::digests_in_text(&bytes));
                report.problems.push(Problem::CorruptManifest {
                    model,
                    why: e.to_string(),
                });
            }
        }
    }

    let blobs_dir = root.join("blobs");
    let mut present: BTreeMap<Digest, u64> = BTreeMap::new();
    let mut entries: Vec<_> = match std::fs::read_dir(&blobs_dir) {
        Ok(rd) => rd.collect::<std::io::Result<_>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let meta = entry.metadata()?; // lstat: symlinks are not blobs
        if !meta.is_file() {
            continue;
        }
        let Ok(file) = entry.file_name().into_string() else {
            continue;
        };
        match classify(&file) {
            Kind::Blob(d) => {
                report.blobs += 1;
                report.blob_bytes += meta.len();
                present.insert(d, meta.len());
            }
            Kind::Partial => report.problems.push(Problem::Partial { file }),
            Kind::Temp => report.problems.push(Problem::Temp { file }),
            Kind::Other => {}
        }
    }

    for (digest, users) in &wanted {
        for (model, want) in users {
            match present.get(digest) {
                None => report.problems.push(Problem::MissingBlob {
                    model: model.clone(),
                    digest: digest.clone(),
                }),
                Some(&got) if got != *want => report.problems.push(Problem::WrongSize {
                    model: model.clone(),
                    digest: digest.clone(),
                    want: *want,
                    got,
                }),
                Some(_) => {}
            }
        }
    }
    for (digest, &size) in &present {
        if !refs.contains(digest) {
            report.problems.push(Problem::Orphan {
                digest: digest.clone(),
                size,
            });
        }
        if verify {
            let (actual, _) = Digest::of_file(&blobs_dir.join(digest.blob_file_name()))?;
            report.verified += 1;
            if &actual != digest {
                report.problems.push(Problem::Corrupt {
                    digest: digest.clone(),
                    actual,
                });
            }
        }
    }
    Ok(report)
}
