//! Create-time quantization (`/api/create` `quantize`, `herd create -q`): after import, a model
//! layer whose GGUF is F16/BF16/F32 is rewritten to the requested type by the runner binary's
//! one-shot `quantize` subcommand (runner-llamacpp/src/quantize.rs, which calls the pinned
//! llama.cpp's `llama_model_quantize`), and the manifest gets the quantized layer instead.
//!
//! Invariants:
//! - what can be refused (unknown type, quantized source) was refused by `apply_model_layers`
//!   before any progress line; this module only runs work that was accepted;
//! - the runner writes into the blobs directory under a `.tmp-*` name (its own partial file is
//!   that name + `.partial`); the result becomes a blob only after it was hashed, fsynced and
//!   parsed as a GGUF of the requested type, by rename (same filesystem). Every failure path
//!   (runner error or crash, bad output, a panic, a dropped call) removes both temp names, and
//!   prune removes `.tmp-*` left by a killed server; no manifest is written on failure;
//! - the runner child is killed and reaped if this call unwinds; it also exits by itself when
//!   its stdin pipe (held here for the run's life) closes.
//!
//! Progress is Ollama's: `quantizing F16 model to Q4_K_M` with `digest` "0000000000000000000",
//! `total` = the source layer's size and `completed` the share of tensors done scaled to it,
//! then `verifying conversion`, then the usual `creating new layer sha256:…`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use super::import::GgufLayer;
use super::layers::Built;
use super::{parse_quantize, CreateRequest, Plan, Progress};
use crate::error::{Error, Result};
use crate::gguf::{self, ReadOptions};
use crate::store::blobs::{sync_dir, TempGuard};
use crate::store::manifest::{MEDIA_TYPE_DRAFT, MEDIA_TYPE_MODEL};
use crate::store::{BlobStore, Digest, Layer};

/// Ollama's placeholder digest on quantize progress lines (its CLI keys progress bars by digest).
pub const PROGRESS_DIGEST: &str = "0000000000000000000";

/// How create runs the quantizer.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The runner-llamacpp binary (`Config::runner_path`).
    pub runner: PathBuf,
    /// The runner-mlx binary (`Config::mlx_runner_path`), for experimental (MLX) creates.
    pub mlx_runner: PathBuf,
    /// Quantization threads; 0 = one per available CPU.
    pub threads: u32,
    /// The quantizer's whole environment: the runners' allow-list (`runner::runner_env`), so
    /// it sees exactly what a runner sees and no server secret.
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Default for QuantizeOptions {
    fn default() -> Self {
        QuantizeOptions {
            runner: crate::config::default_runner_path(),
            mlx_runner: crate::config::default_runner_path()
                .with_file_name(crate::config::MLX_RUNNER_BIN),
            threads: 0,
            env: crate::runner::runner_env(std::env::vars_os()),
        }
    }
}

/// The requested type, `quantize` winning over its deprecated alias.
pub(super) fn requested(req: &CreateRequest) -> &str {
    if req.quantize.is_empty() {
        &req.quantization
    } else {
        &req.quantize
    }
}

/// Quantizes every model layer of `plan` whose type differs from the requested one, replacing
/// the layer (and the config's `file_type`); the draft layer likewise to `draft_quantize`.
pub(super) fn apply(
    blobs: &BlobStore,
    req: &CreateRequest,
    plan: &mut Plan,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<()> {
    let model_q = requested(req);
    if model_q.is_empty() && req.draft_quantize.is_empty() {
        return Ok(());
    }
    for (built, g) in plan.base.iter_mut() {
        let Some(g) = g else { continue };
        let is_model = built.layer.media_type == MEDIA_TYPE_MODEL;
        let q = match built.layer.media_type.as_str() {
            MEDIA_TYPE_MODEL => model_q,
            MEDIA_TYPE_DRAFT => req.draft_quantize.as_str(),
            _ => continue,
        };
        if q.is_empty() {
            continue;
        }
        let want = parse_quantize(q)?;
        let from = g.gguf.quantization_level();
        if from == want {
            continue;
        }
        // Ollama names the type as asked (upper-cased): "Q4_K" though Q4_K_M is written.
        let status = format!("quantizing {from} model to {}", q.to_uppercase());
        let (new, existed) = quantize_layer(blobs, &g.layer, &status, want, opts, progress)?;
        let verb = if existed {
            "using existing layer"
        } else {
            "creating new layer"
        };
        *built = Built {
            status: format!("{verb} {}", new.layer.digest),
            layer: new.layer.clone(),
        };
        *g = new;
        if is_model {
            plan.config.file_type = want.to_owned();
        }
    }
    Ok(())
}

/// Kills and reaps the child unless it was waited for; holds its stdin open meanwhile.
struct ChildGuard {
    child: Child,
    _stdin: Option<ChildStdin>,
    waited: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.waited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What the runner's stdout said.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    done: bool,
    error: Option<String>,
}

/// `completed` of `total` tensors → bytes of a `size`-byte layer (Ollama reports bytes).
fn scaled(completed: u64, total: u64, size: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    ((size as u128 * completed.min(total) as u128) / total as u128) as u64
}

fn quantize_layer(
    blobs: &BlobStore,
    src: &Layer,
    status: &str,
    want: &str,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<(GgufLayer, bool)> {
    let line = |completed: u64| Progress {
        status: status.to_owned(),
        digest: PROGRESS_DIGEST.into(),
        total: src.size,
        completed,
    };
    progress(line(0));
    let out = TempGuard::new(TempGuard::new_path(blobs.dir()));
    let _partial = TempGuard::new(partial_of(out.path()));
    let mut child = Command::new(&opts.runner)
        .arg("quantize")
        .arg("--input")
        .arg(blobs.path(&src.digest))
        .arg("--output")
        .arg(out.path())
        .args(["--type", want, "--threads", &opts.threads.to_string()])
        .env_clear()
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::Internal(format!(
                "cannot start the quantizer {}: {e}",
                opts.runner.display()
            ))
        })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut guard = ChildGuard {
        _stdin: child.stdin.take(),
        child,
        waited: false,
    };
    let tail = std::thread::spawn(move || stderr_tail(stderr));
    let mut outcome = Outcome::default();
    if let Some(stdout) = stdout {
        for l in BufReader::new(stdout).lines() {
            let l = l?;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else {
                continue;
            };
            if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                outcome.error = Some(e.to_owned());
            } else if v.get("done").and_then(|d| d.as_bool()) == Some(true) {
                outcome.done = true;
            } else if let (Some(c), Some(t)) = (
                v.get("completed").and_then(|c| c.as_u64()),
                v.get("total").and_then(|t| t.as_u64()),
            ) {
                progress(line(scaled(c, t, src.size)));
            }
        }
    }
    let exit = guard.child.wait()?;
    guard.waited = true;
    let tail = tail.join().unwrap_or_default();
    match (exit.success() && outcome.done, outcome.error) {
        (true, _) => {}
        (false, Some(e)) => return Err(Error::Internal(format!("quantization failed: {e}"))),
        (false, None) => {
            return Err(Error::RunnerExited(format!(
                "quantizer exited ({exit}) without finishing: {}",
                tail.trim()
            )))
        }
    }

    progress(Progress::status("verifying conversion"));
    let (digest, size) = hash_and_sync(out.path())?;
    let g = gguf::read_path(out.path(), ReadOptions::default())?;
    if g.quantization_level() != want {
        return Err(Error::Internal(format!(
            "quantizer produced a {} file, not {want}",
            g.quantization_level()
        )));
    }
    let existed = blobs.exists(&digest);
    std::fs::rename(out.path(), blobs.path(&digest))?;
    out.keep();
    sync_dir(blobs.dir())?;
    let layer = Layer::new(&src.media_type, digest, size);
    Ok((
        GgufLayer {
            layer,
            gguf: g,
            new_blob: !existed,
        },
        existed,
    ))
}

/// The runner's partial-output name for `out` (its quantize.rs `partial_path`).
fn partial_of(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// The last few KiB of the child's stderr, for a crash message.
fn stderr_tail(stderr: Option<std::process::ChildStderr>) -> String {
    const KEEP: usize = 4096;
    let Some(mut s) = stderr else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * KEEP {
            kept.drain(..kept.len() - KEEP);
        }
    }
    let start = kept.len().saturating_sub(KEEP);
    String::from_utf8_lossy(&kept[start..]).into_owned()
}

/// sha256 and size of a file, then fsync it (it is about to become a blob).
fn hash_and_sync(path: &Path) -> Result<(Digest, u64)> {
    let got = Digest::of_file(path)?;
    std::fs::File::open(path)?.sync_all()?;
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The F16 source quantized to Q8_0, as `quantize` asks for it.
    fn to_q8_0(
        blobs: &BlobStore,
        src: &Layer,
        opts: &QuantizeOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(GgufLayer, bool)> {
        let status = "quantizing F16 model to Q8_0";
        quantize_layer(blobs, src, status, "Q8_0", opts, progress)
    }

    #[test]
    fn progress_scales_tensors_to_bytes() {
        let table = [
            (0, 10, 1000, 0),
            (5, 10, 1000, 500),
            (10, 10, 1000, 1000),
            (11, 10, 1000, 1000),
            (3, 0, 1000, 0),
            (1, 3, u64::MAX, u64::MAX / 3),
        ];
        for (c, t, s, want) in table {
            assert_eq!(scaled(c, t, s), want, "{c}/{t} of {s}");
        }
    }

    #[test]
    fn partial_name_matches_the_runner() {
        assert_eq!(
            partial_of(Path::new("/m/blobs/.tmp-00ff")),
            PathBuf::from("/m/blobs/.tmp-00ff.partial")
        );
    }

    /// A fake quantizer: a shell script run as `quantize --input I --output O --type T …`.
    fn fake(dir: &Path, body: &str) -> QuantizeOptions {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("fake-runner");
        std::fs::write(&p, format!("#!/bin/sh\nout=\"$5\"\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        QuantizeOptions {
            runner: p,
            threads: 1,
            ..Default::default()
        }
    }

    fn blobs_with_source() -> (tempfile::TempDir, BlobStore, Layer) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("blobs");
        std::fs::create_dir(&dir).unwrap();
        let blobs = BlobStore::new(dir);
        let d = blobs.write_bytes(b"GGUF source").unwrap();
        (t, blobs, Layer::new(MEDIA_TYPE_MODEL, d, 1000))
    }

    fn blob_dir_names(blobs: &BlobStore) -> Vec<String> {
        std::fs::read_dir(blobs.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn failures_leave_only_the_source_blob() {
        let (t, blobs, src) = blobs_with_source();
        let cases = [
            // An error line after partial output: the runner's message, both temp names gone.
            (
                "echo x > \"$out.partial\"; echo '{\"completed\":1,\"total\":2}'; echo '{\"error\":\"boom\"}'; exit 1",
                "quantization failed: boom",
            ),
            // A crash: the stderr tail explains it.
            ("echo x > \"$out\"; echo 'killed by something' >&2; exit 134", "killed by something"),
            // Claims success but wrote garbage: verification refuses it, no blob appears.
            (
                "echo 'not a gguf' > \"$out\"; echo '{\"done\":true}'",
                "GGUF",
            ),
        ];
        for (script, want) in cases {
            let opts = fake(t.path(), script);
            let mut seen = Vec::new();
            let err = to_q8_0(&blobs, &src, &opts, &mut |p| seen.push(p)).unwrap_err();
            assert!(err.to_string().contains(want), "{script}: {err}");
            assert_eq!(
                blob_dir_names(&blobs),
                vec![src.digest.blob_file_name()],
                "{script}"
            );
        }
    }

    #[test]
    fn the_quantizer_sees_only_the_runner_environment() {
        let (t, blobs, src) = blobs_with_source();
        let seen_env = t.path().join("seen-env");
        let mut opts = fake(t.path(), &format!("env > '{}'; exit 1", seen_env.display()));
        opts.env = crate::runner::runner_env([
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HERD_SECRET_TOKEN".into(), "s3cr3t".into()),
            ("GGML_SCHED_MAX_COPIES".into(), "1".into()),
        ]);
        assert!(to_q8_0(&blobs, &src, &opts, &mut |_| {}).is_err());
        let env = std::fs::read_to_string(&seen_env).unwrap();
        assert!(env.lines().any(|l| l == "GGML_SCHED_MAX_COPIES=1"), "{env}");
        assert!(!env.contains("s3cr3t"), "{env}");
        // The test process's own variables (cargo sets CARGO_MANIFEST_DIR) are not inherited.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
    }

    #[test]
    fn progress_lines_scale_to_the_source_size() {
        let (t, blobs, src) = blobs_with_source();
        let opts = fake(
            t.path(),
            "for i in 1 2 3 4; do echo \"{\\\"completed\\\":$i,\\\"total\\\":4}\"; done; exit 1",
        );
        let mut seen = Vec::new();
        assert!(quantize_layer(
            &blobs,
            &src,
            "quantizing BF16 model to Q4_K_M",
            "Q4_K_M",
            &opts,
            &mut |p| seen.push(p)
        )
        .is_err());
        let done: Vec<u64> = seen.iter().map(|p| p.completed).collect();
        assert_eq!(done, [0, 250, 500, 750, 1000]);
        assert!(seen
            .iter()
            .all(|p| p.status == "quantizing BF16 model to Q4_K_M" && p.total == 1000));
    }

    #[test]
    fn a_missing_runner_is_an_error_and_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(t.path());
        let d = blobs.write_bytes(b"GGUF not really").unwrap();
        let src = Layer::new(MEDIA_TYPE_MODEL, d, 15);
        let opts = QuantizeOptions {
            runner: t.path().join("no-such-runner"),
            threads: 1,
            ..Default::default()
        };
        let mut seen = Vec::new();
        let err = to_q8_0(&blobs, &src, &opts, &mut |p| seen.push(p)).unwrap_err();
        assert!(
            err.to_string().contains("cannot start the quantizer"),
            "{err}"
        );
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].status, "quantizing F16 model to Q8_0");
        assert_eq!(seen[0].digest, PROGRESS_DIGEST);
        let names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "only the source blob: {names:?}");
    }
}
