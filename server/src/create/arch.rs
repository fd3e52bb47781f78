//! What a model layer's GGUF architecture implies for the new model's config when the create
//! names no renderer or parser (Ollama's `createModel`, the architecture switch after quantize):
//! the built-in renderer and parser that family needs, and for gemma4 a default `stop`.
//! Pure, table-tested.

use serde_json::{Map, Value as Json};

use super::layers::ConfigV2;

/// The defaults one architecture brings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArchDefaults {
    pub renderer: &'static str,
    pub parser: &'static str,
    /// Added as the `stop` parameter when the request sets none.
    pub stop: &'static [&'static str],
}

/// The defaults of `arch`, if it has any. `gemma4` is the legacy renderer name, resolved per
/// model (small or large) when the model renders (`prompt::renderers::resolve`).
pub(crate) fn defaults(arch: &str) -> Option<ArchDefaults> {
    let (renderer, parser, stop): (_, _, &'static [&'static str]) = match arch {
        "gemma4" => ("gemma4", "gemma4", &["<turn|>"]),
        "laguna" => ("laguna", "laguna", &[]),
        "nemotron_h" | "nemotron_h_moe" | "nemotron_h_omni" => {
            ("nemotron-3-nano", "nemotron-3-nano", &[])
        }
        _ => return None,
    };
    Some(ArchDefaults {
        renderer,
        parser,
        stop,
    })
}

/// Fills the config's empty renderer and parser from `arch`, unless both are already set (an
/// explicit or inherited pair wins, as in Ollama), and sets the architecture's default `stop`
/// in `params` when the request gave none.
pub(crate) fn apply(arch: &str, config: &mut ConfigV2, params: &mut Map<String, Json>) {
    if !config.renderer.is_empty() && !config.parser.is_empty() {
        return;
    }
    let Some(d) = defaults(arch) else { return };
    if config.renderer.is_empty() {
        config.renderer = d.renderer.into();
    }
    if config.parser.is_empty() {
        config.parser = d.parser.into();
    }
    if !d.stop.is_empty() && !params.contains_key("stop") {
        params.insert(
            "stop".into(),
            Json::Array(d.stop.iter().map(|s| Json::from(*s)).collect()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(arch: &str, renderer: &str, parser: &str, params: Json) -> (String, String, Json) {
        let mut config = ConfigV2 {
            renderer: renderer.into(),
            parser: parser.into(),
            ..ConfigV2::default()
        };
        let mut params = params.as_object().cloned().unwrap_or_default();
        apply(arch, &mut config, &mut params);
        (config.renderer, config.parser, Json::Object(params))
    }

    #[test]
    fn architecture_defaults_table() {
        let nemo = ("nemotron-3-nano", "nemotron-3-nano");
        // arch, renderer, parser, request params -> (renderer, parser), params
        type Row = (
            &'static str,
            &'static str,
            &'static str,
            Json,
            (&'static str, &'static str),
            Json,
        );
        let table: &[Row] = &[
            (
                "gemma4",
                "",
                "",
                json!({}),
                ("gemma4", "gemma4"),
                json!({"stop": ["<turn|>"]}),
            ),
            (
                "gemma4",
                "",
                "",
                json!({"stop": ["x"], "top_k": 3}),
                ("gemma4", "gemma4"),
                json!({"stop": ["x"], "top_k": 3}),
            ),
            // Only the empty one is filled; the stop still comes with it.
            (
                "gemma4",
                "gemma4-large",
                "",
                json!({}),
                ("gemma4-large", "gemma4"),
                json!({"stop": ["<turn|>"]}),
            ),
            // Both set: nothing changes, not even the stop.
            (
                "gemma4",
                "qwen3-coder",
                "qwen3",
                json!({}),
                ("qwen3-coder", "qwen3"),
                json!({}),
            ),
            ("laguna", "", "", json!({}), ("laguna", "laguna"), json!({})),
            ("nemotron_h", "", "", json!({}), nemo, json!({})),
            ("nemotron_h_moe", "", "", json!({}), nemo, json!({})),
            ("nemotron_h_omni", "", "", json!({}), nemo, json!({})),
            ("llama", "", "", json!({}), ("", ""), json!({})),
            ("gemma3", "", "", json!({}), ("", ""), json!({})),
        ];
        for (arch, r, p, params, (wr, wp), wparams) in table {
            let got = run(arch, r, p, params.clone());
            assert_eq!(
                got,
                (wr.to_string(), wp.to_string(), wparams.clone()),
                "{arch} {r:?} {p:?} {params}"
            );
        }
    }
}
