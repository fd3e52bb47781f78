//! End to end: the real `herd` binary serves a temp `OLLAMA_MODELS` on a random port, and the
//! real `herd list` / `herd show` / `herd cp` / `herd rm` talk to it over HTTP as users would.

mod api_support;
mod herd_proc;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api_support::*;
use herd_proc::{listen, Listening, HERD};

/// A running `herd serve`, stopped with SIGTERM on drop.
struct Server {
    child: Child,
    addr: String,
    /// herd serve creates ~/.ollama/id_ed25519: keep it out of the real home.
    _home: tempfile::TempDir,
}

impl Server {
    fn start(models: &std::path::Path) -> Server {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(HERD);
        cmd.arg("serve")
            .env("HOME", home.path())
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", models)
            .env("OLLAMA_DEBUG", "0")
            .env_remove("HERD_LOG_FORMAT")
            .stdout(Stdio::null());
        let Listening { child, addr, .. } = listen(&mut cmd, Duration::from_secs(30), None);
        Server {
            child,
            addr,
            _home: home,
        }
    }

    fn herd(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(HERD)
            .args(args)
            .env("OLLAMA_HOST", &self.addr)
            .output()
            .expect("run herd");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn stop(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "herd serve ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_list_show_copy_remove() {
    let ts = TestStore::new();
    let w = ts.model(
        "tiny",
        "latest",
        &tiny_gguf(),
        &[(MT_PARAMS, br#"{"temperature":0.2}"#)],
        ago(2 * 3600),
    );
    let server = Server::start(ts.root());

    let (ok, out, err) = server.herd(&["list"]);
    assert!(ok, "{err}");
    let id = &w.manifest_digest[..12];
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "ID", "SIZE", "MODIFIED"]
    );
    let size = server::cli::format::human_bytes(w.size);
    assert_eq!(
        lines[1],
        // tablewriter's padding: four spaces after every cell, the last one too.
        format!("tiny:latest    {id}    {size}    2 hours ago    ")
    );
    // Columns line up: each header starts where its column does.
    assert_eq!(lines[0].find("ID"), lines[1].find(id));

    let (ok, out, err) = server.herd(&["show", "tiny"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("  Model\n    architecture        llama    "),
        "{out}"
    );
    assert!(out.contains("    context length      4096     "), "{out}");
    assert!(
        out.contains("  Parameters\n    temperature    0.2    \n"),
        "{out}"
    );

    let (ok, out, _) = server.herd(&["show", "tiny", "--parameters"]);
    assert!(ok);
    assert_eq!(out, format!("{:<30} 0.2\n", "temperature"));

    let (ok, out, err) = server.herd(&["cp", "tiny", "copy:v2"]);
    assert!(ok, "{err}");
    assert_eq!(out, "copied 'tiny' to 'copy:v2'\n");
    let (ok, out, err) = server.herd(&["rm", "copy:v2", "tiny"]);
    assert!(ok, "{err}");
    // The unload before delete succeeds (nothing was loaded), so no warning.
    assert_eq!(err, "");
    assert_eq!(out, "deleted 'copy:v2'\ndeleted 'tiny'\n");
    let (ok, out, _) = server.herd(&["ls"]);
    assert!(ok);
    assert_eq!(out, "NAME    ID    SIZE    MODIFIED \n");

    let (ok, _, err) = server.herd(&["stop", "missing"]);
    assert!(!ok);
    assert_eq!(err.trim(), "Error: couldn't find model \"missing\" to stop");

    let (ok, _, err) = server.herd(&["show", "missing"]);
    assert!(!ok);
    assert_eq!(err.trim(), "Error: model 'missing:latest' not found");

    assert!(
        server.stop().success(),
        "herd serve should exit 0 on SIGTERM"
    );
}

#[test]
fn clients_explain_a_missing_server() {
    // Bind then drop a listener so the port is (very likely) closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(HERD)
        .arg("list")
        .env("OLLAMA_HOST", format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not connect to herd server") && err.contains("herd serve"),
        "{err}"
    );
}

#[test]
fn version_flag_prints_the_version() {
    // No server there: Ollama's two warnings, then herd's pins line on stderr (metrics_serve
    // checks the lines with a server answering).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(HERD)
        .arg("--version")
        .env("OLLAMA_HOST", format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let p = server::provenance::current();
    // stdout is exactly `ollama -v`'s (scripts parse it); herd's pins line is on stderr.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "Warning: could not connect to a running Ollama instance\nWarning: client version is {}\n",
            server::OLLAMA_COMPAT_VERSION,
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("{}\n", p.pins_line())
    );
}
