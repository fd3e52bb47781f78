//! `herd archive`: keeps this build — the running `herd` (`current_exe`), the runner it would
//! use (`Config::runner_path`) and the engine's shared objects beside that runner — under
//! `<dest>/<version>-<commit>/` with `manifest.json` (each file's size and sha256, the version,
//! commit and engine pins of `provenance`), so any archived build can later be started again on a
//! scratch port (it finds its runner beside itself, the runner its libraries by RUNPATH=$ORIGIN).
//!
//! Invariants: an archive is published by renaming a complete temp directory, so a reader never
//! sees a half-copied one; archiving the same build again is a no-op; an existing archive whose
//! manifest differs from this build's (e.g. a rebuild of a dirty tree with the same commit) is
//! never overwritten.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::config::ArchiveArgs;
use crate::provenance;
use crate::store::Digest;

/// The archive's name for this build: `<version>-<first 12 of the commit>`.
pub fn build_id() -> String {
    let commit: String = provenance::GIT_COMMIT.chars().take(12).collect();
    format!("{}-{commit}", crate::VERSION)
}

/// `manifest.json` of one archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveManifest {
    pub id: String,
    pub version: String,
    pub git_commit: String,
    /// `provenance::Engines` as `/api/version` reports it.
    pub engines: serde_json::Value,
    /// Sorted by name.
    pub files: Vec<ArchivedFile>,
}

/// One archived file: a regular file with its size and hash, or a symlink (a soname) with its
/// target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedFile {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

pub async fn run(args: ArchiveArgs) -> anyhow::Result<()> {
    if args.print_id {
        println!("{}", build_id());
        return Ok(());
    }
    let exe = std::env::current_exe().context("locating the running herd")?;
    let runner = args.serve.runner_path();
    let dest = args.dest_dir();
    let (dir, fresh) = tokio::task::spawn_blocking(move || archive(&exe, &runner, &dest))
        .await
        .context("archive task")??;
    if fresh {
        println!("archived {} in {}", build_id(), dir.display());
    } else {
        println!("{} already archived in {}", build_id(), dir.display());
    }
    Ok(())
}

/// What goes into an archive: the herd binary, the runner, and every shared object in the
/// runner's directory (`*.so`, `*.so.N…`, `*.dylib`), each with the name it is archived under.
pub fn sources(exe: &Path, runner: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut out = vec![("herd".to_string(), exe.to_path_buf())];
    let runner_name = file_name(runner)?;
    if runner_name == "herd" {
        bail!("the runner {} cannot be named herd", runner.display());
    }
    out.push((runner_name, runner.to_path_buf()));
    let dir = runner.parent().unwrap_or(Path::new("."));
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_shared_object(&name) {
            out.push((name, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// `libllama.so`, `libllama.so.0.6.0`, `libggml.dylib`; not `foo.so.d` or `x.sor`.
pub fn is_shared_object(name: &str) -> bool {
    if name.ends_with(".so") || name.ends_with(".dylib") {
        return true;
    }
    match name.split_once(".so.") {
        Some((stem, version)) => {
            !stem.is_empty() && version.split('.').all(|p| p.parse::<u32>().is_ok())
        }
        None => false,
    }
}

fn file_name(p: &Path) -> anyhow::Result<String> {
    Ok(p.file_name()
        .with_context(|| format!("{} has no file name", p.display()))?
        .to_string_lossy()
        .into_owned())
}

/// The manifest entry for `path` as it is now (symlinks are not followed).
fn describe(name: &str, path: &Path) -> anyhow::Result<ArchivedFile> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path)?;
        return Ok(ArchivedFile {
            file: name.to_string(),
            size: None,
            sha256: None,
            link: Some(target.to_string_lossy().into_owned()),
        });
    }
    let (digest, size) =
        Digest::of_file(path).with_context(|| format!("hashing {}", path.display()))?;
    Ok(ArchivedFile {
        file: name.to_string(),
        size: Some(size),
        sha256: Some(digest.hex().to_string()),
        link: None,
    })
}

/// This build's manifest, computed from the source files.
pub fn manifest_of(sources: &[(String, PathBuf)]) -> anyhow::Result<ArchiveManifest> {
    let p = provenance::current();
    Ok(ArchiveManifest {
        id: build_id(),
        version: p.herd_version.to_string(),
        git_commit: p.git_commit.to_string(),
        engines: serde_json::to_value(&p.engines)?,
        files: sources
            .iter()
            .map(|(name, path)| describe(name, path))
            .collect::<anyhow::Result<_>>()?,
    })
}

/// Re-hashes the files of the archive in `dir` against its manifest; the manifest when all match.
pub fn verify(dir: &Path) -> anyhow::Result<ArchiveManifest> {
    let path = dir.join("manifest.json");
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: ArchiveManifest =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    for want in &manifest.files {
        let got = describe(&want.file, &dir.join(&want.file))?;
        if &got != want {
            bail!(
                "{}: {} does not match its manifest entry",
                dir.display(),
                want.file
            );
        }
    }
    Ok(manifest)
}

/// Archives `exe` + `runner` (+ libraries) under `dest/<build_id>/`. Returns the archive's
/// directory and whether it was created now (false: the same build was already there).
pub fn archive(exe: &Path, runner: &Path, dest: &Path) -> anyhow::Result<(PathBuf, bool)> {
    let sources = sources(exe, runner)?;
    let manifest = manifest_of(&sources)?;
    let dir = dest.join(&manifest.id);
    if dir.exists() {
        let existing = verify(&dir)
            .with_context(|| format!("{} exists but is not a valid archive", dir.display()))?;
        if existing != manifest {
            bail!(
                "{} already holds a different build with the same version and commit; \
                 not overwriting it (remove it to archive this one)",
                dir.display()
            );
        }
        return Ok((dir, false));
    }
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", manifest.id))
        .tempdir_in(dest)?;
    for (name, src) in &sources {
        let to = tmp.path().join(name);
        let meta = std::fs::symlink_metadata(src)?;
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(src)?, &to)?;
        } else {
            // fs::copy keeps the permission bits (executables stay executable).
            std::fs::copy(src, &to)
                .with_context(|| format!("copying {} to {}", src.display(), to.display()))?;
        }
    }
    let copied = manifest_of(
        &sources
            .iter()
            .map(|(n, _)| (n.clone(), tmp.path().join(n)))
            .collect::<Vec<_>>(),
    )?;
    if copied != manifest {
        bail!("a source file changed while it was being archived; try again");
    }
    let json = serde_json::to_vec_pretty(&manifest)?;
    std::fs::write(tmp.path().join("manifest.json"), json)?;
    let tmp = tmp.keep();
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another archive of the same build won the race: fine if it is this build.
        if dir.exists() && verify(&dir).is_ok_and(|m| m == manifest) {
            return Ok((dir, false));
        }
        return Err(e).with_context(|| format!("publishing {}", dir.display()));
    }
    Ok((dir, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_object_names() {
        let cases = [
            ("libllama.so", true),
            ("libllama.so.0", true),
            ("libggml-base.so.0.26.0", true),
            ("libggml-metal.dylib", true),
            ("libggml-cpu.so", true),
            ("runner-llamacpp", false),
            ("runner-llamacpp.d", false),
            ("libserver.rlib", false),
            ("libfoo.so.d", false),
            (".so.1", false),
            ("x.sorted", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_shared_object(name), want, "{name}");
        }
    }

    #[test]
    fn id_names_version_and_commit() {
        let id = build_id();
        assert!(id.starts_with(&format!("{}-", crate::VERSION)), "{id}");
        assert!(id.len() <= crate::VERSION.len() + 1 + 12, "{id}");
    }
}
