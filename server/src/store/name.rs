//! Model names: `[scheme://][host/][namespace/]model[:tag]` with Ollama's parsing, per-part
//! character/length rules and defaults (`registry.ollama.ai`, `library`, `latest`).
//!
//! Invariant: a `ModelName` is always fully qualified and every part is valid, so its manifest path
//! can never contain a separator, `..`, a NUL or a leading dot. The only constructors are `parse`
//! and `from_parts`, both of which validate.

use std::fmt;
use std::path::PathBuf;

use crate::error::{Error, Result};

pub const DEFAULT_HOST: &str = "registry.ollama.ai";
pub const DEFAULT_NAMESPACE: &str = "library";
pub const DEFAULT_TAG: &str = "latest";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Part {
    Host,
    Namespace,
    Model,
    Tag,
}

/// A fully qualified, validated model name. Casing is preserved exactly as given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelName {
    host: String,
    namespace: String,
    model: String,
    tag: String,
    /// The name was written `http://…`: registry traffic for it is plain HTTP (needs `insecure`).
    insecure: bool,
}

fn is_valid_part(kind: Part, s: &str) -> bool {
    let max = if kind == Part::Host { 350 } else { 80 };
    if s.is_empty() || s.len() > max {
        return false;
    }
    // A host's ':' starts its port: one, then 1-5 digits naming a real port, so the registry
    // address a name implies is always dialable (`host:99999`, `a:1:2`, `a:x` refuse).
    if kind == Part::Host {
        if let Some((_, port)) = s.split_once(':') {
            let port_ok = (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u32>().is_ok_and(|p| p <= u32::from(u16::MAX));
            if !port_ok {
                return false;
            }
        }
    }
    s.bytes().enumerate().all(|(i, c)| {
        let word = c.is_ascii_alphanumeric() || c == b'_';
        if i == 0 {
            return word;
        }
        match c {
            b'-' => true,
            b'.' => kind != Part::Namespace,
            b':' => kind == Part::Host,
            _ => word,
        }
    })
}

impl ModelName {
    /// Parses a user-supplied name and fills the defaults. Any invalid or missing part (an empty
    /// part after a separator, a bad character, a too-long part, `@digest`) is
    /// `Error::InvalidModelName`.
    pub fn parse(s: &str) -> Result<ModelName> {
        let mut rest = s;
        // The tag is what follows the last ':' only if that ':' comes after the last '/';
        // otherwise the ':' belongs to a host port.
        let mut tag = DEFAULT_TAG;
        if let Some(colon) = rest.rfind(':') {
            if rest.rfind('/').is_none_or(|slash| colon > slash) {
                tag = &rest[colon + 1..];
                rest = &rest[..colon];
                if tag.is_empty() {
                    return Err(Error::InvalidModelName);
                }
            }
        }
        let (mut host, mut namespace) = (DEFAULT_HOST, DEFAULT_NAMESPACE);
        let model;
        let mut insecure = false;
        match rest.rsplit_once('/') {
            None => model = rest,
            Some((before, m)) => {
                model = m;
                match before.rsplit_once('/') {
                    None => namespace = before,
                    Some((h, ns)) => {
                        namespace = ns;
                        // A scheme can only prefix an explicit host (as in Ollama, where
                        // `http://model` does not parse).
                        host = if let Some(h) = h.strip_prefix("http://") {
                            insecure = true;
                            h
                        } else {
                            h.strip_prefix("https://").unwrap_or(h)
                        };
                    }
                }
            }
        }
        let mut n = ModelName::from_parts(host, namespace, model, tag)?;
        n.insecure = insecure;
        Ok(n)
    }

    /// Builds a name from four explicit parts (e.g. a manifest path), validating each.
    pub fn from_parts(host: &str, namespace: &str, model: &str, tag: &str) -> Result<ModelName> {
        let ok = is_valid_part(Part::Host, host)
            && is_valid_part(Part::Namespace, namespace)
            && is_valid_part(Part::Model, model)
            && is_valid_part(Part::Tag, tag);
        if !ok {
            return Err(Error::InvalidModelName);
        }
        Ok(ModelName {
            host: host.to_owned(),
            namespace: namespace.to_owned(),
            model: model.to_owned(),
            tag: tag.to_owned(),
            insecure: false,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    pub fn model(&self) -> &str {
        &self.model
    }
    pub fn tag(&self) -> &str {
        &self.tag
    }
    /// True when the name was given with an `http://` scheme.
    pub fn is_insecure(&self) -> bool {
        self.insecure
    }

    /// The four parts in path order.
    pub fn parts(&self) -> [&str; 4] {
        [&self.host, &self.namespace, &self.model, &self.tag]
    }

    /// Same model ignoring ASCII case (Ollama's `EqualFold`); the scheme is not compared.
    pub fn eq_ignore_case(&self, other: &ModelName) -> bool {
        self.parts()
            .iter()
            .zip(other.parts())
            .all(|(a, b)| a.eq_ignore_ascii_case(b))
    }

    /// The same request (scheme kept) with these exact parts; callers pass parts taken from
    /// valid names, so validity is preserved.
    pub(crate) fn with_parts(&self, host: &str, namespace: &str, model: &str, tag: &str) -> Self {
        ModelName {
            host: host.to_owned(),
            namespace: namespace.to_owned(),
            model: model.to_owned(),
            tag: tag.to_owned(),
            insecure: self.insecure,
        }
    }

    /// Drops the default host (and then the default namespace), never the tag: `llama3:latest`,
    /// `user/m:7b`, `example.com/library/m:latest`.
    pub fn display_shortest(&self) -> String {
        if !self.host.eq_ignore_ascii_case(DEFAULT_HOST) {
            format!(
                "{}/{}/{}:{}",
                self.host, self.namespace, self.model, self.tag
            )
        } else if !self.namespace.eq_ignore_ascii_case(DEFAULT_NAMESPACE) {
            format!("{}/{}:{}", self.namespace, self.model, self.tag)
        } else {
            format!("{}:{}", self.model, self.tag)
        }
    }

    /// `manifests/<host>/<namespace>/<model>/<tag>`, relative to the store root.
    pub fn manifest_rel_path(&self) -> PathBuf {
        [
            "manifests",
            &self.host,
            &self.namespace,
            &self.model,
            &self.tag,
        ]
        .iter()
        .collect()
    }
}

/// The full form `host/namespace/model:tag` (no scheme).
impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}:{}",
            self.host, self.namespace, self.model, self.tag
        )
    }
}

impl std::str::FromStr for ModelName {
    type Err = Error;
    fn from_str(s: &str) -> Result<ModelName> {
        ModelName::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (input, Some(expected full form) | None for invalid)
    #[test]
    fn parse_table() {
        let long80 = "a".repeat(80);
        let long81 = "a".repeat(81);
        let host350 = format!("h{}", "o".repeat(349));
        let host351 = format!("h{}", "o".repeat(350));
        let cases: Vec<(String, Option<String>)> = vec![
            (
                "llama3".into(),
                Some("registry.ollama.ai/library/llama3:latest".into()),
            ),
            (
                "llama3:8b".into(),
                Some("registry.ollama.ai/library/llama3:8b".into()),
            ),
            (
                "Llama3:8B".into(),
                Some("registry.ollama.ai/library/Llama3:8B".into()),
            ),
            (
                "user/m".into(),
                Some("registry.ollama.ai/user/m:latest".into()),
            ),
            (
                "user/m:q4_K_M".into(),
                Some("registry.ollama.ai/user/m:q4_K_M".into()),
            ),
            (
                "example.com/ns/m:1.0".into(),
                Some("example.com/ns/m:1.0".into()),
            ),
            (
                "localhost:5000/ns/m".into(),
                Some("localhost:5000/ns/m:latest".into()),
            ),
            (
                "localhost:5000/ns/m:t".into(),
                Some("localhost:5000/ns/m:t".into()),
            ),
            (
                "https://example.com/ns/m:t".into(),
                Some("example.com/ns/m:t".into()),
            ),
            (
                "http://localhost:5000/ns/m".into(),
                Some("localhost:5000/ns/m:latest".into()),
            ),
            (
                "hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M".into(),
                Some("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M".into()),
            ),
            (
                "_m".into(),
                Some("registry.ollama.ai/library/_m:latest".into()),
            ),
            (
                "m.v2:1.5b-instruct".into(),
                Some("registry.ollama.ai/library/m.v2:1.5b-instruct".into()),
            ),
            (
                long80.clone(),
                Some(format!("registry.ollama.ai/library/{long80}:latest")),
            ),
            (
                format!("m:{long80}"),
                Some(format!("registry.ollama.ai/library/m:{long80}")),
            ),
            (
                format!("{host350}/n/m"),
                Some(format!("{host350}/n/m:latest")),
            ),
            // invalid
            ("".into(), None),
            (":".into(), None),
            ("m:".into(), None),
            (":tag".into(), None),
            ("/m".into(), None),
            ("ns/".into(), None),
            ("h//m".into(), None),
            ("/ns/m".into(), None),
            ("a/b/c/d".into(), None),
            ("m@sha256:abc".into(), None),
            ("m:t@sha256-abc".into(), None),
            ("-m".into(), None),
            (".m".into(), None),
            ("m/..".into(), None),
            ("../m".into(), None),
            ("../../etc/passwd".into(), None),
            ("n.s/m".into(), None),
            ("m:t:u".into(), None),
            ("m:-t".into(), None),
            (
                "m:t.".into(),
                Some("registry.ollama.ai/library/m:t.".into()),
            ),
            ("m\0".into(), None),
            ("m x".into(), None),
            ("mé".into(), None),
            ("m\\x".into(), None),
            ("ftp://h/n/m".into(), None),
            ("http://m".into(), None),
            ("https://n/m".into(), None),
            (long81.clone(), None),
            (format!("m:{long81}"), None),
            (format!("{long81}/m"), None),
            (format!("{host351}/n/m"), None),
            // Issue 22 item 9: a host's port is one real port number.
            ("host:99999/a/b:c".into(), None),
            ("host:65536/a/b".into(), None),
            ("host:/a/b".into(), None),
            ("host:1:2/a/b".into(), None),
            ("host:x/a/b".into(), None),
            ("host:123456/a/b".into(), None),
            ("host:65535/a/b:c".into(), Some("host:65535/a/b:c".into())),
        ];
        for (input, want) in cases {
            let got = ModelName::parse(&input).ok().map(|n| n.to_string());
            assert_eq!(got, want, "parse({input:?})");
        }
    }

    #[test]
    fn scheme_is_remembered() {
        assert!(ModelName::parse("http://localhost:5000/ns/m")
            .unwrap()
            .is_insecure());
        assert!(!ModelName::parse("https://localhost:5000/ns/m")
            .unwrap()
            .is_insecure());
        assert!(!ModelName::parse("localhost:5000/ns/m")
            .unwrap()
            .is_insecure());
    }

    #[test]
    fn display_shortest_keeps_tag() {
        for (input, want) in [
            ("llama3", "llama3:latest"),
            ("Registry.Ollama.AI/Library/Llama3:8b", "Llama3:8b"),
            ("user/m:7b", "user/m:7b"),
            ("registry.ollama.ai/user/m", "user/m:latest"),
            ("example.com/library/m", "example.com/library/m:latest"),
            ("localhost:5000/ns/m:t", "localhost:5000/ns/m:t"),
        ] {
            assert_eq!(
                ModelName::parse(input).unwrap().display_shortest(),
                want,
                "{input}"
            );
        }
    }

    #[test]
    fn manifest_path_and_parts() {
        let n = ModelName::parse("localhost:5000/Ns/M:T").unwrap();
        assert_eq!(
            n.manifest_rel_path(),
            PathBuf::from("manifests/localhost:5000/Ns/M/T")
        );
        assert_eq!(n.parts(), ["localhost:5000", "Ns", "M", "T"]);
        assert_eq!(
            (n.host(), n.namespace(), n.model(), n.tag()),
            ("localhost:5000", "Ns", "M", "T")
        );
    }

    #[test]
    fn from_parts_validates_each_part() {
        assert!(ModelName::from_parts("h", "n", "m", "t").is_ok());
        assert!(ModelName::from_parts("h:1", "n", "m", "t").is_ok());
        for bad in [
            ["h", "n.x", "m", "t"],
            ["h", "n", "m:x", "t"],
            ["h", "n", "m", ".tmp-1"],
            ["h", "n", "..", "t"],
            ["", "n", "m", "t"],
            ["h", "n", "m", "t/x"],
        ] {
            assert!(
                ModelName::from_parts(bad[0], bad[1], bad[2], bad[3]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn case_insensitive_equality() {
        let a = ModelName::parse("Llama3:Latest").unwrap();
        let b = ModelName::parse("registry.ollama.ai/LIBRARY/llama3:latest").unwrap();
        let c = ModelName::parse("llama3:8b").unwrap();
        assert!(a.eq_ignore_case(&b));
        assert_ne!(a, b);
        assert!(!a.eq_ignore_case(&c));
    }
}
