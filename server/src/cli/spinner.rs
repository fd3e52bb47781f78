//! The spinner `ollama run` shows on stderr while it waits for an answer's first words (its
//! `progress.Progress` holding one `progress.Spinner` with no message): from 100 ms on, a
//! braille frame redrawn at the start of the line every 100 ms; stopping it clears the line,
//! drawn or not (`StopAndClear`, whose first call always erases its line), so the answer, or
//! the next prompt after a Ctrl-C that came before any answer, starts on a clean line (the
//! terminal's `^C` echo erased too).
//! Drawn only when stderr is a terminal: escape codes have no place in a log file (Ollama
//! writes them anyway: ollama#14571).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ollama's `progress.Spinner` frames, one every 100 ms.
const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const TICK: Duration = Duration::from_millis(100);

/// One frame as Ollama's `renderLocked` draws it: synchronized update, cursor hidden, back to
/// column 1, the frame and a space, clear to the end of the line.
pub fn frame(i: usize) -> String {
    format!(
        "\x1b[?2026h\x1b[?25l\x1b[1G{} \x1b[K\x1b[?25h\x1b[?2026l",
        FRAMES[i % FRAMES.len()]
    )
}

/// What the first `StopAndClear` writes: erase the line, back to column 1.
pub const CLEAR: &str = "\x1b[?25l\x1b[2K\x1b[1G\x1b[?25h";

/// A running spinner; [`Spinner::stop`] (or dropping it) ends and clears it.
pub struct Spinner {
    task: Option<tokio::task::JoinHandle<()>>,
    state: Arc<State>,
}

/// Read and written only with stderr locked, so a frame can never land after the clear.
#[derive(Default)]
struct State {
    stopped: AtomicBool,
}

impl Spinner {
    /// Starts spinning on stderr when it is a terminal; otherwise a spinner that draws nothing.
    pub fn start() -> Spinner {
        let state = Arc::new(State::default());
        if !std::io::stderr().is_terminal() {
            return Spinner { task: None, state };
        }
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
            for i in 0.. {
                ticker.tick().await;
                let mut e = std::io::stderr().lock();
                if shared.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let _ = e.write_all(frame(i).as_bytes());
                let _ = e.flush();
            }
        });
        Spinner {
            task: Some(task),
            state,
        }
    }

    /// Stops the spinner and clears its line (on a terminal); later calls do nothing.
    pub fn stop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        let mut e = std::io::stderr().lock();
        self.state.stopped.store(true, Ordering::SeqCst);
        let _ = e.write_all(CLEAR.as_bytes());
        let _ = e.flush();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cycle_like_ollamas() {
        assert_eq!(
            frame(0),
            "\x1b[?2026h\x1b[?25l\x1b[1G⠋ \x1b[K\x1b[?25h\x1b[?2026l"
        );
        assert_eq!(frame(9), frame(19));
        assert!(frame(1).contains("⠙ "));
    }
}
