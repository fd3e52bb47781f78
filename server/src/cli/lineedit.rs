//! The REPL's input layer: rustyline (emacs keys, Up/Down recall, bracketed paste) over the
//! terminal, with the history kept in Ollama's file format by [`History`] rather than rustyline's
//! own (whose file has a `#V2` header and escapes), so `ollama run` and `herd run` share it.
//! Ctrl-C on the line is [`Line::Interrupted`]; Ctrl-D on an empty line is [`Line::Eof`]; Ctrl-G
//! is [`Line::Edit`] (the REPL opens the line in an editor, `cli::editor`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustyline::error::ReadlineError;
use rustyline::history::{History as _, MemHistory};
use rustyline::{
    Cmd, ConditionalEventHandler, Config, Editor, Event, EventContext, EventHandler, KeyEvent,
    RepeatCount,
};

use super::history::{History, LIMIT};

/// What one prompt read.
pub enum Line {
    Text(String),
    /// Ctrl-C: the line was dropped.
    Interrupted,
    /// Ctrl-D on an empty line, or the terminal closed.
    Eof,
    /// Ctrl-G: edit this text in an external editor (not added to the history).
    Edit(String),
}

/// Ctrl-G ends the read as Enter would, marking it as a request to edit.
struct EditKey(Arc<AtomicBool>);

impl ConditionalEventHandler for EditKey {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, _: &EventContext) -> Option<Cmd> {
        self.0.store(true, Ordering::Relaxed);
        Some(Cmd::AcceptLine)
    }
}

pub struct LineEditor {
    editor: Editor<(), MemHistory>,
    history: History,
    /// Set by Ctrl-G for the read it ends.
    edit: Arc<AtomicBool>,
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
        let mut editor = Editor::with_history(config, recall)?;
        let edit = Arc::new(AtomicBool::new(false));
        editor.bind_sequence(
            KeyEvent::ctrl('G'),
            EventHandler::Conditional(Box::new(EditKey(edit.clone()))),
        );
        Ok(LineEditor {
            editor,
            history,
            edit,
        })
    }

    /// Reads one line, starting from `initial` (an editor's text after Ctrl-G, else empty); a
    /// non-empty one joins the recall list and the history file at once (as Ollama's readline
    /// does on Enter), slash commands and `"""` continuation lines included. The blocking read
    /// runs off the async workers (`block_in_place`).
    pub fn read(&mut self, prompt: &str, initial: &str) -> anyhow::Result<Line> {
        self.edit.store(false, Ordering::Relaxed);
        let read = tokio::task::block_in_place(|| {
            self.editor.readline_with_initial(prompt, (initial, ""))
        });
        match read {
            Ok(text) if self.edit.swap(false, Ordering::Relaxed) => Ok(Line::Edit(text)),
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
