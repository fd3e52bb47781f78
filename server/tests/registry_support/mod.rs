//! Test harness for registry tests: starts Debian's `docker-registry` (distribution 2.8) on a free
//! loopback port with filesystem storage in a temp dir, and builds tiny models in a temp store.
#![allow(dead_code)]

#[path = "../herd_proc/mod.rs"]
mod herd_proc;
#[path = "../prereq/mod.rs"]
pub mod prereq;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herd_proc::{listen, Listening};
use server::store::manifest::{MEDIA_TYPE_CONFIG, MEDIA_TYPE_MODEL, MEDIA_TYPE_TEMPLATE};
use server::store::registry::{Progress, ProgressFn, Registry, RegistryOptions};
use server::store::{Layer, Manifest, ModelName, Store};

pub mod fake;

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A running `docker-registry`; killed on drop.
pub struct RealRegistry {
    pub child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for RealRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RealRegistry {
    /// `None` (with a printed notice) when the binary is not installed.
    pub fn start() -> Option<RealRegistry> {
        Self::start_with("")
    }

    /// As `start`, with extra top-level YAML appended to the config (e.g. an `auth:` section).
    pub fn start_with(extra: &str) -> Option<RealRegistry> {
        if !Path::new(REGISTRY_BIN).exists() {
            prereq::missing(format!(
                "{REGISTRY_BIN} not installed (apt-get install docker-registry)"
            ));
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{extra}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = RealRegistry {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(r)
    }

    /// `http://127.0.0.1:<port>/<ns>/<model>:<tag>`.
    pub fn name(&self, rest: &str) -> ModelName {
        ModelName::parse(&format!("http://127.0.0.1:{}/{rest}", self.port)).unwrap()
    }
}

/// Options for fast tests: small parts (so multi-part paths run), short stall and backoff.
pub fn test_options(key_dir: Option<PathBuf>) -> RegistryOptions {
    RegistryOptions {
        key_dir,
        stall_timeout: Duration::from_secs(2),
        retries: 3,
        backoff: Duration::from_millis(20),
        part_min: 256 * 1024,
        part_max: 1 << 20,
        push_chunk: 512 * 1024,
        progress_interval: Duration::from_millis(10),
        ..RegistryOptions::default()
    }
}

pub fn registry(store: &Store, opts: RegistryOptions) -> Registry {
    Registry::new(store.clone(), opts).unwrap()
}

/// Collects every progress line.
pub fn recorder() -> (ProgressFn, Arc<Mutex<Vec<Progress>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    (Arc::new(move |p| l.lock().unwrap().push(p)), log)
}

/// Deterministic pseudo-random bytes (incompressible, so no layer dedups by accident).
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Writes a model (a `GGUF`-prefixed blob of `size` bytes, a template and a config) under `name`.
/// Returns the manifest bytes.
pub fn make_model(store: &Store, name: &ModelName, seed: u64, size: usize) -> Vec<u8> {
    let mut model = b"GGUF".to_vec();
    model.extend(bytes(seed, size.saturating_sub(4)));
    let md = store.blobs().write_bytes(&model).unwrap();
    let template = format!("{{{{ .Prompt }}}} {seed}");
    let td = store.blobs().write_bytes(template.as_bytes()).unwrap();
    let config = format!(r#"{{"model_format":"gguf","model_family":"test","seed":{seed}}}"#);
    let cd = store.blobs().write_bytes(config.as_bytes()).unwrap();
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cd, config.len() as u64),
        vec![
            Layer::new(MEDIA_TYPE_MODEL, md, model.len() as u64),
            Layer::new(MEDIA_TYPE_TEMPLATE, td, template.len() as u64),
        ],
    );
    store.write_manifest(name, &m).unwrap();
    m.to_bytes()
}

/// Every file below `dir` (relative paths, sorted).
pub fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// CPU seconds (user + system, all threads) a process has used so far, from `/proc/<pid>/stat`
/// (`self` for this process); Linux reports them in USER_HZ, which is 100.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / 100.0
}

/// `herd serve` on a free loopback port with its own store and HOME; killed on drop.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start(models: &Path, home: &Path) -> Serve {
        let mut cmd = Command::new(HERD);
        cmd.arg("serve")
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", models)
            .env("HOME", home)
            .env("OLLAMA_NOPRUNE", "1")
            .env_remove("HERD_LOG_FORMAT")
            .stdout(Stdio::null());
        let Listening { child, addr, .. } = listen(&mut cmd, Duration::from_secs(30), None);
        Serve { child, addr }
    }

    pub fn herd(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(HERD)
            .args(args)
            .env("OLLAMA_HOST", &self.addr)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Forwards 127.0.0.1:<returned port> to 127.0.0.1:`upstream`, counting the bytes sent to the
/// registry (`up`: requests, uploads) and back to the client (`down`).
pub async fn counting_proxy(
    upstream: u16,
    up: Arc<std::sync::atomic::AtomicU64>,
    down: Arc<std::sync::atomic::AtomicU64>,
) -> u16 {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
    async fn pump(
        mut r: impl AsyncRead + Unpin,
        mut w: impl AsyncWrite + Unpin,
        count: &std::sync::atomic::AtomicU64,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if w.write_all(&buf[..n]).await.is_err() {
                break;
            }
            count.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            let (up, down) = (up.clone(), down.clone());
            tokio::spawn(async move {
                let Ok(mut reg) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (cr, cw) = client.split();
                let (rr, rw) = reg.split();
                tokio::select! {
                    _ = pump(cr, rw, &up) => {},
                    _ = pump(rr, cw, &down) => {},
                }
            });
        }
    });
    port
}
