//! NDJSON lines from a remote response body, one at a time as they arrive. A line is bounded
//! (8 MiB, Ollama's client's scanner buffer), so a remote cannot make this server hold an
//! unbounded buffer; the whole stream is never held. Dropping the reader drops the response,
//! which closes the connection and so cancels the remote's work.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;

/// Ollama's `maxBufferSize`.
pub const MAX_LINE: usize = 8 << 20;

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

pub struct Lines {
    body: ByteStream,
    buf: BytesMut,
    done: bool,
}

impl Lines {
    pub fn new(resp: reqwest::Response) -> Lines {
        Lines {
            body: Box::pin(resp.bytes_stream()),
            buf: BytesMut::new(),
            done: false,
        }
    }

    /// The next non-empty line without its `\n` (a last line without one counts); `None` at
    /// the end. `Err` for a transport failure or an over-long line.
    pub async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line = self.buf.split_to(i + 1).freeze();
                let line = line.slice(..i);
                if !line.trim_ascii().is_empty() {
                    return Some(Ok(line));
                }
            }
            if self.buf.len() > MAX_LINE {
                self.done = true;
                self.buf.clear();
                return Some(Err(format!(
                    "a response line from the remote exceeds {MAX_LINE} bytes"
                )));
            }
            if self.done {
                let rest = std::mem::take(&mut self.buf).freeze();
                return (!rest.trim_ascii().is_empty()).then_some(Ok(rest));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    self.done = true;
                    self.buf.clear();
                    return Some(Err(format!("reading the remote response: {e}")));
                }
                None => self.done = true,
            }
        }
    }
}
