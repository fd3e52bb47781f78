//! A runner's stdout/stderr: every line goes to tracing inside the runner's `runner{model,pid}`
//! span, and the last [`TAIL_BYTES`] are kept so a crash error can say what the runner printed
//! last. Lines are only logged and kept: failures are classified by the protocol, never from
//! this text.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tracing::Level;

/// Bytes of output kept for error messages.
pub const TAIL_BYTES: usize = 8 * 1024;
/// A longer line is forwarded in pieces of this size, so a runner cannot make us buffer without
/// bound.
const MAX_LINE: u64 = 4096;

/// The bounded tail of a runner's output, shared by its stdout and stderr readers.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<u8>>>);

impl Tail {
    pub fn push_line(&self, line: &str) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.extend(line.as_bytes());
        t.push_back(b'\n');
        let excess = t.len().saturating_sub(TAIL_BYTES);
        t.drain(..excess);
    }

    /// The kept output, starting at a line boundary where possible.
    pub fn text(&self) -> String {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: Vec<u8> = t.iter().copied().collect();
        let start = if bytes.len() >= TAIL_BYTES {
            bytes.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1)
        } else {
            0
        };
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// The last `max` bytes of [`Tail::text`], trimmed, on a char boundary.
    pub fn last(&self, max: usize) -> String {
        let text = self.text();
        let text = text.trim_end();
        let mut start = text.len().saturating_sub(max);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].trim_start().to_string()
    }
}

/// Reads `reader` line by line until EOF, logging each line in `span` and keeping it in `tail`.
pub fn forward(
    reader: impl AsyncRead + Unpin + Send + 'static,
    stream: &'static str,
    span: tracing::Span,
    tail: Tail,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(reader);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match (&mut reader)
                .take(MAX_LINE)
                .read_until(b'\n', &mut buf)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                continue;
            }
            tail.push_line(line);
            let _enter = span.enter();
            match level_of(line) {
                Level::ERROR => tracing::error!(stream, "{line}"),
                Level::WARN => tracing::warn!(stream, "{line}"),
                Level::DEBUG => tracing::debug!(stream, "{line}"),
                Level::TRACE => tracing::trace!(stream, "{line}"),
                _ => tracing::info!(stream, "{line}"),
            }
        }
    })
}

/// The log level a line declares: a JSON `level` field, or a leading level word; else INFO.
fn level_of(line: &str) -> Level {
    let word = if line.starts_with('{') {
        serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("level").and_then(|l| l.as_str()).map(str::to_owned))
            .unwrap_or_default()
    } else {
        line.split([' ', ':', ']'])
            .next()
            .unwrap_or_default()
            .trim_start_matches('[')
            .to_string()
    };
    match word.to_ascii_lowercase().as_str() {
        "error" | "err" | "e" | "fatal" => Level::ERROR,
        "warn" | "warning" | "w" => Level::WARN,
        "debug" | "d" => Level::DEBUG,
        "trace" | "t" => Level::TRACE,
        _ => Level::INFO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_is_bounded_and_starts_at_a_line() {
        let t = Tail::default();
        for i in 0..2000 {
            t.push_line(&format!("line {i}"));
        }
        let text = t.text();
        assert!(text.len() <= TAIL_BYTES);
        assert!(text.starts_with("line "), "{:?}", &text[..20]);
        assert!(text.ends_with("line 1999\n"));
        assert_eq!(t.last(9), "line 1999");
    }

    #[test]
    fn levels_come_from_json_or_a_leading_word() {
        assert_eq!(level_of(r#"{"level":"WARN","msg":"x"}"#), Level::WARN);
        assert_eq!(level_of("error: cannot open model"), Level::ERROR);
        assert_eq!(level_of("[debug] x"), Level::DEBUG);
        assert_eq!(level_of("loading model"), Level::INFO);
    }
}
