//! The manifest format (Docker distribution v2 as Ollama writes it) and its byte-exact
//! serialization. Manifests we build are serialized like Ollama's `WriteManifest` (Go
//! `json.Encoder`: compact, keys in struct order, HTML-escaped strings, trailing newline) so the
//! `/api/tags` digest — sha256 of the file bytes — matches what Ollama would produce; pulled
//! manifests are never re-serialized, their bytes are stored as received.

use std::io;

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use crate::error::{Error, Result};

pub const MEDIA_TYPE_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MEDIA_TYPE_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const MEDIA_TYPE_MODEL: &str = "application/vnd.ollama.image.model";
pub const MEDIA_TYPE_PROJECTOR: &str = "application/vnd.ollama.image.projector";
pub const MEDIA_TYPE_ADAPTER: &str = "application/vnd.ollama.image.adapter";
pub const MEDIA_TYPE_DRAFT: &str = "application/vnd.ollama.image.draft";
pub const MEDIA_TYPE_TEMPLATE: &str = "application/vnd.ollama.image.template";
/// Legacy name of the template layer.
pub const MEDIA_TYPE_PROMPT: &str = "application/vnd.ollama.image.prompt";
pub const MEDIA_TYPE_SYSTEM: &str = "application/vnd.ollama.image.system";
pub const MEDIA_TYPE_LICENSE: &str = "application/vnd.ollama.image.license";
pub const MEDIA_TYPE_PARAMS: &str = "application/vnd.ollama.image.params";
pub const MEDIA_TYPE_MESSAGES: &str = "application/vnd.ollama.image.messages";
/// Ignored by Ollama; listed so it is recognised rather than treated as unknown.
pub const MEDIA_TYPE_EMBED: &str = "application/vnd.ollama.image.embed";
/// MLX per-tensor layer (carries `name`).
pub const MEDIA_TYPE_TENSOR: &str = "application/vnd.ollama.image.tensor";
/// MLX config-file layer (carries `name`).
pub const MEDIA_TYPE_JSON: &str = "application/vnd.ollama.image.json";

/// One referenced blob. Field order is the JSON key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Layer {
    pub fn new(media_type: &str, digest: Digest, size: u64) -> Layer {
        Layer {
            media_type: media_type.to_owned(),
            digest,
            size,
            from: None,
            name: None,
        }
    }
}

/// Field order is the JSON key order of Ollama's `WriteManifest`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(rename = "schemaVersion", default)]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub config: Layer,
    #[serde(default)]
    pub layers: Vec<Layer>,
}

impl Manifest {
    /// A schema-2 manifest as Ollama builds it.
    pub fn new(config: Layer, layers: Vec<Layer>) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: MEDIA_TYPE_MANIFEST.to_owned(),
            config,
            layers,
        }
    }

    /// Parses manifest bytes; every digest is validated on the way in.
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        serde_json::from_slice(bytes).map_err(|e| Error::InvalidManifest(e.to_string()))
    }

    /// Ollama-identical bytes (see module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + 160 * self.layers.len());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
        // Serializing plain strings and integers into a Vec cannot fail.
        self.serialize(&mut ser)
            .expect("manifest serialization is infallible");
        out.push(b'\n');
        out
    }

    /// Layers then config: every blob this manifest references.
    pub fn blobs(&self) -> impl Iterator<Item = &Layer> {
        self.layers.iter().chain(std::iter::once(&self.config))
    }

    /// Sum of layer sizes plus the config (what `/api/tags` reports).
    pub fn total_size(&self) -> u64 {
        self.blobs().map(|l| l.size).fold(0, u64::saturating_add)
    }
}

/// Compact JSON with Go's default string escaping: `<`, `>`, `&`, U+2028 and U+2029 become
/// `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029` (serde_json leaves them raw).
struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> Digest {
        Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap()
    }

    #[test]
    fn serializes_like_ollama() {
        let mut model = Layer::new(MEDIA_TYPE_MODEL, d('a'), 100);
        model.from = Some("/tmp/<x>&y".into());
        let m = Manifest::new(
            Layer::new(MEDIA_TYPE_CONFIG, d('c'), 7),
            vec![model, Layer::new(MEDIA_TYPE_TEMPLATE, d('b'), 5)],
        );
        let want = format!(
            concat!(
                r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","#,
                r#""config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:{c}","size":7}},"#,
                r#""layers":[{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{a}","size":100,"from":"/tmp/\u003cx\u003e\u0026y"}},"#,
                r#"{{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:{b}","size":5}}]}}"#,
                "\n"
            ),
            a = "a".repeat(64),
            b = "b".repeat(64),
            c = "c".repeat(64)
        );
        assert_eq!(String::from_utf8(m.to_bytes()).unwrap(), want);
        assert_eq!(m.total_size(), 112);
        assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
    }

    #[test]
    fn parses_registry_manifest_with_unknown_fields_and_whitespace() {
        let raw = format!(
            "{{\n  \"schemaVersion\": 2,\n  \"mediaType\": \"{MEDIA_TYPE_MANIFEST}\",\n  \"config\": {{\"mediaType\": \"{MEDIA_TYPE_CONFIG}\", \"digest\": \"{}\", \"size\": 485}},\n  \"layers\": [{{\"mediaType\": \"{MEDIA_TYPE_TENSOR}\", \"digest\": \"{}\", \"size\": 3, \"name\": \"w.weight\", \"annotations\": {{}}}}]\n}}",
            d('1'),
            d('2')
        );
        let m = Manifest::parse(raw.as_bytes()).unwrap();
        assert_eq!(m.layers[0].name.as_deref(), Some("w.weight"));
        assert_eq!(m.config.size, 485);
        // Re-serialization is compact, which is exactly why pulled bytes must be kept verbatim.
        assert_ne!(m.to_bytes(), raw.as_bytes());
    }

    #[test]
    fn rejects_hostile_or_broken_manifests() {
        let good = Manifest::new(Layer::new(MEDIA_TYPE_CONFIG, d('c'), 1), vec![]);
        let text = String::from_utf8(good.to_bytes()).unwrap();
        for bad in [
            text.replace(&"c".repeat(64), "../../../../etc/ld.so.preload"),
            text.replace(
                &format!("sha256:{}", "c".repeat(64)),
                &format!("sha256-{}", "c".repeat(64)),
            ),
            text.replace("\"size\":1", "\"size\":-1"),
            text.replace(&"c".repeat(64), &"C".repeat(64)),
            r#"{"schemaVersion":2,"layers":[]}"#.to_string(),
            text[..text.len() / 2].to_string(),
            String::new(),
        ] {
            assert!(
                matches!(
                    Manifest::parse(bad.as_bytes()),
                    Err(Error::InvalidManifest(_))
                ),
                "{bad}"
            );
        }
    }
}
