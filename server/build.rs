//! Captures build provenance for `server::provenance`: the git commit this binary was built from
//! (`HERD_GIT_COMMIT`, "unknown" outside a git checkout, e.g. a source tarball) and the llama.cpp
//! pin from `native/llama.cpp.lock` (`HERD_LLAMACPP_BUILD`, `HERD_LLAMACPP_COMMIT`) and the MLX
//! version from `native/mlx.lock` (`HERD_MLX_VERSION`). Nothing here
//! fails the build: a missing tool or file yields "unknown".

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.parent().map(Path::to_path_buf).unwrap_or_default();

    // HERD_GIT_COMMIT may be preset (packagers building from a tarball that know the commit).
    println!("cargo:rerun-if-env-changed=HERD_GIT_COMMIT");
    let commit = std::env::var("HERD_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&root, &["rev-parse", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HERD_GIT_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself (branch switch) and the ref it names (new commit).
    // In a worktree `.git` is a file, so ask git where they live.
    for file in ["HEAD", "logs/HEAD"] {
        if let Some(p) = git(&root, &["rev-parse", "--git-path", file]) {
            println!("cargo:rerun-if-changed={}", absolute(&root, &p).display());
        }
    }
    if let Some(head_ref) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&root, &["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={}", absolute(&root, &p).display());
        }
    }

    let lock = root.join("native/llama.cpp.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    for (key, env) in [
        ("build", "HERD_LLAMACPP_BUILD"),
        ("commit", "HERD_LLAMACPP_COMMIT"),
    ] {
        let value = lock_value(&text, key).unwrap_or_else(|| "unknown".into());
        println!("cargo:rustc-env={env}={value}");
    }
    // runner-mlx's pin: the libmlx wheels' version (the wheels carry no commit).
    let lock = root.join("native/mlx.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let value = lock_value(&text, "version").unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HERD_MLX_VERSION={value}");
}

/// `git -C root ARGS` stdout, trimmed; None when git is absent or fails (not a checkout).
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn absolute(root: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

/// The value of a top-level `key = "value"` line of the lock file.
fn lock_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}
