//! Cloud and remote models' settings (`crate::remote` uses them): `OLLAMA_REMOTES`,
//! `OLLAMA_CLOUD_BASE_URL`, `OLLAMA_NO_CLOUD` and `OLLAMA_AUTH`, with Ollama's names, defaults and
//! meanings (`envconfig/config.go`, `server/cloud_proxy.go`). Part of the one command line.

use clap::Args;
use url::Url;

use super::parse::{self, clean};

/// Ollama's cloud: where explicit cloud references (`model:cloud`) go, and the host whose
/// requests are signed.
pub const DEFAULT_CLOUD_BASE_URL: &str = "https://ollama.com:443";

#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// Hosts (comma list of hostnames) a stub model's `remote_host` may name; a stub elsewhere
    /// answers 400 "this server cannot run this remote model".
    #[arg(long, env = "OLLAMA_REMOTES", value_parser = parse_remotes, default_value = "ollama.com")]
    pub remotes: Remotes,
    /// Where explicit cloud references (`gpt-oss:20b:cloud`, `…-cloud`) are proxied. Only
    /// loopback overrides are accepted (as Ollama's release builds), any other value is a
    /// startup error.
    #[arg(long, env = "OLLAMA_CLOUD_BASE_URL", value_parser = parse_cloud_base, default_value = "")]
    pub cloud_base_url: CloudBase,
    /// Disable Ollama cloud: stub models and cloud references answer 403 (so does
    /// `disable_ollama_cloud` in `~/.ollama/server.json`).
    #[arg(long, env = "OLLAMA_NO_CLOUD", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub no_cloud: bool,
    /// Sign requests to every remote host, not only ollama.com (Ollama's `OLLAMA_AUTH`).
    #[arg(long = "remote-auth", env = "OLLAMA_AUTH", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub auth: bool,
}

impl RemoteArgs {
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        vec![
            ("OLLAMA_REMOTES", self.remotes.0.join(",")),
            ("OLLAMA_CLOUD_BASE_URL", self.cloud_base_url.url.to_string()),
            ("OLLAMA_NO_CLOUD", self.no_cloud.to_string()),
            ("OLLAMA_AUTH", self.auth.to_string()),
        ]
    }
}

/// `OLLAMA_REMOTES` entries, trimmed, never empty (unset or blank = `ollama.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remotes(pub Vec<String>);

impl Default for Remotes {
    fn default() -> Self {
        Remotes(vec!["ollama.com".into()])
    }
}

fn parse_remotes(raw: &str) -> Result<Remotes, String> {
    let hosts: Vec<String> = clean(raw)
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    Ok(if hosts.is_empty() {
        Remotes::default()
    } else {
        Remotes(hosts)
    })
}

/// The cloud proxy's base URL (no path) and the host whose requests are signed: ollama.com for
/// the default, the override's own host otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudBase {
    pub url: Url,
    pub signing_host: String,
}

impl CloudBase {
    /// `scheme://host:port` with the port always written (the URL type drops a scheme's
    /// default port, which Ollama's `remoteURL` would then replace with 11434).
    pub fn origin(&self) -> String {
        format!(
            "{}://{}:{}",
            self.url.scheme(),
            self.url.host_str().unwrap_or("localhost"),
            self.url.port_or_known_default().unwrap_or(443)
        )
    }
}

impl Default for CloudBase {
    fn default() -> Self {
        CloudBase {
            url: Url::parse(DEFAULT_CLOUD_BASE_URL).expect("constant URL"),
            signing_host: "ollama.com".into(),
        }
    }
}

/// Ollama's `resolveCloudProxyBaseURL` in release mode: scheme and host required; no user
/// info, path, query or fragment; the host must be loopback (the signature goes to it).
pub fn parse_cloud_base(raw: &str) -> Result<CloudBase, String> {
    let raw = clean(raw).trim();
    if raw.is_empty() {
        return Ok(CloudBase::default());
    }
    let url = Url::parse(raw).map_err(|e| format!("invalid URL: {e}"))?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("invalid URL: scheme and host are required")?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("invalid URL: userinfo is not allowed".into());
    }
    if url.path() != "/" && !url.path().is_empty() {
        return Err("invalid URL: path is not allowed".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("invalid URL: query and fragment are not allowed".into());
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if !is_loopback_host(host) {
        return Err("non-loopback cloud override is not allowed".into());
    }
    let signing_host = host.to_ascii_lowercase();
    Ok(CloudBase { url, signing_host })
}

/// `localhost` or a loopback IP literal.
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_list() {
        assert_eq!(parse_remotes("").unwrap(), Remotes::default());
        assert_eq!(
            parse_remotes(" ollama.com, 127.0.0.1 ,").unwrap().0,
            vec!["ollama.com", "127.0.0.1"]
        );
    }

    #[test]
    fn cloud_base_overrides() {
        let d = parse_cloud_base("").unwrap();
        assert_eq!(d.url.as_str(), "https://ollama.com/");
        assert_eq!(d.signing_host, "ollama.com");
        let ok = parse_cloud_base("http://127.0.0.1:8080").unwrap();
        assert_eq!(ok.url.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(ok.signing_host, "127.0.0.1");
        assert_eq!(
            parse_cloud_base("http://LocalHost:9/")
                .unwrap()
                .signing_host,
            "localhost"
        );
        assert_eq!(
            parse_cloud_base("http://[::1]:9").unwrap().signing_host,
            "::1"
        );
        for (bad, why) in [
            ("https://example.com", "non-loopback"),
            ("http://127.0.0.1:9/api", "path is not allowed"),
            ("http://127.0.0.1:9/?a=b", "query and fragment"),
            ("http://u:p@127.0.0.1:9", "userinfo"),
            ("127.0.0.1:9", "invalid URL"),
            ("not a url", "invalid URL"),
        ] {
            let e = parse_cloud_base(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
