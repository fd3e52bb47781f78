//! A stored safetensors model read through its manifest view: the small JSON layers, the
//! tensor blobs' headers, and from them Ollama's `details`, `model_info`, tensor list, chat
//! template and the BOS/EOS texts a Jinja template prints. Blocking file I/O.

use serde_json::{Map, Value as Json};

use super::header::{self, Header};
use super::info;
use crate::api::show::{ModelDetails, ModelView, NamedBlob};
use crate::error::{Error, Result};

/// Config files are small; tokenizer.json is never read here (the runner reads it).
const MAX_JSON_LAYER: u64 = 16 << 20;

fn layer<'a>(view: &'a ModelView, name: &str) -> Option<&'a NamedBlob> {
    view.json_layers.iter().find(|l| l.name == name)
}

fn read_small(l: &NamedBlob) -> Result<Vec<u8>> {
    if l.size > MAX_JSON_LAYER {
        return Err(Error::InvalidManifest(format!(
            "json layer {} is larger than {MAX_JSON_LAYER} bytes",
            l.name
        )));
    }
    Ok(std::fs::read(&l.path)?)
}

/// The parsed JSON layer `name` (`None` when the model has none).
pub fn json(view: &ModelView, name: &str) -> Result<Option<Json>> {
    let Some(l) = layer(view, name) else {
        return Ok(None);
    };
    serde_json::from_slice(&read_small(l)?)
        .map(Some)
        .map_err(|e| Error::InvalidManifest(format!("{name}: {e}")))
}

/// `config.json`, which every safetensors model has.
pub fn config(view: &ModelView) -> Result<Json> {
    json(view, "config.json")?
        .ok_or_else(|| Error::InvalidManifest("the model has no config.json layer".into()))
}

/// Every tensor layer's header, with the layer's name.
pub fn headers(view: &ModelView) -> Result<Vec<(String, Header)>> {
    view.tensor_layers
        .iter()
        .map(|l| Ok((l.name.clone(), header::read(&l.path)?)))
        .collect()
}

/// Ollama's details for a safetensors model (`routes.go` show/list): family from the
/// architecture, parameter size from the tensor shapes, quantization from the config blob's
/// `file_type`, else the blobs' quant type, else `torch_dtype`.
pub fn details(view: &ModelView) -> Result<ModelDetails> {
    let cfg = config(view)?;
    let (params, quant) = info::summarize(&headers(view)?);
    let c = &view.config;
    let mut level = c.file_type.clone();
    if level.is_empty() {
        level = quant.unwrap_or_else(|| cfg["torch_dtype"].as_str().unwrap_or_default().into());
    }
    let arch = info::arch(&cfg);
    Ok(ModelDetails {
        parent_model: view.parent_model.clone(),
        format: "safetensors".into(),
        family: if arch.is_empty() {
            c.model_family.clone()
        } else {
            arch
        },
        families: c.model_families.clone(),
        parameter_size: if params > 0 {
            crate::gguf::human_number(params)
        } else {
            c.model_type.clone()
        },
        quantization_level: level,
    })
}

/// `/api/show` `model_info`.
pub fn model_info(view: &ModelView) -> Result<Map<String, Json>> {
    let (params, _) = info::summarize(&headers(view)?);
    Ok(info::model_info(&config(view)?, params))
}

/// `/api/show` `tensors` (`{name, type, shape}`, sorted by name).
pub fn tensors_json(view: &ModelView) -> Result<Vec<Json>> {
    let mut out = Vec::new();
    for (name, h) in headers(view)? {
        for (n, ty, shape) in info::blob_tensors(&name, &h) {
            out.push((n, ty, shape));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out
        .into_iter()
        .map(|(name, ty, shape)| serde_json::json!({"name": name, "type": ty, "shape": shape}))
        .collect())
}

/// The Jinja chat template: `chat_template.jinja`, else tokenizer_config.json's
/// `chat_template` (a string, or the `default` of a named list).
pub fn chat_template(view: &ModelView) -> Result<Option<String>> {
    if let Some(l) = layer(view, "chat_template.jinja") {
        return Ok(Some(String::from_utf8_lossy(&read_small(l)?).into_owned()));
    }
    let Some(tc) = json(view, "tokenizer_config.json")? else {
        return Ok(None);
    };
    Ok(match &tc["chat_template"] {
        Json::String(s) => Some(s.clone()),
        Json::Array(named) => named
            .iter()
            .find(|t| t["name"] == "default")
            .or_else(|| named.first())
            .and_then(|t| t["template"].as_str().map(str::to_owned)),
        _ => None,
    })
}

/// The BOS and EOS token texts (tokenizer_config.json `bos_token` / `eos_token`, a string or
/// an `{content}` object) that Jinja templates print.
pub fn special_tokens(view: &ModelView) -> Result<(Option<String>, Option<String>)> {
    let Some(tc) = json(view, "tokenizer_config.json")? else {
        return Ok((None, None));
    };
    let text = |v: &Json| match v {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_owned),
        _ => None,
    };
    Ok((text(&tc["bos_token"]), text(&tc["eos_token"])))
}
