//! HTTP plumbing for one pull or push against one registry: URL building, the 401 → signed token
//! → retry flow, redirect following under `policy::redirect`, and bounded body reads.
//!
//! Invariants:
//! - two reqwest clients: `registry` (talks only to the host the user named) and `public` (for
//!   cross-host redirect targets: https only, and a resolver that drops every non-public address,
//!   so a DNS name cannot smuggle a private target past the policy); neither follows redirects on
//!   its own, decompresses, or uses a proxy for loopback;
//! - our bearer token is attached only to requests to the registry host;
//! - a response with a `Content-Encoding` other than identity is refused (no decompression bombs),
//!   and every body we buffer is read through `read_limited`.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_ENCODING, LOCATION};
use reqwest::{Method, Response, StatusCode};
use url::Url;

use super::auth;
use super::policy::{self, Origin, Redirect};
use super::Registry;
use crate::error::{Error, Result};
use crate::store::{Digest, ModelName};

const MAX_REDIRECTS: usize = 10;
/// Error bodies and token replies are small; anything larger is cut off.
const MAX_SMALL_BODY: u64 = 64 * 1024;

/// Builds the two HTTP clients (see module docs).
pub(crate) fn build_clients(user_agent: &str) -> Result<(reqwest::Client, reqwest::Client)> {
    let base = || {
        reqwest::Client::builder()
            .user_agent(user_agent)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
    };
    let registry = base()
        .build()
        .map_err(|e| Error::Internal(format!("http client: {e}")))?;
    let public = base()
        .https_only(true)
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(PublicOnly))
        .build()
        .map_err(|e| Error::Internal(format!("http client: {e}")))?;
    Ok((registry, public))
}

/// Resolves names to their public addresses only; a name with none fails to connect.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy::is_public(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves to no public address").into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A response plus where it finally came from.
pub(crate) struct Fetched {
    pub resp: Response,
    pub url: Url,
    /// Served by a cross-host redirect target (no credentials were sent there).
    pub external: bool,
}

/// Re-creatable request body (a 401 retry or redirect sends it again).
pub(crate) type BodyFn<'a> = &'a (dyn Fn() -> Result<reqwest::Body> + Send + Sync);

/// One registry conversation: `scheme://host/v2/<namespace>/<model>/...`.
pub(crate) struct Session {
    pub reg: Registry,
    pub name: ModelName,
    base: Url,
    origin: Origin,
    token: Mutex<Option<String>>,
}

impl Session {
    /// Checks the scheme and classifies the registry's resolved addresses. As in Ollama, an
    /// `http://` name needs `insecure`, and `insecure` speaks plain HTTP to any registry
    /// (its request helper switches the scheme), so `host:port/…` names reach a local registry
    /// without TLS; without it, a scheme other than `http`/`https` (a valid name, e.g.
    /// `ftp://h/n/m`) is refused as Go's HTTP client refuses it. A host that is no address (a
    /// name may carry `host:https` or `host:99999`) is an invalid name here.
    pub async fn new(reg: Registry, name: &ModelName, insecure: bool) -> Result<Session> {
        if name.is_insecure() && !insecure {
            return Err(Error::BadRequest("insecure protocol http".into()));
        }
        let scheme = match name.scheme() {
            _ if insecure => "http",
            s @ ("http" | "https") => s,
            other => {
                return Err(Error::BadRequest(format!(
                    "unsupported protocol scheme {other:?}"
                )))
            }
        };
        let base = Url::parse(&format!("{scheme}://{}/", name.host()))
            .map_err(|_| Error::InvalidModelName)?;
        let host = base.host_str().ok_or(Error::InvalidModelName)?.to_owned();
        let port = base.port_or_known_default().unwrap_or(443);
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| Error::Internal(format!("resolve {host}: {e}")))?
            .collect();
        let origin = if !addrs.is_empty() && addrs.iter().all(|a| policy::is_public(a.ip())) {
            Origin::Public
        } else {
            Origin::Private
        };
        Ok(Session {
            reg,
            name: name.clone(),
            base,
            origin,
            token: Mutex::new(None),
        })
    }

    /// `v2/<namespace>/<model>/<rest>` on the registry (every part is a validated name part or
    /// digest, so no path segment can escape).
    pub fn url(&self, rest: &str) -> Url {
        let path = format!("v2/{}/{}/{rest}", self.name.namespace(), self.name.model());
        self.base.join(&path).expect("validated parts form a URL")
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }

    pub fn blob_url(&self, d: &Digest) -> Url {
        self.url(&format!("blobs/{d}"))
    }

    /// Sends a request, answering one auth challenge and following redirects allowed by policy.
    /// `external` starts the request on the public client (a URL from an earlier redirect).
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        external: bool,
        headers: HeaderMap,
        body: Option<BodyFn<'_>>,
    ) -> Result<Fetched> {
        let (mut url, mut external, mut method) = (url, external, method);
        let mut authenticated = false;
        let mut hops = 0;
        loop {
            let client = if external {
                &self.reg.inner.public
            } else {
                &self.reg.inner.registry
            };
            let mut rb = client
                .request(method.clone(), url.clone())
                .headers(headers.clone());
            if !external {
                if let Some(t) = self.token.lock().unwrap().clone() {
                    rb = rb.bearer_auth(t);
                }
            }
            if let (Some(b), true) = (body, method != Method::GET && method != Method::HEAD) {
                rb = rb.body(b()?);
            }
            let resp = rb.send().await.map_err(|e| net_error(&url, e))?;
            refuse_encoding(&resp)?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && !external && !authenticated {
                let header = resp
                    .headers()
                    .get(reqwest::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Some(c) = header.as_deref().and_then(auth::parse_challenge) {
                    let token = self.fetch_token(&url, &c).await?;
                    *self.token.lock().unwrap() = Some(token);
                    authenticated = true;
                    continue;
                }
                return Ok(Fetched {
                    resp,
                    url,
                    external,
                });
            }
            if status.is_redirection() {
                if let Some(loc) = resp.headers().get(LOCATION) {
                    hops += 1;
                    if hops > MAX_REDIRECTS {
                        return Err(Error::Internal("too many redirects".into()));
                    }
                    let loc = loc
                        .to_str()
                        .map_err(|_| Error::Internal("invalid redirect location".into()))?;
                    let to = url
                        .join(loc)
                        .map_err(|e| Error::Internal(format!("invalid redirect location: {e}")))?;
                    let origin = if external {
                        Origin::Public
                    } else {
                        self.origin
                    };
                    match policy::redirect(&url, &to, origin).map_err(Error::Forbidden)? {
                        Redirect::SameHost => {}
                        Redirect::External => external = true,
                    }
                    if status == StatusCode::SEE_OTHER {
                        method = Method::GET;
                    }
                    url = to;
                    continue;
                }
            }
            return Ok(Fetched {
                resp,
                url,
                external,
            });
        }
    }

    /// Answers a Bearer challenge with a signed token request (see `auth` module docs).
    async fn fetch_token(&self, request: &Url, c: &auth::Challenge) -> Result<String> {
        let key = self.reg.key().await?;
        let realm = Url::parse(&c.realm)
            .map_err(|e| Error::Internal(format!("invalid auth realm {:?}: {e}", c.realm)))?;
        policy::realm_allowed(request, &realm).map_err(Error::Forbidden)?;
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let url = auth::token_url(c, ts, &rand::random())?;
        let sig = key.sign(auth::token_request_payload(&url).as_bytes());
        let resp = self
            .reg
            .inner
            .registry
            .get(url.clone())
            .header(
                AUTHORIZATION,
                HeaderValue::from_str(&sig).map_err(|e| Error::Internal(e.to_string()))?,
            )
            .send()
            .await
            .map_err(|e| net_error(&url, e))?;
        refuse_encoding(&resp)?;
        let status = resp.status();
        let body = read_limited(resp, MAX_SMALL_BODY).await?;
        if !status.is_success() {
            return Err(status_error(status, &body));
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: String,
        }
        let t: Token = serde_json::from_slice(&body)
            .map_err(|e| Error::Internal(format!("auth token reply: {e}")))?;
        Ok(t.token)
    }
}

/// The `reqwest` error without the URL's query (which may carry signatures).
pub(crate) fn net_error(url: &Url, e: reqwest::Error) -> Error {
    let mut shown = url.clone();
    shown.set_query(None);
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    Error::Internal(format!("{shown}: {msg}"))
}

fn refuse_encoding(resp: &Response) -> Result<()> {
    match resp
        .headers()
        .get(CONTENT_ENCODING)
        .map(HeaderValue::as_bytes)
    {
        None => Ok(()),
        Some(v) if v.eq_ignore_ascii_case(b"identity") => Ok(()),
        Some(v) => Err(Error::Internal(format!(
            "registry sent Content-Encoding {:?}; compressed responses are refused",
            String::from_utf8_lossy(v)
        ))),
    }
}

/// Reads a whole body, failing as soon as it exceeds `max` bytes (declared or actual).
pub(crate) async fn read_limited(resp: Response, max: u64) -> Result<Vec<u8>> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(Error::Internal(format!(
            "response too large ({} bytes, limit {max})",
            resp.content_length().unwrap_or(0)
        )));
    }
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::Internal(format!("read response: {e}")))?;
        if out.len() as u64 + chunk.len() as u64 > max {
            return Err(Error::Internal(format!(
                "response too large (over {max} bytes)"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Ollama's `"<code>: <body>"` error for an unexpected status (body cut to 1 KiB).
pub(crate) fn status_error(status: StatusCode, body: &[u8]) -> Error {
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)]);
    let text = text.trim();
    if text.is_empty() {
        Error::Internal(format!("{}", status.as_u16()))
    } else {
        Error::Internal(format!("{}: {text}", status.as_u16()))
    }
}

/// Turns a non-success response into `status_error` (reading at most a small body).
pub(crate) async fn check(f: Fetched) -> Result<Fetched> {
    if f.resp.status().is_success() {
        return Ok(f);
    }
    let status = f.resp.status();
    let body = read_limited(f.resp, MAX_SMALL_BODY)
        .await
        .unwrap_or_default();
    Err(status_error(status, &body))
}
