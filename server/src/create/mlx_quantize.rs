//! `-q int4|int8|nvfp4|mxfp4|mxfp8` for an experimental create: the uploaded float checkpoint is
//! quantized by `runner-mlx quantize SRC_DIR OUT_DIR --mode M [--bits N --group-size 64]`
//! (MLX's affine quantization at Ollama's int4/int8 group size, or MLX's fp block formats with
//! their fixed bits and groups) and the output checkpoint is then imported like an upload.
//!
//! Invariants: SRC_DIR holds only symlinks to the uploaded blobs (nothing is written into the
//! blob store here); both directories live in one private temp directory beside the blobs
//! (same filesystem, removed when the returned guard drops — on success and on every failure);
//! the quantizer runs with the runners' allow-listed environment, stdin closed.

use std::path::Path;
use std::process::{Command, Stdio};

use super::experimental::Paths;
use super::QuantizeOptions;
use crate::error::{Error, Result};
use crate::store::BlobStore;

/// Ollama's group size for int4 and int8 (`x/quant`).
pub const GROUP_SIZE: u32 = 64;

/// Runs the quantizer over `paths`; the output is `<returned dir>/out`.
pub(crate) fn run(
    blobs: &BlobStore,
    paths: &Paths,
    q: &str,
    opts: &QuantizeOptions,
) -> Result<tempfile::TempDir> {
    let args: Vec<String> = match q {
        "int4" | "int8" => [
            "--mode",
            "affine",
            "--bits",
            &q[3..],
            "--group-size",
            &GROUP_SIZE.to_string(),
        ]
        .map(str::to_owned)
        .to_vec(),
        fp => vec!["--mode".into(), fp.into()],
    };
    let root = blobs.dir().parent().unwrap_or(blobs.dir());
    let work = tempfile::Builder::new()
        .prefix(".herd-mlx-quantize-")
        .tempdir_in(root)?;
    let src = work.path().join("src");
    std::fs::create_dir(&src)?;
    for (key, (_, path)) in paths {
        if !key.contains('/') {
            std::os::unix::fs::symlink(path, src.join(key))?;
        }
    }
    let out = work.path().join("out");
    let runner = &opts.mlx_runner;
    let result = Command::new(runner)
        .arg("quantize")
        .arg(&src)
        .arg(&out)
        .args(&args)
        .env_clear()
        .envs(opts.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::Internal(format!("cannot run {}: {e}", runner.display())))?;
    if !result.status.success() {
        let stderr = String::from_utf8_lossy(&result.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(Error::Internal(format!(
            "quantizing to {q} failed ({}): {last}",
            result.status
        )));
    }
    Ok(work)
}

/// The quantizer's output files, as a checkpoint to import.
pub(crate) fn outputs(work: &Path) -> Result<Paths> {
    let mut out = Paths::new();
    for e in std::fs::read_dir(work.join("out"))? {
        let e = e?;
        if e.file_type()?.is_file() {
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                (None, e.path()),
            );
        }
    }
    Ok(out)
}
