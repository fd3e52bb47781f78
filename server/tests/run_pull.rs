//! `herd run` pulls a model it does not have first, as `ollama run` does (issue 14, item 7): the
//! real SmolLM2 is pushed to a real loopback `docker-registry` from one store, then a fresh
//! `herd serve` with an empty store answers `herd run 127.0.0.1:PORT/library/smol:latest
//! --insecure "hi"` with the pull's progress on stderr and the real runner's answer on stdout.

mod registry_support;
mod terminal_support;

use std::path::Path;
use std::process::{Command, Stdio};

use registry_support::*;
use terminal_support::Terminal;

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

    // The REPL's `/save` (on a pseudo-terminal) creates a model carrying the session: Ollama's
    // `/api/create` with `from`, the messages, system and parameters.
    if !Terminal::available() {
        return prereq::missing("util-linux `script`");
    }
    let mut t = Terminal::start(&serve_b.addr, b.path(), &name);
    t.expect(">>> ");
    t.press("/set system be brief\r");
    t.expect("Set system message.");
    t.expect(">>> ");
    t.press("/set parameter num_predict 8\r");
    t.expect("Set parameter 'num_predict' to '8'");
    t.expect(">>> ");
    t.press("hi\r");
    let answer = t.expect(">>> ");
    t.press("/save saved\r");
    t.expect("Created new model 'saved'");
    t.expect(">>> ");
    // `/load` switches model (an unknown one is refused, the session goes on).
    t.press("/load ghost\r");
    t.expect("Couldn't find model 'ghost'");
    t.expect(">>> ");
    t.press("/load saved\r");
    t.expect("Loading model 'saved'");
    t.expect(">>> ");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
    let (ok, out, err) = run_herd(&serve_b.addr, b.path(), &["show", "saved", "--modelfile"]);
    assert!(ok, "{err}");
    assert!(out.contains("SYSTEM be brief"), "{out}");
    assert!(out.contains("MESSAGE user hi"), "{out}");
    assert!(out.contains("MESSAGE assistant"), "{out}");
    assert!(out.contains("PARAMETER num_predict 8"), "{out}");

    // `herd run saved` opens with the saved conversation on screen, as `ollama run` does.
    // The answer's first line of text: the screen as read (control sequences dropped), after the
    // echoed "hi". (Picking "a line without 'hi'" once chose a bare redraw sequence that the
    // second screen only prints after its prompt, when the model's answer itself began "hi.")
    // The spinner's frames (braille glyphs, drawn while the answer is awaited and erased by
    // control sequences that `plain` drops) may stand before it on a loaded machine.
    let shown = terminal_support::plain(&answer);
    let spinner = |c: char| ('\u{2800}'..='\u{28ff}').contains(&c) || c.is_whitespace();
    let reply = shown
        .lines()
        .map(|l| l.trim().trim_start_matches(spinner))
        .skip_while(|l| !l.ends_with("hi"))
        .skip(1)
        .take_while(|l| !l.starts_with(">>>"))
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned();
    let mut t = Terminal::start(&serve_b.addr, b.path(), "saved");
    t.expect(">>> hi\n");
    t.expect(&reply);
    t.expect(">>> ");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
}
