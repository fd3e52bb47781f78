//! Model names: `[scheme://][host/][namespace/]model[:tag]` with Ollama's parsing
//! (types/model/name.go `ParseName`), per-part character/length rules and defaults
//! (`registry.ollama.ai`, `library`, `latest`, scheme `https`). As in Ollama, the scheme is
//! whatever precedes the first `://` before an explicit host and is not validated here (it only
//! matters for registry traffic, which refuses all but `http` and `https`), and a host may hold
//! `:` anywhere after its first character (`host:https` is a valid host; whether it is a
//! dialable address is the registry client's question, not the name's).
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
    /// The scheme the name was written with, unless it was none or the default `https`
    /// (so `https://h/n/m` and `h/n/m` are the same name): `http` means plain HTTP (needs
    /// `insecure`), anything else cannot reach a registry.
    scheme: Option<String>,
}

fn is_valid_part(kind: Part, s: &str) -> bool {
    let max = if kind == Part::Host { 350 } else { 80 };
    if s.is_empty() || s.len() > max {
        return false;
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
        let mut scheme = None;
        match rest.rsplit_once('/') {
            None => model = rest,
            Some((before, m)) => {
                model = m;
                match before.rsplit_once('/') {
                    None => namespace = before,
                    Some((h, ns)) => {
                        namespace = ns;
                        // A scheme can only prefix an explicit host (as in Ollama, where
                        // `http://model` does not parse): what precedes the first `://`.
                        host = match h.split_once("://") {
                            Some((sch, h)) => {
                                // Empty or the default is no scheme (Ollama's Merge).
                                scheme = Some(sch).filter(|s| !s.is_empty() && *s != "https");
                                h
                            }
                            None => h,
                        };
                    }
                }
            }
        }
        let mut n = ModelName::from_parts(host, namespace, model, tag)?;
        n.scheme = scheme.map(str::to_owned);
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
            scheme: None,
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
        self.scheme() == "http"
    }

    /// The scheme registry traffic for this name uses: as written, else `https`.
    pub fn scheme(&self) -> &str {
        self.scheme.as_deref().unwrap_or("https")
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
            scheme: self.scheme.clone(),
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
            ("http://m".into(), None),
            ("https://n/m".into(), None),
            (long81.clone(), None),
            (format!("m:{long81}"), None),
            (format!("{long81}/m"), None),
            (format!("{host351}/n/m"), None),
            // A host may hold ':' anywhere after its first character, as in Ollama; a
            // registry refuses the ones that are no address (`registry::client`).
            ("host:99999/a/b:c".into(), Some("host:99999/a/b:c".into())),
            ("host:/a/b".into(), Some("host:/a/b:latest".into())),
            ("host:1:2/a/b".into(), Some("host:1:2/a/b:latest".into())),
            ("host:65535/a/b:c".into(), Some("host:65535/a/b:c".into())),
            (":host/a/b".into(), None),
        ];
        for (input, want) in cases {
            let got = ModelName::parse(&input).ok().map(|n| n.to_string());
            assert_eq!(got, want, "parse({input:?})");
        }
    }

    #[test]
    fn scheme_is_remembered() {
        // (input, scheme, insecure)
        let cases = [
            ("http://localhost:5000/ns/m", "http", true),
            ("https://localhost:5000/ns/m", "https", false),
            ("localhost:5000/ns/m", "https", false),
            ("://h/n/m:t", "https", false),
            ("ftp://h/n/m", "ftp", false),
            ("HTTP://h/n/m", "HTTP", false),
            ("a/b://h/n/m", "a/b", false),
            ("scheme://host:port/namespace/model:tag", "scheme", false),
        ];
        for (input, scheme, insecure) in cases {
            let n = ModelName::parse(input).unwrap();
            assert_eq!((n.scheme(), n.is_insecure()), (scheme, insecure), "{input}");
        }
        // The default scheme, written or not, is the same name; another scheme is not.
        let plain = ModelName::parse("h/n/m").unwrap();
        assert_eq!(ModelName::parse("https://h/n/m").unwrap(), plain);
        assert_ne!(ModelName::parse("http://h/n/m").unwrap(), plain);
        assert!(ModelName::parse("http://h/n/m")
            .unwrap()
            .eq_ignore_case(&plain));
    }

    /// types/model/name_test.go: TestParseNameParts (parts and Filepath of ParseName) and the
    /// validity table (`testCases`), as ParseName with its defaults reads them (herd always
    /// fills the defaults, so Ollama's bare-name "unqualified" rows are the defaulted name).
    #[test]
    fn ollama_name_test_cases() {
        let p80 = "8".repeat(80);
        let p350 = "3".repeat(350);
        // (input, [host, namespace, model, tag], scheme)
        let parts: Vec<(String, [&str; 4], &str)> = vec![
            (
                "registry.ollama.ai/library/dolphin-mistral:7b-v2.6-dpo-laser-q6_K".into(),
                [
                    "registry.ollama.ai",
                    "library",
                    "dolphin-mistral",
                    "7b-v2.6-dpo-laser-q6_K",
                ],
                "https",
            ),
            (
                "scheme://host:port/namespace/model:tag".into(),
                ["host:port", "namespace", "model", "tag"],
                "scheme",
            ),
            (
                "host/namespace/model:tag".into(),
                ["host", "namespace", "model", "tag"],
                "https",
            ),
            (
                "host:port/namespace/model:tag".into(),
                ["host:port", "namespace", "model", "tag"],
                "https",
            ),
            (
                "host/namespace/model".into(),
                ["host", "namespace", "model", "latest"],
                "https",
            ),
            (
                "host:port/namespace/model".into(),
                ["host:port", "namespace", "model", "latest"],
                "https",
            ),
            (
                "namespace/model".into(),
                ["registry.ollama.ai", "namespace", "model", "latest"],
                "https",
            ),
            (
                "model".into(),
                ["registry.ollama.ai", "library", "model", "latest"],
                "https",
            ),
            ("h/nn/mm:t".into(), ["h", "nn", "mm", "t"], "https"),
            (
                format!("{p80}/{p80}/{p80}:{p80}"),
                [&p80, &p80, &p80, &p80],
                "https",
            ),
            (
                format!("{p350}/{p80}/{p80}:{p80}"),
                [&p350, &p80, &p80, &p80],
                "https",
            ),
            (
                "host:https/namespace/model:tag".into(),
                ["host:https", "namespace", "model", "tag"],
                "https",
            ),
            (
                "https://host/namespace/model:tag".into(),
                ["host", "namespace", "model", "tag"],
                "https",
            ),
            (
                "http://host:https/namespace/model".into(),
                ["host:https", "namespace", "model", "latest"],
                "http",
            ),
        ];
        for (input, want, scheme) in parts {
            let n = ModelName::parse(&input).unwrap_or_else(|_| panic!("{input}"));
            assert_eq!((n.parts(), n.scheme()), (want, scheme), "{input}");
            let path: PathBuf = ["manifests"].into_iter().chain(want).collect();
            assert_eq!(n.manifest_rel_path(), path, "{input}");
        }
        let valid = [
            "_why/_the/_lucky:_stiff",
            "h/n/m:t",
            "host/namespace/model:tag",
            "host/namespace/model",
            "namespace/model",
            "model",
            "m",
            "h/n/m",
            "h/nn/mm:t",
            "host:https/namespace/model:tag",
        ];
        let invalid = [
            "",
            "n/m:",
            "@t",
            "m@d",
            "^",
            "mm:",
            "/nn/mm",
            "//",
            "//mm",
            "hh//",
            "//mm:@",
            "00@",
            "@",
            "-hh/nn/mm:tt",
            "hh/-nn/mm:tt",
            "hh/nn/-mm:tt",
            "hh/nn/mm:-tt",
            "host/name:space/model:tag",
            // A scheme only before an explicit host: the rest must still be valid parts.
            "https://model",
            "https://namespace/model",
            "https://host/name.space/model",
            "scheme://host/a/b/model",
        ];
        for input in valid {
            assert!(ModelName::parse(input).is_ok(), "{input} is valid");
        }
        for input in invalid {
            assert!(ModelName::parse(input).is_err(), "{input} is invalid");
        }
        // A valid full name prints back as written (TestNameIsValid's round trip).
        for input in [
            "h/n/m:t",
            "host:https/namespace/model:tag",
            "_why/_the/_lucky:_stiff",
        ] {
            assert_eq!(ModelName::parse(input).unwrap().to_string(), input);
        }
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
