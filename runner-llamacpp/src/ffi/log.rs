//! llama.cpp's and ggml's log stream: which levels reach stderr (the server forwards runner
//! stderr), and the one reason a model load failed, which llama.cpp only logs (the loader
//! returns NULL).

use super::sys;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};

/// Which messages llama.cpp/ggml may print to stderr (the server forwards runner stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Everything llama.cpp and ggml print, debug included (OLLAMA_DEBUG).
    Debug,
    /// Warnings and errors only.
    Warn,
}

pub(super) static LOG_MIN: AtomicI32 = AtomicI32::new(3);

pub(super) unsafe extern "C" fn log_cb(
    level: sys::ggml_log_level,
    text: *const c_char,
    _: *mut c_void,
) {
    static LAST: AtomicI32 = AtomicI32::new(2);
    if text.is_null() {
        return;
    }
    // 1 debug, 2 info, 3 warn, 4 error; 5 (CONT) continues the previous message at its level.
    let rank = match level as i32 {
        r @ 1..=4 => r,
        5 => LAST.load(Ordering::Relaxed),
        _ => 2,
    };
    LAST.store(rank, Ordering::Relaxed);
    let s = CStr::from_ptr(text).to_string_lossy();
    if rank == 4 {
        note_load_error(&s);
    }
    if rank >= LOG_MIN.load(Ordering::Relaxed) {
        eprint!("{s}");
    }
}

/// Why the last model load failed, as llama.cpp logged it (`error loading model: …`): the
/// loader returns only NULL, so this is the one place the reason survives. One load at a time
/// per process, so one slot suffices; `Model::load` clears it first.
static LOAD_ERROR: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn note_load_error(line: &str) {
    const MARK: &str = "error loading model";
    if let Some(i) = line.find(MARK) {
        if let Ok(mut e) = LOAD_ERROR.lock() {
            *e = line[i..].trim().to_string();
        }
    }
}

pub(super) fn take_load_error() -> Option<String> {
    let e = std::mem::take(&mut *LOAD_ERROR.lock().ok()?);
    (!e.is_empty()).then_some(e)
}

/// Whether info-level messages are shown (`LogLevel::Debug`).
pub fn log_debug() -> bool {
    LOG_MIN.load(Ordering::Relaxed) <= 2
}
