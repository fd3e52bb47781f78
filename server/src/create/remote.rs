//! A create that makes a stub instead of a local model (Ollama's `server/create.go`): `from` a
//! cloud reference (`gpt-oss:20b:cloud`, `gpt-oss:120b-cloud`) or with `remote_host` set, the
//! new model's config names `remote_host` (normalized as Ollama's `remoteURL`) and
//! `remote_model` (the `from` name without its source suffix), and it has no model layers;
//! requests to it are proxied (`crate::remote::stub`). Also the `info` map, which overrides
//! config fields for any create. Pure functions, table-tested.

use serde_json::{Map, Value as Json};

use super::layers::ConfigV2;
use crate::error::{Error, Result};

/// Ollama's refusal of `draft_files` on a stub.
pub const DRAFT_UNSUPPORTED: &str = "DRAFT cannot be used with remote models";

/// Ollama's `remoteURL`: a bare path is a local Ollama's, a missing scheme is `http`,
/// `ollama.com` is `https://ollama.com:443`, a missing port is 11434, and a path is cleaned.
pub fn remote_url(raw: &str) -> Result<String> {
    let bad = |e: String| Error::BadRequest(format!("bad remote: {e}"));
    if raw.starts_with('/') {
        return Ok(format!("http://localhost:11434{}", clean_path(raw)));
    }
    let mut raw = if raw.contains("://") {
        raw.to_owned()
    } else {
        format!("http://{raw}")
    };
    if raw == "http://ollama.com" {
        raw = "https://ollama.com:443".into();
    }
    let (scheme, rest) = raw.split_once("://").expect("has a scheme");
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') || authority.contains('?') || authority.contains('#') {
        return Err(bad(raw.clone()));
    }
    let host = if authority.is_empty() {
        "localhost"
    } else {
        authority
    };
    let host = match split_port(host) {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            format!("{h}:{p}")
        }
        Some(_) => return Err(bad(raw.clone())),
        None => format!("{host}:11434"),
    };
    let path = match clean_path(path).as_str() {
        "/" | "" => String::new(),
        p => p.to_owned(),
    };
    Ok(format!("{scheme}://{host}{path}"))
}

/// `host:port` split at the port's colon (an IPv6 literal keeps its brackets); None when there
/// is no port.
fn split_port(host: &str) -> Option<(&str, &str)> {
    if let Some(end) = host.rfind(']') {
        return host[end + 1..]
            .strip_prefix(':')
            .map(|p| (&host[..=end], p));
    }
    host.rsplit_once(':')
}

/// Go's `path.Clean` for an absolute or empty path.
fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return String::new();
    }
    let mut out: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// The `info` map's overrides (Ollama: "not currently exposed by Modelfiles"): capabilities
/// are added; `model_family` (and families), `base_name`, `quantization_level`,
/// `parameter_size`, `context_length` and `embedding_length` are set.
pub fn apply_info(info: &Map<String, Json>, config: &mut ConfigV2) -> Result<()> {
    if let Some(Json::Array(caps)) = info.get("capabilities") {
        config
            .capabilities
            .extend(caps.iter().filter_map(|c| c.as_str().map(str::to_owned)));
    }
    let string = |k: &str| -> Result<String> {
        match info.get(k) {
            None => Ok(String::new()),
            Some(Json::String(s)) => Ok(s.clone()),
            Some(_) => Err(Error::BadRequest(format!(
                "info field \"{k}\" must be a string"
            ))),
        }
    };
    let number = |k: &str| -> Result<u64> {
        match info.get(k) {
            None => Ok(0),
            Some(Json::Number(n)) => match n.as_f64() {
                Some(v) if v >= 0.0 && v.trunc() == v && v <= i64::MAX as f64 => Ok(v as u64),
                _ => Err(Error::BadRequest(format!(
                    "info field \"{k}\" must be a non-negative integer"
                ))),
            },
            Some(_) => Err(Error::BadRequest(format!(
                "info field \"{k}\" must be a number"
            ))),
        }
    };
    config.model_family = string("model_family")?;
    if !config.model_family.is_empty() {
        config.model_families = Some(vec![config.model_family.clone()]);
    }
    config.base_name = string("base_name")?;
    config.file_type = string("quantization_level")?;
    config.model_type = string("parameter_size")?;
    config.context_length = number("context_length")?;
    config.embedding_length = number("embedding_length")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn remote_urls_are_normalized_as_ollama_does() {
        let table = [
            ("ollama.com", "https://ollama.com:443"),
            ("http://ollama.com", "https://ollama.com:443"),
            ("https://ollama.com:443", "https://ollama.com:443"),
            ("example.com", "http://example.com:11434"),
            ("example.com:8080", "http://example.com:8080"),
            ("https://example.com/", "https://example.com:11434"),
            ("http://127.0.0.1:11500/a/../b/", "http://127.0.0.1:11500/b"),
            ("/api/x", "http://localhost:11434/api/x"),
            ("http://[::1]:9000", "http://[::1]:9000"),
            ("http://[::1]", "http://[::1]:11434"),
        ];
        for (raw, want) in table {
            assert_eq!(remote_url(raw).unwrap(), want, "{raw}");
        }
        for bad in ["http://h:port", "http://user@h:1"] {
            assert!(remote_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn info_overrides_config_fields_with_ollamas_type_errors() {
        let mut c = ConfigV2 {
            capabilities: vec!["completion".into()],
            ..ConfigV2::default()
        };
        let info = json!({"capabilities": ["tools", 3, "thinking"], "model_family": "gptoss",
            "base_name": "gpt-oss", "quantization_level": "MXFP4", "parameter_size": "20.9B",
            "context_length": 131072, "embedding_length": 2880});
        apply_info(info.as_object().unwrap(), &mut c).unwrap();
        assert_eq!(c.capabilities, ["completion", "tools", "thinking"]);
        assert_eq!(c.model_families, Some(vec!["gptoss".to_owned()]));
        assert_eq!(
            (
                c.file_type.as_str(),
                c.model_type.as_str(),
                c.base_name.as_str()
            ),
            ("MXFP4", "20.9B", "gpt-oss")
        );
        assert_eq!((c.context_length, c.embedding_length), (131072, 2880));
        for (info, want) in [
            (
                json!({"model_family": 1}),
                "info field \"model_family\" must be a string",
            ),
            (
                json!({"context_length": "8k"}),
                "info field \"context_length\" must be a number",
            ),
            (
                json!({"context_length": -1}),
                "info field \"context_length\" must be a non-negative integer",
            ),
            (
                json!({"embedding_length": 1.5}),
                "info field \"embedding_length\" must be a non-negative integer",
            ),
        ] {
            let e = apply_info(info.as_object().unwrap(), &mut ConfigV2::default()).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
    }
}
