//! Prompt rendering. Owns turning a chat or generate request into the exact prompt text, the way
//! Ollama does (DESIGN.md decision 7):
//!
//! - Models with a Modelfile TEMPLATE layer render with our Go `text/template` engine
//!   ([`gotmpl`]) and Ollama's rules ([`render`]): `.System` joined with blank lines, same-role
//!   messages merged, `{{ .Response }}` appended when neither `.Messages` nor `.Response` is
//!   used, legacy `.Prompt`/`.Response` templates run per turn and cut at `.Response`.
//! - Otherwise the GGUF `tokenizer.chat_template` renders with minijinja ([`jinja`]).
//!
//! Usage: parse once when the model is resolved (`Template::parse_go` / `Template::jinja`),
//! cache it (it is `Send + Sync`), then call [`render_chat`] / [`render_generate`] per request.
//! Capability helpers (`uses_tools`, `uses_suffix`, `thinking_tags`, `tool_call_tag`) feed
//! `/api/show` capabilities and the output parsers.
//!
//! ```
//! use server::prompt::{render_chat, Message, RenderRequest, Template};
//! let t = Template::parse_go("{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}<assistant>").unwrap();
//! let req = RenderRequest { messages: vec![Message::new("user", "hi")], ..Default::default() };
//! assert_eq!(render_chat(&t, &req).unwrap(), "<user>hi<assistant>");
//! ```
//!
//! Errors: `Template::parse_go` returns a [`TemplateError`] (line/col; Ollama answers 400
//! `template error: …` at create, 500 for a per-request `template`); `Template::jinja` fails with
//! `Error::BadRequest`; rendering failures (template exec errors, `raise_exception`) are
//! `Error::Internal` carrying the message, as Ollama answers 500.

mod caps;
pub mod gotmpl;
mod jinja;
pub mod parsers;
pub mod prefer;
pub mod render;
pub mod renderers;
mod values;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod render_tests;

pub use gotmpl::TemplateError;
pub use render::{
    collate, render_chat, render_generate, tag_images, GenerateRequest, Message, RenderRequest,
    Think, ToolCall,
};

use crate::error::{Error, Result};
use gotmpl::GoTemplate;
use jinja::JinjaChat;

/// Ollama's template for models without one.
pub const DEFAULT_TEMPLATE: &str = "{{ .Prompt }}";

/// A parsed Go template plus the identifiers it reads.
#[derive(Debug)]
pub struct GoChat {
    tmpl: GoTemplate,
    /// Lower-cased identifiers (Ollama's `Template.Vars`), computed once at parse.
    vars: Vec<String>,
}

/// A compiled prompt template, ready to render many requests.
#[derive(Debug)]
pub enum Template {
    /// A Modelfile TEMPLATE layer (Go `text/template`).
    Go(GoChat),
    /// A GGUF `tokenizer.chat_template` (Jinja).
    Jinja(JinjaChat),
    /// A built-in renderer (the model's config `renderer`, Ollama's `RENDERER`) for chats and
    /// generate prompts, beside the TEMPLATE layer (or `{{ .Prompt }}`), which Ollama still runs
    /// for suffix requests and reads capabilities from.
    Builtin(Builtin),
}

/// A named renderer and the Go template beside it.
pub struct Builtin {
    pub name: String,
    pub renderer: Box<dyn renderers::Renderer>,
    pub go: GoChat,
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin").field("name", &self.name).finish()
    }
}

impl Template {
    /// Parses a Go template the way Ollama's `template.Parse` does, including appending
    /// `{{ .Response }}` when the template reads neither `.Messages` nor `.Response`.
    /// The error carries line:col; Ollama reports it as `template error: ...` (create, 400) or a
    /// 500 (a per-request `template` on /api/generate) — the caller picks.
    pub fn parse_go(src: &str) -> std::result::Result<Template, TemplateError> {
        let mut tmpl = GoTemplate::parse(src)?;
        if let Some(pos) = tmpl.bare_template_call() {
            return Err(TemplateError::at(src, pos, "undefined template specified"));
        }
        let vars = tmpl.vars();
        if !vars.iter().any(|v| v == "messages" || v == "response") {
            tmpl.append_response();
        }
        let vars = tmpl.vars();
        Ok(Template::Go(GoChat { tmpl, vars }))
    }

    /// The error for a Go template that failed to parse, as the API answers it: `template
    /// error: …`, a 400 when a resource bound was hit (nesting), else a 500 as Ollama answers a
    /// bad per-request or stored template.
    pub fn parse_error(e: TemplateError) -> Error {
        if e.limit {
            Error::TemplateLimit(format!("template error: {e}"))
        } else {
            Error::Internal(format!("template error: {e}"))
        }
    }

    /// Renders a small sample chat (system, user, assistant, user, one tool) and a suffix
    /// request, failing only when a resource bound is hit: a template that exhausts the
    /// engine's budget on a four-message chat can never serve one, so /api/create refuses it
    /// (400) instead of storing a model whose every chat fails. Other render errors are left to
    /// request time (a template may legitimately reject the sample's shape).
    pub fn check_limits(&self) -> Result<()> {
        let tool = serde_json::json!({"type": "function", "function": {"name": "f",
            "description": "d", "parameters": {"type": "object",
            "properties": {"a": {"type": "string", "description": "a"}}, "required": ["a"]}}});
        let chat = RenderRequest {
            messages: vec![
                Message::new("system", "s"),
                Message::new("user", "u"),
                Message::new("assistant", "a"),
                Message::new("user", "u"),
            ],
            tools: vec![tool],
            think: None,
        };
        let suffix = GenerateRequest {
            prompt: "p".into(),
            suffix: "s".into(),
            ..Default::default()
        };
        for r in [render_chat(self, &chat), render_generate(self, &suffix)] {
            if let Err(e @ Error::TemplateLimit(_)) = r {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The renderer `name` (already [`renderers::resolve`]d) with the model's TEMPLATE layer
    /// beside it (`{{ .Prompt }}` when it has none). An unknown name fails as Ollama's render
    /// does (500 `unknown renderer "x"`).
    pub fn builtin(name: &str, go: Option<Template>) -> Result<Template> {
        let renderer = renderers::for_name(name)
            .ok_or_else(|| Error::Internal(format!("unknown renderer {name:?}")))?;
        let go = match go.unwrap_or_else(Template::default_go) {
            Template::Go(g) => g,
            _ => return Err(Error::Internal("a renderer's template must be Go".into())),
        };
        Ok(Template::Builtin(Builtin {
            name: name.to_string(),
            renderer,
            go,
        }))
    }

    /// `{{ .Prompt }}`: the template of models that have none.
    pub fn default_go() -> Template {
        Template::parse_go(DEFAULT_TEMPLATE).expect("default template parses")
    }

    /// Compiles a GGUF Jinja chat template; `bos`/`eos` are the token strings the template
    /// may reference as `bos_token`/`eos_token`.
    pub fn jinja(src: String, bos: String, eos: String) -> Result<Template> {
        JinjaChat::new(src, bos, eos)
            .map(Template::Jinja)
            .map_err(|e| Error::BadRequest(format!("invalid chat template: {e}")))
    }

    /// Whether the template can render tools (`tools` capability).
    pub fn uses_tools(&self) -> bool {
        match self {
            Template::Go(g) | Template::Builtin(Builtin { go: g, .. }) => {
                g.vars.iter().any(|v| v == "tools")
            }
            Template::Jinja(j) => caps::jinja_uses_tools(j.source()),
        }
    }

    /// Whether the template reads `.Suffix` (`insert` capability). Never for Jinja.
    pub fn uses_suffix(&self) -> bool {
        match self {
            Template::Go(g) | Template::Builtin(Builtin { go: g, .. }) => {
                g.vars.iter().any(|v| v == "suffix")
            }
            Template::Jinja(_) => false,
        }
    }

    /// The thinking open/close tags (`thinking` capability when present): inferred from the
    /// text around `.Thinking` for Go templates, `<think>`/`</think>` for Jinja ones that use them.
    pub fn thinking_tags(&self) -> Option<(String, String)> {
        match self {
            Template::Go(g) | Template::Builtin(Builtin { go: g, .. }) => {
                caps::thinking_tags(&g.tmpl)
            }
            Template::Jinja(j) => {
                caps::jinja_thinks(j.source()).then(|| ("<think>".into(), "</think>".into()))
            }
        }
    }

    /// The text that starts a tool call in model output (Go templates; `{` when unknown).
    pub fn tool_call_tag(&self) -> String {
        match self {
            Template::Go(g) | Template::Builtin(Builtin { go: g, .. }) => {
                caps::tool_call_tag(&g.tmpl)
            }
            Template::Jinja(_) => "{".into(),
        }
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        match self {
            Template::Go(g) | Template::Builtin(Builtin { go: g, .. }) => g.tmpl.source(),
            Template::Jinja(j) => j.source(),
        }
    }
}
