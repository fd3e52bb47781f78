//! Fetches the pinned MLX wheel (native/mlx.lock) into a cache outside `target/`, compiles the
//! C++ shim (shim/*.cpp) against its headers with `cc`, and links `libmlx.so`, copied next to
//! the runner binary in the wheel's own layout so its RPATH still finds its bundled libraries.
//!
//! Pipeline: `<cache>/dl/<wheel>` fetched with pip if absent → sha256 verified → unpacked (with
//! Python's zipfile) into `<cache>/mlx/<wheel stem>`, published by rename so only a whole unpack
//! is visible; a second clone with the same cache fetches nothing.

#[path = "build/recipe.rs"]
mod recipe;

use recipe::support::{mkdir, pip_fetch, sh, Res};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if let Err(e) = run() {
        eprintln!("runner-mlx build: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest.parent().ok_or("crate has no parent dir")?;
    let lock_path = root.join("native/mlx.lock");
    let shim = manifest.join("shim");
    for p in [&lock_path, &shim, &manifest.join("build/recipe.rs")] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    for v in ["HERD_CACHE", "HERD_GPU", "HOME"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let text =
        fs::read_to_string(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let lock = recipe::Lock::parse(&text).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let wheel = lock.wheel(env::var("HERD_GPU").ok().as_deref())?;
    let cache = recipe::support::cache_dir()?;
    let unpacked = cache.join("mlx").join(recipe::unpack_dir_name(wheel));
    if !unpacked.join("mlx/lib/libmlx.so").exists() {
        let archive = fetch(&cache, wheel, &lock.version)?;
        unpack(&archive, &unpacked)?;
    }
    let include = unpacked.join("mlx/include");
    let lib = unpacked.join("mlx/lib");

    let mut b = cc::Build::new();
    b.cpp(true)
        .std("c++20")
        .flag("-isystem")
        .flag(include.to_string_lossy().as_ref())
        // The shim only builds graphs; MLX does the work. -O2 keeps debug builds usable.
        .opt_level(2)
        .warnings(false);
    let mut sources: Vec<PathBuf> = fs::read_dir(&shim)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    sources.sort();
    for s in &sources {
        b.file(s);
    }
    b.try_compile("herd_mlx_shim").map_err(|e| e.to_string())?;

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    // target/<profile>/mlx/lib for the binary, and the same from target/<profile>/deps for tests.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/mlx/lib:$ORIGIN/../mlx/lib");
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let profile_dir = out.ancestors().nth(3).ok_or("unexpected OUT_DIR layout")?;
    copy_tree(&lib, &profile_dir.join("mlx/lib"))?;
    if !wheel.libs_dir.is_empty() {
        copy_tree(
            &unpacked.join(&wheel.libs_dir),
            &profile_dir.join(&wheel.libs_dir),
        )?;
    }
    println!(
        "cargo:rustc-env=HERD_MLX_PIN={} {}",
        wheel.package, lock.version
    );
    Ok(())
}

/// The wheel in `<cache>/dl`, fetched with pip (its ordinary client) when absent; verified.
fn fetch(cache: &Path, w: &recipe::Wheel, version: &str) -> Res<PathBuf> {
    let spec = format!("{}=={version}", w.package);
    pip_fetch(
        cache,
        &spec,
        &["--only-binary=:all:"],
        &w.archive,
        &w.sha256,
        "native/mlx.lock",
    )
}

fn unpack(archive: &Path, dest: &Path) -> Res<()> {
    let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    mkdir(&tmp)?;
    sh(
        Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(archive)
            .arg(&tmp),
        "unzip wheel",
    )?;
    let _ = fs::remove_dir_all(dest);
    fs::rename(&tmp, dest).map_err(|e| format!("{}: {e}", dest.display()))
}

/// Copy the files of `from` into `to` (flat), skipping those already there with the same size.
fn copy_tree(from: &Path, to: &Path) -> Res<()> {
    mkdir(to)?;
    for e in fs::read_dir(from)
        .map_err(|e| format!("{}: {e}", from.display()))?
        .flatten()
    {
        let dest = to.join(e.file_name());
        let len = e.metadata().map_err(|e| e.to_string())?.len();
        if fs::metadata(&dest).is_ok_and(|m| m.len() == len) {
            continue;
        }
        let tmp = dest.with_extension(format!("herd-tmp{}", std::process::id()));
        fs::copy(e.path(), &tmp).map_err(|e| e.to_string())?;
        fs::rename(&tmp, &dest).map_err(|e| e.to_string())?;
    }
    Ok(())
}
