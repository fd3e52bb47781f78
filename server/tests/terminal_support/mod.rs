//! A person at a terminal running `herd run`: util-linux `script` gives herd a pseudo-terminal
//! and relays a pipe to its input and its output to a pipe. Tests type keys (escape sequences
//! included) one step at a time, each after the output the previous step should cause.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// `herd run MODEL` on a pseudo-terminal: util-linux `script` runs it on a pty and relays our
/// pipe to the pty's input and its output to ours. Keys are typed one step at a time, each after
/// the output the previous one should cause, as a person at the keyboard would.
pub struct Terminal {
    child: Child,
    keys: std::process::ChildStdin,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// How much of `screen` earlier `expect`s consumed.
    seen: usize,
}

impl Terminal {
    /// Whether util-linux `script` is installed (callers report it missing through `prereq`).
    pub fn available() -> bool {
        Command::new("script").arg("--version").output().is_ok()
    }

    /// `herd run ARGS` against the server at `addr`, with `home` as HOME.
    pub fn start(addr: &str, home: &Path, args: &str) -> Terminal {
        Terminal::spawn(addr, home, &format!("exec {HERD} run {args}"))
    }

    /// The same with `env` added to herd's environment.
    pub fn start_with_env(addr: &str, home: &Path, args: &str, env: &[(&str, &str)]) -> Terminal {
        Terminal::spawn_env(addr, home, &format!("exec {HERD} run {args}"), env)
    }

    /// The same on a terminal `cols` columns wide.
    pub fn start_sized(addr: &str, home: &Path, args: &str, cols: u16) -> Terminal {
        Terminal::spawn(
            addr,
            home,
            &format!("stty cols {cols} rows 24 && exec {HERD} run {args}"),
        )
    }

    fn spawn(addr: &str, home: &Path, shell: &str) -> Terminal {
        Terminal::spawn_env(addr, home, shell, &[])
    }

    fn spawn_env(addr: &str, home: &Path, shell: &str, env: &[(&str, &str)]) -> Terminal {
        let mut child = Command::new("script")
            .args(["-qec", shell, "/dev/null"])
            .envs(env.iter().copied())
            .env("OLLAMA_HOST", addr)
            .env("HOME", home)
            .env("TERM", "xterm")
            .env_remove("OLLAMA_NOHISTORY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let keys = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = screen.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                // The pty turns "\n" into "\r\n"; keep the text as a program prints it.
                sink.lock()
                    .unwrap()
                    .extend(buf[..n].iter().filter(|&&b| b != b'\r'));
            }
        });
        Terminal {
            child,
            keys,
            screen,
            seen: 0,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    pub fn press(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// Waits (30 s at most) for `needle` in the output not yet consumed; returns that output up
    /// to the needle's end and consumes it.
    pub fn expect(&mut self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let bytes = self.screen.lock().unwrap().clone();
            let fresh = String::from_utf8_lossy(&bytes[self.seen..]).into_owned();
            if let Some(i) = fresh.find(needle) {
                self.seen += i + needle.len();
                return fresh[..i + needle.len()].to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {needle:?} in the terminal after 30 s; it shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit (30 s at most).
    pub fn exit_status(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "herd run did not exit; the terminal shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `s` without terminal control sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL`, and
/// two-byte `ESC x`): the text a person reads off the screen.
pub fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                // Parameters and intermediates, then one final byte in '@'..='~'.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                for c in chars.by_ref() {
                    if c == '\x07' {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
