//! The scale-out test's processes (nginx_replicas.rs): `herd serve` replicas on fixed loopback
//! ports, nginx started from a config that scripts/nginx/render wrote into the test's own run
//! dir (pid, logs, temp files), the scripts/nginx/health checker keeping that config current,
//! and readers for nginx's access log and a replica's /metrics. Every child is stopped on drop.
#![allow(dead_code)]

pub mod mix;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::registry_support::free_port;

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");
pub const NGINX: &str = "/usr/sbin/nginx";
pub const NJS: &str = "/usr/lib/nginx/modules/ngx_http_js_module.so";
pub const CURL: &str = "/usr/bin/curl";

pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/nginx")
}

/// A child process whose stderr lines are kept with the time they arrived.
pub type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

pub fn keep_stderr(child: &mut Child) -> Lines {
    let lines: Lines = Arc::default();
    let sink = lines.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push((Instant::now(), l));
        }
    });
    lines
}

pub fn text(lines: &Lines) -> String {
    let l = lines.lock().unwrap();
    l.iter()
        .map(|(_, s)| s.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Stops `child` with `signal`, SIGKILL after 15 s.
pub fn stop(child: &mut Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = nix::sys::signal::kill(pid, signal);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A child stopped on drop with SIGTERM (herd drains and reaps its runners; nginx's master
/// stops its workers; the checker's loop ends).
pub struct Proc {
    pub child: Child,
    pub stderr: Lines,
    pub _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop(&mut self.child, nix::sys::signal::Signal::SIGTERM);
    }
}

/// `herd serve` on 127.0.0.1:`port` with its own store and HOME.
pub fn replica(runner: &Path, models: &Path, port: u16, extra: Vec<tempfile::TempDir>) -> Proc {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(HERD)
        .arg("serve")
        .env("HOME", home.path())
        .env("OLLAMA_HOST", format!("127.0.0.1:{port}"))
        .env("OLLAMA_MODELS", models)
        .env("OLLAMA_NOPRUNE", "1")
        .env("HERD_RUNNER", runner)
        // Room for a drained replica's in-flight stream on a loaded 2-core box.
        .env("HERD_SHUTDOWN_GRACE", "60s")
        .env_remove("HERD_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn herd serve");
    let stderr = keep_stderr(&mut child);
    let mut dirs = extra;
    dirs.push(home);
    let p = Proc {
        child,
        stderr,
        _dirs: dirs,
    };
    wait_port(port, &p, "herd serve");
    p
}

pub fn wait_port(port: u16, p: &Proc, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port}:\n{}",
            text(&p.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a scripts/nginx script to completion; panics with its output unless it succeeds.
pub fn script(name: &str, args: &[String]) -> String {
    let out = Command::new(scripts().join(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "scripts/nginx/{name} {args:?}: {said}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One access-log field (`key="value"`).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}=\""))? + key.len() + 3;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// request id → (model key, replicas tried in order), from nginx's access log.
pub fn access_log(path: &Path) -> BTreeMap<String, (String, Vec<String>)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let id = field(l, "request_id")?;
            // "a, b" for retries; " : " separates groups across internal redirects.
            let tried = field(l, "upstream")?
                .split(", ")
                .flat_map(|s| s.split(" : "))
                .map(|s| s.trim().to_owned())
                .collect();
            Some((id.to_owned(), (field(l, "model")?.to_owned(), tried)))
        })
        .collect()
}

/// `herd_model_load_seconds_count` per model on the replica at `addr`.
pub async fn loads(http: &reqwest::Client, addr: &str) -> BTreeMap<String, u64> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("herd_model_load_seconds_count{")?;
            let model = field(&format!(" {rest}"), "model")?.to_owned();
            Some((model, rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// nginx in its own run dir with a rendered config for `replicas`, and the checker that keeps
/// that config current (every 0.5 s, one failed /readyz takes a replica out).
pub struct Front {
    pub base: String,
    pub conf: PathBuf,
    pub access_log: PathBuf,
    /// The checker's log lines.
    pub checks: Lines,
    // Dropped in order: the checker first (no reload of a stopping nginx), then nginx.
    _health: Proc,
    _nginx: Proc,
    _run: tempfile::TempDir,
}

impl Front {
    pub fn start(replicas: &[String]) -> Front {
        Front::start_with(replicas, &[])
    }

    /// As `start`, with more options for scripts/nginx/render (and so for the checker).
    pub fn start_with(replicas: &[String], extra: &[&str]) -> Front {
        // nginx in its own run dir, its config rendered; the checker keeps it current.
        let run = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(run.path().join("tmp")).unwrap();
        let conf = run.path().join("nginx.conf");
        let port = free_port();
        let user =
            String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
        let mut render = vec![
            "--listen".to_owned(),
            format!("127.0.0.1:{port}"),
            "--run-dir".into(),
            run.path().display().to_string(),
            "--user".into(),
            user.trim().to_owned(),
            "--fail-timeout".into(),
            "2s".into(),
        ];
        render.extend(extra.iter().map(|a| a.to_string()));
        render.extend(replicas.iter().cloned());
        std::fs::write(&conf, script("render", &render)).unwrap();
        let mut child = Command::new(NGINX)
            .arg("-p")
            .arg(run.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(run.path().join("error.log"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nginx");
        let stderr = keep_stderr(&mut child);
        let nginx = Proc {
            child,
            stderr,
            _dirs: vec![],
        };
        wait_port(port, &nginx, "nginx");
        let mut child = Command::new(scripts().join("health"))
            .arg("--conf")
            .arg(&conf)
            .arg("--pid-file")
            .arg(run.path().join("nginx.pid"))
            .args(["--interval", "0.5", "--fall", "1", "--timeout", "1"])
            .args(&render)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let checks = keep_stderr(&mut child);
        let _health = Proc {
            child,
            stderr: checks.clone(),
            _dirs: vec![],
        };
        Front {
            base: format!("http://127.0.0.1:{port}"),
            access_log: run.path().join("access.log"),
            conf,
            checks,
            _health,
            _nginx: nginx,
            _run: run,
        }
    }
}

/// Polls until `lines` has a line containing `want` that arrived after `since`; its arrival
/// time. Panics after `within`.
pub fn wait_line(lines: &Lines, want: &str, since: Instant, within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let l = lines.lock().unwrap();
        if let Some((at, _)) = l.iter().find(|(at, l)| *at > since && l.contains(want)) {
            return *at;
        }
        drop(l);
        assert!(
            Instant::now() < deadline,
            "no {want:?} in:\n{}",
            text(lines)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The binaries scripts/nginx needs; `false` (after `prereq::missing`) when one is absent.
pub fn installed() -> bool {
    for (path, what) in [
        (NGINX, "nginx (apt-get install nginx; scripts/setup)"),
        (
            NJS,
            "nginx's njs module (apt-get install libnginx-mod-http-js; scripts/setup)",
        ),
        (CURL, "curl (apt-get install curl; scripts/setup)"),
    ] {
        if !Path::new(path).exists() {
            crate::serve_support::prereq::missing(format!("{path}: {what}"));
            return false;
        }
    }
    true
}
