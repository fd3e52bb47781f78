//! Value types and parsers of herd's operations settings (`HERD_API_KEYS`,
//! `HERD_API_KEYS_FILE`, `HERD_SHUTDOWN_GRACE`): secrets that never print, and durations with
//! the same grammar as Ollama's (Go duration or integer seconds). Also the policy settings
//! (`HERD_MAX_KEEP_ALIVE`, `HERD_PIN`, `HERD_ALLOW_PULL_HOSTS`) with the pure checks the
//! scheduler and the API apply.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::parse::{clean, env_duration_nanos};

/// API keys from the environment or a file. `Debug` prints only how many there are, so the
/// derived `Debug` of `Config` (and any log of it) never shows a key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(pub Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

/// `HERD_API_KEYS`: comma-separated, entries trimmed, empty entries dropped.
pub fn parse_key_list(raw: &str) -> Result<Secrets, String> {
    Ok(Secrets(
        clean(raw)
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect(),
    ))
}

/// The contents of `HERD_API_KEYS_FILE`: one key per line; blank lines and `#` comments are
/// skipped. A file that names no key is an error (the operator meant to lock the server).
pub fn keys_from_file_text(text: &str) -> Result<Vec<String>, String> {
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if keys.is_empty() {
        return Err("contains no key".into());
    }
    Ok(keys)
}

pub fn read_keys_file(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    keys_from_file_text(&text)
}

/// A non-negative duration: Go duration or integer seconds; negative values are refused.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let ns = env_duration_nanos(raw).ok_or_else(|| {
        format!(
            "{:?} is neither a duration (10s, 1m30s) nor seconds",
            clean(raw)
        )
    })?;
    u64::try_from(ns)
        .map(Duration::from_nanos)
        .map_err(|_| format!("{:?} is negative", clean(raw)))
}

// ---- Policy: HERD_MAX_KEEP_ALIVE, HERD_PIN, HERD_ALLOW_PULL_HOSTS.

/// `HERD_MAX_KEEP_ALIVE`: empty (or unset) = no cap, else `parse_duration`'s grammar.
pub fn parse_max_keep_alive(raw: &str) -> Result<MaxKeepAlive, String> {
    if clean(raw).is_empty() {
        return Ok(MaxKeepAlive(None));
    }
    parse_duration(raw).map(|d| MaxKeepAlive(Some(d)))
}

/// The cap on every keep-alive; `None` = no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaxKeepAlive(pub Option<Duration>);

/// `HERD_PIN`: models that stay loaded and are never evicted for another model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins(pub Vec<crate::store::ModelName>);

/// Comma list of model names, each normalized as names are (`smollm2` = `smollm2:latest` =
/// `registry.ollama.ai/library/smollm2:latest`); an invalid name is a startup error.
pub fn parse_pins(raw: &str) -> Result<Pins, String> {
    clean(raw)
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            crate::store::ModelName::parse(n).map_err(|_| format!("{n:?} is not a model name"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Pins)
}

impl Pins {
    /// Whether `name` (any spelling of a model name) is pinned; names compare ignoring case,
    /// as store lookups do.
    pub fn contains(&self, name: &str) -> bool {
        let Ok(name) = crate::store::ModelName::parse(name) else {
            return false;
        };
        self.0.iter().any(|p| p.eq_ignore_case(&name))
    }

    /// The names as the startup log shows them.
    pub fn shown(&self) -> String {
        let names: Vec<String> = self.0.iter().map(|n| n.display_shortest()).collect();
        names.join(",")
    }
}

/// `HERD_ALLOW_PULL_HOSTS`: registry hosts pull, push and create may contact; empty = any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullHosts(pub Vec<String>);

/// Comma list of `host` or `host:port`, lowercased. A bad entry (a scheme, a path, a port
/// that is not a number) is a startup error rather than an entry that never matches.
pub fn parse_pull_hosts(raw: &str) -> Result<PullHosts, String> {
    let mut hosts = Vec::new();
    for h in clean(raw)
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
    {
        let (host, port) = match h.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (h, None),
        };
        let host_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
        let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
        if !host_ok || !port_ok {
            return Err(format!("{h:?} is not a registry host (host or host:port)"));
        }
        hosts.push(h.to_ascii_lowercase());
    }
    Ok(PullHosts(hosts))
}

impl PullHosts {
    pub fn is_restricted(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether a model name's host part (`host` or `host:port`) may be contacted: an entry with
    /// a port allows exactly that port, one without allows the host on any port. Case-blind.
    pub fn permits(&self, host: &str) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let host = host.to_ascii_lowercase();
        let bare = host.split_once(':').map_or(host.as_str(), |(h, _)| h);
        self.0
            .iter()
            .any(|a| *a == host || (!a.contains(':') && a == bare))
    }
}

// --- Listener settings (issue 22 item 5, issue 16 TLS): one block, flattened into `Config`. ---

/// How `herd serve` holds its connections: TLS, the body transfer rule, the idle timeout and the
/// connection cap.
#[derive(Debug, Clone, clap::Args)]
pub struct Listen {
    /// PEM certificate chain for HTTPS on the listener; needs HERD_TLS_KEY too.
    #[arg(long, env = "HERD_TLS_CERT", value_parser = parse_pem_path)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS on the listener; needs HERD_TLS_CERT too.
    #[arg(long, env = "HERD_TLS_KEY", value_parser = parse_pem_path)]
    pub tls_key: Option<PathBuf>,
    /// A request body may pause this long, and after this long must average HERD_BODY_MIN_RATE.
    #[arg(long, env = "HERD_BODY_TIMEOUT", value_parser = parse_positive_duration, default_value = "30s")]
    pub body_timeout: Duration,
    /// Least average request-body rate in bytes per second after HERD_BODY_TIMEOUT (0 = none).
    #[arg(long, env = "HERD_BODY_MIN_RATE", value_parser = super::parse::clap_byte_size, default_value = "4096")]
    pub body_min_rate: u64,
    /// A connection (HTTP/1 or h2) with no request in flight for this long is closed.
    #[arg(long, env = "HERD_IDLE_TIMEOUT", value_parser = parse_positive_duration, default_value = "30s")]
    pub idle_timeout: Duration,
    /// Most connections open at once (0 = the open-file limit less 256 reserved descriptors);
    /// further connections wait in the accept backlog.
    #[arg(long, env = "HERD_MAX_CONNECTIONS", value_parser = super::parse::clap_uint::<0>, default_value = "0")]
    pub max_connections: u32,
    /// Write each inference request's body and a curl command replaying it to a private temp
    /// directory (named in the log at startup).
    #[arg(long, env = "OLLAMA_DEBUG_LOG_REQUESTS", value_parser = super::parse::clap_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub debug_log_requests: bool,
}

impl Listen {
    /// Both TLS paths or neither; one alone is a startup error naming the missing one.
    pub fn tls(&self) -> Result<Option<(&Path, &Path)>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (Some(_), None) => {
                Err("HERD_TLS_CERT is set but HERD_TLS_KEY is not: set both or neither".into())
            }
            (None, Some(_)) => {
                Err("HERD_TLS_KEY is set but HERD_TLS_CERT is not: set both or neither".into())
            }
        }
    }

    /// `(ENV_NAME, value)` pairs for the startup log.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or_else(String::new, |p| p.display().to_string())
        };
        vec![
            ("HERD_TLS_CERT", path(&self.tls_cert)),
            ("HERD_TLS_KEY", path(&self.tls_key)),
            ("HERD_BODY_TIMEOUT", format!("{:?}", self.body_timeout)),
            ("HERD_BODY_MIN_RATE", self.body_min_rate.to_string()),
            ("HERD_IDLE_TIMEOUT", format!("{:?}", self.idle_timeout)),
            ("HERD_MAX_CONNECTIONS", self.max_connections.to_string()),
            (
                "OLLAMA_DEBUG_LOG_REQUESTS",
                self.debug_log_requests.to_string(),
            ),
        ]
    }
}

fn parse_pem_path(raw: &str) -> Result<PathBuf, String> {
    match clean(raw) {
        "" => Err("empty path".into()),
        s => Ok(PathBuf::from(s)),
    }
}

/// A duration that must be above zero (a zero timeout would cut every connection).
fn parse_positive_duration(raw: &str) -> Result<Duration, String> {
    match parse_duration(raw)? {
        d if d.is_zero() => Err(format!("{:?} must be above zero", clean(raw))),
        d => Ok(d),
    }
}

// --- End of listener settings. ---

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_keep_alive() {
        let table = [
            ("", Some(None)),
            ("  ", Some(None)),
            ("2s", Some(Some(2))),
            ("90", Some(Some(90))),
            ("-1", None),
            ("later", None),
        ];
        for (raw, want) in table {
            let got = parse_max_keep_alive(raw)
                .ok()
                .map(|m| m.0.map(|d| d.as_secs()));
            assert_eq!(got, want, "{raw:?}");
        }
    }

    #[test]
    fn pins() {
        let p = parse_pins(" smollm2 , Example.com/team/Gemma3:270m ").unwrap();
        let table = [
            ("smollm2", true),
            ("smollm2:latest", true),
            ("registry.ollama.ai/library/SmolLM2:latest", true),
            ("smollm2:135m", false),
            ("example.com/team/gemma3:270m", true),
            ("gemma3:270m", false),
            ("not a name", false),
        ];
        for (name, want) in table {
            assert_eq!(p.contains(name), want, "{name}");
        }
        assert_eq!(p.shown(), "smollm2:latest,Example.com/team/Gemma3:270m");
        assert!(parse_pins("").unwrap().0.is_empty());
        assert!(parse_pins("ok,bad name").is_err());
    }

    #[test]
    fn pull_hosts() {
        let any = parse_pull_hosts("").unwrap();
        assert!(!any.is_restricted() && any.permits("anything:1"));
        let h = parse_pull_hosts("registry.ollama.ai, 127.0.0.1:5000").unwrap();
        let table = [
            ("registry.ollama.ai", true),
            ("REGISTRY.ollama.ai", true),
            ("registry.ollama.ai:8443", true),
            ("127.0.0.1:5000", true),
            ("127.0.0.1:5001", false),
            ("127.0.0.1", false),
            ("evil.example", false),
            ("registry.ollama.ai.evil.example", false),
        ];
        for (host, want) in table {
            assert_eq!(h.permits(host), want, "{host}");
        }
        for bad in ["http://x", "x/y", "x:port", "x:0", ":5000"] {
            assert!(parse_pull_hosts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_lists() {
        let table = [
            ("", vec![]),
            ("a", vec!["a"]),
            (" a , b,,c ", vec!["a", "b", "c"]),
            ("\"k1,k2\"", vec!["k1", "k2"]),
        ];
        for (raw, want) in table {
            assert_eq!(parse_key_list(raw).unwrap().0, want, "{raw:?}");
        }
        assert_eq!(
            format!("{:?}", parse_key_list("topsecret").unwrap()),
            "Secrets(1 redacted)"
        );
    }

    #[test]
    fn key_files() {
        assert_eq!(
            keys_from_file_text("# ops keys\nk1\n\n  k2  \n#k3\n").unwrap(),
            vec!["k1", "k2"]
        );
        assert!(keys_from_file_text("# none\n\n").is_err());
        assert!(read_keys_file(Path::new("/nonexistent/keys")).is_err());
    }

    #[test]
    fn durations() {
        let table = [
            ("10s", Some(10_000)),
            ("1m30s", Some(90_000)),
            ("5", Some(5_000)),
            ("0", Some(0)),
            ("-1s", None),
            ("soon", None),
        ];
        for (raw, want) in table {
            assert_eq!(
                parse_duration(raw).ok().map(|d| d.as_millis() as u64),
                want,
                "{raw:?}"
            );
        }
    }

    #[test]
    fn listen_settings() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            l: Listen,
        }
        let parse = |args: &[&str]| {
            T::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map(|t| t.l)
        };
        let l = parse(&[]).unwrap();
        assert_eq!(
            (
                l.body_timeout,
                l.body_min_rate,
                l.idle_timeout,
                l.max_connections
            ),
            (Duration::from_secs(30), 4096, Duration::from_secs(30), 0)
        );
        assert_eq!(l.tls().unwrap(), None);
        let l = parse(&["--tls-cert", "c.pem"]).unwrap();
        assert_eq!(
            l.tls().unwrap_err(),
            "HERD_TLS_CERT is set but HERD_TLS_KEY is not: set both or neither"
        );
        let l = parse(&["--tls-key", "k.pem"]).unwrap();
        assert_eq!(
            l.tls().unwrap_err(),
            "HERD_TLS_KEY is set but HERD_TLS_CERT is not: set both or neither"
        );
        let l = parse(&[
            "--tls-key",
            "k.pem",
            "--tls-cert",
            "c.pem",
            "--body-min-rate",
            "1KiB",
        ])
        .unwrap();
        assert_eq!(
            l.tls().unwrap(),
            Some((Path::new("c.pem"), Path::new("k.pem")))
        );
        assert_eq!(l.body_min_rate, 1024);
        assert!(parse(&["--body-timeout", "0"]).is_err());
        assert!(parse(&["--idle-timeout", "-1s"]).is_err());
    }
}
