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
    /// A blob upload over the configured cap (`HERD_MAX_BLOB_SIZE`).
    #[error("blob is larger than this server accepts ({limit} bytes, HERD_MAX_BLOB_SIZE)")]
    BlobTooLarge { limit: u64 },
    /// The model cannot be loaded while the pinned models (`HERD_PIN`) stay loaded.
    #[error("{0}")]
    NoRoom(String),
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
    #[error("{0}")]
    Internal(String),
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
            | Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::PayloadTooLarge | Error::BlobTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::QueueFull | Error::Draining | Error::NoRoom(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Error::Cancelled => StatusCode::from_u16(499).unwrap(),
            Error::Runner(e) => match e.kind {
                K::BadRequest | K::ContextOverflow => StatusCode::BAD_REQUEST,
                K::Cancelled => StatusCode::from_u16(499).unwrap(),
                K::OutOfMemory | K::ModelLoad | K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            },
            Error::InvalidManifest(_)
            | Error::RunnerExited(_)
            | Error::Internal(_)
            | Error::Io(_)
            | Error::Json(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        assert_eq!(Error::InvalidModelName.status(), 400);
        assert_eq!(Error::NotFound("model 'x' not found".into()).status(), 404);
        assert_eq!(Error::QueueFull.status(), 503);
        assert_eq!(Error::TemplateLimit("template: x".into()).status(), 400);
        assert_eq!(Error::Cancelled.status(), 499);
        assert_eq!(
            Error::QueueFull.to_string(),
            "server busy, please try again.  maximum pending requests exceeded"
        );
    }
}
