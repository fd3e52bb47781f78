//! What `/api/show` (and the details of `/api/tags`) say about a stored model: the manifest's
//! layers read into a `ModelView`, the config blob, the GGUF metadata, and Ollama's text
//! renderings of them — the generated Modelfile, the `parameters` lines (`%-30s %#v`) and the
//! capability list. Blocking file I/O: call from `spawn_blocking`.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::create::{ConfigV2, Message};
use crate::error::{Error, Result};
use crate::gguf::{self, GgufFile, ReadOptions};
pub use crate::modelfile::quote;
use crate::prompt::prefer::{go_template_renders, jinja_caps, GoTemplate};
use crate::store::{ManifestEntry, Store};

const MT: &str = "application/vnd.ollama.image.";
/// Ollama's template when a model has none.
pub const DEFAULT_TEMPLATE: &str = "{{ .Prompt }}";
/// Text layers (template, system, license, params, messages) are small; refuse absurd ones.
const MAX_TEXT_LAYER: u64 = 16 << 20;

/// Ollama's `details` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelDetails {
    pub parent_model: String,
    pub format: String,
    pub family: String,
    pub families: Option<Vec<String>>,
    pub parameter_size: String,
    pub quantization_level: String,
}

/// A stored model's layers, read.
#[derive(Debug, Clone, Default)]
pub struct ModelView {
    pub config: ConfigV2,
    pub model_path: Option<PathBuf>,
    pub parent_model: String,
    pub projector_paths: Vec<PathBuf>,
    pub adapter_paths: Vec<PathBuf>,
    /// The draft model (the last `draft` layer, as Ollama's `GetModel` takes it), loaded
    /// beside the model for speculative decoding.
    pub draft_path: Option<PathBuf>,
    /// That layer's size in bytes (the draft's weights, for memory estimates).
    pub draft_size: u64,
    /// The TEMPLATE (or legacy `prompt`) layer, if any.
    pub template: Option<String>,
    pub system: String,
    pub licenses: Vec<String>,
    /// The params layer, in its JSON order.
    pub options: Map<String, Json>,
    pub messages: Vec<Message>,
    /// Safetensors models: the `tensor` layers, in manifest order.
    pub tensor_layers: Vec<NamedBlob>,
    /// Safetensors models: the `json` layers (config.json, tokenizer.json, …).
    pub json_layers: Vec<NamedBlob>,
    /// `OLLAMA_GO_TEMPLATE`, which decides with the layers whether the TEMPLATE renders.
    pub go_template_mode: GoTemplate,
}

/// A layer that carries a `name` (Ollama's MLX `tensor` and `json` layers).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedBlob {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
}

impl ModelView {
    /// The layers of `entry`; `mode` is the server's `OLLAMA_GO_TEMPLATE`.
    pub fn load(store: &Store, entry: &ManifestEntry, mode: GoTemplate) -> Result<ModelView> {
        let blobs = store.blobs();
        let mut view = ModelView {
            go_template_mode: mode,
            ..ModelView::default()
        };
        let config = &entry.manifest.config;
        if blobs.exists(&config.digest) {
            let bytes = read_text_layer(&blobs.path(&config.digest), config.size)?;
            view.config = serde_json::from_slice(&bytes).unwrap_or_default();
        }
        for layer in &entry.manifest.layers {
            let path = blobs.path(&layer.digest);
            let kind = layer.media_type.strip_prefix(MT).unwrap_or("");
            match kind {
                // The first model layer is the model; Ollama ignores any later one.
                "model" if view.model_path.is_none() => {
                    view.model_path = Some(path);
                    view.parent_model = layer.from.clone().unwrap_or_default();
                }
                "projector" => view.projector_paths.push(path),
                "tensor" | "json" => {
                    let named = NamedBlob {
                        name: layer.name.clone().unwrap_or_default(),
                        path,
                        size: layer.size,
                    };
                    if kind == "tensor" {
                        view.tensor_layers.push(named);
                    } else {
                        view.json_layers.push(named);
                    }
                }
                "adapter" => view.adapter_paths.push(path),
                "draft" => {
                    view.draft_path = Some(path);
                    view.draft_size = layer.size;
                }
                "template" | "prompt" => view.template = Some(read_string(&path, layer.size)?),
                "system" => view.system = read_string(&path, layer.size)?,
                "license" => view.licenses.push(read_string(&path, layer.size)?),
                "params" => {
                    let bytes = read_text_layer(&path, layer.size)?;
                    view.options = serde_json::from_slice(&bytes).map_err(|e| {
                        Error::InvalidManifest(format!("params layer {}: {e}", layer.digest))
                    })?;
                }
                "messages" => {
                    let bytes = read_text_layer(&path, layer.size)?;
                    view.messages = serde_json::from_slice(&bytes).map_err(|e| {
                        Error::InvalidManifest(format!("messages layer {}: {e}", layer.digest))
                    })?;
                }
                _ => {}
            }
        }
        Ok(view)
    }

    /// A safetensors (MLX) model: its config says so, or it has tensor layers and no GGUF.
    pub fn is_safetensors(&self) -> bool {
        self.config.model_format == "safetensors"
            || (self.model_path.is_none() && !self.tensor_layers.is_empty())
    }

    /// The GGUF metadata of the model layer (`None` for non-GGUF models).
    pub fn gguf(&self, full_arrays: bool) -> Result<Option<GgufFile>> {
        let Some(path) = &self.model_path else {
            return Ok(None);
        };
        if !self.config.model_format.is_empty() && self.config.model_format != "gguf" {
            return Ok(None);
        }
        gguf::read_path(path, ReadOptions { full_arrays }).map(Some)
    }

    /// `details`: the config blob's fields; a GGUF fills what the config leaves empty.
    pub fn details(&self, gguf: Option<&GgufFile>) -> ModelDetails {
        let c = &self.config;
        let mut d = ModelDetails {
            parent_model: self.parent_model.clone(),
            format: c.model_format.clone(),
            family: c.model_family.clone(),
            families: c.model_families.clone(),
            parameter_size: c.model_type.clone(),
            quantization_level: c.file_type.clone(),
        };
        if let Some(g) = gguf {
            let gd = g.details();
            if d.format.is_empty() {
                d.format = gd.format;
            }
            if d.family.is_empty() {
                d.family = gd.family;
            }
            if d.families.is_none() {
                d.families = Some(gd.families);
            }
            if d.parameter_size.is_empty() {
                d.parameter_size = gd.parameter_size;
            }
            if d.quantization_level.is_empty()
                || d.quantization_level.eq_ignore_ascii_case("unknown")
            {
                d.quantization_level = gd.quantization_level;
            }
        }
        d
    }

    /// The TEMPLATE layer, else the default.
    pub fn go_template(&self) -> &str {
        self.template.as_deref().unwrap_or(DEFAULT_TEMPLATE)
    }

    /// Ollama's generated Modelfile (`GetModelInfo` + `Model.String`). Parameters are written in
    /// key order so the output is stable (Ollama iterates a Go map).
    pub fn modelfile(&self, short_name: &str) -> String {
        let mut out = String::from("# Modelfile generated by \"ollama show\"\n");
        out.push_str("# To build a new Modelfile based on this, replace FROM with:\n");
        out.push_str(&format!("# FROM {short_name}\n\n"));
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        if let Some(p) = &self.model_path {
            line(format!("FROM {}", p.display()));
        }
        for a in &self.adapter_paths {
            line(format!("ADAPTER {}", quote(&a.display().to_string())));
        }
        if let Some(d) = &self.draft_path {
            line(format!("DRAFT {}", quote(&d.display().to_string())));
        }
        for p in &self.projector_paths {
            line(format!("FROM {}", p.display()));
        }
        line(format!("TEMPLATE {}", quote(self.go_template())));
        if !self.system.is_empty() {
            line(format!("SYSTEM {}", quote(&self.system)));
        }
        if !self.config.renderer.is_empty() {
            line(format!("RENDERER {}", quote(&self.config.renderer)));
        }
        if !self.config.parser.is_empty() {
            line(format!("PARSER {}", quote(&self.config.parser)));
        }
        for (k, v) in sorted(&self.options) {
            for item in flatten(v) {
                line(format!("PARAMETER {k} {}", quote(&go_v(item))));
            }
        }
        for l in &self.licenses {
            line(format!("LICENSE {}", quote(l)));
        }
        for m in &self.messages {
            line(format!("MESSAGE {} {}", m.role, quote(&m.content)));
        }
        out
    }

    /// `parameters`: one `%-30s %#v` line per value (arrays give one line per element).
    pub fn parameters(&self) -> String {
        let mut lines = Vec::new();
        for (k, v) in sorted(&self.options) {
            for item in flatten(v) {
                lines.push(format!("{k:<30} {}", go_sharp_v(item)));
            }
        }
        lines.join("\n")
    }

    /// Whether the TEMPLATE layer renders this model's prompts (Ollama's `shouldUseGoTemplate`):
    /// false without one; else `OLLAMA_GO_TEMPLATE` decides, and when it is unset the GGUF chat
    /// template renders instead if it offers more (`PreferChatTemplate`, `crate::prompt::prefer`).
    pub fn go_template_renders(&self, gguf: Option<&GgufFile>) -> bool {
        match self.template.as_deref() {
            Some(src) => {
                let go = crate::prompt::Template::parse_go(src);
                self.renders_parsed(gguf, go.as_ref().ok())
            }
            None => false,
        }
    }

    /// [`Self::go_template_renders`] for a present TEMPLATE layer already parsed (`None`: it
    /// does not parse, and only the variable can set it aside). The GGUF template never
    /// replaces it beside a renderer or parser, or for a harmony template: those always
    /// render through Ollama's own code, which reads the TEMPLATE.
    pub fn renders_parsed(
        &self,
        gguf: Option<&GgufFile>,
        go: Option<&crate::prompt::Template>,
    ) -> bool {
        let jinja = gguf
            .and_then(GgufFile::chat_template)
            .filter(|j| !j.is_empty());
        let replaceable = jinja.is_some()
            && self.config.renderer.is_empty()
            && self.config.parser.is_empty()
            && !go
                .is_some_and(|g| crate::prompt::parsers::is_harmony(g, &self.config.model_family));
        go_template_renders(self.go_template_mode, replaceable, || match (jinja, go) {
            (Some(j), Some(g)) => crate::prompt::prefer::prefer_chat_template(j, g),
            _ => false,
        })
    }

    /// Ollama's capability list: config-declared, then the GGUF chat template's (only when no
    /// TEMPLATE layer takes precedence), the GGUF base set, then the TEMPLATE layer's.
    pub fn capabilities(&self, gguf: Option<&GgufFile>) -> Vec<String> {
        let mut caps: Vec<String> = Vec::new();
        let mut add = |c: &str| {
            if !caps.iter().any(|x| x == c) {
                caps.push(c.to_owned());
            }
        };
        for c in &self.config.capabilities {
            add(c);
        }
        // A renderer or parser prompts and parses the model itself: the Jinja template's
        // mentions of tools and thinking say nothing then (Ollama's usesOllamaRenderedChat).
        let ollama_rendered = !self.config.renderer.is_empty() || !self.config.parser.is_empty();
        if self.is_safetensors() {
            // Ollama's create stores `completion` (and tools/thinking) in the config; a manifest
            // without them is still a text model. The Jinja template adds what it mentions.
            add("completion");
            if self.template.is_none() && !ollama_rendered {
                if let Ok(Some(t)) = crate::mlx::view::chat_template(self) {
                    if t.contains("tools") || t.contains("tool_call") {
                        add("tools");
                    }
                    if t.contains("<think>") && t.contains("</think>") {
                        add("thinking");
                    }
                }
            }
        }
        // The TEMPLATE layer, parsed once for the preference and for its own capabilities.
        let go = self
            .template
            .as_deref()
            .map(crate::prompt::Template::parse_go);
        let renders_go = match &go {
            Some(parsed) => self.renders_parsed(gguf, parsed.as_ref().ok()),
            None => false,
        };
        if let Some(g) = gguf {
            if !renders_go && !ollama_rendered {
                // Ollama's chatTemplateCapabilities (thinking also from a `split('</think>')`).
                for c in g.chat_template().map(jinja_caps).unwrap_or_default() {
                    add(c);
                }
            }
            for c in g.capabilities() {
                add(c);
            }
        }
        if let Some(parsed) = go.filter(|_| renders_go) {
            // Ollama's rules: the identifiers the Go template reads, and thinking tags inferred
            // around `.Thinking` inside `range .Messages`. A broken template adds nothing.
            match parsed {
                Ok(tpl) => {
                    if tpl.uses_tools() {
                        add("tools");
                    }
                    if tpl.uses_suffix() {
                        add("insert");
                    }
                    // Ollama checks projector layers after tools/insert, before thinking.
                    if !self.projector_paths.is_empty() {
                        add("vision");
                    }
                    if tpl.thinking_tags().is_some() {
                        add("thinking");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "model template contains errors"),
            }
        }
        if !self.projector_paths.is_empty() {
            add("vision");
        }
        // Then what the named parser supports (Ollama's parserCapabilities).
        if let Some(s) = crate::prompt::parsers::support(&self.config.parser) {
            if s.tools {
                add("tools");
            }
            if s.thinking {
                add("thinking");
            }
        }
        super::caps_rules::finish(
            &mut caps,
            &self.config,
            self.is_safetensors(),
            gguf.and_then(|g| g.architecture()),
        );
        caps
    }
}

fn read_string(path: &std::path::Path, size: u64) -> Result<String> {
    let bytes = read_text_layer(path, size)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn read_text_layer(path: &std::path::Path, size: u64) -> Result<Vec<u8>> {
    if size > MAX_TEXT_LAYER {
        return Err(Error::InvalidManifest(format!(
            "text layer of {size} bytes exceeds {MAX_TEXT_LAYER}"
        )));
    }
    Ok(std::fs::read(path)?)
}

fn sorted(map: &Map<String, Json>) -> Vec<(&String, &Json)> {
    let mut v: Vec<_> = map.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

fn flatten(v: &Json) -> Vec<&Json> {
    match v {
        Json::Array(items) => items.iter().collect(),
        v => vec![v],
    }
}

/// Go's `%v` of a JSON-decoded value (numbers are float64 in Go).
pub fn go_v(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Json::Bool(b) => b.to_string(),
        Json::Null => "<nil>".to_owned(),
        other => other.to_string(),
    }
}

/// Go's `%#v` of a JSON-decoded value: strings Go-quoted, numbers as float64.
pub fn go_sharp_v(v: &Json) -> String {
    match v {
        Json::String(s) => go_quote(s),
        other => go_v(other),
    }
}

/// Go's float `%v` and `strconv.Quote`: one implementation, the Go template engine's.
pub use crate::prompt::gotmpl::{format_float_g as go_float, go_quote};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_formatting() {
        let cases = [
            (json!("<|im_end|>"), "\"<|im_end|>\""),
            (json!("a\"b\\c\nd\te"), "\"a\\\"b\\\\c\\nd\\te\""),
            (json!("\u{1}"), "\"\\x01\""),
            (json!("héllo"), "\"héllo\""),
            (json!(0.7), "0.7"),
            (json!(1.0), "1"),
            (json!(40), "40"),
            (json!(4096), "4096"),
            (json!(100000), "100000"),
            (json!(1000000), "1e+06"),
            (json!(1.5e6), "1.5e+06"),
            (json!(0.0001), "0.0001"),
            (json!(0.00001), "1e-05"),
            (json!(-1), "-1"),
            (json!(true), "true"),
        ];
        for (v, want) in cases {
            assert_eq!(go_sharp_v(&v), want, "{v}");
        }
        assert_eq!(go_v(&json!("<|im_end|>")), "<|im_end|>");
    }

    #[test]
    fn modelfile_quoting() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("two\nlines"), "\"two\nlines\"");
        assert_eq!(quote(" edge"), "\" edge\"");
        assert_eq!(quote("say \"hi\"\nok"), "\"\"\"say \"hi\"\nok\"\"\"");
    }

    #[test]
    fn parameters_and_modelfile() {
        let mut v = ModelView {
            model_path: Some(PathBuf::from("/m/blobs/sha256-abc")),
            draft_path: Some(PathBuf::from("/m/blobs/sha256-def")),
            template: Some("{{ .System }} {{ .Prompt }}".into()),
            system: "You are\nhelpful.".into(),
            licenses: vec!["MIT".into()],
            messages: vec![Message {
                role: "user".into(),
                content: "hi".into(),
                ..Message::default()
            }],
            ..ModelView::default()
        };
        v.options = serde_json::from_value(json!({
            "temperature": 0.7,
            "stop": ["<|im_end|>", "<|im_start|>"],
            "num_ctx": 4096
        }))
        .unwrap();
        assert_eq!(
            v.parameters(),
            format!(
                "{:<30} 4096\n{:<30} \"<|im_end|>\"\n{:<30} \"<|im_start|>\"\n{:<30} 0.7",
                "num_ctx", "stop", "stop", "temperature"
            )
        );
        let mf = v.modelfile("m:latest");
        assert_eq!(
            mf,
            "# Modelfile generated by \"ollama show\"\n\
             # To build a new Modelfile based on this, replace FROM with:\n\
             # FROM m:latest\n\n\
             FROM /m/blobs/sha256-abc\n\
             DRAFT /m/blobs/sha256-def\n\
             TEMPLATE {{ .System }} {{ .Prompt }}\n\
             SYSTEM \"You are\nhelpful.\"\n\
             PARAMETER num_ctx 4096\n\
             PARAMETER stop <|im_end|>\n\
             PARAMETER stop <|im_start|>\n\
             PARAMETER temperature 0.7\n\
             LICENSE MIT\n\
             MESSAGE user hi\n"
        );
    }

    #[test]
    fn template_capabilities() {
        let v = ModelView {
            template: Some(
                "{{ if .Tools }}T{{ end }}{{ .Suffix }}{{ range .Messages }}<think>{{ .Thinking }}</think>{{ end }}"
                    .into(),
            ),
            ..ModelView::default()
        };
        assert_eq!(v.capabilities(None), vec!["tools", "insert", "thinking"]);
        // `.Thinking` outside `range .Messages` infers no tags (Ollama's InferTags).
        let v = ModelView {
            template: Some("{{ .Thinking }}{{ .Prompt }}".into()),
            ..ModelView::default()
        };
        assert!(v.capabilities(None).is_empty());
        let broken = ModelView {
            template: Some("{{ .Tools ".into()),
            ..ModelView::default()
        };
        assert!(broken.capabilities(None).is_empty());
        let v = ModelView::default();
        assert!(v.capabilities(None).is_empty());
        assert_eq!(v.go_template(), DEFAULT_TEMPLATE);
        // A gpt-oss model thinks whatever its template shows.
        let mut v = ModelView {
            template: Some("{{ if .Tools }}T{{ end }}{{ .Prompt }}".into()),
            ..ModelView::default()
        };
        for (family, want) in [
            ("gptoss", vec!["tools", "thinking"]),
            ("gpt-oss", vec!["tools", "thinking"]),
            ("llama", vec!["tools"]),
        ] {
            v.config.model_family = family.into();
            assert_eq!(v.capabilities(None), want, "{family}");
        }
    }
}
