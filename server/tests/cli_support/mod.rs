//! A stand-in Ollama server for CLI tests: a plain HTTP/1.1 listener on an ephemeral loopback
//! port that records every request the `herd` client sends (method, path, JSON body) and
//! answers each from the test's script (status, body). One request per connection
//! (`Connection: close`), so no client reuse can hide a request. Also runs the `herd` binary
//! against it with stdin from a given string (never a terminal).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::Value;

#[path = "../herd_proc/mod.rs"]
mod herd_proc;
pub use herd_proc::HERD;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

/// The test's answer to a request: status and body (sent as `application/x-ndjson` when it
/// has several lines, else `application/json`).
pub type Script = dyn Fn(&Seen) -> (u16, String) + Send + Sync;

pub struct Recorder {
    pub addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    pub fn start(script: impl Fn(&Seen) -> (u16, String) + Send + Sync + 'static) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (log, script) = (log.clone(), script.clone());
                std::thread::spawn(move || serve(stream, &log, &*script));
            }
        });
        Recorder { addr, seen }
    }

    /// The requests so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// `herd ARGS` against this server with `stdin` piped in: (exit code, stdout, stderr).
    pub fn herd(&self, args: &[&str], stdin: &str) -> (i32, String, String) {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(HERD);
        cmd.args(args)
            .env("OLLAMA_HOST", &self.addr)
            .env("HOME", home.path())
            .env_remove("OLLAMA_KEEP_ALIVE");
        let out = herd_proc::piped(&mut cmd, stdin);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Seen>>, script: &Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    let seen = Seen {
        method,
        path,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    log.lock().unwrap().push(seen.clone());
    let (status, text) = script(&seen);
    let kind = if text.trim_end().contains('\n') {
        "application/x-ndjson"
    } else {
        "application/json"
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// NDJSON: one JSON value a line.
pub fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}
