//! The environment a runner starts in: the allow-list of variables it inherits from the server
//! (everything else is cleared) and the private directory that holds runner sockets.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;

/// Environment variables a runner inherits from the server; everything else is cleared.
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "GGML_VK_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
    "OMP_NUM_THREADS",
    "RUST_BACKTRACE",
    "RUST_LOG",
    // The server's log level, normalized by `main` (0, 1 = debug, 2 = trace): runners then
    // print llama.cpp's own log at debug level (device placement, kernel selection).
    "OLLAMA_DEBUG",
];
/// Prefixes of further inherited variables (engine tuning knobs).
pub const ENV_ALLOW_PREFIXES: &[&str] = &["GGML_", "CUDA_", "HERD_RUNNER_"];

/// Filters an environment (e.g. the config's `std::env::vars_os()`) down to the allow-list.
pub fn runner_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            ENV_ALLOW_LIST.contains(&k.as_ref())
                || ENV_ALLOW_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// Creates the per-server-process private directory (0700) that holds runner sockets; it is
/// removed when the returned guard drops.
pub fn create_runner_dir() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("herd-").tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_filtered_to_the_allow_list() {
        let vars = [
            ("PATH", "/bin"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("GGML_CUDA_NO_PINNED", "1"),
            ("OLLAMA_HOST", "x"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("PATHX", "y"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept: Vec<_> = runner_env(vars)
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect();
        assert_eq!(
            kept,
            ["PATH", "CUDA_VISIBLE_DEVICES", "GGML_CUDA_NO_PINNED"]
        );
    }

    #[test]
    fn runner_dir_is_private() {
        let d = create_runner_dir().unwrap();
        let mode = std::fs::metadata(d.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
