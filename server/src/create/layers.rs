//! The small blobs a create writes (template, system, license, params, messages, config) and
//! their exact bytes. They are encoded as Go's `json.Encoder` does (sorted map keys, `<>&`
//! escaped, trailing newline) so a model created here has the digests Ollama would give it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::error::{Error, Result};
use crate::store::manifest::{
    MEDIA_TYPE_CONFIG, MEDIA_TYPE_MESSAGES, MEDIA_TYPE_PARAMS, MEDIA_TYPE_PROMPT,
    MEDIA_TYPE_SYSTEM, MEDIA_TYPE_TEMPLATE,
};
use crate::store::{BlobStore, Layer};

/// Text layers are read whole into memory; refuse absurd ones from a `from` model.
const MAX_TEXT_LAYER: u64 = 16 << 20;

/// A layer plus the progress line Ollama prints for it.
#[derive(Clone, Debug)]
pub(crate) struct Built {
    pub layer: Layer,
    pub status: String,
}

/// `json.Encoder` output: compact, HTML-escaped, newline-terminated. `<`, `>`, `&`, U+2028 and
/// U+2029 can only occur inside JSON strings, so escaping the serialized text is exact.
pub(crate) fn go_json<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>> {
    let s = serde_json::to_string(v)?;
    let mut out = String::with_capacity(s.len() + 1);
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    Ok(out.into_bytes())
}

/// A JSON value as a Go `map[string]any` round trip leaves it: object keys sorted, numbers as
/// float64 (integral ones written without a fraction).
pub(crate) fn go_value(v: &Json) -> Json {
    match v {
        Json::Object(m) => {
            let sorted: BTreeMap<&String, Json> = m.iter().map(|(k, v)| (k, go_value(v))).collect();
            Json::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Json::Array(a) => Json::Array(a.iter().map(go_value).collect()),
        Json::Number(n) if n.is_f64() => {
            crate::modelfile::go_float_json(n.as_f64().unwrap_or_default())
        }
        v => v.clone(),
    }
}

/// Stores `bytes` as a layer of `media_type`, with Ollama's `creating new layer` / `using
/// existing layer` status.
pub(crate) fn text_layer(blobs: &BlobStore, media_type: &str, bytes: &[u8]) -> Result<Built> {
    let existed = blobs.exists(&crate::store::Digest::of_bytes(bytes));
    let digest = blobs.write_bytes(bytes)?;
    let verb = if existed {
        "using existing layer"
    } else {
        "creating new layer"
    };
    Ok(Built {
        status: format!("{verb} {digest}"),
        layer: Layer::new(media_type, digest, bytes.len() as u64),
    })
}

/// Reads a small layer of an existing model.
pub(crate) fn read_text(blobs: &BlobStore, layer: &Layer) -> Result<Vec<u8>> {
    if layer.size > MAX_TEXT_LAYER {
        return Err(Error::InvalidManifest(format!(
            "{} layer {} is larger than {MAX_TEXT_LAYER} bytes",
            layer.media_type, layer.digest
        )));
    }
    Ok(std::fs::read(blobs.path(&layer.digest))?)
}

fn remove(layers: &mut Vec<Built>, media_types: &[&str]) {
    layers.retain(|b| !media_types.contains(&b.layer.media_type.as_str()));
}

/// TEMPLATE replaces any template (or legacy prompt) layer.
pub(crate) fn set_template(blobs: &BlobStore, layers: &mut Vec<Built>, t: &str) -> Result<()> {
    remove(layers, &[MEDIA_TYPE_TEMPLATE, MEDIA_TYPE_PROMPT]);
    layers.push(text_layer(blobs, MEDIA_TYPE_TEMPLATE, t.as_bytes())?);
    Ok(())
}

pub(crate) fn set_system(blobs: &BlobStore, layers: &mut Vec<Built>, s: &str) -> Result<()> {
    remove(layers, &[MEDIA_TYPE_SYSTEM]);
    layers.push(text_layer(blobs, MEDIA_TYPE_SYSTEM, s.as_bytes())?);
    Ok(())
}

/// New parameters win key by key over the inherited params layer(s); the merged map replaces
/// them. Nothing is written when both are empty.
pub(crate) fn set_parameters(
    blobs: &BlobStore,
    layers: &mut Vec<Built>,
    new: Option<&Map<String, Json>>,
) -> Result<()> {
    let mut merged: Map<String, Json> = new.cloned().unwrap_or_default();
    for b in layers
        .iter()
        .filter(|b| b.layer.media_type == MEDIA_TYPE_PARAMS)
    {
        let bytes = read_text(blobs, &b.layer)?;
        let old: Map<String, Json> = serde_json::from_slice(&bytes)
            .map_err(|e| Error::InvalidManifest(format!("params layer {}: {e}", b.layer.digest)))?;
        for (k, v) in old {
            merged.entry(k).or_insert(v);
        }
    }
    if merged.is_empty() {
        return Ok(());
    }
    remove(layers, &[MEDIA_TYPE_PARAMS]);
    let bytes = go_json(&go_value(&Json::Object(merged)))?;
    layers.push(text_layer(blobs, MEDIA_TYPE_PARAMS, &bytes)?);
    Ok(())
}

/// A chat message as Ollama's `api.Message` encodes it (field order and omitempty rules).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Json>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_call_id: String,
}

/// Non-empty MESSAGEs replace the inherited ones; none keeps them (as Ollama).
pub(crate) fn set_messages(
    blobs: &BlobStore,
    layers: &mut Vec<Built>,
    m: &[Message],
) -> Result<()> {
    if m.is_empty() {
        return Ok(());
    }
    remove(layers, &[MEDIA_TYPE_MESSAGES]);
    layers.push(text_layer(blobs, MEDIA_TYPE_MESSAGES, &go_json(m)?)?);
    Ok(())
}

/// Ollama's `ConfigV2` draft entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DraftConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model_format: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub architecture: String,
}

/// The config blob (Ollama's `ConfigV2`, same field order and omitempty rules). The remote fields
/// (`remote_host`, `remote_model`, and the `capabilities`, `context_length`, `embedding_length`,
/// `base_name` a cloud stub describes its model with) are read from stubs; herd's create leaves
/// them empty, so they are omitted and its config blobs keep their bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigV2 {
    #[serde(default)]
    pub model_format: String,
    #[serde(default)]
    pub model_family: String,
    /// `null` until a model layer adds its architecture (a Go nil slice).
    #[serde(default)]
    pub model_families: Option<Vec<String>>,
    #[serde(default)]
    pub model_type: String,
    #[serde(default)]
    pub file_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub renderer: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parser: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requires: String,
    /// A stub's upstream server (`https://ollama.com:443`): requests are proxied there.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    /// The stub's model name on `remote_host`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_length: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub embedding_length: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<DraftConfig>,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
}

impl Default for ConfigV2 {
    fn default() -> Self {
        ConfigV2 {
            model_format: String::new(),
            model_family: String::new(),
            model_families: None,
            model_type: String::new(),
            file_type: String::new(),
            renderer: String::new(),
            parser: String::new(),
            requires: String::new(),
            remote_host: String::new(),
            remote_model: String::new(),
            capabilities: Vec::new(),
            context_length: 0,
            embedding_length: 0,
            base_name: String::new(),
            draft: None,
            // Constant in Ollama regardless of the host.
            architecture: "amd64".into(),
            os: "linux".into(),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ConfigV2 {
    /// A cloud/remote stub: both remote fields set (Ollama's test before proxying).
    pub fn remote(&self) -> Option<(&str, &str)> {
        (!self.remote_host.is_empty() && !self.remote_model.is_empty())
            .then_some((self.remote_host.as_str(), self.remote_model.as_str()))
    }
}

/// Writes the config blob and returns its layer.
pub(crate) fn config_layer(blobs: &BlobStore, config: &ConfigV2) -> Result<Layer> {
    Ok(text_layer(blobs, MEDIA_TYPE_CONFIG, &go_json(config)?)?.layer)
}
