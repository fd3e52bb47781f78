//! API keys (`HERD_API_KEYS`, `HERD_API_KEYS_FILE`): when any key is configured, every route
//! but the probes (`/healthz`, `/readyz`, see [`is_public`]) requires `Authorization: Bearer K`
//! (`/v1/messages` also accepts Anthropic's `x-api-key: K`). A refusal is 401 in the shape of
//! the API the path belongs to ([`Family`]), with `WWW-Authenticate: Bearer`.
//!
//! Invariants: keys are compared in constant time over their SHA-256 digests (so neither the
//! content nor the length of a configured key leaks through timing), every configured key is
//! compared on every request (no early exit), and no key, presented or configured, is ever
//! logged or formatted (`Debug` prints only the count).

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::openai::error::{anthropic_response, openai_response, ApiError};
use super::AppState;
use crate::error::Error;

/// The configured keys, kept only as digests.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

impl ApiKeys {
    /// Keys from their plain texts; empty strings are dropped (they could never be presented).
    pub fn new<I, S>(keys: I) -> ApiKeys
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ApiKeys {
            digests: keys
                .into_iter()
                .filter(|k| !k.as_ref().is_empty())
                .map(|k| Sha256::digest(k.as_ref().as_bytes()).into())
                .collect(),
        }
    }

    /// No key configured: the server is open, as Ollama is.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether `presented` is one of the keys. Compares against every key, in constant time.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let d: [u8; 32] = Sha256::digest(presented).into();
        let mut ok = subtle::Choice::from(0);
        for k in &self.digests {
            ok |= k.ct_eq(&d);
        }
        bool::from(ok)
    }
}

/// Which API a path belongs to; decides the error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Native,
    OpenAi,
    Anthropic,
}

pub fn family(path: &str) -> Family {
    if path == "/v1/messages" || path.starts_with("/v1/messages/") {
        Family::Anthropic
    } else if path == "/v1" || path.starts_with("/v1/") {
        Family::OpenAi
    } else {
        Family::Native
    }
}

/// Paths served without a key: the liveness and readiness probes (load balancers and
/// Kubernetes probe without credentials; neither reveals anything beyond up/ready).
pub fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

/// The key a request presents: the `Bearer` credential of `Authorization` (scheme matched
/// case-insensitively, as RFC 7235 says), or on the Anthropic route `x-api-key`.
pub fn presented_key(headers: &HeaderMap, family: Family) -> Option<&[u8]> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(v[7..].trim_ascii());
        }
    }
    if family == Family::Anthropic {
        return headers.get("x-api-key").map(|v| v.as_bytes().trim_ascii());
    }
    None
}

/// Renders `e` in the shape of the API `path` belongs to.
pub fn error_response(path: &str, e: Error) -> Response {
    match family(path) {
        Family::Native => e.into_response(),
        Family::OpenAi => openai_response(&ApiError::from(e)),
        Family::Anthropic => anthropic_response(&ApiError::from(e)),
    }
}

/// Middleware: refuses requests without a valid key when keys are configured.
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if state.api_keys.is_empty() || is_public(path) {
        return next.run(req).await;
    }
    let fam = family(path);
    let message = match presented_key(req.headers(), fam) {
        Some(k) if state.api_keys.accepts(k) => return next.run(req).await,
        Some(_) => "invalid API key",
        None => match fam {
            Family::Anthropic => "missing API key: send x-api-key or Authorization: Bearer",
            _ => "missing API key: send Authorization: Bearer <key>",
        },
    };
    let mut resp = error_response(path, Error::Unauthorized(message.into()));
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        let keys = ApiKeys::new(["alpha", "", "beta-2"]);
        assert_eq!(keys.len(), 2);
        let table: [(&[u8], bool); 7] = [
            (b"alpha", true),
            (b"beta-2", true),
            (b"alph", false),
            (b"alphaa", false),
            (b"", false),
            (b"ALPHA", false),
            (b"beta", false),
        ];
        for (k, want) in table {
            assert_eq!(keys.accepts(k), want, "{k:?}");
        }
        assert!(!ApiKeys::default().accepts(b""));
        assert_eq!(format!("{keys:?}"), "ApiKeys(2 keys)");
    }

    #[test]
    fn families_and_public_paths() {
        let table = [
            ("/api/chat", Family::Native),
            ("/", Family::Native),
            ("/metrics", Family::Native),
            ("/v1/chat/completions", Family::OpenAi),
            ("/v1/models/a/b", Family::OpenAi),
            ("/v1/messages", Family::Anthropic),
            ("/v1/messagesx", Family::OpenAi),
            ("/v10", Family::Native),
        ];
        for (p, f) in table {
            assert_eq!(family(p), f, "{p}");
        }
        for (p, public) in [
            ("/healthz", true),
            ("/readyz", true),
            ("/healthz/", false),
            ("/metrics", false),
            ("/", false),
        ] {
            assert_eq!(is_public(p), public, "{p}");
        }
    }

    #[test]
    fn presented_keys() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        type Case<'a> = (&'a [(&'a str, &'a str)], Family, Option<&'a [u8]>);
        let cases: [Case; 7] = [
            (
                &[("authorization", "Bearer k1")],
                Family::Native,
                Some(b"k1"),
            ),
            (
                &[("authorization", "bearer  k1 ")],
                Family::OpenAi,
                Some(b"k1"),
            ),
            (&[("authorization", "Basic azE=")], Family::Native, None),
            (&[("x-api-key", "k2")], Family::Anthropic, Some(b"k2")),
            (&[("x-api-key", "k2")], Family::OpenAi, None),
            (&[("x-api-key", "k2")], Family::Native, None),
            (&[], Family::Anthropic, None),
        ];
        for (pairs, fam, want) in cases {
            assert_eq!(presented_key(&h(pairs), fam), want, "{pairs:?} {fam:?}");
        }
    }
}
