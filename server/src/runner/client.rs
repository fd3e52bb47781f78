//! The server's side of the runner protocol (`runner-protocol`): HTTP/1.1 over the runner's Unix
//! socket, one connection per request. A completion is a [`CompletionStream`] of typed chunks;
//! dropping it closes the connection, which is how a request is cancelled (the runner frees the
//! slot when it notices). Transport failures surface as [`Error::RunnerExited`] so the runner
//! handle can replace them with the process's exit status and output tail.

use crate::error::{Error, Result};
use bytes::Bytes;
use futures_util::Stream;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use runner_protocol::{
    CompletionChunk, CompletionRequest, DetokenizeRequest, DetokenizeResponse, EmbedRequest,
    EmbedResponse, ErrorBody, Health, Info, TokenizeRequest, TokenizeResponse,
};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::UnixStream;

/// Longest NDJSON line accepted from a runner; a longer one is a protocol violation.
const MAX_LINE: usize = 16 << 20;

/// A protocol client bound to one runner socket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RunnerClient {
    socket: PathBuf,
}

/// Aborts the connection task when dropped, closing the socket.
struct ConnGuard(tokio::task::JoinHandle<()>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn lost(e: impl std::fmt::Display) -> Error {
    Error::RunnerExited(format!("lost connection to runner: {e}"))
}

impl RunnerClient {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(http::Response<Incoming>, ConnGuard)> {
        let stream = UnixStream::connect(&self.socket).await.map_err(lost)?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(lost)?;
        let guard = ConnGuard(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "runner");
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::Internal(e.to_string()))?;
        let resp = sender.send_request(req).await.map_err(lost)?;
        Ok((resp, guard))
    }

    /// A JSON request whose 2xx body is `T`; a non-2xx body is the runner's typed error.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let (resp, _guard) = self.send(method, path, body).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map_err(lost)?.to_bytes();
        if !status.is_success() {
            return Err(error_from(status, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Internal(format!("runner sent a malformed {path} response: {e}")))
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        req: &impl serde::Serialize,
    ) -> Result<T> {
        self.call(Method::POST, path, Some(serde_json::to_vec(req)?))
            .await
    }

    /// `GET /health`. The body is a [`Health`] whatever the status code.
    pub async fn health(&self) -> Result<Health> {
        let (resp, _guard) = self.send(Method::GET, "/health", None).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map_err(lost)?.to_bytes();
        serde_json::from_slice(&bytes).map_err(|_| error_from(status, &bytes))
    }

    pub async fn info(&self) -> Result<Info> {
        self.call(Method::GET, "/info", None).await
    }

    pub async fn embed(&self, req: &EmbedRequest) -> Result<EmbedResponse> {
        self.post("/embed", req).await
    }

    pub async fn tokenize(&self, req: &TokenizeRequest) -> Result<TokenizeResponse> {
        self.post("/tokenize", req).await
    }

    pub async fn detokenize(&self, req: &DetokenizeRequest) -> Result<DetokenizeResponse> {
        self.post("/detokenize", req).await
    }

    /// `POST /completion`. Resolves once the runner accepted the request (status line received).
    pub async fn completion(&self, req: &CompletionRequest) -> Result<CompletionStream> {
        let (resp, guard) = self
            .send(Method::POST, "/completion", Some(serde_json::to_vec(req)?))
            .await?;
        let status = resp.status();
        if !status.is_success() {
            let bytes = resp.into_body().collect().await.map_err(lost)?.to_bytes();
            return Err(error_from(status, &bytes));
        }
        let state = ReadState {
            body: resp.into_body(),
            lines: LineBuffer::default(),
            finished: false,
            _guard: guard,
        };
        Ok(CompletionStream::new(futures_util::stream::unfold(
            state,
            ReadState::next,
        )))
    }
}

fn error_from(status: StatusCode, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(b) => Error::Runner(b.error),
        Err(_) => Error::Internal(format!(
            "runner answered {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        )),
    }
}

pub(crate) type ChunkStream = Pin<Box<dyn Stream<Item = Result<CompletionChunk>> + Send>>;

/// A completion in progress: `Ok(Token)` items, then exactly one terminal item, `Ok(Done)` or
/// `Err(_)` — a runner's `error` chunk arrives as `Err(Error::Runner)`, so `Ok` items are never
/// [`CompletionChunk::Error`]. Nothing follows the terminal item. Dropping the stream cancels.
pub struct CompletionStream {
    inner: ChunkStream,
    /// Kept alive as long as the stream (e.g. a scheduler lease).
    guard: Option<Box<dyn Send>>,
}

impl CompletionStream {
    pub fn new(s: impl Stream<Item = Result<CompletionChunk>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(s),
            guard: None,
        }
    }

    /// Ties `guard`'s lifetime to the stream's: it drops when the stream does.
    pub fn with_guard(mut self, guard: impl Send + 'static) -> Self {
        self.guard = Some(Box::new(guard));
        self
    }

    pub(crate) fn into_parts(self) -> (ChunkStream, Option<Box<dyn Send>>) {
        (self.inner, self.guard)
    }
}

impl Stream for CompletionStream {
    type Item = Result<CompletionChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

struct ReadState {
    body: Incoming,
    lines: LineBuffer,
    finished: bool,
    _guard: ConnGuard,
}

impl ReadState {
    async fn next(mut self) -> Option<(Result<CompletionChunk>, Self)> {
        if self.finished {
            return None;
        }
        loop {
            match self.lines.next_line() {
                Ok(Some(line)) => {
                    let item = decode_chunk(&line);
                    self.finished = !matches!(
                        item,
                        Ok(CompletionChunk::Token { .. } | CompletionChunk::Progress { .. })
                    );
                    return Some((item, self));
                }
                Ok(None) => {}
                Err(e) => {
                    self.finished = true;
                    return Some((Err(e), self));
                }
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.lines.push(&data);
                    }
                }
                Some(Err(e)) => {
                    self.finished = true;
                    return Some((Err(lost(e)), self));
                }
                None => {
                    self.finished = true;
                    let item = match self.lines.take_rest() {
                        Some(line) => decode_chunk(&line).and_then(|c| match c {
                            CompletionChunk::Token { .. } => Err(unterminated()),
                            c => Ok(c),
                        }),
                        None => Err(unterminated()),
                    };
                    return Some((item, self));
                }
            }
        }
    }
}

fn unterminated() -> Error {
    lost("the completion stream ended without a final chunk")
}

fn decode_chunk(line: &[u8]) -> Result<CompletionChunk> {
    match serde_json::from_slice::<CompletionChunk>(line) {
        Ok(CompletionChunk::Error { error }) => Err(Error::Runner(error)),
        Ok(c) => Ok(c),
        Err(e) => Err(Error::Internal(format!(
            "runner sent a malformed completion chunk: {e}"
        ))),
    }
}

/// Splits a byte stream into newline-terminated lines, whatever the chunk boundaries.
/// Invariant: `buf[..scanned]` holds no newline, so each byte is scanned once.
#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    buf: Vec<u8>,
    scanned: usize,
}

impl LineBuffer {
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next non-blank line without its terminator (`\n` or `\r\n`), if one is complete.
    pub(crate) fn next_line(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_LINE {
                    return Err(Error::Internal(
                        "runner sent an over-long completion line".into(),
                    ));
                }
                return Ok(None);
            };
            let end = self.scanned + pos;
            let mut line: Vec<u8> = self.buf.drain(..=end).collect();
            self.scanned = 0;
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(line));
            }
        }
    }

    /// What is left after the stream ended, if it is not blank.
    pub(crate) fn take_rest(&mut self) -> Option<Vec<u8>> {
        let rest = std::mem::take(&mut self.buf);
        self.scanned = 0;
        (!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut lb = LineBuffer::default();
        let mut out = Vec::new();
        for c in chunks {
            lb.push(c);
            while let Some(l) = lb.next_line().unwrap() {
                out.push(String::from_utf8(l).unwrap());
            }
        }
        if let Some(rest) = lb.take_rest() {
            out.push(format!("rest:{}", String::from_utf8(rest).unwrap()));
        }
        out
    }

    #[test]
    fn lines_survive_any_chunk_boundary() {
        let text = b"{\"a\":1}\n\n{\"b\":\"\xc3\xa9\"}\r\n{\"c\":3}\n";
        let expected = ["{\"a\":1}", "{\"b\":\"\u{e9}\"}", "{\"c\":3}"];
        for split in 0..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(lines_of(&[a, b]), expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(lines_of(&bytes), expected);
    }

    #[test]
    fn unterminated_tail_is_returned_once() {
        assert_eq!(lines_of(&[b"x\ny"]), ["x", "rest:y"]);
        assert_eq!(lines_of(&[b"x\n  "]), ["x"]);
    }

    #[test]
    fn error_chunks_become_errors() {
        let e = decode_chunk(br#"{"type":"error","kind":"ContextOverflow","message":"m"}"#);
        match e {
            Err(Error::Runner(r)) => {
                assert_eq!(r.kind, runner_protocol::ErrorKind::ContextOverflow)
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(decode_chunk(b"{nope"), Err(Error::Internal(_))));
    }
}
