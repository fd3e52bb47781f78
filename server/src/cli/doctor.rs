//! `herd doctor`: a preflight of this host for `herd serve` with the same configuration. It
//! prints one line per finding — `ok`, `warn` or `fail`, the check, what it found — and exits
//! non-zero when any check fails. Checks: the GPU and driver the engines would see, the runner
//! and its engine libraries (the runner is started with `--version`, which only succeeds when the
//! dynamic linker resolves libllama/libggml; backend modules, which the runner dlopens at load,
//! must be present beside it), the effective configuration's digest, free disk space under the store, the store's integrity
//! (`store::check`; `--verify` re-hashes every blob), the API key file, and whether
//! `OLLAMA_HOST` can be bound (or a herd already answers there).
//!
//! Policy lives in pure functions (`disk_level`, `gpu_finding`, `store_findings`) with table
//! tests; the probes around them only gather facts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::config::{Config, DoctorArgs};
use crate::store::check::{CheckReport, Problem};

/// Below this much free space under the store: warn (one model pull may not fit).
pub const DISK_WARN_BELOW: u64 = 10_000_000_000;
/// Below this: fail (a server would fill the disk with its first pull or create).
pub const DISK_FAIL_BELOW: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        })
    }
}

/// One printed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub check: &'static str,
    pub detail: String,
}

impl Finding {
    fn new(level: Level, check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            level,
            check,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<5}{:<8}{}", self.level, self.check, self.detail)
    }
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    let cfg = args.serve;
    // The same pairs `herd serve` logs and digests at startup (`provenance::set_config`).
    let digest = crate::provenance::config_digest(&cfg.effective());
    if args.print_config_digest {
        println!("{digest}");
        return Ok(());
    }
    if args.ready {
        return ready(&cfg).await;
    }
    let mut findings = Vec::new();
    let runner = cfg.runner_path();
    let runner_dir = runner.parent().map(Path::to_path_buf).unwrap_or_default();
    let modules = backend_modules(&runner_dir);

    findings.push(gpu_finding(
        nvidia_driver(),
        nvidia_gpus().await,
        modules.iter().any(|m| m.contains("cuda")),
    ));
    findings.extend(engine_findings(&runner, &modules).await);
    let models = cfg.models.clone();
    let verify = args.verify;
    let store = tokio::task::spawn_blocking(move || store_probe(&models, verify)).await?;
    findings.extend(store);
    findings.push(match cfg.api_keys() {
        Ok(k) if k.is_empty() => {
            Finding::new(Level::Ok, "keys", "no API keys: every client is admitted")
        }
        Ok(k) => Finding::new(Level::Ok, "keys", format!("{} API keys", k.len())),
        Err(e) => Finding::new(Level::Fail, "keys", e),
    });
    findings.push(Finding::new(
        Level::Ok,
        "config",
        format!("effective configuration {digest} (/api/version config_digest)"),
    ));
    findings.push(port_finding(&cfg).await);

    for f in &findings {
        println!("{f}");
    }
    let failed = findings.iter().filter(|f| f.level == Level::Fail).count();
    if failed > 0 {
        anyhow::bail!("{failed} check(s) failed");
    }
    Ok(())
}

/// The verdict on `avail` free bytes under the store.
pub fn disk_level(avail: u64) -> Level {
    if avail < DISK_FAIL_BELOW {
        Level::Fail
    } else if avail < DISK_WARN_BELOW {
        Level::Warn
    } else {
        Level::Ok
    }
}

/// The GPU line from what was found: the NVIDIA kernel driver's version (`/proc/driver/nvidia`),
/// the GPUs `nvidia-smi` lists, and whether this build has a CUDA backend module.
pub fn gpu_finding(driver: Option<String>, gpus: Vec<String>, cuda_backend: bool) -> Finding {
    if cfg!(target_os = "macos") {
        return Finding::new(Level::Ok, "gpu", "Apple GPU through Metal");
    }
    let seen = match (&driver, gpus.is_empty()) {
        (None, true) => return Finding::new(
            Level::Warn,
            "gpu",
            "no GPU driver visible (no /proc/driver/nvidia, no nvidia-smi): models run on the CPU",
        ),
        (Some(d), true) => format!("NVIDIA driver {d}, no GPU listed by nvidia-smi"),
        (d, false) => format!(
            "{} (NVIDIA driver {})",
            gpus.join(", "),
            d.as_deref().unwrap_or("unknown")
        ),
    };
    if !cuda_backend {
        return Finding::new(
            Level::Warn,
            "gpu",
            format!(
                "{seen}; this build has no CUDA backend (libggml-cuda), so models run on the CPU"
            ),
        );
    }
    if gpus.is_empty() {
        return Finding::new(Level::Warn, "gpu", seen);
    }
    Finding::new(Level::Ok, "gpu", seen)
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  …` → `550.54.15`.
fn nvidia_driver() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    let after = line.split("Kernel Module").nth(1).unwrap_or(line);
    after.split_whitespace().next().map(str::to_string)
}

/// `name, memory` of each GPU nvidia-smi lists (none when it is absent or fails).
async fn nvidia_gpus() -> Vec<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new("nvidia-smi")
            .args(["--query-gpu=name,memory.total", "--format=csv,noheader"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await;
    match out {
        Ok(Ok(o)) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// ggml's backend modules beside the runner (`libggml-cpu*.so`, `libggml-cuda.so`, …), which it
/// loads with `ggml_backend_load_all_from_path`: their names without `libggml-` and suffix.
fn backend_modules(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_prefix("libggml-")?;
            let stem = stem
                .strip_suffix(".so")
                .or_else(|| stem.strip_suffix(".dylib"))?;
            (stem != "base").then(|| stem.to_string())
        })
        .collect();
    out.sort();
    out
}

async fn engine_findings(runner: &Path, modules: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    if !runner.is_file() {
        out.push(Finding::new(
            Level::Fail,
            "engine",
            format!(
                "runner {} not found (HERD_RUNNER / HERD_RUNNER_DIR, default: beside herd)",
                runner.display()
            ),
        ));
        return out;
    }
    let probe = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new(runner)
            .arg("--version")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await;
    out.push(match probe {
        Ok(Ok(o)) if o.status.success() => Finding::new(
            Level::Ok,
            "engine",
            format!(
                "{} loads its libraries (llama.cpp {}, {})",
                String::from_utf8_lossy(&o.stdout).trim(),
                crate::provenance::LLAMACPP_BUILD,
                runner.display()
            ),
        ),
        Ok(Ok(o)) => {
            let err = String::from_utf8_lossy(&o.stderr);
            Finding::new(
                Level::Fail,
                "engine",
                format!(
                    "{} does not start ({}): {}",
                    runner.display(),
                    o.status,
                    err.lines().next().unwrap_or("no message")
                ),
            )
        }
        Ok(Err(e)) => Finding::new(
            Level::Fail,
            "engine",
            format!("cannot run {}: {e}", runner.display()),
        ),
        Err(_) => Finding::new(
            Level::Fail,
            "engine",
            format!("{} --version did not answer within 20 s", runner.display()),
        ),
    });
    out.push(if modules.iter().any(|m| m.starts_with("cpu")) {
        Finding::new(
            Level::Ok,
            "engine",
            format!("backend modules: {}", modules.join(", ")),
        )
    } else {
        Finding::new(
            Level::Fail,
            "engine",
            format!(
                "no CPU backend module (libggml-cpu*) beside the runner; found: [{}]",
                modules.join(", ")
            ),
        )
    });
    out
}

/// Disk space and integrity of the store at `models`.
fn store_probe(models: &Path, verify: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    // The store may not exist yet (`herd serve` creates it): measure where it will be.
    let existing: PathBuf = models
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    match nix::sys::statvfs::statvfs(&existing) {
        Ok(s) => {
            // fsblkcnt_t / c_ulong are u64 on Linux but narrower elsewhere (macOS).
            #[allow(clippy::unnecessary_cast)]
            let avail = (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64);
            out.push(Finding::new(
                disk_level(avail),
                "disk",
                format!(
                    "{} free under {}",
                    super::format::human_bytes(avail),
                    existing.display()
                ),
            ));
        }
        Err(e) => out.push(Finding::new(
            Level::Fail,
            "disk",
            format!("cannot measure {}: {e}", existing.display()),
        )),
    }
    if !models.exists() {
        out.push(Finding::new(
            Level::Warn,
            "store",
            format!(
                "{} does not exist yet; herd serve creates it",
                models.display()
            ),
        ));
        return out;
    }
    match crate::store::check::check(models, verify) {
        Ok(report) => out.extend(store_findings(models, &report, verify)),
        Err(e) => out.push(Finding::new(
            Level::Fail,
            "store",
            format!("cannot read {}: {e}", models.display()),
        )),
    }
    out
}

/// One line per problem (fail for what breaks a model, warn for leftovers), then the summary.
pub fn store_findings(models: &Path, report: &CheckReport, verify: bool) -> Vec<Finding> {
    let mut out: Vec<Finding> = report
        .problems
        .iter()
        .map(|p| {
            let level = if p.is_fatal() {
                Level::Fail
            } else {
                Level::Warn
            };
            Finding::new(level, "store", p.to_string())
        })
        .collect();
    let verified = if verify {
        format!(", {} re-hashed", report.verified)
    } else {
        ", not re-hashed (--verify)".to_string()
    };
    let level = if report.problems.iter().any(Problem::is_fatal) {
        Level::Fail
    } else {
        Level::Ok
    };
    out.push(Finding::new(
        level,
        "store",
        format!(
            "{}: {} manifests, {} blobs ({}){verified}",
            models.display(),
            report.manifests,
            report.blobs,
            super::format::human_bytes(report.blob_bytes)
        ),
    ));
    out
}

#[derive(serde::Deserialize)]
struct VersionReply {
    version: String,
    /// herd's own version (its `version` is the Ollama release it implements).
    #[serde(default)]
    herd_version: Option<String>,
    #[serde(default)]
    git_commit: Option<String>,
}

/// `--ready`: `GET /readyz` on OLLAMA_HOST must answer 200 within 5 s.
async fn ready(cfg: &Config) -> anyhow::Result<()> {
    let url = format!("{}/readyz", cfg.host.connect_url());
    let reply = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    let status = reply.status();
    if status != reqwest::StatusCode::OK {
        let body = reply.text().await.unwrap_or_default();
        anyhow::bail!("{url}: {status} {}", body.trim());
    }
    println!("ready");
    Ok(())
}

/// Whether `herd serve` could listen on OLLAMA_HOST; a herd already serving there is fine.
async fn port_finding(cfg: &Config) -> Finding {
    let bind = cfg.host.bind_addr();
    let err = match std::net::TcpListener::bind(&bind) {
        Ok(l) => {
            drop(l);
            return Finding::new(Level::Ok, "port", format!("{bind} is free"));
        }
        Err(e) => e,
    };
    if err.kind() != std::io::ErrorKind::AddrInUse {
        return Finding::new(
            Level::Fail,
            "port",
            format!("cannot listen on {bind}: {err}"),
        );
    }
    let url = format!("{}/api/version", cfg.host.connect_url());
    let mut req = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(5));
    if let Some(key) = cfg.api_keys().ok().and_then(|k| k.into_iter().next()) {
        req = req.bearer_auth(key);
    }
    let reply = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Finding::new(
                Level::Fail,
                "port",
                format!("{bind} is in use by something that does not answer HTTP: {e}"),
            )
        }
    };
    let status = reply.status();
    match reply.json::<VersionReply>().await {
        Ok(VersionReply {
            herd_version: Some(version),
            git_commit: Some(commit),
            ..
        }) => Finding::new(
            Level::Ok,
            "port",
            format!("herd {version} (commit {commit}) already answers at {bind}"),
        ),
        Ok(v) => Finding::new(
            Level::Fail,
            "port",
            format!(
                "{bind} is taken by another Ollama-compatible server (version {})",
                v.version
            ),
        ),
        Err(_) => Finding::new(
            Level::Fail,
            "port",
            format!("{bind} is in use by another program (/api/version answered {status})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Digest;

    #[test]
    fn disk_thresholds() {
        let cases = [
            (0, Level::Fail),
            (DISK_FAIL_BELOW - 1, Level::Fail),
            (DISK_FAIL_BELOW, Level::Warn),
            (DISK_WARN_BELOW - 1, Level::Warn),
            (DISK_WARN_BELOW, Level::Ok),
            (u64::MAX, Level::Ok),
        ];
        for (avail, want) in cases {
            assert_eq!(disk_level(avail), want, "{avail}");
        }
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn gpu_verdicts() {
        let h200 = || vec!["NVIDIA H200, 143771 MiB".to_string()];
        let cases = [
            (None, vec![], false, Level::Warn, "no GPU driver visible"),
            (None, vec![], true, Level::Warn, "no GPU driver visible"),
            (
                Some("550.54.15".into()),
                h200(),
                true,
                Level::Ok,
                "NVIDIA H200, 143771 MiB (NVIDIA driver 550.54.15)",
            ),
            (
                Some("550.54.15".into()),
                h200(),
                false,
                Level::Warn,
                "no CUDA backend",
            ),
            (
                Some("550.54.15".into()),
                vec![],
                true,
                Level::Warn,
                "no GPU listed",
            ),
            (None, h200(), true, Level::Ok, "driver unknown"),
        ];
        for (driver, gpus, cuda, level, needle) in cases {
            let f = gpu_finding(driver.clone(), gpus.clone(), cuda);
            assert_eq!(f.level, level, "{driver:?} {gpus:?} {cuda}: {f}");
            assert!(f.detail.contains(needle), "{f}");
        }
    }

    #[test]
    fn store_verdicts() {
        let d = Digest::of_bytes(b"x");
        let root = Path::new("/s");
        let clean = CheckReport {
            manifests: 1,
            blobs: 2,
            ..CheckReport::default()
        };
        let f = store_findings(root, &clean, false);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Ok);
        assert!(f[0].detail.contains("1 manifests, 2 blobs"), "{}", f[0]);
        let leftovers = CheckReport {
            problems: vec![
                Problem::Orphan {
                    digest: d.clone(),
                    size: 1,
                },
                Problem::Partial {
                    file: "sha256-x-partial".into(),
                },
            ],
            ..clean.clone()
        };
        let f = store_findings(root, &leftovers, true);
        let levels: Vec<Level> = f.iter().map(|f| f.level).collect();
        assert_eq!(levels, [Level::Warn, Level::Warn, Level::Ok]);
        let broken = CheckReport {
            problems: vec![Problem::Corrupt {
                digest: d.clone(),
                actual: d,
            }],
            ..clean
        };
        let f = store_findings(root, &broken, true);
        assert_eq!(f[0].level, Level::Fail);
        assert_eq!(f.last().unwrap().level, Level::Fail);
    }

    #[test]
    fn line_format() {
        let f = Finding::new(Level::Warn, "disk", "5 GB free");
        assert_eq!(f.to_string(), "warn disk    5 GB free");
    }
}
