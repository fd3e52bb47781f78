//! Error bodies of the compatibility APIs. Every failure keeps the native status code (so a
//! client sees the same 404/400/503 as on `/api`); only the body's shape changes:
//! - OpenAI (`/v1/*`): `{"error":{"message","type","param":null,"code":null}}`, `type` from the
//!   status (400 and 401 `invalid_request_error`, 404 `not_found_error`, anything else
//!   `api_error`); a 401 carries `code: "invalid_api_key"` as OpenAI's does.
//! - Anthropic (`/v1/messages`): `{"type":"error","error":{"type","message"}}` with Anthropic's
//!   type names per status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::Error;

/// A failure on its way to a compatibility client: the native status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError::new(e.status(), e.client_message())
    }
}

/// OpenAI's `error.type` for a status.
pub fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        // OpenAI answers a missing or wrong key with 401 `invalid_request_error`.
        400 | 401 => "invalid_request_error",
        404 => "not_found_error",
        _ => "api_error",
    }
}

/// The OpenAI error object (also the payload of a mid-stream SSE error frame).
pub fn openai_body(e: &ApiError) -> Value {
    json!({"error": {
        "message": e.message,
        "type": openai_type(e.status),
        "param": null,
        "code": if e.status == StatusCode::UNAUTHORIZED { json!("invalid_api_key") } else { Value::Null },
    }})
}

/// Anthropic's `error.type` for a status.
pub fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Anthropic's error object; `request_id` is `req_` + 24 hex digits, as Ollama makes them.
pub fn anthropic_body(e: &ApiError) -> Value {
    let mut rng = rand::thread_rng();
    let id: String = (0..12)
        .map(|_| format!("{:02x}", rand::Rng::gen::<u8>(&mut rng)))
        .collect();
    json!({"type": "error", "error": {"type": anthropic_type(e.status), "message": e.message},
           "request_id": format!("req_{id}")})
}

fn respond(status: StatusCode, body: Value) -> Response {
    let mut resp = (status, Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // Same retry hint as the native 503 (queue full).
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

pub fn openai_response(e: &ApiError) -> Response {
    respond(e.status, openai_body(e))
}

pub fn anthropic_response(e: &ApiError) -> Response {
    respond(e.status, anthropic_body(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_keeps_native_status() {
        let e: ApiError = Error::NotFound("model 'x' not found".into()).into();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(
            serde_json::to_string(&openai_body(&e)).unwrap(),
            r#"{"error":{"message":"model 'x' not found","type":"not_found_error","param":null,"code":null}}"#
        );
        let table = [
            (400, "invalid_request_error"),
            (404, "not_found_error"),
            (499, "api_error"),
            (500, "api_error"),
            (503, "api_error"),
        ];
        for (code, ty) in table {
            assert_eq!(
                openai_type(StatusCode::from_u16(code).unwrap()),
                ty,
                "{code}"
            );
        }
        let resp = openai_response(&Error::QueueFull.into());
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn anthropic_shape() {
        let e = ApiError::bad_request("max_tokens is required");
        let mut body = anthropic_body(&e);
        let id = body["request_id"].take();
        let id = id.as_str().unwrap();
        assert!(id.len() == 28 && id.starts_with("req_"), "{id}");
        assert!(id[4..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens is required"},"request_id":null}"#
        );
        let table = [
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (503, "overloaded_error"),
            (500, "api_error"),
            (499, "api_error"),
        ];
        for (code, ty) in table {
            assert_eq!(
                anthropic_type(StatusCode::from_u16(code).unwrap()),
                ty,
                "{code}"
            );
        }
    }
}
