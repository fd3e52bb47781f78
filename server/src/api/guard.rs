//! Browser-facing protections, as Ollama applies them:
//! - `HostGuard` (DNS rebinding, CVE-2024-28224): while the server listens on loopback, the
//!   `Host` must name this machine — a loopback, private, unspecified or local-interface IP,
//!   `localhost`, the hostname, or `*.localhost|*.local|*.internal`. Else 403. Unlike Ollama an
//!   empty host (`Host: :11434`) is refused (the bypass noted in anchors.md §1).
//! - `CorsPolicy`: `OLLAMA_ORIGINS` plus the built-in local list, gin-contrib/cors semantics: a
//!   cross-origin request from an origin not on the list gets 403; allowed preflights get 204.
//!
//! The decisions are pure (`allows`) and table-tested; the middleware only applies them.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

#[derive(Debug, Clone, Default)]
pub struct HostGuard {
    enforce: bool,
    hostname: Option<String>,
    local_ips: Vec<IpAddr>,
}

impl HostGuard {
    /// No Host checks (the server is reachable from other machines anyway).
    pub fn off() -> HostGuard {
        HostGuard::default()
    }

    /// The guard for a server bound to `bound`: enforcing only when that is a loopback address.
    pub fn new(bound: SocketAddr, hostname: Option<String>, local_ips: Vec<IpAddr>) -> HostGuard {
        HostGuard {
            enforce: bound.ip().to_canonical().is_loopback(),
            hostname: hostname.map(|h| h.to_ascii_lowercase()),
            local_ips,
        }
    }

    /// `new` with this machine's hostname and interface addresses, read once at startup.
    pub fn detect(bound: SocketAddr) -> HostGuard {
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok());
        let local_ips = nix::ifaddrs::getifaddrs()
            .map(|addrs| {
                addrs
                    .filter_map(|a| a.address)
                    .filter_map(|a| {
                        if let Some(v4) = a.as_sockaddr_in() {
                            Some(IpAddr::V4(v4.ip()))
                        } else {
                            a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        HostGuard::new(bound, hostname, local_ips)
    }

    pub fn is_enforcing(&self) -> bool {
        self.enforce
    }

    /// Whether a request with this `Host` value may proceed.
    pub fn allows(&self, host_header: &str) -> bool {
        if !self.enforce {
            return true;
        }
        let Some(host) = parse_authority(host_header) else {
            return false;
        };
        let host = match host {
            AuthorityHost::Ip(ip) => {
                let ip = ip.to_canonical();
                return is_local_class(ip) || self.local_ips.iter().any(|l| l.to_canonical() == ip);
            }
            AuthorityHost::Name(name) => name.to_ascii_lowercase(),
        };
        host == "localhost"
            || self.hostname.as_deref() == Some(host.as_str())
            || [".localhost", ".local", ".internal"]
                .iter()
                .any(|tld| host.ends_with(tld))
    }
}

/// The host part of a `Host` header (RFC 9110 §7.2: `uri-host [ ":" port ]`).
#[derive(Debug, PartialEq, Eq)]
enum AuthorityHost<'a> {
    Ip(IpAddr),
    /// A registered name: DNS labels of letters, digits, `-` and `_`, separated by single dots.
    Name(&'a str),
}

/// Parses a `Host` value as a whole authority, or `None` when any byte is left unexplained.
///
/// Invariant: what `allows` compares is the entire host, never a prefix. Go's `SplitHostPort`,
/// which Ollama uses, does not check the port, so `localhost:1.evil.com` and
/// `127.0.0.1:1@evil.com` split into an allowed host and garbage; here the port must be 1–5
/// digits no larger than 65535 (or empty, as RFC 3986 allows), an IPv6 literal must be in
/// brackets (a bare one is accepted only when the whole value is an IPv6 address), and a name may
/// hold only DNS label characters, so userinfo (`@`), paths, zone ids and a second `:` refuse.
fn parse_authority(value: &str) -> Option<AuthorityHost<'_>> {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip = inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (AuthorityHost::Ip(IpAddr::V6(ip)), port)
    } else if let Ok(ip) = value.parse::<std::net::Ipv6Addr>() {
        (AuthorityHost::Ip(IpAddr::V6(ip)), None)
    } else {
        let (host, port) = match value.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (value, None),
        };
        let host = if let Ok(v4) = host.parse::<std::net::Ipv4Addr>() {
            AuthorityHost::Ip(IpAddr::V4(v4))
        } else if is_reg_name(host) {
            AuthorityHost::Name(host)
        } else {
            return None;
        };
        (host, port)
    };
    match port {
        None | Some("") => Some(host),
        Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            (p.parse::<u32>().ok()? <= u32::from(u16::MAX)).then_some(host)
        }
        Some(_) => None,
    }
}

/// Non-empty dot-separated labels of `[A-Za-z0-9_-]` (no empty label, so no trailing dot).
fn is_reg_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Go's `IsLoopback || IsPrivate || IsUnspecified`.
fn is_local_class(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xfe00) == 0xfc00
        }
    }
}

pub async fn host_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.host_guard.is_enforcing() {
        return next.run(req).await;
    }
    let host = request_host(&req);
    if host.as_deref().is_some_and(|h| state.host_guard.allows(h)) {
        next.run(req).await
    } else {
        tracing::warn!(host = ?host, "rejected request with a foreign Host header");
        StatusCode::FORBIDDEN.into_response()
    }
}

/// The `Host` header, else the URI authority (HTTP/2).
fn request_host(req: &Request) -> Option<String> {
    if let Some(h) = req.headers().get(header::HOST) {
        return h.to_str().ok().map(str::to_owned);
    }
    req.uri().authority().map(|a| a.as_str().to_owned())
}

/// Headers a browser may send cross-origin (Ollama's list, including the OpenAI SDK's).
pub const ALLOWED_HEADERS: &str = "Authorization,Content-Type,User-Agent,Accept,X-Requested-With,\
OpenAI-Beta,x-stainless-arch,x-stainless-async,x-stainless-custom-poll-interval,\
x-stainless-helper-method,x-stainless-lang,x-stainless-os,x-stainless-package-version,\
x-stainless-poll-helper,x-stainless-retry-count,x-stainless-runtime,x-stainless-runtime-version,\
x-stainless-timeout";
pub const ALLOWED_METHODS: &str = "GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS";
/// gin-contrib/cors' default preflight cache: 12 hours.
const MAX_AGE: &str = "43200";

#[derive(Debug, Clone)]
pub struct CorsPolicy {
    allow_all: bool,
    exact: Vec<String>,
    /// `(prefix, suffix)` of each pattern with one `*`.
    wildcards: Vec<(String, String)>,
}

impl CorsPolicy {
    /// From the full origin list (`Origins::allowed()`); `*` alone allows every origin.
    pub fn new(origins: &[String]) -> CorsPolicy {
        let mut p = CorsPolicy {
            allow_all: false,
            exact: Vec::new(),
            wildcards: Vec::new(),
        };
        for o in origins {
            let o = o.trim().to_ascii_lowercase();
            if o == "*" {
                p.allow_all = true;
            } else if let Some((pre, suf)) = o.split_once('*') {
                p.wildcards.push((pre.to_owned(), suf.to_owned()));
            } else if !o.is_empty() {
                p.exact.push(o);
            }
        }
        p
    }

    pub fn allows(&self, origin: &str) -> bool {
        if self.allow_all {
            return true;
        }
        let origin = origin.to_ascii_lowercase();
        self.exact.contains(&origin)
            || self.wildcards.iter().any(|(pre, suf)| {
                origin.len() >= pre.len() + suf.len()
                    && origin.starts_with(pre.as_str())
                    && origin.ends_with(suf.as_str())
            })
    }
}

pub async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let is_options = req.method() == Method::OPTIONS;
    let Some(origin) = origin.filter(|o| !o.is_empty()) else {
        // Not a CORS request. A bare OPTIONS gets the 204 Ollama's host middleware gives it.
        if is_options {
            return StatusCode::NO_CONTENT.into_response();
        }
        return next.run(req).await;
    };
    // Same-origin requests that carry an Origin (fetch) are not CORS requests.
    if let Some(host) = request_host(&req) {
        if origin == format!("http://{host}") || origin == format!("https://{host}") {
            return next.run(req).await;
        }
    }
    if !state.cors.allows(&origin) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let allow_origin = if state.cors.allow_all {
        HeaderValue::from_static("*")
    } else {
        HeaderValue::from_str(&origin).unwrap_or_else(|_| HeaderValue::from_static("null"))
    };
    if is_options {
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOWED_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
        h.append(
            header::VARY,
            HeaderValue::from_static("Access-Control-Request-Method"),
        );
        h.append(
            header::VARY,
            HeaderValue::from_static("Access-Control-Request-Headers"),
        );
        return resp;
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> HostGuard {
        HostGuard::new(
            "127.0.0.1:11434".parse().unwrap(),
            Some("MyBox".into()),
            vec!["203.0.113.7".parse().unwrap()],
        )
    }

    #[test]
    fn host_table() {
        let g = guard();
        let cases = [
            ("localhost", true),
            ("localhost:11434", true),
            ("LOCALHOST:11434", true),
            ("127.0.0.1:11434", true),
            ("127.8.9.10", true),
            ("[::1]:11434", true),
            ("[::1]", true),
            ("::1", true),
            ("0.0.0.0:11434", true),
            ("10.1.2.3:11434", true),
            ("172.16.0.1", true),
            ("192.168.1.20:80", true),
            ("[fd00::1]:1", true),
            ("203.0.113.7:11434", true),
            ("mybox:11434", true),
            ("app.localhost:3000", true),
            ("printer.local", true),
            ("svc.internal:8080", true),
            ("evil.example", false),
            ("evil.example:11434", false),
            ("localhost.evil.example", false),
            ("8.8.8.8:11434", false),
            ("203.0.113.8", false),
            (":11434", false),
            ("", false),
            ("local", false),
            // Issue 22 item 4: the whole value is the authority, not a prefix of it.
            ("localhost:11434.evil.com", false),
            ("127.0.0.1:11434@evil.com", false),
            ("localhost@evil.com", false),
            ("evil.com@localhost", false),
            ("localhost:11434/evil", false),
            ("localhost:99999", false),
            ("localhost:011434", false),
            ("localhost:-1", false),
            ("localhost:1:2", false),
            ("localhost:", true),
            ("localhost:65535", true),
            ("localhost.", false),
            ("a..localhost", false),
            ("[::1]x", false),
            ("[::1]:1.evil.com", false),
            ("[::1%eth0]", false),
            ("[127.0.0.1]", false),
            ("127.0.0.1.evil.com", false),
            ("127.0.0.1 ", false),
            ("localhost\t", false),
        ];
        for (host, want) in cases {
            assert_eq!(g.allows(host), want, "Host: {host:?}");
        }
    }

    #[test]
    fn guard_is_off_unless_bound_to_loopback() {
        let g = HostGuard::new("0.0.0.0:11434".parse().unwrap(), None, vec![]);
        assert!(!g.is_enforcing());
        assert!(g.allows("evil.example"));
        let g6 = HostGuard::new("[::1]:11434".parse().unwrap(), None, vec![]);
        assert!(g6.is_enforcing());
        assert!(!g6.allows("evil.example"));
    }

    #[test]
    fn origin_table() {
        let mut list = vec![
            "https://app.example".to_string(),
            "chrome-extension://*".to_string(),
        ];
        list.extend(crate::config::Origins::default().allowed());
        let p = CorsPolicy::new(&list);
        let cases = [
            ("http://localhost", true),
            ("http://localhost:3000", true),
            ("https://127.0.0.1:8443", true),
            ("http://0.0.0.0:1", true),
            ("app://obsidian.md", true),
            ("file://", true),
            ("tauri://localhost", true),
            ("vscode-webview://abc", true),
            ("vscode-file://vscode-app", true),
            ("https://app.example", true),
            ("HTTPS://APP.EXAMPLE", true),
            ("chrome-extension://abcdef", true),
            ("https://evil.example", false),
            ("http://localhost.evil.example", false),
            ("http://evil.localhost", false),
            ("https://app.example.evil", false),
            ("null", false),
        ];
        for (origin, want) in cases {
            assert_eq!(p.allows(origin), want, "Origin: {origin}");
        }
        assert!(CorsPolicy::new(&["*".into()]).allows("https://anything.example"));
    }
}
