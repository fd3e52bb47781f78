//! How the native API renders failures: every handler error is a `crate::error::Error`, shown as
//! `{"error": msg}` with the status from `Error::status()` (the one table). Also the JSON body
//! extractor, which turns Ollama's request-decoding failures into the same errors: empty body →
//! 400 `missing request body`, malformed → 400 with the decoder's message, too large → 413.

use axum::extract::{FromRequest, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use super::gojson;
use crate::error::Error;

/// The message of a 5xx, carried to `log_server_errors` in the response extensions so the log
/// line is written once, in middleware, with the request's span.
#[derive(Clone, Debug)]
struct ServerErrorMessage(String);

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = self.to_string();
        let shown = self.client_message();
        let body = match &self {
            Error::RemoteUnauthorized {
                signin_url: Some(url),
            } => serde_json::json!({ "error": shown, "signin_url": url }),
            _ => serde_json::json!({ "error": shown }),
        };
        let mut resp = (status, Json(body)).into_response();
        if matches!(self, Error::QueueFull) {
            // Admission overflow is transient (DESIGN.md decision 8): tell clients when to retry.
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if status.is_server_error() {
            resp.extensions_mut().insert(ServerErrorMessage(message));
        }
        resp
    }
}

/// Logs 5xx responses produced by handlers (4xx are the client's business).
pub async fn log_server_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let resp = next.run(req).await;
    if let Some(ServerErrorMessage(msg)) = resp.extensions().get::<ServerErrorMessage>() {
        tracing::error!(%method, %path, status = resp.status().as_u16(), error = %msg, "request failed");
    }
    resp
}

/// A JSON request body with Ollama's decoding rules (see module docs). Like Go's
/// `json.Decoder.Decode`, only the first JSON value is read; unknown fields are ignored.
pub struct OJson<T>(pub T);

impl<T, S> FromRequest<S> for OJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Error> {
        let bytes = read_body(req).await?;
        decode_json(&bytes).map(OJson)
    }
}

/// The whole body of a JSON request, in one buffer sized from `Content-Length`, under the
/// router's body limit (`DefaultBodyLimit`): a declared length over the limit is 413 before a
/// byte is read; one that turns out longer is 413 when it crosses; a body that stalls or
/// trickles is 408 (`serve::BodyPolicy`). One copy of the body is held while it arrives, never
/// a list of chunks and their concatenation side by side.
pub(crate) async fn read_body(req: Request) -> Result<Vec<u8>, Error> {
    use axum::RequestExt;
    use http_body_util::BodyExt;
    let declared = axum::body::HttpBody::size_hint(req.body()).exact();
    let mut body = req.into_limited_body();
    let cap = axum::body::HttpBody::size_hint(&body).upper();
    if let (Some(declared), Some(cap)) = (declared, cap) {
        if declared > cap {
            return Err(Error::PayloadTooLarge);
        }
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0).min(cap.unwrap_or(0)) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let e: &(dyn std::error::Error + 'static) = &e;
            if chain_has::<http_body_util::LengthLimitError>(e) {
                Error::PayloadTooLarge
            } else if super::serve::is_too_slow(e) {
                Error::BodyTimeout
            } else {
                Error::BadRequest(format!("Failed to buffer the request body: {e}"))
            }
        })?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// Whether `err` or an error it wraps is an `E`.
fn chain_has<E: std::error::Error + 'static>(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = Some(err);
    while let Some(cur) = e {
        if cur.is::<E>() {
            return true;
        }
        e = cur.source();
    }
    false
}

/// Decode the first JSON value in `bytes` with the native API's error texts: Go's
/// `encoding/json` wording for syntax errors and for type mismatches in Ollama's request
/// structs (`gojson`), serde's text for anything else.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    if bytes.trim_ascii().is_empty() {
        return Err(Error::BadRequest("missing request body".into()));
    }
    // Go decodes `null` into a struct as a no-op: the request is all zero values (Go clients
    // send `null` for a nil request), so each handler reports what is missing in its words.
    let bytes: &[u8] = if bytes.trim_ascii() == b"null" {
        b"{}"
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let e = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    // Go reads a `\u` escape of a lone UTF-16 surrogate as U+FFFD where serde_json refuses the
    // body: decode the body as Go reads it, errors included (the rewrite keeps every other byte,
    // and the rewritten body has no such escape left, so this recurses once at most). Only a
    // failed decode looks, so the common path pays nothing.
    if let std::borrow::Cow::Owned(fixed) = crate::prompt::parsers::govalue::go_surrogates(bytes) {
        return decode_json(&fixed);
    }
    // Go reports the first syntax error of the value before any type mismatch, so a failed
    // decode is scanned with Go's rules. A value serde decoded is well-formed JSON, so the scan
    // (the costly part of a 50 MB body) is skipped on the success path.
    if let Some(msg) = gojson::syntax_error(bytes) {
        return Err(Error::BadRequest(msg));
    }
    if e.inner().is_eof() {
        return Err(Error::BadRequest("unexpected EOF".into()));
    }
    let path: Vec<gojson::Step> = e
        .path()
        .iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Map { key } => Some(gojson::Step::Key(key.clone())),
            serde_path_to_error::Segment::Seq { .. } => Some(gojson::Step::Index),
            _ => None,
        })
        .collect();
    let inner = e.into_inner();
    // serde_json appends " at line L column C"; Go's text has no position.
    let text = inner.to_string();
    let msg = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(m, _)| m);
    let go = gojson::go_struct(std::any::type_name::<T>())
        .and_then(|root| gojson::found_kind(msg).and_then(|k| gojson::type_error(root, &path, &k)));
    Err(Error::BadRequest(go.unwrap_or(text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[derive(serde::Deserialize, Debug)]
    struct Req {
        model: String,
    }

    #[test]
    fn decoding_errors() {
        let err = |b: &[u8]| decode_json::<Req>(b).unwrap_err().to_string();
        assert_eq!(err(b""), "missing request body");
        assert_eq!(err(b" \n\t"), "missing request body");
        assert_eq!(err(b"{\"model\":"), "unexpected EOF");
        assert!(err(b"{\"model\": 1}").contains("invalid type"));
        assert_eq!(
            err(b"nope"),
            "invalid character 'o' in literal null (expecting 'u')"
        );
        // First value only, unknown fields ignored (Go's Decoder semantics).
        let r: Req = decode_json(b"{\"model\":\"a\",\"x\":1} trailing").unwrap();
        assert_eq!(r.model, "a");
        // `null` is a request of zero values, as Go decodes it.
        #[derive(serde::Deserialize)]
        struct Zero {
            #[serde(default)]
            model: String,
        }
        assert_eq!(decode_json::<Zero>(b" null ").unwrap().model, "");
    }

    #[test]
    fn lone_surrogate_escapes_decode_as_go_reads_them() {
        // U+FFFD for each escape that is not half of a valid pair; a pair stays one character.
        let r: Req = decode_json(br#"{"model":"a\ud800b\udc00\ud83d\ude00\ud800\u0041"}"#).unwrap();
        assert_eq!(r.model, "a\u{fffd}b\u{fffd}\u{1f600}\u{fffd}A");
        // An escaped backslash before `ud800` is text, not an escape.
        let r: Req = decode_json(br#"{"model":"\\ud800"}"#).unwrap();
        assert_eq!(r.model, "\\ud800");
        // Other errors keep their texts.
        let err = |b: &[u8]| decode_json::<Req>(b).unwrap_err().to_string();
        assert_eq!(err(br#"{"model":"\ud800""#), "unexpected EOF");
        assert_eq!(
            err(br#"{"model":"\ud800" x}"#),
            "invalid character 'x' after object key:value pair"
        );
        assert!(err(br#"{"model":["\ud800"]}"#).contains("invalid type"));
    }

    #[test]
    fn error_shape() {
        let resp = Error::NotFound("model 'x:latest' not found".into()).into_response();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let resp = Error::QueueFull.into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()["retry-after"], "1");
        let resp = Error::Internal("boom".into()).into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(resp.extensions().get::<ServerErrorMessage>().is_some());
    }
}
