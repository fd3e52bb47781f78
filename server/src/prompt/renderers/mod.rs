//! Built-in prompt renderers: Ollama's Modelfile `RENDERER` names (a model's config
//! `renderer`). A model pulled from ollama.com with a renderer is prompted by Ollama's Go code for
//! that family instead of its TEMPLATE layer, so herd must render the same bytes for the same
//! chat or the model sees a format it was not trained on.
//!
//! Owns: the [`Renderer`] trait, the name registry ([`for_name`], [`NAMES`]), the `gemma4` name
//! resolution Ollama does per model ([`resolve`]), and what every family needs to print Ollama's
//! values exactly ([`json`]: Go's `json.Marshal` of tools, calls and arguments; [`image_tags`]).
//!
//! Each family lives in its own module and is registered in [`for_name`] and [`NAMES`]; the
//! registry test checks that the two agree. A renderer receives the request's messages as sent
//! (not collated, images not yet tagged: renderers place their own image markers) and the tools
//! as the client sent them.

pub mod cogito;
pub mod cohere;
pub mod deepseek3;
pub mod functiongemma;
pub mod gemma4;
pub mod gemma4_tools;
pub mod glimmer;
pub mod glm;
pub mod json;
pub mod laguna;
pub mod lfm2;
pub mod nemotron;
pub mod nemotron_tools;
pub mod olmo3;
pub mod qwen35;
pub mod qwen38;
pub mod qwen3coder;
pub mod qwen3vl;

use serde_json::Value as J;

use super::{Message, Think};
use crate::error::Result;

/// One family's prompt format.
pub trait Renderer: Send + Sync {
    /// The whole prompt for a chat: every message, the tools, the request's `think`.
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String>;

    /// The BOS text the rendered prompt begins with, if the renderer prints one (the runner then
    /// adds none of its own); "" when the tokenizer's BOS rule applies.
    fn leading_bos(&self) -> &'static str {
        ""
    }
}

/// Renderer names herd knows, as Modelfile `RENDERER` accepts them.
pub const NAMES: &[&str] = &[
    "qwen3-coder",
    "gemma4-small",
    "gemma4-large",
    "deepseek3.1",
    "cogito",
    "glm-4.7",
    "glm-ocr",
    "olmo3",
    "olmo3.1",
    "olmo3-think",
    "olmo3-32b-think",
    "nemotron-3-nano",
    "nemotron-3.5-nano",
    "lfm2",
    "lfm2-thinking",
    "functiongemma",
    "qwen3-vl-instruct",
    "qwen3-vl-thinking",
    "qwen3.5",
    "qwen3.8",
    "ornith",
    "cohere",
    "laguna",
    "poolside-v1",
    "glimmer",
];

/// The renderer registered under `name` (after [`resolve`]).
pub fn for_name(name: &str) -> Option<Box<dyn Renderer>> {
    Some(match name {
        "qwen3-coder" => Box::new(qwen3coder::Qwen3Coder),
        "gemma4-small" => Box::new(gemma4::Gemma4::small()),
        "gemma4-large" => Box::new(gemma4::Gemma4::large()),
        "deepseek3.1" => Box::new(deepseek3::DeepSeek3 { thinking: true }),
        "cogito" => Box::new(cogito::Cogito { thinking: true }),
        "glm-4.7" => Box::new(glm::Glm47),
        "glm-ocr" => Box::new(glm::GlmOcr),
        "olmo3" => Box::new(olmo3::Olmo3 { extended: false }),
        "olmo3.1" => Box::new(olmo3::Olmo3 { extended: true }),
        "olmo3-think" => Box::new(olmo3::Olmo3Think { large_32b: false }),
        "olmo3-32b-think" => Box::new(olmo3::Olmo3Think { large_32b: true }),
        "nemotron-3-nano" => Box::new(nemotron::Nemotron3Nano { v35: false }),
        "nemotron-3.5-nano" => Box::new(nemotron::Nemotron3Nano { v35: true }),
        "lfm2" => Box::new(lfm2::Lfm2 { thinking: false }),
        "lfm2-thinking" => Box::new(lfm2::Lfm2 { thinking: true }),
        "functiongemma" => Box::new(functiongemma::FunctionGemma),
        "qwen3-vl-instruct" => Box::new(qwen3vl::Qwen3Vl { thinking: false }),
        "qwen3-vl-thinking" => Box::new(qwen3vl::Qwen3Vl { thinking: true }),
        "qwen3.5" => Box::new(qwen35::Qwen35::v35()),
        "qwen3.8" => Box::new(qwen35::Qwen35::v38()),
        "ornith" => Box::new(qwen35::Qwen35::ornith()),
        "cohere" => Box::new(cohere::Cohere),
        "laguna" => Box::new(laguna::Laguna),
        "poolside-v1" => Box::new(laguna::PoolsideV1),
        "glimmer" => Box::new(glimmer::Glimmer { date: None }),
        _ => return None,
    })
}

/// Whether a Modelfile `RENDERER` names a renderer herd has (`gemma4` resolves to one of its
/// sizes per model).
pub fn is_known(name: &str) -> bool {
    NAMES.contains(&resolve(name, "", "").as_str())
}

/// The renderer a model's config `renderer` means for this model. Ollama resolves the legacy
/// `gemma4` name per model: `gemma4-small` for e2b/e4b, `gemma4-large` for 12b/26b/31b (read from
/// the model's name, then its parameter size such as "27.4B"), `gemma4-small` otherwise.
pub fn resolve(renderer: &str, model_name: &str, parameter_size: &str) -> String {
    if renderer != "gemma4" {
        return renderer.to_string();
    }
    let by_name = |n: &str| {
        let n = n.to_lowercase();
        if n.contains("e2b") || n.contains("e4b") {
            Some("gemma4-small")
        } else if ["12b", "26b", "31b"].iter().any(|s| n.contains(s)) {
            Some("gemma4-large")
        } else {
            None
        }
    };
    if let Some(r) = by_name(model_name) {
        return r.to_string();
    }
    match parameter_count(parameter_size) {
        Some(n) if n >= 12_000_000_000.0 => "gemma4-large".into(),
        _ => "gemma4-small".into(),
    }
}

/// "27.4B" / "135M" / "8K" as a count (Ollama's `parseHumanParameterCount`).
fn parameter_count(s: &str) -> Option<f64> {
    let unit = s.chars().last()?;
    let mult = match unit.to_ascii_uppercase() {
        'B' => 1e9,
        'M' => 1e6,
        'K' => 1e3,
        _ => return None,
    };
    s[..s.len() - unit.len_utf8()]
        .parse::<f64>()
        .ok()
        .map(|v| v * mult)
}

/// Ollama's image placeholders for renderers (`renderContentWithImageTags`): a message's images,
/// numbered from `offset` across the conversation, replace literal `[img]` markers in order and
/// are otherwise prefixed (with a space before content that does not start with whitespace).
/// Content that already carries `[img-` markers is left alone. Returns the content and the next
/// offset.
pub fn image_tags(content: &str, count: usize, offset: usize) -> (String, usize) {
    if count == 0 {
        return (content.to_string(), offset);
    }
    if content.contains("[img-") {
        return (content.to_string(), offset + count);
    }
    let mut content = content.to_string();
    let mut prefix = String::new();
    for i in 0..count {
        let tag = format!("[img-{}]", offset + i);
        if content.contains("[img]") {
            content = content.replacen("[img]", &tag, 1);
        } else {
            prefix.push_str(&tag);
        }
    }
    if !prefix.is_empty() && content.chars().next().is_some_and(|c| !c.is_whitespace()) {
        prefix.push(' ');
    }
    (prefix + &content, offset + count)
}

#[cfg(test)]
pub(crate) mod testutil;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_to_a_renderer() {
        for n in NAMES {
            assert!(for_name(n).is_some(), "{n} is listed but not registered");
        }
        assert!(for_name("no-such-renderer").is_none());
    }

    #[test]
    fn gemma4_resolves_per_model() {
        for (name, size, want) in [
            ("gemma4:e2b", "", "gemma4-small"),
            ("gemma4:E4B-it", "27B", "gemma4-small"),
            ("gemma4:31b", "", "gemma4-large"),
            ("mine:latest", "27.4B", "gemma4-large"),
            ("mine:latest", "4.3B", "gemma4-small"),
            ("mine:latest", "", "gemma4-small"),
            ("mine:latest", "12B", "gemma4-large"),
        ] {
            assert_eq!(resolve("gemma4", name, size), want, "{name} {size}");
        }
        assert_eq!(resolve("qwen3-coder", "gemma4:31b", "31B"), "qwen3-coder");
    }

    #[test]
    fn image_tags_follow_ollama() {
        let cases = [
            ("hi", 0, 3, "hi", 3),
            ("hi", 1, 0, "[img-0] hi", 1),
            (" hi", 2, 1, "[img-1][img-2] hi", 3),
            ("a [img] b", 1, 0, "a [img-0] b", 1),
            ("a [img] b", 2, 0, "[img-1] a [img-0] b", 2),
            ("[img-7] x", 1, 0, "[img-7] x", 1),
            ("", 1, 0, "[img-0]", 1),
        ];
        for (content, n, off, want, next) in cases {
            assert_eq!(
                image_tags(content, n, off),
                (want.to_string(), next),
                "{content}"
            );
        }
    }
}
