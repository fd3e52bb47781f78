//! Build-script helpers both runners' build.rs share (included with `#[path]`): the pin-file
//! format, the cache location, running tools, and fetching a pinned PyPI file with pip into
//! `<cache>/dl`, verified against its sha256 every time.
#![allow(dead_code)] // each build script uses a subset

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

pub type Res<T> = Result<T, String>;

/// A pin file (`native/*.lock`): `key = "value"` lines, `#` comments.
pub fn parse_pin(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut kv = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: expected key = \"value\"", n + 1))?;
        let v = v
            .trim()
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .ok_or_else(|| format!("line {}: value must be a quoted string", n + 1))?;
        kv.insert(k.trim().to_string(), v.to_string());
    }
    Ok(kv)
}

/// True for 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `HERD_CACHE`, else `~/.cache/herd`.
pub fn cache_dir() -> Res<PathBuf> {
    match std::env::var_os("HERD_CACHE") {
        Some(c) if !c.is_empty() => Ok(PathBuf::from(c)),
        _ => Ok(PathBuf::from(
            std::env::var_os("HOME").ok_or("neither HERD_CACHE nor HOME is set")?,
        )
        .join(".cache/herd")),
    }
}

pub fn mkdir(p: &Path) -> Res<()> {
    fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))
}

pub fn sh(cmd: &mut Command, what: &str) -> Res<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {status}"))
    }
}

pub fn sha256_file(p: &Path) -> Res<String> {
    let mut f = fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// `<cache>/dl/<archive>`, fetched with `pip download --no-deps <pip_args> <spec>` (pip is the
/// registry's ordinary client) when absent; always verified against `sha256`.
pub fn pip_fetch(
    cache: &Path,
    spec: &str,
    pip_args: &[&str],
    archive: &str,
    sha256: &str,
    pin_file: &str,
) -> Res<PathBuf> {
    let dl = cache.join("dl");
    let path = dl.join(archive);
    if !path.exists() {
        let tmp = dl.join(format!(".pip-{}", std::process::id()));
        mkdir(&tmp)?;
        sh(
            Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps"])
                .args(pip_args)
                .arg(spec)
                .arg("-d")
                .arg(&tmp),
            "pip download",
        )?;
        fs::rename(tmp.join(archive), &path).map_err(|e| format!("pip gave no {archive}: {e}"))?;
        let _ = fs::remove_dir_all(&tmp);
    }
    let got = sha256_file(&path)?;
    if got != sha256 {
        return Err(format!(
            "{}: sha256 {got}, {pin_file} says {sha256} (delete the file to refetch)",
            path.display()
        ));
    }
    Ok(path)
}
