//! `/api/generate` and `/api/chat` on a stub model, as Ollama's handlers serve one: cloud off →
//! 403; a `remote_host` outside `OLLAMA_REMOTES` → 400; otherwise the request goes to
//! `remote_host` with `remote_model` as its model and the stub's options (and for generate its
//! TEMPLATE and SYSTEM, for chat its MESSAGES and SYSTEM) filled in where the request left them
//! out. Each reply line comes back with `model` set to the name the client asked for and
//! `remote_model`/`remote_host` added, as it arrives. Errors keep the remote's status and text;
//! a 401 becomes Ollama's `{"error":"unauthorized","signin_url":…}`.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value};
use url::Url;

use super::lines::Lines;
use super::{policy, Remote};
use crate::api::inference::ResolvedModel;
use crate::api::show::{ModelView, DEFAULT_TEMPLATE};
use crate::api::types::{ChatRequest, GenerateRequest};
use crate::error::{Error, Result};

/// What the reply lines say about the stub.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// The model name as the client sent it.
    pub name: String,
    pub remote_model: String,
    pub remote_host: String,
}

/// A reply line, rewritten.
#[derive(Debug, PartialEq)]
pub enum Line {
    Chunk(Vec<u8>),
    /// The remote reported a failure (`{"error": …}`) or sent something that is not a reply.
    Error(String),
}

impl Rewrite {
    /// `model` becomes the requested name and the remote fields follow it (where Ollama's
    /// response structs put them); every other field is kept as the remote wrote it.
    pub fn line(&self, raw: &[u8]) -> Line {
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(raw) else {
            return Line::Error(String::from_utf8_lossy(raw).trim().to_owned());
        };
        if let Some(e) = error_text(&obj) {
            return Line::Error(e);
        }
        let mut out = Map::with_capacity(obj.len() + 3);
        out.insert("model".into(), Value::String(self.name.clone()));
        out.insert(
            "remote_model".into(),
            Value::String(self.remote_model.clone()),
        );
        out.insert(
            "remote_host".into(),
            Value::String(self.remote_host.clone()),
        );
        // Iterated, not removed from: the remote's field order is kept.
        out.extend(
            obj.into_iter()
                .filter(|(k, _)| !matches!(k.as_str(), "model" | "remote_model" | "remote_host")),
        );
        let mut bytes = serde_json::to_vec(&Value::Object(out)).unwrap_or_default();
        bytes.push(b'\n');
        Line::Chunk(bytes)
    }
}

/// A non-empty `error` string.
fn error_text(obj: &Map<String, Value>) -> Option<String> {
    match obj.get("error") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(Value::String(_)) => None,
        Some(other) => Some(other.to_string()),
    }
}

/// Puts `key: value` unless the value is "empty" (Go's `omitempty`).
fn put(m: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
    };
    if !empty {
        m.insert(key.to_owned(), value);
    }
}

/// The request's options with the stub's PARAMETERs added where the request has none.
fn merged_options(req: Option<&Map<String, Value>>, view: &ModelView) -> Map<String, Value> {
    let mut opts = req.cloned().unwrap_or_default();
    for (k, v) in &view.options {
        opts.entry(k.clone()).or_insert_with(|| v.clone());
    }
    opts
}

fn put_common(
    m: &mut Map<String, Value>,
    stream: Option<bool>,
    format: Option<&Value>,
    keep_alive: Option<&Value>,
    think: Option<&Value>,
) {
    if let Some(s) = stream {
        m.insert("stream".into(), Value::Bool(s));
    }
    put(m, "format", format.cloned().unwrap_or(Value::Null));
    put(m, "keep_alive", keep_alive.cloned().unwrap_or(Value::Null));
    put(m, "think", think.cloned().unwrap_or(Value::Null));
}

/// The body sent for `/api/generate` (Ollama's GenerateHandler remote branch). Its TEMPLATE is
/// the stub's, else Ollama's default `{{ .Prompt }}`: Ollama's model always has a template, so
/// it sends one whenever the request has none.
pub fn generate_body(req: &GenerateRequest, view: &ModelView) -> Value {
    let mut m = Map::new();
    m.insert(
        "model".into(),
        Value::String(view.config.remote_model.clone()),
    );
    put(&mut m, "prompt", Value::String(req.prompt.clone()));
    put(&mut m, "suffix", Value::String(req.suffix.clone()));
    let system = if req.system.is_empty() {
        &view.system
    } else {
        &req.system
    };
    put(&mut m, "system", Value::String(system.clone()));
    let template = if req.template.is_empty() {
        view.template.as_deref().unwrap_or(DEFAULT_TEMPLATE)
    } else {
        &req.template
    };
    put(&mut m, "template", Value::String(template.to_owned()));
    if let Some(c) = &req.context {
        put(&mut m, "context", serde_json::json!(c));
    }
    put_common(
        &mut m,
        req.stream,
        req.format.as_ref(),
        req.keep_alive.as_ref(),
        req.think.as_ref(),
    );
    put(&mut m, "raw", Value::Bool(req.raw));
    put(&mut m, "images", serde_json::json!(req.images));
    put(
        &mut m,
        "options",
        Value::Object(merged_options(req.options.as_ref(), view)),
    );
    put_tail(
        &mut m,
        req.truncate,
        req.shift,
        req.logprobs,
        req.top_logprobs,
    );
    Value::Object(m)
}

fn put_tail(
    m: &mut Map<String, Value>,
    truncate: Option<bool>,
    shift: Option<bool>,
    logprobs: bool,
    top: i64,
) {
    if let Some(t) = truncate {
        m.insert("truncate".into(), Value::Bool(t));
    }
    if let Some(s) = shift {
        m.insert("shift".into(), Value::Bool(s));
    }
    put(m, "logprobs", Value::Bool(logprobs));
    put(m, "top_logprobs", serde_json::json!(top));
}

/// The body sent for `/api/chat` (Ollama's ChatHandler remote branch): the stub's MESSAGES
/// before the request's, its SYSTEM first unless the request starts with a system message, and
/// earlier assistant turns' `<think>` blocks dropped for qwen3 and deepseek-r1 stubs.
pub fn chat_body(req: &ChatRequest, view: &ModelView, model_part: &str) -> Value {
    let mut m = Map::new();
    m.insert(
        "model".into(),
        Value::String(view.config.remote_model.clone()),
    );
    let messages = if req.messages.is_empty() {
        Value::Null
    } else {
        let mut msgs: Vec<Value> = Vec::new();
        if req.messages[0].role != "system" && !view.system.is_empty() {
            msgs.push(serde_json::json!({"role": "system", "content": view.system}));
        }
        msgs.extend(view.messages.iter().map(|x| serde_json::json!(x)));
        msgs.extend(req.messages.iter().map(|x| serde_json::json!(x)));
        if view.config.model_family == "qwen3" || model_part == "deepseek-r1" {
            drop_old_thinking(&mut msgs);
        }
        Value::Array(msgs)
    };
    // Ollama's `messages` has no omitempty: null when there are none (a load request).
    m.insert("messages".into(), messages);
    put_common(
        &mut m,
        req.stream,
        req.format.as_ref(),
        req.keep_alive.as_ref(),
        req.think.as_ref(),
    );
    put(&mut m, "tools", serde_json::json!(req.tools));
    put(
        &mut m,
        "options",
        Value::Object(merged_options(req.options.as_ref(), view)),
    );
    put_tail(
        &mut m,
        req.truncate,
        req.shift,
        req.logprobs,
        req.top_logprobs,
    );
    Value::Object(m)
}

/// Ollama's `filterThinkTags`: assistant turns before the last user turn lose a leading
/// `<think>…</think>` block.
fn drop_old_thinking(msgs: &mut [Value]) {
    let role = |v: &Value| v["role"].as_str().unwrap_or_default().to_owned();
    let Some(last_user) = msgs.iter().rposition(|v| role(v) == "user") else {
        return;
    };
    for v in &mut msgs[..last_user] {
        if role(v) != "assistant" {
            continue;
        }
        let content = v["content"].as_str().unwrap_or_default();
        let trimmed = content.trim_start();
        if let Some(rest) = trimmed.strip_prefix("<think>") {
            if let Some(end) = rest.find("</think>") {
                let after = rest[end + "</think>".len()..].trim_start().to_owned();
                v["content"] = Value::String(after);
            }
        }
    }
}

/// The checks before a stub is contacted: cloud on, `remote_host` a URL on an allowed host.
fn target(remote: &Remote, view: &ModelView) -> Result<Url> {
    remote.check_enabled(policy::INFERENCE_UNAVAILABLE)?;
    let host = &view.config.remote_host;
    let url = Url::parse(host).map_err(|e| Error::Internal(format!("parse {host:?}: {e}")))?;
    if !policy::host_allowed(&remote.remotes, &url) {
        tracing::info!(remote_host = %host, remotes = ?remote.remotes, "remote model host not allowed");
        return Err(Error::BadRequest(policy::NOT_ALLOWED.into()));
    }
    Ok(url)
}

pub async fn generate(
    remote: &Remote,
    req: &GenerateRequest,
    model: &ResolvedModel,
) -> Result<Response> {
    let base = target(remote, &model.view)?;
    if !model.view.messages.is_empty() {
        tracing::warn!("embedded messages in the model not supported with '/api/generate'; try '/api/chat' instead");
    }
    let body = generate_body(req, &model.view);
    proxy(
        remote,
        base,
        "/api/generate",
        body,
        req.stream,
        rewrite(&req.model, model),
    )
    .await
}

pub async fn chat(remote: &Remote, req: &ChatRequest, model: &ResolvedModel) -> Result<Response> {
    let base = target(remote, &model.view)?;
    let body = chat_body(req, &model.view, model.name.model());
    proxy(
        remote,
        base,
        "/api/chat",
        body,
        req.stream,
        rewrite(&req.model, model),
    )
    .await
}

fn rewrite(requested: &str, model: &ResolvedModel) -> Rewrite {
    Rewrite {
        name: requested.to_owned(),
        remote_model: model.view.config.remote_model.clone(),
        remote_host: model.view.config.remote_host.clone(),
    }
}

/// Sends `body` to `base` + `path` as Ollama's API client does (signed when it would sign) and
/// relays the reply: the first line is read before answering, so a remote failure keeps its
/// status; later failures end the stream with an `{"error": …}` line.
async fn proxy(
    remote: &Remote,
    base: Url,
    path: &str,
    body: Value,
    stream: Option<bool>,
    rw: Rewrite,
) -> Result<Response> {
    let mut url = base.clone();
    url.set_path(&format!("{}{path}", base.path().trim_end_matches('/')));
    let mut auth = None;
    if policy::stub_signs(&base, remote.use_auth) {
        let ts = super::unix_now();
        auth = Some(
            remote
                .sign(&policy::stub_challenge("POST", path, ts))
                .await?,
        );
        url.query_pairs_mut().append_pair("ts", &ts.to_string());
    }
    let mut request = remote
        .http()
        .post(url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/x-ndjson")
        .header(header::USER_AGENT, super::user_agent())
        .body(serde_json::to_vec(&body)?);
    if let Some(a) = auth {
        request = request.header(header::AUTHORIZATION, a);
    }
    let resp = request.send().await.map_err(|e| Error::Remote {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: super::transport_error("POST", &url, &e),
    })?;
    let status = resp.status();
    let mut lines = Lines::new(resp);
    let first = lines.next().await;
    if status.as_u16() >= 400 {
        return Err(remote_failure(remote, status, first).await);
    }
    let first = match first {
        None => None,
        Some(Err(e)) => {
            return Err(Error::Remote {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: e,
            })
        }
        Some(Ok(line)) => match rw.line(&line) {
            Line::Chunk(c) => Some(c),
            Line::Error(e) => {
                return Err(Error::Remote {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: e,
                })
            }
        },
    };
    let state = (lines, rw, first, false);
    let chunks = futures_util::stream::unfold(state, |(mut lines, rw, first, ended)| async move {
        if ended {
            return None;
        }
        if let Some(c) = first {
            return Some((
                Ok::<_, std::io::Error>(Bytes::from(c)),
                (lines, rw, None, false),
            ));
        }
        let (bytes, ended) = match lines.next().await? {
            Ok(line) => match rw.line(&line) {
                Line::Chunk(c) => (c, false),
                Line::Error(e) => (error_line(&e), true),
            },
            Err(e) => (error_line(&e), true),
        };
        Some((Ok(Bytes::from(bytes)), (lines, rw, None, ended)))
    });
    let content_type = if stream == Some(false) {
        "application/json; charset=utf-8"
    } else {
        crate::api::stream::NDJSON
    };
    let mut out = Response::new(Body::from_stream(chunks));
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(out)
}

fn error_line(message: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({ "error": message })).unwrap_or_default();
    v.push(b'\n');
    v
}

/// A remote's 4xx/5xx as Ollama's client reads it: 401 → sign in; otherwise the status with
/// the body's `error` (or the body itself).
async fn remote_failure(
    remote: &Remote,
    status: StatusCode,
    first: Option<Result<Bytes, String>>,
) -> Error {
    if status == StatusCode::UNAUTHORIZED {
        return match remote.signin_url().await {
            Ok(url) => Error::RemoteUnauthorized {
                signin_url: Some(url),
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot build the sign-in URL");
                Error::Internal("error getting authorization details".into())
            }
        };
    }
    let message = match first {
        Some(Ok(line)) => match serde_json::from_slice::<Value>(&line) {
            Ok(Value::Object(o)) => error_text(&o).unwrap_or_default(),
            _ => String::from_utf8_lossy(&line).trim().to_owned(),
        },
        Some(Err(e)) => e,
        None => String::new(),
    };
    let message = if message.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("remote error")
            .to_lowercase()
    } else {
        message
    };
    Error::Remote { status, message }
}

#[cfg(test)]
mod tests;
