//! `herd run` pulls a model it does not have first, as `ollama run` does (issue 14, item 7): the
//! real SmolLM2 is pushed to a real loopback `docker-registry` from one store, then a fresh
//! `herd serve` with an empty store answers `herd run 127.0.0.1:PORT/library/smol:latest
//! --insecure "hi"` with the pull's progress on stderr and the real runner's answer on stdout.

mod registry_support;

use std::path::Path;
use std::process::{Command, Stdio};

use registry_support::*;

fn run_herd(addr: &str, home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(HERD)
        .args(args)
        .env("OLLAMA_HOST", addr)
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn run_pulls_a_missing_model_then_answers() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let gguf = home.join(".cache/herd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let runner = Path::new(HERD).parent().unwrap().join("runner-llamacpp");
    if !gguf.exists() || !runner.exists() {
        prereq::missing(format!("{} and {}", gguf.display(), runner.display()));
        return;
    }
    let name = format!("127.0.0.1:{}/library/smol:latest", reg.port);

    // Store A: create the model from the GGUF and push it to the registry.
    let a = tempfile::tempdir().unwrap();
    let serve_a = Serve::start(&a.path().join("models"), a.path());
    let modelfile = a.path().join("Modelfile");
    std::fs::write(
        &modelfile,
        format!("FROM {}\nPARAMETER num_predict 16\n", gguf.display()),
    )
    .unwrap();
    let mf = modelfile.to_str().unwrap();
    let (ok, _, err) = run_herd(&serve_a.addr, a.path(), &["create", &name, "-f", mf]);
    assert!(ok, "{err}");
    let (ok, _, err) = run_herd(&serve_a.addr, a.path(), &["push", &name, "--insecure"]);
    assert!(ok && err.contains("success"), "{err}");
    drop(serve_a);

    // Store B is empty: `herd run` pulls, then answers.
    let b = tempfile::tempdir().unwrap();
    let serve_b = Serve::start(&b.path().join("models"), b.path());
    let (ok, out, err) = run_herd(&serve_b.addr, b.path(), &["run", &name, "--insecure", "hi"]);
    assert!(ok, "{err}");
    for s in ["pulling manifest", "writing manifest", "success"] {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert!(!out.trim().is_empty(), "an answer after the pull: {err}");
    // Now present: a second run does not pull again.
    let (ok, out, err) = run_herd(&serve_b.addr, b.path(), &["run", &name, "hi"]);
    assert!(ok && !out.trim().is_empty(), "{err}");
    assert!(!err.contains("pulling manifest"), "{err}");

    // The REPL's `/save` (in a pty through util-linux `script`) creates a model carrying the
    // session: Ollama's `/api/create` with `from`, the messages, system and parameters.
    if Command::new("script").arg("--version").output().is_err() {
        prereq::missing("util-linux `script`");
        return;
    }
    let input = "/set system be brief\n/set parameter num_predict 8\nhi\n/save saved\n/bye\n";
    let mut child = Command::new("script")
        .args(["-qec", &format!("{HERD} run {name}"), "/dev/null"])
        .env("OLLAMA_HOST", &serve_b.addr)
        .env("HOME", b.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Created new model 'saved'"), "{text}");
    let (ok, out, err) = run_herd(&serve_b.addr, b.path(), &["show", "saved", "--modelfile"]);
    assert!(ok, "{err}");
    assert!(out.contains("SYSTEM be brief"), "{out}");
    assert!(out.contains("MESSAGE user hi"), "{out}");
    assert!(out.contains("MESSAGE assistant"), "{out}");
    assert!(out.contains("PARAMETER num_predict 8"), "{out}");
}
