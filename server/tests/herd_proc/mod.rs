//! A real `herd serve` child process for the hardening tests: started with a temp HOME, the
//! given store and extra environment, on an ephemeral loopback port; its stderr is kept (for
//! assertions on the log) and its address read from the "Listening on" line. Killed on drop.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");

pub struct HerdServe {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub log: Arc<Mutex<Vec<String>>>,
    _home: tempfile::TempDir,
}

impl HerdServe {
    /// Starts `herd serve` on `models` with `env` added (and `HERD_LOG_FORMAT` removed).
    pub fn start(models: &std::path::Path, env: &[(&str, &str)]) -> HerdServe {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(HERD);
        cmd.arg("serve")
            .env("HOME", home.path())
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", models)
            .env_remove("HERD_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn herd serve");
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            // The line is logged before the address is sent, so whoever holds the address
            // sees the "Listening on" line in the log (CI once read the log in between).
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let addr = line.split("Listening on ").nth(1).map(|rest| {
                    rest.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                });
                sink.lock().unwrap().push(line);
                if let Some(addr) = addr {
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => panic!(
                "herd serve did not report its address; log:\n{}",
                log.lock().unwrap().join("\n")
            ),
        };
        HerdServe {
            child,
            addr,
            log,
            _home: home,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's resident set size in bytes (`VmRSS` of /proc/PID/status).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("VmRSS");
        kb * 1024
    }

    /// How many descriptors the server holds open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The log once it contains `needle` (or after 10 s without it, for the caller's assertion
    /// to show). A line the server writes just before it answers may reach this process's
    /// reader thread after the answer does.
    pub fn log_with(&self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            if text.contains(needle) || std::time::Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for HerdServe {
    /// SIGTERM first so the server stops and reaps its runners, SIGKILL after 15 s.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
