//! Shared helpers for the supervisor and scheduler fault tests: locating the fake runner,
//! writing scripted fake "models", and checking processes from /proc.
//!
//! The fake runner is a binary of another package, so cargo does not build it for `server`'s
//! tests: run `cargo build -p fake-runner` first (or set `HERD_FAKE_RUNNER` to its path). It is
//! looked up in the target directory of the test executable (`target/<profile>/fake-runner`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub fn fake_runner() -> PathBuf {
    if let Some(p) = std::env::var_os("HERD_FAKE_RUNNER") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/fake-runner
    let p = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("fake-runner");
    assert!(
        p.exists(),
        "{} not found: run `cargo build -p fake-runner` before these tests",
        p.display()
    );
    p
}

/// Writes a fake model whose script lines become extra fake-runner arguments.
pub fn fake_model(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let p = dir.join(name);
    let mut text = String::from("#fake-runner\n");
    for a in args {
        text.push_str(a);
        text.push('\n');
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// True once the process is gone entirely: exited *and* reaped (a zombie still has /proc/pid).
pub fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

pub async fn wait_gone(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gone(pid)
}

/// The child processes of `ppid` (zombies included), with their argv.
pub fn children_of(ppid: u32) -> Vec<(u32, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state, ppid, ...
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let parent: Option<u32> = after.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        if parent != Some(ppid) {
            continue;
        }
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        out.push((pid, argv));
    }
    out
}

/// Our child processes (zombies included) whose command line mentions `needle`.
pub fn children_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy();
    children_of(std::process::id())
        .into_iter()
        .filter(|(_, argv)| argv.iter().any(|a| a.contains(needle.as_ref())))
        .map(|(pid, _)| pid)
        .collect()
}

pub fn kill9(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// A private runner directory and a models directory for scheduler tests, with requests for
/// scripted fake models in it.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub models: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: server::runner::create_runner_dir().unwrap(),
            models: tempfile::tempdir().unwrap(),
        }
    }

    /// The fake runner with short stop and load deadlines.
    pub fn config(&self) -> server::scheduler::SchedulerConfig {
        let mut c = server::scheduler::SchedulerConfig::new(fake_runner(), self.dir.path());
        c.stop_grace = Duration::from_secs(2);
        c.load_timeout = Some(Duration::from_secs(5));
        c
    }

    /// A request for fake model `name` running `script`, with the default keep-alive.
    pub fn request(&self, name: &str, script: &[&str]) -> server::scheduler::ModelRequest {
        self.request_with(name, script, None)
    }

    pub fn request_with(
        &self,
        name: &str,
        script: &[&str],
        keep_alive: Option<server::scheduler::KeepAlive>,
    ) -> server::scheduler::ModelRequest {
        server::scheduler::ModelRequest {
            name: format!("{name}:latest"),
            digest: format!("digest-{name}"),
            runner: Default::default(),
            options: runner_protocol::LoadOptions {
                model: fake_model(self.models.path(), name, script),
                ctx_size: 256,
                parallel: 0,
                ..Default::default()
            },
            keep_alive,
            memory: 1000,
            kv_per_slot: 0,
        }
    }
}

/// The one-word prompt the fault tests send.
pub fn prompt() -> runner_protocol::CompletionRequest {
    runner_protocol::CompletionRequest {
        prompt: runner_protocol::Prompt::Text("hi".into()),
        ..Default::default()
    }
}
