//! Harness for the RPC tests (issue 20): a pair of network namespaces joined by a veth pair
//! (removed on drop, even when the test fails), a test CA with worker and client certificates
//! (openssl CLI), child processes run inside a namespace with their output kept for
//! assertions, and curl run inside a namespace as the HTTP client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");
pub const TOKEN: &str = "rpc-test-token-0123456789";

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces: `serve` (address `serve_ip`) and `worker` (`worker_ip`), one /30 between them.
pub struct Netns {
    pub serve: String,
    pub worker: String,
    pub serve_ip: String,
    pub worker_ip: String,
}

impl Netns {
    /// Makes the pair; fails the test (naming what it needs) where namespaces are not allowed.
    pub fn create() -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = std::process::id() % 10_000 * 10 + N.fetch_add(1, Ordering::Relaxed) % 10;
        let subnet = (std::process::id() + N.load(Ordering::Relaxed) * 7) % 250 + 1;
        let ns = Netns {
            serve: format!("herd-rpc-s{id}"),
            worker: format!("herd-rpc-w{id}"),
            serve_ip: format!("10.213.{subnet}.1"),
            worker_ip: format!("10.213.{subnet}.2"),
        };
        let (va, vb) = (format!("hrs{id}"), format!("hrw{id}"));
        let steps: Vec<Vec<String>> = vec![
            vec!["ip", "netns", "add", &ns.serve],
            vec!["ip", "netns", "add", &ns.worker],
            vec![
                "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
            ],
            vec!["ip", "link", "set", &va, "netns", &ns.serve],
            vec!["ip", "link", "set", &vb, "netns", &ns.worker],
            vec![
                "ip",
                "-n",
                &ns.serve,
                "addr",
                "add",
                &format!("{}/30", ns.serve_ip),
                "dev",
                &va,
            ],
            vec![
                "ip",
                "-n",
                &ns.worker,
                "addr",
                "add",
                &format!("{}/30", ns.worker_ip),
                "dev",
                &vb,
            ],
            vec!["ip", "-n", &ns.serve, "link", "set", &va, "up"],
            vec!["ip", "-n", &ns.worker, "link", "set", &vb, "up"],
            vec!["ip", "-n", &ns.serve, "link", "set", "lo", "up"],
            vec!["ip", "-n", &ns.worker, "link", "set", "lo", "up"],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = sh(&args) {
                drop(ns); // removes whatever was made
                panic!(
                    "these tests need network namespaces: run as root or with CAP_NET_ADMIN, \
                     with iproute2 installed (scripts/setup): {e}"
                );
            }
        }
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so the pair.
        let _ = sh(&["ip", "netns", "del", &self.serve]);
        let _ = sh(&["ip", "netns", "del", &self.worker]);
    }
}

/// A child process (in a namespace, or here with `ns` None) whose stdout and stderr lines are
/// kept. Killed on drop.
pub struct Proc {
    pub child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub fn spawn(ns: Option<&str>, bin: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(args)
            .env_remove("HERD_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn");
        let log = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for r in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err),
        ] {
            let sink = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    sink.lock().unwrap().push(line);
                }
            });
        }
        Proc { child, log }
    }

    pub fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits for a line containing `needle`; returns that line.
    pub fn wait_for(&self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} within {limit:?}; output:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

/// `herd serve` on `127.0.0.1:0` in `ns`, once it reports its address: (process, address).
pub fn serve(ns: &str, models: &Path, home: &Path, env: &[(&str, &str)]) -> (Proc, String) {
    let mut all = vec![
        ("HOME", home.to_str().unwrap()),
        ("OLLAMA_HOST", "127.0.0.1:0"),
        ("OLLAMA_MODELS", models.to_str().unwrap()),
        ("OLLAMA_MAX_LOADED_MODELS", "1"),
    ];
    all.extend_from_slice(env);
    let p = Proc::spawn(Some(ns), HERD, &["serve"], &all);
    let line = p.wait_for("Listening on ", Duration::from_secs(60));
    let addr = line.split("Listening on ").nth(1).unwrap();
    let addr = addr.split_whitespace().next().unwrap().to_string();
    (p, addr)
}

/// `herd worker --listen ADDR` in `ns` (None = here), ready once its RPC server has started.
pub fn worker(ns: Option<&str>, listen: &str, env: &[(&str, &str)]) -> Proc {
    let p = Proc::spawn(
        ns,
        HERD,
        &["worker", "--listen", listen, "--threads", "1"],
        env,
    );
    p.wait_for("ggml RPC server started", Duration::from_secs(60));
    p
}

/// POST `body` (JSON) to `url` with curl inside `ns`; the response body.
pub fn post(ns: &str, url: &str, body: &serde_json::Value) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-sS",
            "--max-time",
            "600",
            url,
            "-d",
        ])
        .arg(body.to_string())
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn get(ns: &str, url: &str) -> serde_json::Value {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sS", "--max-time", "60", url])
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// A streaming POST: curl's stdout, line by line as it arrives.
pub fn post_stream(
    ns: &str,
    url: &str,
    body: &serde_json::Value,
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-sS",
            "-N",
            "--max-time",
            "600",
            url,
            "-d",
        ])
        .arg(body.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    let out = BufReader::new(c.stdout.take().unwrap());
    (c, out)
}

/// Test CA plus a worker certificate for `worker_ip` and a client certificate, in `dir`.
pub struct Certs {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

pub fn certs(dir: &Path, worker_ip: &str) -> Certs {
    let script = format!(
        r#"set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -days 1 -subj "/CN=herd rpc test CA" -keyout ca.key -out ca.pem
printf 'subjectAltName=IP:{worker_ip}\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n' > w.ext
printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n' > c.ext
openssl req $ec -subj /CN=worker -keyout key.pem -out w.csr
openssl x509 -req -days 1 -set_serial 2 -in w.csr -CA ca.pem -CAkey ca.key -extfile w.ext -out cert.pem
openssl req $ec -subj /CN=serve -keyout client.key -out c.csr
openssl x509 -req -days 1 -set_serial 3 -in c.csr -CA ca.pem -CAkey ca.key -extfile c.ext -out client.pem
"#
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "making certificates needs openssl (scripts/setup): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Certs {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}
