//! `OLLAMA_HOST`: Ollama's grammar (`envconfig.Host`) for where the server listens and where the
//! CLI connects. Never fails: like Ollama, a bad port falls back to the scheme's default.

use std::fmt;
use std::net::IpAddr;

use super::parse::clean;

/// The port used when neither a port nor an `http(s)://` scheme is given.
pub const DEFAULT_PORT: u16 = 11434;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaHost {
    pub scheme: String,
    /// Host name or IP without brackets; empty means "all interfaces" (from `:port`).
    pub host: String,
    pub port: u16,
    /// Path prefix for clients behind a proxy (`https://example.com/ollama`), without slashes.
    pub path: String,
}

impl Default for OllamaHost {
    fn default() -> Self {
        Self::parse("")
    }
}

impl OllamaHost {
    pub fn parse(raw: &str) -> Self {
        let s = clean(raw).trim();
        let mut default_port = DEFAULT_PORT;
        let (scheme, hostport) = match s.split_once("://") {
            None if s == "ollama.com" => ("https", "ollama.com:443"),
            None => ("http", s),
            Some((scheme, rest)) => {
                match scheme {
                    "http" => default_port = 80,
                    "https" => default_port = 443,
                    _ => {}
                }
                (scheme, rest)
            }
        };
        let (hostport, path) = hostport.split_once('/').unwrap_or((hostport, ""));
        let (host, port) = match split_host_port(hostport) {
            Some((h, p)) => (h.to_string(), p),
            None => {
                let unbracketed = hostport.trim_matches(|c| c == '[' || c == ']');
                let host = if let Ok(ip) = unbracketed.parse::<IpAddr>() {
                    ip.to_string()
                } else if !hostport.is_empty() {
                    hostport.to_string()
                } else {
                    "127.0.0.1".to_string()
                };
                (host, "")
            }
        };
        let port = match port.parse::<i64>() {
            Ok(n) if (0..=65535).contains(&n) => n as u16,
            _ => default_port,
        };
        OllamaHost {
            scheme: scheme.to_string(),
            host,
            port,
            path: path.to_string(),
        }
    }

    /// `host:port` with IPv6 brackets (Go's `net.JoinHostPort`); what the server binds.
    pub fn host_port(&self) -> String {
        join_host_port(&self.host, self.port)
    }

    /// Address to bind: an empty host (from `:port`) means every interface.
    pub fn bind_addr(&self) -> String {
        if self.host.is_empty() {
            join_host_port("0.0.0.0", self.port)
        } else {
            self.host_port()
        }
    }

    /// Base URL for clients: unspecified or empty hosts become loopback (Ollama's
    /// `ConnectableHost`), and the proxy path is kept.
    pub fn connect_url(&self) -> String {
        let host = match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) if ip.is_unspecified() => "127.0.0.1",
            Ok(IpAddr::V6(ip)) if ip.is_unspecified() => "::1",
            _ if self.host.is_empty() => "127.0.0.1",
            _ => &self.host,
        };
        let mut url = format!("{}://{}", self.scheme, join_host_port(host, self.port));
        if !self.path.is_empty() {
            url.push('/');
            url.push_str(&self.path);
        }
        url
    }
}

impl fmt::Display for OllamaHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host_port())?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        Ok(())
    }
}

pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Go's `net.SplitHostPort`: `None` where Go returns an error (missing port, too many colons,
/// stray brackets). The port may be empty (`"1.2.3.4:"`).
pub fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    let i = hostport.rfind(':')?;
    let (host, j, k) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        if end + 1 != i {
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..i];
        if host.contains(':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[j..].contains('[') || hostport[k..].contains(']') {
        return None;
    }
    Some((host, &hostport[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ollama's own `TestHost` table (envconfig/config_test.go), same inputs and outputs.
    #[test]
    fn ollama_host_table() {
        let cases = [
            ("", "http://127.0.0.1:11434"),
            ("1.2.3.4", "http://1.2.3.4:11434"),
            (":1234", "http://:1234"),
            ("1.2.3.4:1234", "http://1.2.3.4:1234"),
            ("example.com", "http://example.com:11434"),
            ("example.com:1234", "http://example.com:1234"),
            (":0", "http://:0"),
            (":66000", "http://:11434"),
            (":-1", "http://:11434"),
            ("[::1]", "http://[::1]:11434"),
            ("[::]", "http://[::]:11434"),
            ("::1", "http://[::1]:11434"),
            ("[::1]:1337", "http://[::1]:1337"),
            (" 1.2.3.4 ", "http://1.2.3.4:11434"),
            ("\"1.2.3.4\"", "http://1.2.3.4:11434"),
            (" \" 1.2.3.4 \" ", "http://1.2.3.4:11434"),
            ("'1.2.3.4'", "http://1.2.3.4:11434"),
            ("http://1.2.3.4", "http://1.2.3.4:80"),
            ("http://1.2.3.4:4321", "http://1.2.3.4:4321"),
            ("https://1.2.3.4", "https://1.2.3.4:443"),
            ("https://1.2.3.4:4321", "https://1.2.3.4:4321"),
            (
                "https://example.com/ollama",
                "https://example.com:443/ollama",
            ),
            ("ollama.com", "https://ollama.com:443"),
            ("0.0.0.0", "http://0.0.0.0:11434"),
            ("http://1.2.3.4:4321/", "http://1.2.3.4:4321"),
            ("1.2.3.4:", "http://1.2.3.4:11434"),
        ];
        for (raw, want) in cases {
            assert_eq!(
                OllamaHost::parse(raw).to_string(),
                want,
                "OLLAMA_HOST={raw:?}"
            );
        }
    }

    #[test]
    fn bind_and_connect() {
        let any = OllamaHost::parse(":1234");
        assert_eq!(any.bind_addr(), "0.0.0.0:1234");
        assert_eq!(any.connect_url(), "http://127.0.0.1:1234");
        let unspecified = OllamaHost::parse("0.0.0.0");
        assert_eq!(unspecified.bind_addr(), "0.0.0.0:11434");
        assert_eq!(unspecified.connect_url(), "http://127.0.0.1:11434");
        let v6 = OllamaHost::parse("[::]:99");
        assert_eq!(v6.connect_url(), "http://[::1]:99");
        let proxied = OllamaHost::parse("https://example.com/ollama");
        assert_eq!(proxied.connect_url(), "https://example.com:443/ollama");
        assert_eq!(OllamaHost::default().bind_addr(), "127.0.0.1:11434");
    }

    #[test]
    fn split_host_port_matches_go() {
        assert_eq!(split_host_port("a:1"), Some(("a", "1")));
        assert_eq!(split_host_port("[::1]:1"), Some(("::1", "1")));
        assert_eq!(split_host_port(":1"), Some(("", "1")));
        assert_eq!(split_host_port("a:"), Some(("a", "")));
        assert_eq!(split_host_port("a"), None);
        assert_eq!(split_host_port("::1"), None);
        assert_eq!(split_host_port("[::1]"), None);
        assert_eq!(split_host_port("[::1]x:1"), None);
        assert_eq!(split_host_port("a]:1"), None);
    }
}
