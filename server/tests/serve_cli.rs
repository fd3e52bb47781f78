//! The real `herd` binary end to end with the fake runner: `herd serve` on a random port, then
//! `herd run` with piped stdin and in a pseudo-terminal (REPL via util-linux `script`), `herd ps`
//! and `herd stop` (the model leaves `herd ps`). Needs `cargo build -p fake-runner`.

mod fake_serve;
mod herd_proc;
mod serve_support;
mod terminal_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use fake_serve::Server;
use herd_proc::{listen, Listening, HERD};
use serve_support::api_support::{ago, TestStore, MT_SYSTEM, MT_TEMPLATE};
use serve_support::scheduler_support;
use terminal_support::Terminal;

fn store() -> TestStore {
    let ts = TestStore::new();
    ts.model("fake", "latest", b"#fake-runner\n", &[], ago(60));
    ts.echo_chat_model("echo");
    ts.model(
        "saved",
        "latest",
        b"#fake-runner\n--echo\n",
        &[
            (
                MT_TEMPLATE,
                b"{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}",
            ),
            (MT_SYSTEM, b"be brief"),
            (
                serve_support::MT_MESSAGES,
                br#"[{"role":"user","content":"first\nsecond"},{"role":"assistant","content":"an answer"}]"#,
            ),
        ],
        ago(60),
    );
    ts
}

#[test]
fn run_with_piped_stdin_then_ps_and_stop() {
    let ts = store();
    let s = Server::start(&ts);
    let (ok, out, err) = s.herd(&["run", "fake"], "hi\n");
    assert!(ok, "{err}");
    assert_eq!(out, "Hello from the fake runner.\n\n");
    // Piped stdin comes first, then the arguments.
    let (ok, out, err) = s.herd(&["run", "echo", "world", "--verbose"], "hello");
    assert!(ok, "{err}");
    assert_eq!(out.trim_end(), "[user:hello world]");
    assert!(
        err.contains("eval count:"),
        "--verbose stats on stderr: {err}"
    );
    assert!(err.contains("total duration:"), "{err}");

    let (ok, out, _) = s.herd(&["ps"], "");
    assert!(ok);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{out}");
    for col in ["ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"] {
        assert!(lines[0].contains(col), "{out}");
    }
    let fake = lines
        .iter()
        .find(|l| l.starts_with("fake:latest"))
        .expect("fake listed");
    assert!(
        fake.contains("100% CPU") && fake.contains("4096") && fake.contains("from now"),
        "{fake}"
    );

    let (ok, _, err) = s.herd(&["stop", "fake"], "");
    assert!(ok, "{err}");
    let (_, out, _) = s.herd(&["ps"], "");
    assert!(!out.contains("fake:latest"), "{out}");
    // As in Ollama: stopping a stored model that is not loaded is fine, an unknown one is not.
    let (ok, _, err) = s.herd(&["stop", "fake"], "");
    assert!(ok, "{err}");
    let (ok, _, err) = s.herd(&["stop", "ghost"], "");
    assert!(!ok);
    assert!(
        err.contains("couldn't find model \"ghost\" to stop"),
        "{err}"
    );
    // As `ollama run`: a missing model is pulled first; offline (registry.ollama.ai out of
    // reach) the pull's error is the run's, and it comes at once rather than hanging.
    let started = std::time::Instant::now();
    let (ok, _, err) = s.herd(&["run", "ghost"], "x");
    assert!(!ok);
    assert!(err.contains("pulling manifest"), "{err}");
    assert!(err.contains("Error: "), "{err}");
    assert!(!err.contains("model 'ghost:latest' not found"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60), "{err}");
}

#[test]
fn run_in_a_terminal_is_a_repl() {
    let ts = store();
    let s = Server::start(&ts);
    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let mut t = Terminal::start(&s.addr, s.home.path(), "echo");
    t.expect(">>> ");
    t.press("/set system be brief\r");
    t.expect("Set system message.");
    t.expect(">>> ");
    t.press("/set parameter num_predict 100\r");
    t.expect("Set parameter 'num_predict' to '100'");
    t.expect(">>> ");
    // Checked as a Modelfile PARAMETER is (Ollama's FormatParams).
    t.press("/set parameter num_predict many\r");
    t.expect("Couldn't set parameter: \"invalid int value [many]\"");
    t.expect(">>> ");
    t.press("/set parameter bogus 1\r");
    t.expect("Couldn't set parameter: \"unknown parameter 'bogus'\"");
    t.expect(">>> ");
    // A `"""` block: continuation lines get the `... ` prompt.
    t.press("\"\"\"first\r");
    t.expect("... ");
    t.press("second\"\"\"\r");
    // The multi-line message and the session's system message reach the template.
    t.expect("[system:be brief][user:first\nsecond]");
    t.expect(">>> ");
    // The second turn carries the first exchange.
    t.press("again\r");
    t.expect(
        "[system:be brief][user:first\nsecond][assistant:[system:be brief][user:first\nsecond]][user:again]",
    );
    t.expect(">>> ");
    t.press("/show system\r");
    let shown = t.expect(">>> ");
    assert!(
        shown.contains("be brief"),
        "/show system shows the session's: {shown}"
    );
    t.press("/clear\r");
    t.expect("Cleared session context");
    t.expect(">>> ");
    t.press("/nonsense\r");
    t.expect("Unknown command '/nonsense'. Type /? for help");
    t.expect(">>> ");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
    // A model saved with a conversation (what `/save` makes: MESSAGE and SYSTEM layers; the
    // real `/save`, and the saved conversation shown on `herd run`, are in run_pull.rs, since
    // `/api/show` and `/api/create` need a real GGUF): the server puts the conversation and the
    // saved system message in front of the next turn.
    let mut t = Terminal::start(&s.addr, s.home.path(), "saved");
    t.expect(">>> ");
    t.press("next\r");
    t.expect("[system:be brief][user:first\nsecond][assistant:an answer][user:next]");
    t.expect(">>> ");
    // `/load` switches to another model with a fresh conversation; an unknown one is refused.
    t.press("/load ghost\r");
    t.expect("Couldn't find model 'ghost'");
    t.expect(">>> ");
    t.press("/load echo\r");
    t.expect("Loading model 'echo'");
    t.expect(">>> ");
    t.press("fresh\r");
    let fresh = t.expect(">>> ");
    assert!(
        fresh.contains("[user:fresh]") && !fresh.contains("be brief"),
        "{fresh}"
    );
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
    // Each line entered is one entry, as Ollama's readline records them.
    let history = std::fs::read_to_string(s.home.path().join(".ollama/history")).unwrap();
    assert!(
        history.contains("\"\"\"first\nsecond\"\"\"\nagain\n"),
        "{history}"
    );
}

/// Issue 14 item 7: the REPL runs on a line editor. The history file is Ollama's (shared with
/// `ollama run`): loaded at start, one entry per line, appended as lines are entered; Up-arrow
/// recalls entries (this session's and the file's); Ctrl-C drops the line being typed and stops
/// a streaming answer; `/set nohistory` stops the writes; Ctrl-D on an empty line exits 0.
#[test]
fn repl_recalls_history_and_takes_control_keys() {
    let ts = store();
    ts.model(
        "slowecho",
        "latest",
        b"#fake-runner\n--echo\n--token-delay-ms\n300\n",
        &[(
            MT_TEMPLATE,
            b"{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}",
        )],
        ago(60),
    );
    // Slow to answer at all: Ctrl-C comes before the first word.
    ts.model(
        "hesitant",
        "latest",
        b"#fake-runner\n--echo\n--token-delay-ms\n5000\n",
        &[(
            MT_TEMPLATE,
            b"{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}",
        )],
        ago(60),
    );
    let s = Server::start(&ts);
    let history = s.home.path().join(".ollama/history");
    std::fs::create_dir_all(history.parent().unwrap()).unwrap();
    std::fs::write(&history, "from ollama\n").unwrap();

    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let mut t = Terminal::start(&s.addr, s.home.path(), "echo");
    t.expect(">>> ");
    t.press("hello there\r");
    t.expect("[user:hello there]");
    t.expect(">>> ");
    // Up-arrow + Enter sends the previous line again: the model sees it twice.
    t.press("\x1b[A\r");
    t.expect("[user:hello there][assistant:[user:hello there]][user:hello there]");
    t.expect(">>> ");
    // Three entries back is the one loaded from the file.
    t.press("\x1b[A\x1b[A\x1b[A\r");
    t.expect("][user:from ollama]");
    t.expect(">>> ");
    // Ctrl-C drops the typed line; the session goes on.
    t.press("never sent\x03");
    t.expect("Use Ctrl + d or /bye to exit.");
    t.expect(">>> ");
    t.press("/set nohistory\r");
    t.expect(">>> ");
    t.press("not recorded\r");
    t.expect("[user:not recorded]");
    t.expect(">>> ");
    // Ctrl-D on an empty line exits, successfully.
    t.press("\x04");
    assert!(t.exit_status().success(), "{}", t.text());
    assert_eq!(
        std::fs::read_to_string(&history).unwrap(),
        "from ollama\nhello there\nhello there\nfrom ollama\n/set nohistory\n"
    );

    // Ctrl-C while an answer streams stops it: the prompt comes back long before the 20-word
    // echo (300 ms a word) would end; the question stays in the conversation (as in Ollama),
    // the cut-off answer does not.
    let words: Vec<String> = (1..=20).map(|i| format!("w{i}")).collect();
    let question = words.join(" ");
    let mut t = Terminal::start(&s.addr, s.home.path(), "slowecho");
    t.expect(">>> ");
    t.press(&format!("{question}\r"));
    // Ollama's spinner on stderr while the first word is awaited, its line cleared for it.
    t.expect("\x1b[1G\u{280b} \x1b[K");
    t.expect("\x1b[2K\x1b[1G");
    t.expect("[user:w1");
    let started = std::time::Instant::now();
    t.press("\x03");
    let cut = t.expect(">>> ");
    assert!(started.elapsed() < Duration::from_secs(4), "{cut}");
    assert!(!cut.contains("w20"), "the answer was cut off: {cut}");
    t.press("next\r");
    // Consecutive user messages merge, as Ollama's template data merges them.
    t.expect(&format!("[user:{question}\n\nnext]"));
    t.expect(">>> ");
    // Ctrl-C on an empty line only says how to leave.
    t.press("\x03");
    t.expect("Use Ctrl + d or /bye to exit.");
    t.expect(">>> ");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());

    // Ctrl-C before the first word: the spinner's line is cleared (the `^C` echo with it) and
    // the prompt comes back right there, as in Ollama: no hint, no blank line.
    let mut t = Terminal::start(&s.addr, s.home.path(), "hesitant");
    t.expect(">>> ");
    t.press("anyone there?\r");
    t.expect("\u{280b} ");
    t.press("\x03");
    let back = t.expect(">>> ");
    assert!(back.contains("\x1b[2K\x1b[1G"), "{back:?}");
    let after_clear = &back[back.rfind("\x1b[2K\x1b[1G").unwrap()..];
    assert!(!after_clear.contains('\n'), "{back:?}");
    assert!(!back.contains("Use Ctrl + d"), "{back:?}");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
}

/// The REPL's commands answer as Ollama's `cmd/interactive.go` does: help screens, `/show`
/// without a topic, `/show parameters` (the model's, then the session's), usage lines, unknown
/// `/set` words, `/list`, the thinking warning (its `ensureThinkingSupport`), and `/save` from a
/// model with a saved conversation keeping that conversation in front of the session's.
#[test]
fn repl_commands_answer_as_ollamas() {
    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let ts = store();
    // A real (tiny) GGUF, so that `/api/show` describes it; the fake runner answers for it.
    ts.model(
        "tiny",
        "latest",
        &serve_support::api_support::tiny_gguf(),
        &[
            (serve_support::MT_PARAMS, br#"{"temperature":0.7}"#),
            (
                serve_support::MT_MESSAGES,
                br#"[{"role":"user","content":"first"},{"role":"assistant","content":"one"}]"#,
            ),
        ],
        ago(60),
    );
    let s = Server::start(&ts);
    let mut t = Terminal::start(&s.addr, s.home.path(), "tiny");
    t.expect(">>> first\none\n");
    t.expect(">>> ");
    t.press("/?\r");
    t.expect("Use \"\"\" to begin a multi-line message.");
    t.expect(">>> ");
    t.press("/? show\r");
    t.expect("  /show info         Show details for this model");
    t.expect(">>> ");
    t.press("/show\r");
    t.expect("  /show template     Show prompt template");
    t.expect(">>> ");
    t.press("/set parameter\r");
    t.expect("Available Parameters:");
    t.expect(">>> ");
    t.press("/set parameter num_predict 8\r");
    t.expect("Set parameter 'num_predict' to '8'");
    t.expect(">>> ");
    t.press("/show parameters\r");
    let shown = t.expect(">>> ");
    assert!(
        shown.contains("Model defined parameters:\n  temperature                    0.7\n\n")
            && shown.contains("User defined parameters:\n  num_predict                    8\n"),
        "{shown:?}"
    );
    t.press("/set bogus\r");
    t.expect("Unknown command '/set bogus'. Type /? for help");
    t.expect(">>> ");
    t.press("/set format yaml\r");
    t.expect("Invalid or missing format. For 'json' mode use '/set format json'");
    t.expect(">>> ");
    t.press("/load\r");
    t.expect("Usage:\n  /load <modelname>");
    t.expect(">>> ");
    t.press("/list\r");
    let listed = t.expect(">>> ");
    assert!(
        listed.contains("NAME") && listed.contains("tiny:latest"),
        "{listed}"
    );
    t.press("hi\r");
    t.expect("Hello from the fake runner.");
    t.expect(">>> ");
    t.press("/save again\r");
    t.expect("Created new model 'again'");
    t.expect(">>> ");
    // The model reports no `thinking` capability: the setting is taken, with a warning.
    t.press("/set think\r");
    t.expect("warning: model \"tiny\" does not support thinking output");
    t.expect("Set 'think' mode.");
    t.expect(">>> ");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
    let (ok, out, err) = s.herd(&["show", "again", "--modelfile"], "");
    assert!(ok, "{err}");
    let saved: Vec<&str> = out.lines().filter(|l| l.starts_with("MESSAGE")).collect();
    assert_eq!(
        saved,
        [
            "MESSAGE user first",
            "MESSAGE assistant one",
            "MESSAGE user hi",
            "MESSAGE assistant Hello from the fake runner."
        ],
        "{out}"
    );
    assert!(out.contains("PARAMETER num_predict 8"), "{out}");
    // `--think` on a model that cannot think fails at the load, before any prompt.
    let mut t = Terminal::start(&s.addr, s.home.path(), "tiny --think");
    t.expect("\"tiny\" does not support thinking");
    assert!(!t.exit_status().success(), "{}", t.text());
    assert!(!t.text().contains(">>> "), "{}", t.text());
}

/// `--format` takes a JSON schema as well as `json`: it reaches the server as that object.
#[test]
fn run_format_takes_a_json_schema() {
    let ts = store();
    let s = Server::start(&ts);
    let schema = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    let (ok, out, err) = s.herd(&["run", "fake", "--format", schema, "hi"], "");
    assert!(ok, "{err}");
    assert_eq!(out, "Hello from the fake runner.\n\n");
    let (ok, _, err) = s.herd(&["run", "fake", "--format", "yaml", "hi"], "");
    assert!(!ok);
    assert!(err.contains("invalid --format"), "{err}");
}

/// Answers wrap at the terminal's width as Ollama wraps them (words move down whole); `/set
/// nowordwrap` turns it off.
#[test]
fn repl_wraps_words_at_the_terminal_width() {
    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let ts = store();
    let s = Server::start(&ts);
    let mut t = Terminal::start_sized(&s.addr, s.home.path(), "echo", 30);
    t.expect(">>> ");
    t.press("alpha beta gamma delta epsilon\r");
    // "[user:alpha beta gamma delta" crosses column 25 inside "delta": it is erased and
    // rewritten on the next line.
    // (The line editor wraps the typed line on its own; the answer starts after "[user:".)
    t.expect("[user:");
    let wrapped = t.expect("epsilon]");
    t.expect(">>> ");
    assert!(
        wrapped.starts_with("alpha beta gamma d") && wrapped.ends_with("\x1b[K\ndelta epsilon]"),
        "{wrapped:?}"
    );
    t.press("/set nowordwrap\r");
    t.expect("Set 'nowordwrap' mode.");
    t.expect(">>> ");
    t.press("alpha beta gamma delta epsilon\r");
    t.expect("[user:");
    let plain = t.expect("epsilon]");
    t.expect(">>> ");
    assert_eq!(plain, "alpha beta gamma delta epsilon]");
    t.press("/bye\r");
    assert!(t.exit_status().success(), "{}", t.text());
}

/// Processes whose command line mentions `needle` (any parent).
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[test]
fn no_runner_outlives_herd_serve() {
    let ts = store();
    let blobs = ts.root().join("blobs").display().to_string();
    let mut s = Server::start(&ts);
    let (ok, _, err) = s.herd(&["run", "fake", "--keepalive", "-1s"], "hi");
    assert!(ok, "{err}");
    let runners = processes_mentioning(&blobs);
    assert_eq!(runners.len(), 1, "one runner loaded: {runners:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(s.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // herd reaps its runners before exiting; give the kernel a moment to drop /proc entries.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !processes_mentioning(&blobs).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        processes_mentioning(&blobs).is_empty(),
        "orphan runner left"
    );
}

/// `(soft, hard)` "Max open files" of a process, from /proc.
fn nofile_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let mut f = line["Max open files".len()..].split_whitespace();
    (f.next().unwrap().to_owned(), f.next().unwrap().to_owned())
}

/// Issue 22 item 5: started under a soft limit of 256 open files, `herd serve` raises it to the
/// hard limit, so many slow connections do not exhaust its descriptors.
#[test]
fn serve_raises_the_open_file_limit() {
    let ts = store();
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -Sn 256 && exec \"$0\" serve", HERD])
        .env("HOME", home.path())
        .env("OLLAMA_HOST", "127.0.0.1:0")
        .env("OLLAMA_MODELS", ts.root())
        .env("HERD_RUNNER", scheduler_support::fake_runner())
        .stdout(Stdio::null());
    let Listening { mut child, .. } = listen(&mut cmd, Duration::from_secs(30), None);
    let (soft, hard) = nofile_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_ne!(hard, "256", "the hard limit must exceed 256 for this test");
    assert_eq!(soft, hard, "soft open-file limit raised to the hard one");
}

/// `ollama run`'s non-interactive cases: an empty piped stdin, or stdout that is no terminal,
/// only loads the model; an embedding model prints the prompt's embedding as a JSON array
/// (`--dimensions` cuts it) and refuses to run without input.
#[test]
fn run_without_a_prompt_only_loads_and_embedding_models_print_vectors() {
    let ts = store();
    // An embedding GGUF (pooling_type) that the fake runner serves (16-wide vectors).
    let gguf = server::gguf::GgufBuilder::tiny_llama()
        .kv("llama.pooling_type", 1u32)
        .build()
        .unwrap();
    ts.model("emb", "latest", &gguf, &[], ago(60));
    let s = Server::start(&ts);

    let (ok, out, err) = s.herd(&["run", "fake"], "");
    assert!(ok, "{err}");
    assert_eq!(out, "", "nothing asked, nothing answered");
    let (_, ps, _) = s.herd(&["ps"], "");
    assert!(ps.contains("fake:latest"), "loaded: {ps}");

    let (ok, out, err) = s.herd(&["run", "emb", "hello", "world"], "");
    assert!(ok, "{err}");
    let v: Vec<f64> = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v.len(), 16, "{out}");
    let (ok, out, err) = s.herd(&["run", "emb", "hello", "--dimensions", "3"], "");
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Vec<f64>>(out.trim()).unwrap().len(),
        3
    );
    let (ok, _, err) = s.herd(&["run", "emb"], "");
    assert!(!ok);
    assert!(err.contains("embedding models require input text"), "{err}");
}
