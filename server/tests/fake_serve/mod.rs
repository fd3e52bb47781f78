//! `herd serve` as a child process on a random port (`herd_proc::HerdServe`), its models a test
//! store of fake-runner scripts, and `herd` CLI commands pointed at it (serve_cli.rs,
//! repl_errors.rs). The includer declares `herd_proc` and `serve_support` beside this module.
#![allow(dead_code)]

use std::ops::{Deref, DerefMut};
use std::process::Command;

use super::herd_proc::{piped, HerdServe, HERD};
use super::serve_support::api_support::TestStore;
use super::serve_support::scheduler_support;

/// A running `herd serve` with the fake runner; stopped on drop (`HerdServe`).
pub struct Server(HerdServe);

impl Deref for Server {
    type Target = HerdServe;
    fn deref(&self) -> &HerdServe {
        &self.0
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut HerdServe {
        &mut self.0
    }
}

impl Server {
    pub fn start(ts: &TestStore) -> Server {
        let runner = scheduler_support::fake_runner();
        Server(HerdServe::start(
            ts.root(),
            &[("HERD_RUNNER", runner.to_str().expect("a UTF-8 path"))],
        ))
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
