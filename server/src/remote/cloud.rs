//! Explicit cloud references (`gpt-oss:20b:cloud`, `gpt-oss:20b-cloud`), as Ollama's
//! `cloud_proxy.go` serves them: one middleware in front of the routes that take a model reads
//! the request's `model`; a cloud reference is sent, unchanged but for the model name (its
//! suffix removed), to the same path on `OLLAMA_CLOUD_BASE_URL`, signed, and the reply — status,
//! headers, body — is streamed back as it comes. Anything else goes on to the local handlers.
//! Cloud off → 403 with Ollama's text, before any connection.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use serde_json::{Map, Value};

use super::modelref::{self, Source};
use super::policy;
use crate::api::AppState;
use crate::error::Error;

/// POST routes whose body names a model, and what a disabled cloud says about them.
const POST_PATHS: &[(&str, &str)] = &[
    ("/api/generate", policy::INFERENCE_UNAVAILABLE),
    ("/api/chat", policy::INFERENCE_UNAVAILABLE),
    ("/api/embed", policy::INFERENCE_UNAVAILABLE),
    ("/api/embeddings", policy::INFERENCE_UNAVAILABLE),
    ("/api/show", policy::DETAILS_UNAVAILABLE),
    ("/v1/chat/completions", policy::INFERENCE_UNAVAILABLE),
    ("/v1/completions", policy::INFERENCE_UNAVAILABLE),
    ("/v1/embeddings", policy::INFERENCE_UNAVAILABLE),
    ("/v1/responses", policy::INFERENCE_UNAVAILABLE),
    ("/v1/messages", policy::INFERENCE_UNAVAILABLE),
];
const MODELS_PREFIX: &str = "/v1/models/";

/// The request's `model` string, trimmed; `None` when the body is not an object with one.
/// Only `model` is kept: every other field (a prompt of many MB) is skipped, not built, since
/// this runs before the handler parses the body for real.
pub fn model_field(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow, default)]
        model: Option<std::borrow::Cow<'a, str>>,
    }
    let named: Named = serde_json::from_slice(body).ok()?;
    let model = named.model?;
    let model = model.trim();
    (!model.is_empty()).then(|| model.to_owned())
}

/// `body` with its `model` replaced (every other field kept, in order).
pub fn with_model(body: &[u8], model: &str) -> Result<Vec<u8>, serde_json::Error> {
    let mut m: Map<String, Value> = serde_json::from_slice(body)?;
    m.insert("model".into(), Value::String(model.to_owned()));
    serde_json::to_vec(&m)
}

/// The cloud base of a reference, when it is an explicit cloud one.
fn cloud_base(raw: &str) -> Option<String> {
    match modelref::parse(raw) {
        Ok(Some(r)) if r.source == Source::Cloud => Some(r.base),
        _ => None,
    }
}

pub async fn passthrough(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if req.method() == Method::GET {
        if let Some(raw) = path.strip_prefix(MODELS_PREFIX) {
            let raw = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
            if let Some(base) = cloud_base(&raw) {
                let to = format!("{MODELS_PREFIX}{base}");
                return proxy(&state, req, None, &to, policy::DETAILS_UNAVAILABLE).await;
            }
        }
        return next.run(req).await;
    }
    let Some(&(_, operation)) = POST_PATHS.iter().find(|(p, _)| *p == path) else {
        return next.run(req).await;
    };
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match crate::api::error::read_body(Request::from_parts(parts.clone(), body)).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let base = model_field(&bytes).and_then(|m| cloud_base(&m));
    let Some(base) = base else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let body = match with_model(&bytes, &base) {
        Ok(b) => b,
        Err(e) => return Error::BadRequest(e.to_string()).into_response(),
    };
    let req = Request::from_parts(parts, Body::empty());
    proxy(&state, req, Some(body), &path, operation).await
}

fn json_error(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `cloud_proxy.go`'s `proxyCloudRequestWithPath`.
async fn proxy(
    state: &AppState,
    req: Request,
    body: Option<Vec<u8>>,
    path: &str,
    operation: &str,
) -> Response {
    let remote = &state.remote;
    if let Err(e) = remote.check_enabled(operation) {
        return e.into_response();
    }
    let mut url = remote.cloud.url.clone();
    url.set_path(path);
    url.set_query(req.uri().query());
    let mut authorization = None;
    if policy::hostname(&url).eq_ignore_ascii_case(&remote.cloud.signing_host) {
        let (challenge, query) = policy::cloud_challenge(
            req.method().as_str(),
            path,
            req.uri().query(),
            super::unix_now(),
        );
        url.set_query(Some(&query));
        match remote.sign(&challenge).await {
            Ok(a) => authorization = Some(a),
            Err(e) => {
                tracing::warn!(error = %e, "cloud proxy signing failed");
                return match remote.signin_url().await {
                    Ok(u) => Error::RemoteUnauthorized {
                        signin_url: Some(u),
                    }
                    .into_response(),
                    Err(_) => Error::RemoteUnauthorized { signin_url: None }.into_response(),
                };
            }
        }
    }
    let mut headers = HeaderMap::new();
    let tokens = connection_tokens(req.headers());
    for (k, v) in req.headers() {
        if policy::forwarded(k.as_str(), &tokens, true) {
            headers.append(k.clone(), v.clone());
        }
    }
    headers.insert(
        HeaderName::from_static("x-ollama-client-version"),
        axum::http::HeaderValue::from_static(crate::OLLAMA_COMPAT_VERSION),
    );
    let body = body.unwrap_or_default();
    if !body.is_empty() && !headers.contains_key(axum::http::header::CONTENT_TYPE) {
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
    }
    if let Some(a) = authorization.and_then(|a| a.parse().ok()) {
        headers.insert(axum::http::header::AUTHORIZATION, a);
    }
    let method = req.method().clone();
    let sent = remote
        .http()
        .request(method.clone(), url.clone())
        .headers(headers)
        .body(body)
        .send()
        .await;
    let upstream = match sent {
        Ok(r) => r,
        Err(e) => {
            let msg = super::transport_error(method.as_str(), &url, &e);
            return json_error(StatusCode::BAD_GATEWAY, serde_json::json!({ "error": msg }));
        }
    };
    let status = upstream.status();
    let tokens = connection_tokens(upstream.headers());
    let mut out_headers = HeaderMap::new();
    for (k, v) in upstream.headers() {
        if policy::forwarded(k.as_str(), &tokens, false) {
            out_headers.append(k.clone(), v.clone());
        }
    }
    // Streamed as it arrives; dropping the response (client gone) closes the upstream request.
    let stream = upstream.bytes_stream().map_err(std::io::Error::other);
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = out_headers;
    resp
}

fn connection_tokens(h: &HeaderMap) -> Vec<String> {
    h.get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_fields() {
        assert_eq!(
            model_field(br#"{"model":" m:cloud "}"#).as_deref(),
            Some("m:cloud")
        );
        assert_eq!(model_field(br#"{"model":""}"#), None);
        assert_eq!(model_field(br#"{"model":1}"#), None);
        assert_eq!(model_field(b"[]"), None);
        assert_eq!(model_field(b"garbage"), None);
        assert_eq!(
            with_model(br#"{"a":1,"model":"m:cloud","z":[2]}"#, "m").unwrap(),
            br#"{"a":1,"model":"m","z":[2]}"#.to_vec()
        );
        assert_eq!(
            cloud_base("gpt-oss:20b-cloud").as_deref(),
            Some("gpt-oss:20b")
        );
        assert_eq!(cloud_base("gpt-oss:20b"), None);
        assert_eq!(cloud_base("m:local:cloud"), None);
    }
}
