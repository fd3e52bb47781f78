//! `herd serve` as a child process on a random port, its models a test store of fake-runner
//! scripts, and `herd` CLI commands pointed at it (serve_cli.rs, repl_errors.rs). The includer
//! declares `herd_proc` and `serve_support` beside this module.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::herd_proc::{listen, piped, Listening, HERD};
use super::serve_support::api_support::TestStore;
use super::serve_support::scheduler_support;

/// A running `herd serve`; SIGTERM and reaped on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub home: tempfile::TempDir,
}

impl Server {
    pub fn start(ts: &TestStore) -> Server {
        // herd serve creates ~/.ollama/id_ed25519: keep it out of the real home.
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(HERD);
        cmd.arg("serve")
            .env("HOME", home.path())
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", ts.root())
            .env("HERD_RUNNER", scheduler_support::fake_runner())
            .env_remove("HERD_LOG_FORMAT")
            .stdout(Stdio::null());
        let Listening { child, addr, .. } = listen(&mut cmd, Duration::from_secs(30), None);
        Server { child, addr, home }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(HERD);
        c.args(args)
            .env("OLLAMA_HOST", &self.addr)
            .env("HOME", self.home.path())
            .env_remove("OLLAMA_NOHISTORY");
        c
    }

    /// Runs herd with `stdin` piped in; returns (success, stdout, stderr).
    pub fn herd(&self, args: &[&str], stdin: &str) -> (bool, String, String) {
        let out = piped(&mut self.command(args), stdin);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}
