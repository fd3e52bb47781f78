//! The pure rules of remote and cloud requests: which stub hosts may be contacted
//! (`OLLAMA_REMOTES`), when a request is signed and over which string, the sign-in URL of a 401,
//! Ollama's texts, and which headers a proxy may forward. Table-tested; no I/O.

use url::Url;

/// Ollama's texts (`server/routes.go`, `internal/cloud/policy.go`).
pub const NOT_ALLOWED: &str = "this server cannot run this remote model";
pub const DISABLED_PREFIX: &str = "ollama cloud is disabled";
pub const INFERENCE_UNAVAILABLE: &str = "remote model is unavailable";
pub const DETAILS_UNAVAILABLE: &str = "remote model details are unavailable";

/// `ollama cloud is disabled: <operation>` (the 403 when `OLLAMA_NO_CLOUD` is on).
pub fn disabled_message(operation: &str) -> String {
    if operation.is_empty() {
        DISABLED_PREFIX.to_owned()
    } else {
        format!("{DISABLED_PREFIX}: {operation}")
    }
}

/// A URL's host as Go's `URL.Hostname()` gives it: no port, no IPv6 brackets.
pub fn hostname(url: &Url) -> String {
    url.host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// Whether a stub's `remote_host` names a host in `OLLAMA_REMOTES` (hostnames compare without
/// case, as DNS does; the port never matters).
pub fn host_allowed(remotes: &[String], remote_host: &Url) -> bool {
    let host = hostname(remote_host);
    !host.is_empty() && remotes.iter().any(|r| r.eq_ignore_ascii_case(&host))
}

/// Ollama's API client signs requests to ollama.com, and to every host with `OLLAMA_AUTH`.
pub fn stub_signs(remote_host: &Url, use_auth: bool) -> bool {
    use_auth || hostname(remote_host) == "ollama.com"
}

/// The API client's challenge (`api/client.go`): `METHOD,PATH?ts=UNIX` over the path alone;
/// the same `ts` goes in the request's query.
pub fn stub_challenge(method: &str, path: &str, ts: u64) -> String {
    format!("{method},{path}?ts={ts}")
}

/// The cloud proxy's challenge (`cloud_proxy.go`): `METHOD,REQUEST_URI` after `ts` is set in
/// the query, which is re-encoded with its keys sorted (Go's `Values.Encode`). Returns the
/// challenge and the query to send.
pub fn cloud_challenge(method: &str, path: &str, query: Option<&str>, ts: u64) -> (String, String) {
    let mut pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .filter(|(k, _)| k != "ts")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    pairs.push(("ts".into(), ts.to_string()));
    // Stable: values of one key keep their order, as in Go's map of slices.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    (format!("{method},{path}?{query}"), query)
}

/// Where a 401 sends the user (`signinURL`): ollama.com's connect page with this host's name and
/// its public key (`ssh-ed25519 <base64>`, base64url without padding).
pub fn signin_url(hostname: &str, public_key_base64: &str) -> String {
    use base64::Engine as _;
    let key = format!("ssh-ed25519 {public_key_base64}");
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes());
    let name: String = url::form_urlencoded::byte_serialize(hostname.as_bytes())
        .collect::<String>()
        .replace('+', "%20");
    format!("https://ollama.com/connect?name={name}&key={key}")
}

/// Hop-by-hop headers (and what a proxy must set itself) are never forwarded; neither are the
/// headers named by `Connection`. `authorization` is dropped from requests too: a herd API key
/// is for this server, never for the cloud (the signature replaces it).
pub fn forwarded(name: &str, connection_tokens: &[String], request: bool) -> bool {
    const HOP: &[&str] = &[
        "connection",
        "content-length",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    let lower = name.to_ascii_lowercase();
    if HOP.contains(&lower.as_str()) || connection_tokens.contains(&lower) {
        return false;
    }
    !(request && (lower == "authorization" || lower == "host"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist() {
        let remotes = vec![
            "ollama.com".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        let table = [
            ("https://ollama.com:443", true),
            ("https://OLLAMA.com", true),
            ("http://127.0.0.1:11434", true),
            ("http://[::1]:8080", true),
            ("https://evil.example", false),
            ("https://ollama.com.evil.example", false),
            ("http://127.0.0.2:1", false),
        ];
        for (u, want) in table {
            assert_eq!(host_allowed(&remotes, &Url::parse(u).unwrap()), want, "{u}");
        }
    }

    #[test]
    fn signing_rules_and_challenges() {
        let com = Url::parse("https://ollama.com:443").unwrap();
        let local = Url::parse("http://127.0.0.1:1").unwrap();
        assert!(stub_signs(&com, false));
        assert!(!stub_signs(&local, false));
        assert!(stub_signs(&local, true));
        assert_eq!(
            stub_challenge("POST", "/api/chat", 1700000000),
            "POST,/api/chat?ts=1700000000"
        );
        assert_eq!(
            cloud_challenge("POST", "/v1/chat/completions", None, 5),
            ("POST,/v1/chat/completions?ts=5".into(), "ts=5".into())
        );
        // Keys sorted, an incoming ts replaced, values escaped as Go's QueryEscape does.
        assert_eq!(
            cloud_challenge("GET", "/v1/models/m", Some("z=1&ts=9&a=b c"), 7),
            (
                "GET,/v1/models/m?a=b+c&ts=7&z=1".into(),
                "a=b+c&ts=7&z=1".into()
            )
        );
    }

    #[test]
    fn signin_and_texts() {
        let url = signin_url("my host", "AAAAC3Nz");
        // base64url("ssh-ed25519 AAAAC3Nz"), no padding.
        assert_eq!(
            url,
            "https://ollama.com/connect?name=my%20host&key=c3NoLWVkMjU1MTkgQUFBQUMzTno"
        );
        assert_eq!(
            disabled_message(INFERENCE_UNAVAILABLE),
            "ollama cloud is disabled: remote model is unavailable"
        );
        assert_eq!(disabled_message(""), "ollama cloud is disabled");
    }

    #[test]
    fn header_filter() {
        let conn = vec!["x-private".to_owned()];
        for (h, req, want) in [
            ("Content-Type", true, true),
            ("User-Agent", true, true),
            ("Authorization", true, false),
            ("Host", true, false),
            ("Transfer-Encoding", false, false),
            ("Connection", false, false),
            ("X-Private", false, false),
            ("Authorization", false, true),
        ] {
            assert_eq!(forwarded(h, &conn, req), want, "{h} {req}");
        }
    }
}
