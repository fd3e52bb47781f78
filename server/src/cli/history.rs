//! The REPL history file in Ollama's own format (its `readline/history.go`), so `ollama run` and
//! `herd run` share `~/.ollama/history`: plain text, one entry per line, the newest last, at most
//! [`LIMIT`] entries; loading trims each line and skips blank ones; every added entry rewrites
//! the file through a temp file and a rename (mode 0600, directory 0755). Disabling the history
//! (`OLLAMA_NOHISTORY`, `--nohistory`, `/set nohistory`) stops the writes only: entries are still
//! kept in memory for recall, and `/set history` saves them again on the next entry, as Ollama does.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Ollama keeps the newest 100 entries.
pub const LIMIT: usize = 100;

/// The in-memory history and the file it is saved to.
pub struct History {
    path: PathBuf,
    entries: Vec<String>,
    pub enabled: bool,
}

impl History {
    /// Loads `path` (a missing or unreadable file is an empty history).
    pub fn load(path: PathBuf, enabled: bool) -> History {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut h = History {
            path,
            entries: Vec::new(),
            enabled,
        };
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            h.push(line.to_owned());
        }
        h
    }

    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Appends one entry (a pasted multi-line entry becomes one line, so the file stays one entry
    /// per line) and saves when enabled. A failed save is not an error for the REPL: Ollama
    /// ignores it too.
    pub fn add(&mut self, entry: &str) {
        let line = entry.replace(['\r', '\n'], " ");
        if line.trim().is_empty() {
            return;
        }
        self.push(line);
        if self.enabled {
            let _ = self.save();
        }
    }

    fn push(&mut self, line: String) {
        self.entries.push(line);
        if self.entries.len() > LIMIT {
            let extra = self.entries.len() - LIMIT;
            self.entries.drain(..extra);
        }
    }

    /// Writes every entry to `<path>.tmp`, then renames it over the file.
    fn save(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = self.path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)?;
        }
        let tmp = tmp_path(&self.path);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut text = String::new();
        for e in &self.entries {
            text.push_str(e);
            text.push('\n');
        }
        f.write_all(text.as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, &self.path)
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_trimmed_nonblank_lines_and_keeps_the_newest_hundred() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".ollama/history");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let lines: Vec<String> = (0..105).map(|i| format!("  line {i} ")).collect();
        std::fs::write(&path, lines.join("\n\n") + "\n").unwrap();
        let h = History::load(path, true);
        assert_eq!(h.entries().len(), LIMIT);
        assert_eq!(h.entries()[0], "line 5");
        assert_eq!(h.entries()[99], "line 104");
    }

    #[test]
    fn add_rewrites_the_file_one_entry_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".ollama/history");
        let mut h = History::load(path.clone(), true);
        h.add("hello");
        h.add("hello");
        h.add("two\nlines");
        h.add("   ");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "hello\nhello\ntwo lines\n"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!tmp_path(&path).exists());
    }

    #[test]
    fn disabled_history_is_kept_in_memory_and_saved_once_enabled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history");
        std::fs::write(&path, "old\n").unwrap();
        let mut h = History::load(path.clone(), false);
        h.add("secret");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\n");
        assert_eq!(h.entries(), ["old", "secret"]);
        h.enabled = true;
        h.add("next");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old\nsecret\nnext\n"
        );
    }

    #[test]
    fn the_limit_applies_to_what_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history");
        let mut h = History::load(path.clone(), true);
        for i in 0..=LIMIT {
            h.add(&format!("e{i}"));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), LIMIT);
        assert!(
            text.starts_with("e1\n") && text.ends_with("e100\n"),
            "{text}"
        );
    }
}
