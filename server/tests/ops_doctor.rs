//! `herd doctor` (the real binary, the real runner) on a temp store: a clean store passes; an
//! orphaned blob only warns; a blob whose bytes were corrupted in place (same size) is caught
//! only by `--verify`; a manifest pointing at a missing blob, an unparsable manifest and a
//! leftover partial download are reported; a port held by a program that is not herd fails.
//!
//! Needs `cargo build --workspace --bins`; a missing runner fails the test unless HERD_ALLOW_SKIP=1.

mod serve_support;

use std::process::{Command, Output, Stdio};

use serve_support::api_support::{ago, TestStore};
use serve_support::native_runner;

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn doctor(ts: &TestStore, runner: &std::path::Path, port: u16, extra: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(HERD)
        .arg("doctor")
        .args(extra)
        .env("HOME", home.path())
        .env("OLLAMA_HOST", format!("127.0.0.1:{port}"))
        .env("OLLAMA_MODELS", ts.root())
        .env("HERD_RUNNER", runner)
        .env_remove("HERD_API_KEYS")
        .env_remove("HERD_API_KEYS_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The lines of `check` at `level`.
fn lines<'a>(out: &'a str, level: &str, check: &str) -> Vec<&'a str> {
    out.lines()
        .filter(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some(level) && w.next() == Some(check)
        })
        .collect()
}

#[test]
fn doctor_reports_store_damage_and_verify_catches_corruption() {
    let Some(runner) = native_runner() else {
        return;
    };
    let ts = TestStore::new();
    let model = ts.model("good", "latest", b"GGUF good model bytes", &[], ago(60));
    let orphan = ts.blob(b"nobody references me");
    // Corrupt the model blob in place: same size, different bytes.
    let hex = model.model_blob.strip_prefix("sha256:").unwrap();
    let blob_path = ts.root().join("blobs").join(format!("sha256-{hex}"));
    std::fs::write(&blob_path, b"GGUF evil model bytes").unwrap();

    let port = free_port();
    let out = doctor(&ts, &runner, port, &[]);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "doctor failed without --verify:\n{text}"
    );
    assert_eq!(lines(&text, "ok", "engine").len(), 2, "{text}");
    assert_eq!(lines(&text, "ok", "port").len(), 1, "{text}");
    // The disk line's level depends on this machine's free space (warn below 10 GB): only a
    // fail would be wrong here.
    let disk = lines(&text, "ok", "disk").len() + lines(&text, "warn", "disk").len();
    assert_eq!(disk, 1, "{text}");
    let warns = lines(&text, "warn", "store");
    assert_eq!(warns.len(), 1, "{text}");
    assert!(warns[0].contains(&orphan), "{text}");
    assert!(warns[0].contains("referenced by no manifest"), "{text}");
    assert!(!text.contains("corrupt"), "{text}");
    let summary = lines(&text, "ok", "store");
    assert!(
        summary.len() == 1 && summary[0].contains("1 manifests, 3 blobs"),
        "{text}"
    );

    let out = doctor(&ts, &runner, port, &["--verify"]);
    let text = stdout(&out);
    assert!(
        !out.status.success(),
        "--verify passed a corrupt blob:\n{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("check(s) failed"),
        "{out:?}"
    );
    let fails = lines(&text, "fail", "store");
    assert!(
        fails
            .iter()
            .any(|l| l.contains(&model.model_blob) && l.contains("is corrupt")),
        "{text}"
    );
    assert!(fails.iter().any(|l| l.contains("3 re-hashed")), "{text}");

    // Repair the blob; break the store in the other ways.
    std::fs::write(&blob_path, b"GGUF good model bytes").unwrap();
    let missing = format!("sha256:{}", "ab".repeat(32));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{missing}","size":7}},"layers":[]}}"#
    );
    let path = ts.manifest_path("broken", "latest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, manifest).unwrap();
    let path = ts.manifest_path("garbage", "latest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"{ not json").unwrap();
    std::fs::write(
        ts.root()
            .join("blobs")
            .join(format!("sha256-{}-partial", "cd".repeat(32))),
        b"half",
    )
    .unwrap();

    let out = doctor(&ts, &runner, port, &[]);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    let fails = lines(&text, "fail", "store");
    assert!(
        fails
            .iter()
            .any(|l| l.contains("broken") && l.contains(&format!("missing blob {missing}"))),
        "{text}"
    );
    assert!(
        fails
            .iter()
            .any(|l| l.contains("garbage") && l.contains("does not parse")),
        "{text}"
    );
    assert!(
        lines(&text, "warn", "store")
            .iter()
            .any(|l| l.contains("unfinished download")),
        "{text}"
    );
}

#[test]
fn doctor_fails_on_a_port_held_by_another_program_and_a_missing_runner() {
    let Some(runner) = native_runner() else {
        return;
    };
    let ts = TestStore::new();
    // Listening but never answering HTTP (nobody accepts: the request times out).
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let out = doctor(&ts, &runner, port, &[]);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    let fails = lines(&text, "fail", "port");
    assert!(
        fails.len() == 1 && fails[0].contains(&format!("127.0.0.1:{port}")),
        "{text}"
    );
    drop(squatter);

    let gone = ts.dir.path().join("no-such-runner");
    let out = doctor(&ts, &gone, free_port(), &[]);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        lines(&text, "fail", "engine")
            .iter()
            .any(|l| l.contains("not found")),
        "{text}"
    );
}
