//! Ctrl-G in the `herd run` REPL, as Ollama's (cmd/interactive.go `editInExternalEditor`): the
//! line typed so far opens in `OLLAMA_EDITOR` (its words, then the file), and what the editor
//! leaves comes back as the next line's text, sent only on Enter; a missing editor is an error
//! printed in the session. The real `herd serve` and `herd run` in a terminal, with the fake
//! runner echoing the prompt.
//!
//! Needs `cargo build -p fake-runner` and util-linux `script`.

mod fake_serve;
mod herd_proc;
mod serve_support;
mod terminal_support;

use std::os::unix::fs::PermissionsExt;

use fake_serve::Server;
use serve_support::api_support::TestStore;
use terminal_support::Terminal;

#[test]
fn ctrl_g_edits_the_line_in_the_editor_and_enter_sends_it() {
    if !Terminal::available() {
        return serve_support::prereq::missing("util-linux `script`");
    }
    let ts = TestStore::new();
    ts.echo_chat_model("echo");
    let s = Server::start(&ts);
    // The editor's words come first and the file last: the script sees its flag as $1.
    let script = s.home.path().join("append-editor");
    std::fs::write(
        &script,
        "#!/bin/sh\n[ \"$1\" = --wait ] || exit 9\nprintf '%s from the editor\\n' \"$(cat \"$2\")\" > \"$2\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let editor = format!("{} --wait", script.display());
    let mut t = Terminal::start_with_env(
        &s.addr,
        s.home.path(),
        "echo",
        &[("OLLAMA_EDITOR", &editor), ("VISUAL", "missing-visual")],
    );
    t.expect(">>> ");
    t.press("draft");
    t.expect("draft");
    // Ctrl-G: the editor gets "draft" and appends; the text comes back on a new prompt, unsent.
    t.press("\x07");
    t.expect(">>> draft from the editor");
    t.press(" and more\r");
    t.expect("[user:draft from the editor and more]");
    t.expect(">>> ");
    t.press("/bye\r");
    assert_eq!(t.exit_status().code(), Some(0));

    // An editor that is not there: the error, and the session goes on.
    let mut t = Terminal::start_with_env(
        &s.addr,
        s.home.path(),
        "echo",
        &[("OLLAMA_EDITOR", "no-such-editor -w")],
    );
    t.expect(">>> ");
    t.press("kept?\x07");
    t.expect(
        "error: editor \"no-such-editor\" not found, set OLLAMA_EDITOR to the path of your preferred editor",
    );
    t.expect(">>> ");
    t.press("next\r");
    t.expect("[user:next]");
    t.expect(">>> ");
    t.press("/bye\r");
    assert_eq!(t.exit_status().code(), Some(0));
    // Edited lines are not history entries; sent ones are.
    let history = std::fs::read_to_string(s.home.path().join(".ollama/history")).unwrap();
    assert!(
        history.contains("draft from the editor and more"),
        "{history:?}"
    );
    assert!(
        !history.lines().any(|l| l == "draft" || l == "kept?"),
        "{history:?}"
    );
}
