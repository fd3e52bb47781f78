//! The REPL's input layer: rustyline (emacs keys, Up/Down recall, bracketed paste) over the
//! terminal, with the history kept in Ollama's file format by [`History`] rather than rustyline's
//! own (whose file has a `#V2` header and escapes), so `ollama run` and `herd run` share it.
//! Ctrl-C on the line is [`Line::Interrupted`]; Ctrl-D on an empty line is [`Line::Eof`].

use rustyline::error::ReadlineError;
use rustyline::history::{History as _, MemHistory};
use rustyline::{Config, Editor};

use super::history::{History, LIMIT};

/// What one prompt read.
pub enum Line {
    Text(String),
    /// Ctrl-C: the line was dropped.
    Interrupted,
    /// Ctrl-D on an empty line, or the terminal closed.
    Eof,
}

pub struct LineEditor {
    editor: Editor<(), MemHistory>,
    history: History,
}

impl LineEditor {
    /// An editor whose recall list starts as the history file's entries.
    pub fn new(history: History) -> anyhow::Result<LineEditor> {
        // Ollama keeps repeated entries; rustyline's default drops consecutive duplicates.
        let config = Config::builder()
            .max_history_size(LIMIT)?
            .history_ignore_dups(false)?
            .auto_add_history(false)
            .build();
        let mut recall = MemHistory::with_config(&config);
        for e in history.entries() {
            recall.add(e)?;
        }
        let editor = Editor::with_history(config, recall)?;
        Ok(LineEditor { editor, history })
    }

    /// Reads one line; a non-empty one joins the recall list and the history file at once (as
    /// Ollama's readline does on Enter), slash commands and `"""` continuation lines included.
    /// The blocking read runs off the async workers (`block_in_place`).
    pub fn read(&mut self, prompt: &str) -> anyhow::Result<Line> {
        let read = tokio::task::block_in_place(|| self.editor.readline(prompt));
        match read {
            Ok(text) => {
                if !text.is_empty() {
                    self.editor.add_history_entry(text.as_str())?;
                    self.history.add(&text);
                }
                Ok(Line::Text(text))
            }
            Err(ReadlineError::Interrupted) => Ok(Line::Interrupted),
            Err(ReadlineError::Eof) => Ok(Line::Eof),
            Err(e) => Err(e.into()),
        }
    }

    /// `/set history` / `/set nohistory`: whether new entries are written to the file.
    pub fn set_history_enabled(&mut self, enabled: bool) {
        self.history.enabled = enabled;
    }
}
