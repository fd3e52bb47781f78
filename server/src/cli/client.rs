//! A small HTTP client for the native API, as Ollama's CLI uses it: base URL from `OLLAMA_HOST`,
//! JSON in and out, `{"error": …}` bodies surfaced as the error message, and a clear hint when no
//! server is listening.

use anyhow::{anyhow, Context};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::OllamaHost;

pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(host: &OllamaHost) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder()
            .user_agent(format!(
                "herd/{} ({} {})",
                crate::VERSION,
                std::env::consts::ARCH,
                std::env::consts::OS
            ))
            .build()
            .context("building the HTTP client")?;
        Ok(Client {
            base: host.connect_url(),
            http,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request and returns the successful response body (possibly empty).
    pub async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<bytes::Bytes> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow!(
                    "could not connect to herd server at {}, run 'herd serve' to start it",
                    self.base
                )
            } else {
                anyhow!(e)
            }
        })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .context("reading the server's response")?;
        if status.is_success() {
            return Ok(bytes);
        }
        Err(anyhow!(error_message(status, &bytes)))
    }

    /// POSTs `body` and returns the response for reading as a stream (NDJSON); a non-2xx
    /// status is an error carrying the server's message.
    pub async fn post_stream<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        let resp = self.http.post(&url).json(body).send().await.map_err(|e| {
            if e.is_connect() {
                anyhow!(
                    "could not connect to herd server at {}, run 'herd serve' to start it",
                    self.base
                )
            } else {
                anyhow!(e)
            }
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp.bytes().await.unwrap_or_default();
        Err(anyhow!(stream_error(status, &bytes)))
    }

    pub async fn json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<T> {
        let bytes = self.send(method, path, body).await?;
        serde_json::from_slice(&bytes).context("decoding the server's response")
    }
}

/// The server's `{"error": msg}` text, else the status line and body.
fn error_message(status: StatusCode, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                status.to_string()
            } else {
                format!("{status}: {text}")
            }
        }
    }
}

/// An error status on a streamed request (`/api/chat`, `/api/generate`) as Ollama's client
/// reports it (api/client.go `stream`: a `StatusError` with the status line, printed
/// "<status>: <message>"): the message of the body's `{"error"}`, else the body's text.
fn stream_error(status: StatusCode, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        #[serde(default)]
        error: String,
    }
    let message = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    };
    if message.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_errors_carry_the_status_line() {
        assert_eq!(
            stream_error(
                StatusCode::BAD_REQUEST,
                br#"{"error":"invalid think value: \"x\""}"#
            ),
            r#"400 Bad Request: invalid think value: "x""#
        );
        assert_eq!(
            stream_error(StatusCode::NOT_FOUND, b"404 page not found\n"),
            "404 Not Found: 404 page not found"
        );
        assert_eq!(
            stream_error(StatusCode::INTERNAL_SERVER_ERROR, b"{}"),
            "500 Internal Server Error"
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(
                StatusCode::NOT_FOUND,
                br#"{"error":"model 'x:latest' not found"}"#
            ),
            "model 'x:latest' not found"
        );
        assert_eq!(
            error_message(StatusCode::NOT_FOUND, b"404 page not found"),
            "404 Not Found: 404 page not found"
        );
        assert_eq!(error_message(StatusCode::FORBIDDEN, b""), "403 Forbidden");
    }
}
