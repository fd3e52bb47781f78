//! Source suffixes on a model reference, as Ollama's `internal/modelref` reads them:
//! `name:cloud` and `name:tag-cloud` ask for Ollama's cloud (`name`, `name:tag`), `name:local`
//! for the local store only. Pure.

/// Where a reference asks to be served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Unspecified,
    Local,
    Cloud,
}

/// A reference with its suffix taken off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRef {
    /// The name without the source suffix (`gpt-oss:20b:cloud` → `gpt-oss:20b`).
    pub base: String,
    pub source: Source,
}

/// Ollama's `ErrConflictingSourceSuffix`, quoted as its handlers show it.
pub fn conflict_message(raw: &str) -> String {
    format!(
        "use either :local or :cloud, not both: {}",
        crate::api::show::go_quote(raw.trim())
    )
}

/// `Ok(None)` for a blank reference (each endpoint words that itself); `Err` with Ollama's text
/// for two suffixes (`m:local:cloud`).
pub fn parse(raw: &str) -> Result<Option<ParsedRef>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let (base, source) = split_suffix(raw);
    if source != Source::Unspecified && split_suffix(&base).1 != Source::Unspecified {
        return Err(conflict_message(raw));
    }
    Ok(Some(ParsedRef { base, source }))
}

/// Whether `raw` asks for Ollama's cloud (`m:tag:cloud`, `m:tag-cloud`, `m:cloud`).
pub fn is_cloud(raw: &str) -> bool {
    matches!(parse(raw), Ok(Some(r)) if r.source == Source::Cloud)
}

/// The name a pull of `raw` stores (Ollama's `NormalizePullName`): a cloud reference becomes the
/// registry's stub name, `m:tag:cloud` → `m:tag-cloud`, `m:cloud` → `m:cloud`.
pub fn pull_name(raw: &str) -> Result<Option<String>, String> {
    Ok(parse(raw)?.map(|r| match r.source {
        Source::Cloud if has_explicit_tag(&r.base) => format!("{}-cloud", r.base),
        Source::Cloud => format!("{}:cloud", r.base),
        _ => r.base,
    }))
}

/// A tag after the last `/` (a registry port's colon does not count).
fn has_explicit_tag(name: &str) -> bool {
    match (name.rfind(':'), name.rfind('/')) {
        (Some(c), Some(s)) => c > s,
        (Some(_), None) => true,
        _ => false,
    }
}

fn split_suffix(raw: &str) -> (String, Source) {
    let Some(i) = raw.rfind(':') else {
        return (raw.to_owned(), Source::Unspecified);
    };
    let suffix_raw = raw[i + 1..].trim();
    let suffix = suffix_raw.to_ascii_lowercase();
    match suffix.as_str() {
        "cloud" => return (raw[..i].to_owned(), Source::Cloud),
        "local" => return (raw[..i].to_owned(), Source::Local),
        _ => {}
    }
    if !suffix_raw.contains('/') && suffix.ends_with("-cloud") {
        let tag = &suffix_raw[..suffix_raw.len() - "-cloud".len()];
        return (format!("{}{tag}", &raw[..=i]), Source::Cloud);
    }
    (raw.to_owned(), Source::Unspecified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        use Source::*;
        let table = [
            ("gpt-oss:20b", "gpt-oss:20b", Unspecified),
            ("gpt-oss:20b:cloud", "gpt-oss:20b", Cloud),
            ("gpt-oss:120b-cloud", "gpt-oss:120b", Cloud),
            ("gpt-oss:120b-CLOUD", "gpt-oss:120b", Cloud),
            ("gpt-oss:cloud", "gpt-oss", Cloud),
            ("  qwen3:8b:local ", "qwen3:8b", Local),
            ("qwen3:local", "qwen3", Local),
            ("smol", "smol", Unspecified),
            // A host port is not a tag; "-cloud" inside a path is not a suffix.
            ("host:5000/ns/m", "host:5000/ns/m", Unspecified),
            ("host:5000/m-cloud", "host:5000/m-cloud", Unspecified),
            ("m:-cloud", "m:", Cloud),
        ];
        for (raw, base, source) in table {
            let r = parse(raw).unwrap().unwrap();
            assert_eq!((r.base.as_str(), r.source), (base, source), "{raw}");
        }
        assert_eq!(parse("  ").unwrap(), None);
        assert_eq!(
            parse("m:local:cloud").unwrap_err(),
            "use either :local or :cloud, not both: \"m:local:cloud\""
        );
        assert!(parse("m:8b-cloud:local").is_err());
    }

    #[test]
    fn pull_names() {
        let table = [
            ("gpt-oss:20b:cloud", "gpt-oss:20b-cloud"),
            ("gpt-oss:20b-cloud", "gpt-oss:20b-cloud"),
            ("gpt-oss:cloud", "gpt-oss:cloud"),
            ("host:5000/m:cloud", "host:5000/m:cloud"),
            ("smol:local", "smol"),
            ("smol", "smol"),
        ];
        for (raw, want) in table {
            assert_eq!(pull_name(raw).unwrap().unwrap(), want, "{raw}");
        }
    }
}
