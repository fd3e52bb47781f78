//! Ollama's prompt-rendering rules on top of the engines: image markers, same-role message
//! merging, `.System` joining, the modern (`.Messages`) and legacy (`.Prompt`/`.Response`,
//! executed per turn and cut at `.Response` on the last) Go paths, suffix (insert) requests, and
//! dispatch to the Jinja path for GGUF chat templates.

use serde_json::Map;
use std::collections::BTreeMap;

use super::gotmpl::{TemplateError, Value};
use super::{values, Template};
use crate::error::{Error, Result};

/// One function call made by the assistant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub index: i64,
    pub name: String,
    /// Arguments in the client's key order (Go templates see them sorted, as Ollama does).
    pub arguments: Map<String, serde_json::Value>,
}

/// A chat message as the renderer needs it (independent of the HTTP wire types).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: String,
    pub thinking: Option<String>,
    /// Number of images attached; each gets an `[img-N]` marker in `content`.
    pub images: usize,
    pub tool_calls: Vec<ToolCall>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }
}

/// The request's `think` field: a bool or a level (`low|medium|high|max`).
#[derive(Debug, Clone, PartialEq)]
pub enum Think {
    Bool(bool),
    Level(String),
}

impl Think {
    /// Ollama's `ThinkValue.Bool()`: levels count as on only when they are known ones.
    pub fn enabled(&self) -> bool {
        match self {
            Think::Bool(b) => *b,
            Think::Level(l) => matches!(l.as_str(), "high" | "medium" | "low" | "max"),
        }
    }

    /// Ollama's `ThinkValue.String()`: `true` reads as "medium", `false` as "".
    pub fn level(&self) -> String {
        match self {
            Think::Bool(true) => "medium".into(),
            Think::Bool(false) => String::new(),
            Think::Level(l) => l.clone(),
        }
    }
}

/// Everything a chat render needs. Messages are final: Modelfile MESSAGEs and SYSTEM already
/// layered in by the caller.
#[derive(Debug, Clone, Default)]
pub struct RenderRequest {
    pub messages: Vec<Message>,
    /// Tools as the client sent them (`{type, function:{name, description, parameters}}`).
    pub tools: Vec<serde_json::Value>,
    pub think: Option<Think>,
}

/// A `/api/generate` render (not raw).
#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    pub prompt: String,
    pub suffix: String,
    /// The request's `system`, else the model's SYSTEM layer ("" for none).
    pub system: String,
    /// The model's Modelfile MESSAGEs (the caller omits them when `context` is given).
    pub messages: Vec<Message>,
    pub images: usize,
    pub think: Option<Think>,
    /// An assistant message after the prompt that the response continues (the two-pass
    /// format flow re-renders with the parsed thinking here).
    pub prefill: Option<Message>,
}

/// Execution errors are 500s as in Ollama, except resource bounds: those are the request's
/// doing (its template or its size) and answer 400.
fn exec_err(e: TemplateError) -> Error {
    if e.limit {
        Error::TemplateLimit(e.to_string())
    } else {
        Error::Internal(e.to_string())
    }
}

/// Renders a chat prompt. Images become `[img-N]` markers (numbered across the conversation,
/// prefixed to the content, or replacing literal `[img]` placeholders in order).
pub fn render_chat(t: &Template, req: &RenderRequest) -> Result<String> {
    match t {
        // Renderers see the messages as sent and place their own image markers.
        Template::Builtin(b) => b
            .renderer
            .render(&req.messages, &req.tools, req.think.as_ref()),
        Template::Go(g) => {
            let messages = tag_images(&req.messages);
            let d = think_values(&req.think);
            let (system, collated) = collate(&messages);
            if !g.vars.iter().any(|v| v == "messages") {
                return legacy(g, &collated, &d);
            }
            let mut data = d;
            data.insert("System".into(), Value::str(system));
            data.insert(
                "Messages".into(),
                Value::list(collated.iter().map(values::message).collect()),
            );
            data.insert("Tools".into(), values::tools(&req.tools));
            data.insert("Response".into(), Value::str(""));
            g.tmpl.execute(&Value::map(data)).map_err(exec_err)
        }
        Template::Jinja(j) => j.render(&tag_images(&req.messages), &req.tools, req.think.as_ref()),
    }
}

/// Renders a generate prompt: suffix requests run the template with `.Prompt`/`.Suffix`;
/// otherwise it is a chat of [system], Modelfile messages, and the user prompt.
pub fn render_generate(t: &Template, req: &GenerateRequest) -> Result<String> {
    if let Template::Go(g) | Template::Builtin(super::Builtin { go: g, .. }) = t {
        if !req.prompt.is_empty() && !req.suffix.is_empty() {
            let mut data = think_values(&req.think);
            data.insert("Prompt".into(), Value::str(req.prompt.as_str()));
            data.insert("Suffix".into(), Value::str(req.suffix.as_str()));
            data.insert("Response".into(), Value::str(""));
            return g.tmpl.execute(&Value::map(data)).map_err(exec_err);
        }
    }
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(Message::new("system", &req.system));
    }
    messages.extend(req.messages.iter().cloned());
    messages.push(Message {
        images: req.images,
        ..Message::new("user", &req.prompt)
    });
    messages.extend(req.prefill.iter().cloned());
    render_chat(
        t,
        &RenderRequest {
            messages,
            tools: Vec::new(),
            think: req.think.clone(),
        },
    )
}

fn think_values(think: &Option<Think>) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    m.insert(
        "Think".into(),
        Value::Bool(think.as_ref().is_some_and(Think::enabled)),
    );
    m.insert(
        "ThinkLevel".into(),
        Value::str(think.as_ref().map(Think::level).unwrap_or_default()),
    );
    m.insert("IsThinkSet".into(), Value::Bool(think.is_some()));
    m
}

/// Ollama's `imageTaggedMessages`: image N (0-based across the conversation) becomes
/// `[img-N]`, replacing the next literal `[img]` or else prefixed to the content.
pub fn tag_images(msgs: &[Message]) -> Vec<Message> {
    let mut next = 0;
    msgs.iter()
        .map(|m| {
            let mut m = m.clone();
            let mut prefix = String::new();
            for _ in 0..m.images {
                let tag = format!("[img-{next}]");
                next += 1;
                if m.content.contains("[img]") {
                    m.content = m.content.replacen("[img]", &tag, 1);
                } else {
                    prefix.push_str(&tag);
                }
            }
            m.content.insert_str(0, &prefix);
            m
        })
        .collect()
}

/// Ollama's `collate`: all system contents joined with a blank line, and consecutive messages of
/// the same role (other than `tool`) merged into one with "\n\n" between contents.
pub fn collate(msgs: &[Message]) -> (String, Vec<Message>) {
    let mut system = Vec::new();
    let mut out: Vec<Message> = Vec::new();
    for m in msgs {
        if m.role == "system" {
            system.push(m.content.as_str());
        }
        match out.last_mut() {
            Some(last) if last.role == m.role && m.role != "tool" => {
                last.content.push_str("\n\n");
                last.content.push_str(&m.content);
            }
            _ => out.push(m.clone()),
        }
    }
    (system.join("\n\n"), out)
}

/// The legacy path: one execution per system/user/assistant triple with `.System .Prompt
/// .Response`; the final (pending) turn runs the template cut after `.Response`, so the prompt
/// ends where the model's answer begins.
fn legacy(g: &super::GoChat, msgs: &[Message], think: &BTreeMap<String, Value>) -> Result<String> {
    let mut out = String::new();
    let (mut system, mut prompt, mut response) = (String::new(), String::new(), String::new());
    let data = |system: &str, prompt: &str, response: &str| {
        let mut d = think.clone();
        d.insert("System".into(), Value::str(system));
        d.insert("Prompt".into(), Value::str(prompt));
        d.insert("Response".into(), Value::str(response));
        Value::map(d)
    };
    for m in msgs {
        let flush = match m.role.as_str() {
            "system" => !prompt.is_empty() || !response.is_empty(),
            "user" => !response.is_empty(),
            _ => false,
        };
        if flush {
            out.push_str(
                &g.tmpl
                    .execute(&data(&system, &prompt, &response))
                    .map_err(exec_err)?,
            );
            system.clear();
            prompt.clear();
            response.clear();
        }
        match m.role.as_str() {
            "system" => system = m.content.clone(),
            "user" => prompt = m.content.clone(),
            "assistant" => response = m.content.clone(),
            _ => {}
        }
    }
    let cut = g.tmpl.root_cut_at_response();
    out.push_str(
        &g.tmpl
            .execute_nodes(&cut, &data(&system, &prompt, &response))
            .map_err(exec_err)?,
    );
    Ok(out)
}
