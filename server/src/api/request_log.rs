//! `OLLAMA_DEBUG_LOG_REQUESTS`: every inference request (`/api/generate`, `/api/chat`,
//! `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/messages`) is written, as
//! Ollama writes it, into one private directory made at startup (`ollama-request-logs-*` under
//! the temp dir): `<time>-<n>_<route>_body.json` holds the body exactly as received, and the
//! sibling `<time>-<n>_<route>_request.sh` replays it with curl. Off unless the variable is set;
//! the bodies hold prompts, so the directory and files are the server user's only (0700/0600).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// The routes whose requests are logged (Ollama's `withInferenceRequestLogging` list).
pub const LOGGED_ROUTES: [&str; 6] = [
    "/api/generate",
    "/api/chat",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
];

#[derive(Debug)]
pub struct RequestLog {
    dir: PathBuf,
    /// `http` or `https`, for the replay URL.
    scheme: &'static str,
    counter: AtomicU64,
}

impl RequestLog {
    /// Makes a fresh private directory under the system temp dir.
    pub fn create(scheme: &'static str) -> std::io::Result<RequestLog> {
        use std::os::unix::fs::DirBuilderExt;
        let tmp = std::env::temp_dir();
        // A few tries: the random name only has to be new.
        let mut last = None;
        for _ in 0..8 {
            let dir = tmp.join(crate::api::openai::common::random_id(
                "ollama-request-logs-",
                10,
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(RequestLog::in_dir(dir, scheme)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no directory made")))
    }

    /// Logs into `dir`, which must exist.
    pub fn in_dir(dir: PathBuf, scheme: &'static str) -> RequestLog {
        RequestLog {
            dir,
            scheme,
            counter: AtomicU64::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the body and its replay script; returns the script's path.
    pub fn write(
        &self,
        route: &str,
        method: &Method,
        host: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<PathBuf> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let now = file_time(time::OffsetDateTime::now_utc());
        let stem = format!("{now}-{n:06}_{}", route_file_name(route));
        let body_name = format!("{stem}_body.json");
        let script = self.dir.join(format!("{stem}_request.sh"));
        write_private(&self.dir.join(&body_name), body)?;
        let url = format!("{}://{host}{route}", self.scheme);
        let content_type = if content_type.is_empty() {
            "application/json"
        } else {
            content_type
        };
        let text = format!(
            "#!/bin/sh\nSCRIPT_DIR=\"$(CDPATH= cd -- \"$(dirname -- \"$0\")\" && pwd)\"\n\
             curl --request {method} --url {} --header {} --data-binary @\"${{SCRIPT_DIR}}/{body_name}\"\n",
            shell_quote(&url),
            shell_quote(&format!("Content-Type: {content_type}")),
        );
        write_private(&script, text.as_bytes())?;
        Ok(script)
    }
}

/// `20060102T150405.000000000Z`, Ollama's sortable UTC time in the file names.
fn file_time(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond()
    )
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// A route as a file name part: letters and digits kept, anything else `_`, the leading `/`
/// dropped (`/v1/chat/completions` → `v1_chat_completions`; `/` → `root`).
pub fn route_file_name(route: &str) -> String {
    let r = route.strip_prefix('/').unwrap_or(route);
    if r.is_empty() {
        return "root".into();
    }
    r.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Single-quoted for sh (the URL and header come from the request's Host and Content-Type).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Middleware: a POST to a logged route is read whole (within the JSON body limit), written out,
/// and passed on unchanged. A write failure is a warning; the request is served either way.
pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(log) = state.request_log.clone() else {
        return next.run(req).await;
    };
    let path = req.uri().path().to_owned();
    let Some(route) = LOGGED_ROUTES.iter().find(|r| **r == path) else {
        return next.run(req).await;
    };
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, state.max_json_body).await {
        Ok(b) => b,
        Err(_) => return crate::error::Error::PayloadTooLarge.into_response(),
    };
    let header = |h| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (host, content_type) = (header(header::HOST), header(header::CONTENT_TYPE));
    let (method, body) = (parts.method.clone(), bytes.clone());
    let written =
        tokio::task::spawn_blocking(move || log.write(route, &method, &host, &content_type, &body))
            .await;
    match written {
        Ok(Ok(script)) => tracing::info!(
            "logged to {}, replay using curl with `sh {}`",
            script
                .display()
                .to_string()
                .replace("_request.sh", "_body.json"),
            script.display()
        ),
        Ok(Err(e)) => tracing::warn!(route, error = %e, "failed to write debug request log"),
        Err(e) => tracing::warn!(route, error = %e, "failed to write debug request log"),
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_file_names() {
        for (route, want) in [
            ("/api/generate", "api_generate"),
            ("/v1/chat/completions", "v1_chat_completions"),
            ("/v1/messages", "v1_messages"),
            ("/", "root"),
        ] {
            assert_eq!(route_file_name(route), want);
        }
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        let t = time::macros::datetime!(2026-01-02 03:04:05.000000006 UTC);
        assert_eq!(file_time(t), "20260102T030405.000000006Z");
    }

    #[test]
    fn writes_body_and_replay_script() {
        let tmp = tempfile::tempdir().unwrap();
        let log = RequestLog::in_dir(tmp.path().to_owned(), "http");
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
        let script = log
            .write(
                "/v1/chat/completions",
                &Method::POST,
                "127.0.0.1:11434",
                "",
                body,
            )
            .unwrap();
        let name = script.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with("-000001_v1_chat_completions_request.sh"),
            "{name}"
        );
        let body_name = name.replace("_request.sh", "_body.json");
        assert_eq!(std::fs::read(tmp.path().join(&body_name)).unwrap(), body);
        let text = std::fs::read_to_string(&script).unwrap();
        assert!(
            text.contains("--url 'http://127.0.0.1:11434/v1/chat/completions'"),
            "{text}"
        );
        assert!(
            text.contains("--header 'Content-Type: application/json'"),
            "{text}"
        );
        assert!(
            text.contains(&format!("@\"${{SCRIPT_DIR}}/{body_name}\"")),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let made = RequestLog::create("http").unwrap();
        assert!(made.dir().is_dir());
        std::fs::remove_dir(made.dir()).unwrap();
    }
}
