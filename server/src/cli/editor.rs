//! Ctrl-G in the REPL (Ollama's `editInExternalEditor`): the line being typed goes to an external
//! editor in a temporary file; what the editor leaves there comes back as the next line's
//! starting text. Which editor: `OLLAMA_EDITOR`, else `VISUAL`, else `EDITOR`, else `vi`; its
//! words are the command and its first arguments, the file is the last argument.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, Context};

/// Used when none of the variables names an editor.
const DEFAULT: &str = "vi";

/// The editor command: the first of `OLLAMA_EDITOR`, `VISUAL`, `EDITOR` (in that order) that
/// has a word in it, else `vi`.
pub fn command(choices: [Option<&str>; 3]) -> String {
    choices
        .into_iter()
        .flatten()
        .find(|c| !c.trim().is_empty())
        .unwrap_or(DEFAULT)
        .to_string()
}

/// Runs `editor` on a temporary file holding `content`, on the terminal, and returns what the
/// file holds after it exits, trailing newlines removed. The file is removed either way.
pub fn edit(editor: &str, content: &str) -> anyhow::Result<String> {
    let words: Vec<&str> = editor.split_whitespace().collect();
    let name = words.first().copied().unwrap_or(DEFAULT);
    if !runnable(name) {
        return Err(anyhow!(
            "editor {name:?} not found, set OLLAMA_EDITOR to the path of your preferred editor"
        ));
    }
    let mut file = tempfile::Builder::new()
        .prefix("ollama-prompt-")
        .suffix(".txt")
        .tempfile()
        .context("creating temp file")?;
    file.write_all(content.as_bytes())
        .and_then(|()| file.flush())
        .context("writing to temp file")?;
    let status = Command::new(name)
        .args(&words[1..])
        .arg(file.path())
        .status()
        .map_err(|e| anyhow!("editor exited with error: {e}"))?;
    if !status.success() {
        return Err(anyhow!("editor exited with error: {status}"));
    }
    let text = std::fs::read_to_string(file.path()).context("reading temp file")?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// Whether `name` is a file that can be run: a path as given, a bare name on `PATH` (Go's
/// `exec.LookPath`).
fn runnable(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        return executable(Path::new(name));
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| executable(&d.join(name))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_variable_with_a_word_names_the_editor() {
        let cases: [([Option<&str>; 3], &str); 5] = [
            ([Some("nano"), Some("code -w"), Some("ed")], "nano"),
            ([None, Some("code -w"), Some("ed")], "code -w"),
            ([Some("  "), None, Some("ed")], "ed"),
            ([Some(""), Some(""), Some("")], "vi"),
            ([None, None, None], "vi"),
        ];
        for (choices, want) in cases {
            assert_eq!(command(choices), want, "{choices:?}");
        }
    }

    /// An executable shell script `name` in `dir` with `body`.
    fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn the_editor_edits_the_line_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let append = script(
            dir.path(),
            "append.sh",
            "printf '%s edited\\n\\n' \"$(cat \"$2\")\" > \"$2\"",
        );
        // The editor's own words come first, the file last.
        let editor = format!("{} --flag", append.display());
        assert_eq!(edit(&editor, "hello").unwrap(), "hello edited");
        let missing = edit("no-such-editor-here -w", "x").unwrap_err().to_string();
        assert_eq!(
            missing,
            "editor \"no-such-editor-here\" not found, set OLLAMA_EDITOR to the path of your preferred editor"
        );
        let failing = script(dir.path(), "fail.sh", "exit 3");
        let err = edit(failing.to_str().unwrap(), "x")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("editor exited with error"), "{err}");
    }
}
