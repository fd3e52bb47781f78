//! How the `herd run` REPL meets a failed turn, as Ollama's (cmd/interactive.go
//! `generateInteractive`, cmd/cmd.go `chat`): `/set think LEVEL` takes any level and the server
//! judges it at the next turn; that error, like any about thinking, is printed and the session
//! goes on with the user's message kept; any other failed turn ends the session with
//! `Error: …` and exit status 1. The real `herd serve` and `herd run` in a terminal, with the
//! fake runner answering.
//!
//! Needs `cargo build -p fake-runner` and util-linux `script`.

mod fake_serve;
mod herd_proc;
mod serve_support;
mod terminal_support;

use fake_serve::Server;
use serve_support::api_support::{ago, TestStore};
use terminal_support::Terminal;

#[test]
fn think_errors_keep_the_session_and_other_errors_end_it() {
    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let ts = TestStore::new();
    ts.echo_chat_model("echo");
    // Fails its first answer: the runner dies after one token.
    ts.model(
        "crash",
        "latest",
        b"#fake-runner\n--tokens\none two three four\n--crash-after\n1\n",
        &[],
        ago(60),
    );
    let s = Server::start(&ts);
    let mut t = Terminal::start(&s.addr, s.home.path(), "echo");
    t.expect(">>> ");
    // The server refuses thinking on this model: printed, and the session goes on.
    t.press("/set think\r");
    t.expect("Set 'think' mode.");
    t.expect(">>> ");
    t.press("hi\r");
    t.expect(r#"error: 400 Bad Request: "echo" does not support thinking"#);
    t.expect(">>> ");
    // A level is taken as written, no local check: the error comes with the next turn, from
    // the server.
    t.press("/set think bogus\r");
    t.expect("Set 'think' mode to 'bogus'.");
    t.expect(">>> ");
    t.press("again\r");
    t.expect(concat!(
        r#"error: 400 Bad Request: invalid think value: "bogus" "#,
        r#"(must be "high", "medium", "low", "max", true, or false)"#
    ));
    t.expect(">>> ");
    // `true` as a level is the string "true", which the server refuses too.
    t.press("/set think true\r");
    t.expect("Set 'think' mode to 'true'.");
    t.expect(">>> ");
    t.press("more\r");
    t.expect(r#"error: 400 Bad Request: invalid think value: "true""#);
    t.expect(">>> ");
    // The failed turns' messages stayed: the next prompt carries them all (merged into one
    // user turn by the template engine).
    t.press("/set nothink\r");
    t.expect("Set 'nothink' mode.");
    t.expect(">>> ");
    t.press("third\r");
    t.expect("[user:hi");
    let merged = t.expect("third]");
    assert!(
        merged.contains("again") && merged.contains("more"),
        "{merged:?}"
    );
    t.expect(">>> ");
    // Any other error ends the session.
    t.press("/load crash\r");
    t.expect(">>> ");
    t.press("boom\r");
    let status = t.exit_status();
    let text = terminal_support::plain(&t.text());
    assert_eq!(status.code(), Some(1), "{text}");
    let tail = &text[text.rfind("boom").unwrap()..];
    assert!(tail.contains("Error: "), "{tail:?}");
    assert!(!tail.contains(">>> "), "{tail:?}");
}
