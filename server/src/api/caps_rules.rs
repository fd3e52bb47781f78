//! The last two steps of Ollama's capability list (`server/images.go`), decided from the config
//! alone: `modelFamilyCapabilities` (a gpt-oss family model thinks, whatever its template says)
//! and `filterUnsupportedCapabilities` (vision and audio withheld where Ollama's runners cannot
//! serve them: Gemma 4 and Nemotron 3 Nano safetensors models, glimmer safetensors audio, and
//! Nemotron Omni audio). Pure, table-tested.

use crate::create::ConfigV2;

/// Applies both steps to `caps` (already in Ollama's order). `safetensors`: the model's weights
/// are tensor layers, not a GGUF; `arch`: the GGUF's `general.architecture`.
pub fn finish(caps: &mut Vec<String>, config: &ConfigV2, safetensors: bool, arch: Option<&str>) {
    if matches!(config.model_family.as_str(), "gptoss" | "gpt-oss")
        && !caps.iter().any(|c| c == "thinking")
    {
        caps.push("thinking".into());
    }
    let gemma4 = matches!(
        config.renderer.as_str(),
        "gemma4" | "gemma4-small" | "gemma4-large"
    );
    let omni = |f: &str| f == "nemotron_h_omni";
    let families = config.model_families.as_deref().unwrap_or_default();
    let family_omni = omni(&config.model_family) || families.iter().any(|f| omni(f));
    let nemotron_st = safetensors
        && (config.parser == "nemotron-3-nano"
            || config.renderer == "nemotron-3-nano"
            || family_omni);
    let no_audio = (safetensors && (gemma4 || config.renderer == "glimmer"))
        || nemotron_st
        || arch.is_some_and(omni)
        || family_omni;
    let no_vision = (gemma4 && safetensors) || nemotron_st;
    caps.retain(|c| !(no_audio && c == "audio" || no_vision && c == "vision"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(family: &str, renderer: &str, parser: &str) -> ConfigV2 {
        ConfigV2 {
            model_family: family.into(),
            renderer: renderer.into(),
            parser: parser.into(),
            ..ConfigV2::default()
        }
    }

    #[test]
    fn family_and_suppression_table() {
        let all: &'static [&'static str] = &["completion", "vision", "audio"];
        // name, config, safetensors, arch, capabilities before -> after
        type Row = (
            &'static str,
            ConfigV2,
            bool,
            Option<&'static str>,
            &'static [&'static str],
            &'static [&'static str],
        );
        let table: &[Row] = &[
            (
                "gpt-oss family thinks",
                cfg("gptoss", "", ""),
                false,
                Some("gptoss"),
                &["completion"],
                &["completion", "thinking"],
            ),
            (
                "gpt-oss spelled with a dash",
                cfg("gpt-oss", "", ""),
                false,
                None,
                &["completion", "thinking"],
                &["completion", "thinking"],
            ),
            (
                "gemma4 safetensors: no vision or audio",
                cfg("", "gemma4", ""),
                true,
                None,
                all,
                &["completion"],
            ),
            (
                "gemma4-large safetensors",
                cfg("", "gemma4-large", ""),
                true,
                None,
                all,
                &["completion"],
            ),
            (
                "gemma4 gguf keeps both",
                cfg("", "gemma4", "gemma4"),
                false,
                Some("gemma4"),
                all,
                all,
            ),
            (
                "glimmer safetensors: no audio",
                cfg("", "glimmer", ""),
                true,
                None,
                all,
                &["completion", "vision"],
            ),
            (
                "glimmer gguf keeps audio",
                cfg("", "glimmer", ""),
                false,
                None,
                all,
                all,
            ),
            (
                "nemotron nano safetensors: text only",
                cfg("", "", "nemotron-3-nano"),
                true,
                None,
                all,
                &["completion"],
            ),
            (
                "nemotron omni gguf: no audio",
                cfg("", "", ""),
                false,
                Some("nemotron_h_omni"),
                all,
                &["completion", "vision"],
            ),
            (
                "nemotron omni family: no audio",
                cfg("nemotron_h_omni", "", ""),
                false,
                None,
                all,
                &["completion", "vision"],
            ),
            (
                "nemotron nano gguf keeps vision",
                cfg("", "nemotron-3-nano", ""),
                false,
                Some("nemotron_h"),
                all,
                all,
            ),
            (
                "others untouched",
                cfg("llama", "", ""),
                true,
                None,
                all,
                all,
            ),
        ];
        for (name, config, st, arch, have, want) in table {
            let mut caps: Vec<String> = have.iter().map(|s| s.to_string()).collect();
            finish(&mut caps, config, *st, *arch);
            assert_eq!(caps, *want, "{name}");
        }
        let mut families = cfg("", "", "");
        families.model_families = Some(vec!["nemotron_h_omni".into()]);
        let mut caps: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        finish(&mut caps, &families, true, None);
        assert_eq!(caps, ["completion"], "omni in families, safetensors");
    }
}
