//! A real `herd serve` child process for the hardening tests: started with a temp HOME, the
//! given store and extra environment, on an ephemeral loopback port; its stderr is kept (for
//! assertions on the log) and its address read from the "Listening on" line. Killed on drop.
//! [`listen`] is that start-up for any command line, used by every test that runs the binary;
//! [`piped`] runs a command to its end with a given stdin.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");

pub struct HerdServe {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub log: Arc<Mutex<Vec<String>>>,
    /// Its HOME (herd serve writes ~/.ollama/id_ed25519 there; CLI commands share it).
    pub home: tempfile::TempDir,
}

/// A spawned process that reported "Listening on ADDR" on stderr.
pub struct Listening {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its stderr lines, so far and to come.
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Runs `cmd` to its end with `stdin` written to it (then closed) and its stdout and stderr
/// captured.
pub fn piped(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Spawns `cmd` with stderr piped and waits up to `wait` for its "Listening on ADDR" line;
/// panics with the log so far when none comes. `echo` also copies each line to the test's
/// stderr behind that prefix. A line is stored in the log before the address is sent, so
/// whoever holds the address sees the "Listening on" line there (CI once read the log in
/// between).
pub fn listen(cmd: &mut Command, wait: Duration, echo: Option<&'static str>) -> Listening {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn herd");
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(prefix) = echo {
                eprintln!("{prefix}{line}");
            }
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
    match rx.recv_timeout(wait) {
        Ok(addr) => Listening { child, addr, log },
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the process did not report its address; log:\n{}",
                log.lock().unwrap().join("\n")
            )
        }
    }
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
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let Listening { child, addr, log } = listen(&mut cmd, Duration::from_secs(60), None);
        HerdServe {
            child,
            addr,
            log,
            home,
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
