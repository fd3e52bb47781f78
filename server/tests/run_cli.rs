//! `herd run MODEL PROMPT` without a REPL, against a recording stand-in server: what it asks
//! (`/api/show`, then `/api/generate` as Ollama's `generate` in cmd/cmd.go — not `/api/chat`),
//! the request's fields, and what it prints (thinking block, two trailing newlines, `--verbose`
//! statistics on stderr, errors, Ctrl-C).

mod cli_support;

use cli_support::{ndjson, Recorder, Seen};
use serde_json::{json, Value};

/// A server whose model has `caps` and whose generate streams `answer`.
fn server(caps: Value, answer: Vec<Value>) -> Recorder {
    Recorder::start(move |req: &Seen| match req.path.as_str() {
        "/api/show" => (200, json!({"capabilities": caps}).to_string()),
        "/api/generate" => (200, ndjson(&answer)),
        _ => (404, json!({"error": "unexpected"}).to_string()),
    })
}

fn done() -> Value {
    json!({
        "response": "", "done": true, "done_reason": "stop",
        "total_duration": 2_000_000_000u64, "eval_count": 4, "eval_duration": 1_000_000_000u64
    })
}

fn paths(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

#[test]
fn one_answer_goes_through_generate() {
    let s = server(
        json!(["completion", "thinking"]),
        vec![
            json!({"thinking": "Hmm", "done": false}),
            json!({"response": "Hi", "done": false}),
            done(),
        ],
    );
    let (code, out, err) = s.herd(
        &[
            "run",
            "m",
            "hello",
            "there",
            "--format",
            "json",
            "--verbose",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        paths(&s.seen()),
        ["POST /api/show", "POST /api/generate"],
        "no chat, no separate preload"
    );
    // A model that thinks is asked to (Ollama's inferThinkingOption); options always present.
    assert_eq!(
        s.seen()[1].body,
        json!({"model": "m", "prompt": "hello there", "options": {}, "format": "json", "think": true})
    );
    // Output is not a terminal: plain markers, no colour, then two newlines.
    assert_eq!(out, "Thinking...\nHmm\n...done thinking.\n\nHi\n\n");
    assert!(err.contains("total duration:       2s\n"), "{err}");
    assert!(
        err.contains("eval rate:            4.00 tokens/s\n"),
        "{err}"
    );
}

#[test]
fn piped_stdin_comes_first_and_flags_reach_the_request() {
    let s = server(
        json!(["completion", "thinking"]),
        vec![
            json!({"thinking": "secret", "done": false}),
            json!({"response": "ok", "done": false}),
            done(),
        ],
    );
    let (code, out, err) = s.herd(
        &["run", "m", "world", "--think=false", "--hidethinking"],
        "hello\n",
    );
    assert_eq!(code, 0, "{err}");
    let body = &s.seen()[1].body;
    // Stdin as read (its newline kept), then the arguments, joined by a space.
    assert_eq!(body["prompt"], "hello\n world");
    assert_eq!(body["think"], false);
    assert_eq!(out, "ok\n\n", "hidden thinking");
    assert!(!err.contains("eval"), "no stats without --verbose: {err}");
}

#[test]
fn a_model_that_cannot_think_gets_no_think_field() {
    let s = server(
        json!(["completion"]),
        vec![json!({"response": "x", "done": false}), done()],
    );
    let (code, _, err) = s.herd(&["run", "m", "q"], "");
    assert_eq!(code, 0, "{err}");
    assert!(
        s.seen()[1].body.get("think").is_none(),
        "{:?}",
        s.seen()[1].body
    );
}

#[test]
fn images_named_in_the_prompt_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("cat.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\nrest").unwrap();
    let s = server(
        json!(["completion", "vision"]),
        vec![json!({"response": "a cat", "done": false}), done()],
    );
    let prompt = format!("what is {}", png.display());
    let (code, out, err) = s.herd(&["run", "m", &prompt], "");
    assert_eq!(code, 0, "{err}");
    let body = &s.seen()[1].body;
    assert_eq!(body["prompt"], "what is");
    assert_eq!(body["images"], json!(["iVBORw0KGgpyZXN0"]));
    assert!(
        err.contains(&format!("Added image '{}'", png.display())),
        "{err}"
    );
    assert_eq!(out, "a cat\n\n");
}

#[test]
fn an_empty_prompt_only_loads() {
    let s = server(
        json!(["completion"]),
        vec![json!({"response": "", "done": true, "load_duration": 1_000_000})],
    );
    let (code, out, err) = s.herd(&["run", "m", "--verbose"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        s.seen()[1].body,
        json!({"model": "m", "prompt": "", "options": {}})
    );
    // Nothing on stdout; the stats of the load on stderr, as Ollama prints them.
    assert_eq!(out, "");
    assert!(err.contains("load duration:        1ms"), "{err}");
}

#[test]
fn an_error_line_ends_the_run_after_what_was_shown() {
    let s = server(
        json!(["completion"]),
        vec![
            json!({"response": "par", "done": false}),
            json!({"error": "boom"}),
        ],
    );
    let (code, out, err) = s.herd(&["run", "m", "q"], "");
    assert_eq!(code, 1);
    assert_eq!(out, "par", "no newline of herd's own before the error");
    assert_eq!(err, "Error: boom\n");
}

#[test]
fn keepalive_is_a_go_duration() {
    let s = server(
        json!(["completion"]),
        vec![json!({"response": "x", "done": false}), done()],
    );
    for (flag, sent) in [
        ("1h30m", json!("1h30m0s")),
        ("300ms", json!("300ms")),
        ("-1s", json!(-1)),
    ] {
        let (code, _, err) = s.herd(&["run", "m", "q", "--keepalive", flag], "");
        assert_eq!(code, 0, "{flag}: {err}");
        let last = s.seen().pop().unwrap();
        assert_eq!(last.path, "/api/generate");
        assert_eq!(last.body["keep_alive"], sent, "{flag}");
    }
    // Ollama's error (Go's time.ParseDuration), before anything is asked of the server.
    let before = s.seen().len();
    let (code, out, err) = s.herd(&["run", "m", "q", "--keepalive", "5"], "");
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(err, "Error: time: missing unit in duration \"5\"\n");
    let (code, _, err) = s.herd(&["run", "m", "q", "--keepalive", "1d"], "");
    assert_eq!(code, 1);
    assert_eq!(err, "Error: time: unknown unit \"d\" in duration \"1d\"\n");
    assert_eq!(s.seen().len(), before, "no request for a bad flag");
}
