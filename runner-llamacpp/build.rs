//! Builds the pinned llama.cpp (native/llama.cpp.lock) into a cache outside `target/`, generates
//! bindings, and puts the shared libraries next to the runner binary.
//!
//! Pipeline: fetch the sdist with pip if absent → verify sha256 → extract its llama.cpp tree →
//! apply patches/llama.cpp/NNNN-*.patch in order → CMake (cmake crate, Ninja, ccache) → install →
//! publish atomically as `<cache>/llama.cpp/<key>` (build/recipe.rs defines the key). A build with
//! a key already published only links. One lock file serialises builds across cargo processes;
//! a killed build leaves only the work dir, which the next build resumes or wipes.

#[path = "build/recipe.rs"]
mod recipe;

use recipe::support::{mkdir, pip_fetch, sh, Res};
use recipe::{Gpu, Lock};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if let Err(e) = run() {
        eprintln!("runner-llamacpp build: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest
        .parent()
        .ok_or("crate has no parent dir")?
        .to_path_buf();
    let lock_path = root.join("native/llama.cpp.lock");
    let patch_dir = root.join("patches/llama.cpp");
    for p in [&lock_path, &patch_dir, &manifest.join("build/recipe.rs")] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    for v in ["HERD_CACHE", "HERD_GPU", "CMAKE_CUDA_ARCHITECTURES", "HOME"] {
        println!("cargo:rerun-if-env-changed={v}");
    }

    let lock = Lock::parse(&read_string(&lock_path)?)
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let cache = recipe::support::cache_dir()?;
    let target = env::var("TARGET").map_err(|e| e.to_string())?;
    let gpu = Gpu::select(
        env::var("HERD_GPU").ok().as_deref(),
        env::var_os("CARGO_FEATURE_CUDA").is_some(),
        env::var_os("CARGO_FEATURE_METAL").is_some(),
        target.contains("apple"),
    )?;
    let cuda_archs = env::var("CMAKE_CUDA_ARCHITECTURES").unwrap_or_else(|_| "90".into());
    let apple = target.contains("apple");
    let defines = recipe::cmake_defines(&lock, gpu, &cuda_archs, apple);

    let mut names = Vec::new();
    for entry in fs::read_dir(&patch_dir).map_err(|e| format!("{}: {e}", patch_dir.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    let mut patches = Vec::new();
    for name in recipe::patch_order(&names) {
        let bytes = fs::read(patch_dir.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        patches.push((name, bytes));
    }
    let key = recipe::cache_key(&lock.sha256, &patches, &defines, &target);

    let base = cache.join("llama.cpp");
    let install = base.join(&key);
    if !install.join("herd-build.txt").exists() {
        mkdir(&base)?;
        let lockfile = fs::File::create(base.join(".lock")).map_err(|e| e.to_string())?;
        lockfile
            .lock()
            .map_err(|e| format!("locking {}: {e}", base.display()))?;
        // Another cargo process may have published this key while we waited.
        if !install.join("herd-build.txt").exists() {
            let archive = fetch_archive(&cache, &lock)?;
            build(
                &base, &install, &key, &archive, &lock, &patches, &patch_dir, &defines,
            )?;
        }
    }

    bindings(&install)?;
    devices_shim(&manifest, &install);
    link(&install, apple)?;
    println!("cargo:rustc-env=HERD_LLAMA_BUILD={}", lock.build);
    println!("cargo:rustc-env=HERD_LLAMA_KEY={key}");
    Ok(())
}

fn read_string(p: &Path) -> Res<String> {
    fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The sdist in `<cache>/dl`, fetched with pip (its ordinary client) when absent; always verified.
fn fetch_archive(cache: &Path, lock: &Lock) -> Res<PathBuf> {
    let spec = format!("{}=={}", lock.package, lock.version);
    pip_fetch(
        cache,
        &spec,
        &["--no-binary", &lock.package],
        &lock.archive,
        &lock.sha256,
        "native/llama.cpp.lock",
    )
}

/// Extract + patch into `work/src`, build in `work/out/build`, install into `work/out`, then
/// move the result to `<key>.tmp` and rename it to `<key>`: only a finished build is visible.
/// The work dir is stamped with the key so an interrupted build of the same key resumes (ninja
/// and ccache skip finished objects) and a different key starts clean. Fixed work paths keep
/// ccache hits across keys (absolute paths are part of its hash).
#[allow(clippy::too_many_arguments)]
fn build(
    base: &Path,
    install: &Path,
    key: &str,
    archive: &Path,
    lock: &Lock,
    patches: &[(String, Vec<u8>)],
    patch_dir: &Path,
    defines: &[(String, String)],
) -> Res<()> {
    let work = base.join("work");
    let stamp = work.join("herd-key");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(key) {
        let _ = fs::remove_dir_all(&work);
        let unpack = base.join("work.tmp");
        let _ = fs::remove_dir_all(&unpack);
        mkdir(&unpack)?;
        sh(
            Command::new("tar")
                .arg("xzf")
                .arg(archive)
                .arg("-C")
                .arg(&unpack)
                .arg(&lock.source_dir),
            "tar",
        )?;
        let src = unpack.join(&lock.source_dir);
        let names: Vec<String> = patches.iter().map(|(n, _)| n.clone()).collect();
        recipe::apply_patches(&src, patch_dir, &names)?;
        let staged = base.join("work.src");
        let _ = fs::remove_dir_all(&staged);
        fs::rename(&src, &staged).map_err(|e| e.to_string())?;
        fs::remove_dir_all(&unpack).map_err(|e| e.to_string())?;
        mkdir(&work)?;
        fs::rename(&staged, work.join("src")).map_err(|e| e.to_string())?;
        fs::write(&stamp, key).map_err(|e| e.to_string())?;
    }

    let out = work.join("out");
    let mut cfg = cmake::Config::new(work.join("src"));
    cfg.out_dir(&out).profile("Release").no_default_flags(true);
    if on_path("ninja") {
        cfg.generator("Ninja");
    }
    for (k, v) in defines {
        cfg.define(k, v);
    }
    for flags in ["CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS", "CMAKE_ASM_FLAGS"] {
        cfg.define(flags, "");
    }
    if on_path("ccache") {
        let cuda = defines.iter().any(|(k, v)| k == "GGML_CUDA" && v == "ON");
        for l in ["C", "CXX"].into_iter().chain(cuda.then_some("CUDA")) {
            cfg.define(format!("CMAKE_{l}_COMPILER_LAUNCHER"), "ccache");
        }
        // Paths under the work dir hash as relative ones, so another cache root (a fresh
        // HERD_CACHE, another user) still hits.
        cfg.env("CCACHE_BASEDIR", &work)
            .env("CCACHE_NOHASHDIR", "1");
    }
    let started = std::time::Instant::now();
    cfg.build();
    eprintln!("llama.cpp built in {:?}", started.elapsed());

    let tmp = base.join(format!("{key}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    mkdir(&tmp.join("lib"))?;
    fs::rename(out.join("include"), tmp.join("include")).map_err(|e| e.to_string())?;
    // Backend modules install into bin/ (GGML_BACKEND_DL); all shared objects go to lib/.
    for dir in ["lib", "bin"] {
        let Ok(rd) = fs::read_dir(out.join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_shared_lib(&name) {
                fs::rename(e.path(), tmp.join("lib").join(&name)).map_err(|e| e.to_string())?;
            }
        }
    }
    let mut manifest = format!(
        "package {} {}\nsha256 {}\nllama.cpp {} (commit {})\nrecipe {}\n",
        lock.package,
        lock.version,
        lock.sha256,
        lock.build,
        lock.commit,
        recipe::RECIPE_VERSION
    );
    for (name, _) in patches {
        manifest.push_str(&format!("patch {name}\n"));
    }
    for (k, v) in defines {
        manifest.push_str(&format!("-D{k}={v}\n"));
    }
    fs::write(tmp.join("herd-build.txt"), manifest).map_err(|e| e.to_string())?;
    let _ = fs::remove_dir_all(install);
    fs::rename(&tmp, install).map_err(|e| format!("publishing {}: {e}", install.display()))?;
    let _ = fs::remove_dir_all(&work);
    Ok(())
}

fn on_path(exe: &str) -> bool {
    env::var_os("PATH")
        .map(|p| env::split_paths(&p).any(|d| d.join(exe).is_file()))
        .unwrap_or(false)
}

fn is_shared_lib(name: &str) -> bool {
    name.starts_with("lib")
        && (name.ends_with(".so") || name.contains(".so.") || name.ends_with(".dylib"))
}

fn bindings(install: &Path) -> Res<()> {
    let inc = install.join("include");
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let b = bindgen::Builder::default()
        .header_contents(
            "herd_llama.h",
            "#include \"llama.h\"\n#include \"mtmd.h\"\n#include \"ggml-backend.h\"\n\
             #include \"ggml-rpc.h\"\n",
        )
        .clang_arg(format!("-I{}", inc.display()))
        .allowlist_function("llama_.*")
        .allowlist_function("mtmd_.*")
        .allowlist_function("ggml_backend_load_all_from_path")
        .allowlist_function("ggml_backend_reg_count")
        .allowlist_function("ggml_backend_dev_count")
        .allowlist_function("ggml_log_set")
        // ffi/rpc.rs: devices and the RPC module's entry points (reached by proc address).
        .allowlist_function("ggml_backend_reg_(by_name|get_proc_address|name|dev_count)")
        .allowlist_function("ggml_backend_register")
        .allowlist_function("ggml_backend_dev_(get|by_type|type|name|description|memory)")
        .allowlist_function("ggml_backend_dev_backend_reg")
        .allowlist_var("RPC_PROTO_.*")
        .allowlist_function("ggml_backend_dev_(count|get|name|description|memory|type)")
        .allowlist_function("ggml_backend_buft_(get_device|is_host|name)")
        .allowlist_type("llama_.*")
        .allowlist_var("LLAMA_.*")
        // Candidates are runner-core's `TokenData` (same #[repr(C)] layout as llama.h's
        // struct), so the sampler's arrays reach llama.cpp's samplers without a copy.
        .blocklist_type("llama_token_data")
        .raw_line("pub use runner_core::TokenData as llama_token_data;")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .map_err(|e| format!("bindgen: {e}"))?;
    b.write_to_file(out.join("llama_bindings.rs"))
        .map_err(|e| e.to_string())
}

/// The C shim over llama.cpp's C++-only memory breakdown (src/ffi/devices_shim.cpp), compiled
/// against the installed headers; linked before llama so its references resolve.
fn devices_shim(manifest: &Path, install: &Path) {
    let src = manifest.join("src/ffi/devices_shim.cpp");
    println!("cargo:rerun-if-changed={}", src.display());
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(install.join("include"))
        .file(src)
        .compile("herd_devices_shim");
}

/// Link llama + ggml + mtmd from the cache and copy every shared object (backend modules too)
/// next to the binaries, where RUNPATH `$ORIGIN` and `ggml_backend_load_all_from_path` find them.
fn link(install: &Path, apple: bool) -> Res<()> {
    let lib = install.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["llama", "ggml", "ggml-base", "mtmd"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    // The binary looks beside itself (`@loader_path` is the executable's dir for an executable).
    println!(
        "cargo:rustc-link-arg=-Wl,-rpath,{}",
        recipe::origin_rpath(apple)
    );
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out.
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let profile_dir = out
        .ancestors()
        .nth(3)
        .ok_or("unexpected OUT_DIR layout")?
        .to_path_buf();
    // Which cache key these libraries came from, for scripts that need the matching
    // herd-build.txt (scripts/gpu-bench) when the cache holds several builds.
    fs::write(
        profile_dir.join("herd-llama-key"),
        install.file_name().unwrap_or_default().as_encoded_bytes(),
    )
    .map_err(|e| e.to_string())?;
    for dest in [profile_dir.clone(), profile_dir.join("deps")] {
        mkdir(&dest)?;
        for e in fs::read_dir(&lib).map_err(|e| e.to_string())?.flatten() {
            copy_lib(&e.path(), &dest.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Copy (symlinks stay symlinks) via a temp name and rename, so a process that has the old file
/// mapped keeps its inode intact.
fn copy_lib(from: &Path, to: &Path) -> Res<()> {
    let meta = fs::symlink_metadata(from).map_err(|e| e.to_string())?;
    let tmp = to.with_extension(format!("herd-tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(|e| e.to_string())?;
        if fs::read_link(to).ok().as_deref() == Some(target.as_path()) {
            return Ok(());
        }
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| e.to_string())?;
    } else {
        if let Ok(m) = fs::metadata(to) {
            if m.len() == meta.len() && m.modified().ok() >= meta.modified().ok() {
                return Ok(());
            }
        }
        fs::copy(from, &tmp).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    fs::rename(&tmp, to).map_err(|e| e.to_string())
}
