//! The server crate's one error enum and the one table mapping it to HTTP status codes.
//! Messages are Ollama's exact strings where Ollama has one (shared/research/ollama.md §1); the
//! API layer renders them as `{"error": msg}` (native) or the OpenAI/Anthropic shapes.

use http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 400 `invalid model name`.
    #[error("invalid model name")]
    InvalidModelName,
    /// A digest that is not `sha256:` + 64 lowercase hex.
    #[error("invalid digest format")]
    InvalidDigest,
    #[error("digest mismatch, expected {expected:?}, got {got:?}")]
    DigestMismatch { expected: String, got: String },
    /// A malformed or hostile GGUF file; the message says what is wrong and where.
    #[error("invalid GGUF: {0}")]
    InvalidGguf(String),
    /// A manifest that does not parse or points at something impossible.
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// A template hit a resource bound of the engines (nesting, call depth, steps, output
    /// size): the template or the request asks for more work than a prompt may take.
    #[error("{0}")]
    TemplateLimit(String),
    /// Any other client mistake; the message is the exact text the client sees.
    #[error("{0}")]
    BadRequest(String),
    /// Not found; the message is the handler's exact wording (it differs per endpoint).
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    /// 401: no or a wrong API key (`HERD_API_KEYS`); the message never contains a key.
    #[error("{0}")]
    Unauthorized(String),
    /// 503 while the server drains for shutdown (SIGTERM): it admits no new work.
    #[error("server is shutting down")]
    Draining,
    #[error("request entity too large")]
    PayloadTooLarge,
    /// 408: the request body stopped arriving or arrived below the minimum rate
    /// (`HERD_BODY_TIMEOUT`, `HERD_BODY_MIN_RATE`).
    #[error("request body arrived too slowly")]
    BodyTimeout,
    /// A blob upload over the configured cap (`HERD_MAX_BLOB_SIZE`).
    #[error("blob is larger than this server accepts ({limit} bytes, HERD_MAX_BLOB_SIZE)")]
    BlobTooLarge { limit: u64 },
    /// The model cannot be loaded while the pinned models (`HERD_PIN`) stay loaded.
    #[error("{0}")]
    NoRoom(String),
    /// The model alone needs more memory than the budget allows (Ollama's wording and 500).
    #[error("model requires more system memory ({required}) than is available ({available})")]
    InsufficientMemory { required: String, available: String },
    /// A request's `main_gpu` names a GPU this server does not have (`gpus` = how many it has).
    #[error("main_gpu {requested} is out of range: {}", gpu_range(*gpus))]
    MainGpuOutOfRange { requested: u32, gpus: usize },
    /// Admission queue full (note Ollama's two spaces).
    #[error("server busy, please try again.  maximum pending requests exceeded")]
    QueueFull,
    #[error("request canceled")]
    Cancelled,
    /// A typed failure reported by a runner.
    #[error("{0}")]
    Runner(#[from] runner_protocol::RunnerError),
    /// A runner process died or could not be started; the message carries its output tail.
    #[error("{0}")]
    RunnerExited(String),
    /// A model failed to load (or its runner died while loading): the model's name, then why.
    #[error("model {model}: {source}")]
    Load { model: String, source: Box<Error> },
    #[error("{0}")]
    Internal(String),
    /// A remote server's failure (a stub's `remote_host`), passed on with its status and text.
    #[error("{message}")]
    Remote { status: StatusCode, message: String },
    /// The remote refused this server's identity: Ollama's 401 `unauthorized`, with the URL
    /// where the key is connected to an account (`signin_url` in the body).
    #[error("unauthorized")]
    RemoteUnauthorized { signin_url: Option<String> },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The one place a status code is chosen.
    pub fn status(&self) -> StatusCode {
        use runner_protocol::ErrorKind as K;
        match self {
            Error::InvalidModelName
            | Error::InvalidDigest
            | Error::DigestMismatch { .. }
            | Error::InvalidGguf(_)
            | Error::TemplateLimit(_)
            | Error::MainGpuOutOfRange { .. }
            | Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Unauthorized(_) | Error::RemoteUnauthorized { .. } => StatusCode::UNAUTHORIZED,
            Error::Remote { status, .. } => *status,
            Error::PayloadTooLarge | Error::BlobTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Error::QueueFull | Error::Draining | Error::NoRoom(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Error::Cancelled => StatusCode::from_u16(499).unwrap(),
            Error::Runner(e) => match e.kind {
                K::BadRequest | K::ContextOverflow => StatusCode::BAD_REQUEST,
                K::Cancelled => StatusCode::from_u16(499).unwrap(),
                K::OutOfMemory | K::ModelLoad | K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            },
            Error::Load { source, .. } => source.status(),
            Error::InvalidManifest(_)
            | Error::RunnerExited(_)
            | Error::InsufficientMemory { .. }
            | Error::Internal(_)
            | Error::Io(_)
            | Error::Json(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl Error {
    /// The text a client sees. Messages written by the server about its own state (runner
    /// errors and their output tails, I/O, manifests) can quote paths on the server; those are
    /// scrubbed here, the one place errors leave toward clients (native JSON, NDJSON error lines,
    /// the OpenAI/Anthropic shapes). Client mistakes are shown as written: they quote the request.
    /// The log keeps the unscrubbed `to_string()`.
    pub fn client_message(&self) -> String {
        match self {
            // Ollama's own overflow texts, shown exactly: clients match on them.
            Error::Runner(e) if e.kind == runner_protocol::ErrorKind::ContextOverflow => {
                e.message.clone()
            }
            Error::Runner(_)
            | Error::RunnerExited(_)
            | Error::Load { .. }
            | Error::Internal(_)
            | Error::Io(_)
            | Error::InvalidManifest(_) => scrub_paths(&self.to_string()),
            _ => self.to_string(),
        }
    }
}

/// The valid `main_gpu` values, for [`Error::MainGpuOutOfRange`].
fn gpu_range(gpus: usize) -> String {
    match gpus {
        0 => "this server has no GPU".to_string(),
        1 => "this server has 1 GPU (main_gpu 0)".to_string(),
        n => format!("this server has {n} GPUs (main_gpu 0 to {})", n - 1),
    }
}

/// Replaces every absolute filesystem path in `text` with what a client may know of it: a blob
/// (`…/blobs/sha256-HEX`) becomes its digest `sha256:HEX`, anything else its file name.
///
/// A path is a `/` at the start of the text or after a space, quote, bracket, `=` or `,`, with at
/// least two components (so `/health` in "GET /health" stays, and `http://h/p` is never touched:
/// its slashes follow `:` or a letter); it runs to the next space, quote or bracket, minus
/// trailing `:`, `.`, `,`, `;`.
pub fn scrub_paths(text: &str) -> String {
    const BEFORE: &[char] = &[
        ' ', '\t', '\n', '\'', '"', '`', '(', '[', '{', '<', '=', ',',
    ];
    const END: &[char] = &[' ', '\t', '\n', '\'', '"', '`', ')', ']', '}', '>', ','];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut prev: Option<char> = None;
    while let Some(i) = rest.find('/') {
        let before = rest[..i].chars().next_back().or(prev);
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let len = tail.find(END).unwrap_or(tail.len());
        let token = tail[..len].trim_end_matches([':', '.', ';']);
        let starts = before.is_none_or(|c| BEFORE.contains(&c));
        let components = token.split('/').filter(|c| !c.is_empty()).count();
        if starts && components >= 2 && !token.contains("//") {
            let name = token.rsplit('/').next().unwrap_or_default();
            match name.strip_prefix("sha256-") {
                Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    out.push_str("sha256:");
                    out.push_str(hex);
                }
                _ => out.push_str(name),
            }
            rest = &tail[token.len()..];
            prev = token.chars().next_back();
        } else {
            out.push('/');
            rest = &tail[1..];
            prev = Some('/');
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubbed_paths() {
        let hex = "6ee156ec74b81f10bf1ecc67bc97633b27ab4ec2bfa222a0175634aebe747db1";
        let table = [
            (
                format!("llama.cpp could not load /tmp/x/models/blobs/sha256-{hex}"),
                format!("llama.cpp could not load sha256:{hex}"),
            ),
            (
                format!("failed to open GGUF file '/srv/m/blobs/sha256-{hex}' (No such file)"),
                format!("failed to open GGUF file 'sha256:{hex}' (No such file)"),
            ),
            (
                "failed to start runner /opt/herd/bin/runner-llamacpp: denied".into(),
                "failed to start runner runner-llamacpp: denied".into(),
            ),
            (
                "no ggml backend module found in /opt/herd/lib.".into(),
                "no ggml backend module found in lib.".into(),
            ),
            ("path=/a/b/c, next".into(), "path=c, next".into()),
            ("/var/lib/herd/x at start".into(), "x at start".into()),
            // Not filesystem paths: one component, URLs, ratios.
            ("GET /health failed".into(), "GET /health failed".into()),
            (
                "see https://example.com/a/b".into(),
                "see https://example.com/a/b".into(),
            ),
            ("tokens 3/4/5 used".into(), "tokens 3/4/5 used".into()),
            ("a // b".into(), "a // b".into()),
            ("".into(), "".into()),
        ];
        for (input, want) in table {
            assert_eq!(scrub_paths(&input), want, "{input:?}");
        }
    }

    #[test]
    fn only_server_side_messages_are_scrubbed() {
        let load = Error::Load {
            model: "m:latest".into(),
            source: Box::new(Error::Runner(runner_protocol::RunnerError::new(
                runner_protocol::ErrorKind::ModelLoad,
                "llama.cpp could not load /s/blobs/x",
            ))),
        };
        assert_eq!(load.status(), 500);
        assert_eq!(
            load.to_string(),
            "model m:latest: model load failed: llama.cpp could not load /s/blobs/x"
        );
        assert_eq!(
            load.client_message(),
            "model m:latest: model load failed: llama.cpp could not load x"
        );
        let bad = Error::BadRequest("model '/a/b' is invalid".into());
        assert_eq!(bad.client_message(), bad.to_string());
    }

    #[test]
    fn status_table() {
        assert_eq!(Error::InvalidModelName.status(), 400);
        assert_eq!(Error::NotFound("model 'x' not found".into()).status(), 404);
        assert_eq!(Error::QueueFull.status(), 503);
        assert_eq!(Error::TemplateLimit("template: x".into()).status(), 400);
        assert_eq!(Error::Cancelled.status(), 499);
        for (gpus, text) in [
            (0, "main_gpu 5 is out of range: this server has no GPU"),
            (
                1,
                "main_gpu 5 is out of range: this server has 1 GPU (main_gpu 0)",
            ),
            (
                2,
                "main_gpu 5 is out of range: this server has 2 GPUs (main_gpu 0 to 1)",
            ),
        ] {
            let e = Error::MainGpuOutOfRange { requested: 5, gpus };
            assert_eq!(
                (e.status(), e.to_string().as_str()),
                (StatusCode::BAD_REQUEST, text)
            );
        }
        assert_eq!(
            Error::QueueFull.to_string(),
            "server busy, please try again.  maximum pending requests exceeded"
        );
    }
}
