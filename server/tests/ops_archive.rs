//! `herd archive` with the real build: the archive lands in `<store>/../binaries/<id>/`, its
//! manifest's sha256s match the files (checked with sha256sum, not herd's own hasher), archiving
//! again is a no-op, a tampered archive is never overwritten; the archived herd, started from the
//! archive on a scratch port, answers /api/version with the same commit and runs SmolLM2 with the
//! archived runner and engine libraries; `herd doctor` then reports that herd on its port.
//!
//! Needs `cargo build --workspace --bins` and `scripts/fetch-test-models`; a missing prerequisite
//! fails the test unless HERD_ALLOW_SKIP=1.

mod ops_support;
mod serve_support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn archive(store: &Path, runner: &Path) -> Output {
    Command::new(HERD)
        .arg("archive")
        .env("OLLAMA_MODELS", store)
        .env("HERD_RUNNER", runner)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn sha256sum(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[test]
fn archive_is_complete_idempotent_and_runs() {
    let Some(runner) = native_runner() else {
        return;
    };
    let Some(model) = test_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let ts = TestStore::new();
    let out = archive(ts.root(), &runner);
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(
        Command::new(HERD)
            .args(["archive", "--print-id"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let dir = ts.dir.path().join("binaries").join(&id);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("archived {id} in")),
        "{out:?}"
    );

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["id"], id.as_str());
    let commit = manifest["git_commit"].as_str().unwrap().to_string();
    assert!(
        id.ends_with(&commit[..12.min(commit.len())]),
        "{id} {commit}"
    );
    assert!(manifest["engines"]["llama.cpp"]["build"]
        .as_str()
        .unwrap()
        .starts_with('b'));
    let files = manifest["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["file"].as_str().unwrap()).collect();
    for want in ["herd", "runner-llamacpp", "libllama.so.0", "libggml-cpu.so"] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "manifest.json")
        .collect();
    on_disk.sort();
    assert_eq!(
        on_disk, names,
        "the manifest lists exactly the archived files"
    );
    for f in files {
        let path = dir.join(f["file"].as_str().unwrap());
        if let Some(link) = f["link"].as_str() {
            assert_eq!(std::fs::read_link(&path).unwrap(), Path::new(link));
            continue;
        }
        assert_eq!(f["sha256"].as_str().unwrap(), sha256sum(&path), "{f}");
        assert_eq!(
            f["size"].as_u64().unwrap(),
            std::fs::metadata(&path).unwrap().len()
        );
    }
    assert_eq!(sha256sum(&dir.join("herd")), sha256sum(Path::new(HERD)));

    // Again: nothing to do.
    let out = archive(ts.root(), &runner);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("already archived"));

    // The archived build runs from its archive: its own runner, its own libraries.
    register_file(&ts, "smol", &model, &[]);
    let home = tempfile::tempdir().unwrap();
    let served = ops_support::serve(
        &dir.join("herd"),
        &[("OLLAMA_MODELS", ts.root()), ("HOME", home.path())],
    );
    let (status, version) = ops_support::get(&format!("{}/api/version", served.base));
    assert_eq!(status, 200);
    assert_eq!(version["git_commit"], commit.as_str(), "{version}");
    let (status, _) = ops_support::get(&format!("{}/readyz", served.base));
    assert_eq!(status, 200);
    let out = Command::new("curl")
        .args(["-s", "-m", "120", &format!("{}/api/generate", served.base), "-d"])
        .arg(r#"{"model":"smol","prompt":"Hi","stream":false,"options":{"num_predict":3,"temperature":0}}"#)
        .output()
        .unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        reply["done"],
        true,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(reply["eval_count"].as_u64().unwrap() >= 1, "{reply}");

    // doctor sees that herd on its port.
    let port = served.base.rsplit(':').next().unwrap().to_string();
    let out = Command::new(HERD)
        .arg("doctor")
        .env("OLLAMA_HOST", format!("127.0.0.1:{port}"))
        .env("OLLAMA_MODELS", ts.root())
        .env("HERD_RUNNER", &runner)
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines().any(|l| l.starts_with("ok   port")
            && l.contains(&format!("(commit {commit}) already answers"))),
        "{text}"
    );
    // The container health probe: ready while it serves, not once it is gone.
    let probe = |port: &str| {
        Command::new(HERD)
            .args(["doctor", "--ready"])
            .env("OLLAMA_HOST", format!("0.0.0.0:{port}"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = probe(&port);
    assert!(out.status.success(), "{out:?}");
    drop(served);
    let out = probe(&port);
    assert!(!out.status.success(), "{out:?}");

    // A valid archive of a different build under this id is not overwritten.
    let manifest_path = dir.join("manifest.json");
    let original = std::fs::read(&manifest_path).unwrap();
    let mut other = manifest.clone();
    other["engines"]["llama.cpp"]["build"] = "b1".into();
    std::fs::write(&manifest_path, other.to_string()).unwrap();
    let out = archive(ts.root(), &runner);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already holds a different build"),
        "{out:?}"
    );
    std::fs::write(&manifest_path, original).unwrap();

    // A tampered archive is not overwritten.
    std::fs::write(dir.join("libggml-cpu.so"), b"tampered").unwrap();
    let out = archive(ts.root(), &runner);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a valid archive"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read(dir.join("libggml-cpu.so")).unwrap(),
        b"tampered"
    );
}
