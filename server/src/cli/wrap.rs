//! Word wrap for streamed answers (Ollama's `displayResponse`): on a terminal at least 10 columns
//! wide, a line is broken before it reaches `width - 5` columns; the word being written moves to
//! the next line whole (its start is erased and rewritten there), unless the word itself is
//! longer than `width - 10`, which is then broken where it stands. On by default; `--nowordwrap`
//! and `/set nowordwrap` turn it off; output that is not a terminal is never wrapped.

use unicode_width::UnicodeWidthChar;

/// Columns of the terminal on stdout; 0 when stdout is not a terminal.
pub fn stdout_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .map(|w| usize::from(w.ws_col))
        .unwrap_or(0)
}

/// The wrap state of one answer.
#[derive(Default)]
pub struct Wrapper {
    line: usize,
    word: String,
}

impl Wrapper {
    /// What to write for `text` on a terminal `width` columns wide (no wrap below 10).
    pub fn push(&mut self, text: &str, width: usize) -> String {
        if width < 10 {
            return text.to_owned();
        }
        let mut out = String::new();
        for ch in text.chars() {
            let w = ch.width().unwrap_or(0);
            if self.line + 1 > width - 5 {
                let word_w: usize = self.word.chars().map(|c| c.width().unwrap_or(0)).sum();
                if word_w > width - 10 {
                    // A word longer than a line: break it here.
                    out.push(ch);
                    self.word.clear();
                    self.line = 0;
                    continue;
                }
                // Erase the word's start (cursor left, clear to end of line) and rewrite it on
                // the next line.
                if word_w > 0 {
                    out.push_str(&format!("\x1b[{word_w}D"));
                }
                out.push_str("\x1b[K\n");
                out.push_str(&self.word);
                out.push(ch);
                self.line = word_w + w;
                if ch == ' ' {
                    self.word.clear();
                } else {
                    self.word.push(ch);
                }
                continue;
            }
            out.push(ch);
            self.line += w;
            if w >= 2 {
                // Wide characters (CJK) break anywhere.
                self.word.clear();
                continue;
            }
            match ch {
                ' ' => self.word.clear(),
                '\n' => {
                    self.line = 0;
                    self.word.clear();
                }
                _ => self.word.push(ch),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_or_unknown_terminals_are_not_wrapped() {
        let mut w = Wrapper::default();
        let long = "word ".repeat(40);
        assert_eq!(w.push(&long, 0), long);
        assert_eq!(w.push(&long, 9), long);
    }

    #[test]
    fn a_word_crossing_the_margin_moves_to_the_next_line() {
        // width 20: lines break before column 15.
        let mut w = Wrapper::default();
        let out = w.push("hello brave new world", 20);
        // "new" ends at the margin: the space after it moves it down.
        assert_eq!(out, "hello brave new\x1b[3D\x1b[K\nnew world");
        let mut w = Wrapper::default();
        let out = w.push("hello brave newer world", 20);
        // "newe" was written up to the margin, then erased and rewritten below.
        assert_eq!(out, "hello brave new\x1b[3D\x1b[K\nnewer world");
    }

    #[test]
    fn newlines_restart_the_count_and_state_spans_chunks() {
        let mut w = Wrapper::default();
        let a = w.push("0123456789\n", 20);
        let b = w.push("abc def ghi jk", 20);
        assert_eq!(a, "0123456789\n");
        assert_eq!(b, "abc def ghi jk");
        let c = w.push("l more", 20);
        assert_eq!(c, "l\x1b[3D\x1b[K\njkl more");
    }
}
