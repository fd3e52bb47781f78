//! The `glimmer` renderer (Ollama's `GlimmerRenderer`): `<|begin_of_text|>`, then messages as
//! `<|start|>header<|message|>body` ended by `<|eot|>` (end of turn) or `<|eom|>` (end of
//! message), a system message carrying the date, the reasoning strength, the tools in JSONSchema
//! form and the valid recipients, and assistant messages addressed `to=self` (thinking),
//! `to=user` (answers) or `to=tool` (calls as `<atem:function_calls>` XML) — the format the
//! `glimmer` parser reads back.
//!
//! Rules (Ollama's, reproduced byte for byte):
//! - without any system message a default one comes first, with the knowledge cutoff and today's
//!   date (herd's clock in UTC; Go uses the server's local time); every system message prints
//!   the reasoning strength (unless its text already names one; "Reasoning effort" is renamed),
//!   the tool definitions and the recipients: `self`, each tool namespace (the name up to its
//!   first `.`) as `ns.*`, and `user`;
//! - the reasoning strength is `high` with `think` unset or true, `none` when off, else the level;
//! - images become `[img-N]` tags numbered across the conversation (every role's images count);
//! - an assistant message prints its thinking as a `to=self` message, then each call as a
//!   `to=name` message (the last ends the turn unless the next message is also the assistant's),
//!   or else its content `to=user` (also when it has neither thinking nor content);
//! - a tool result is headed by its `tool_name`, else by the name of the call whose id it
//!   carries, else by that id;
//! - JSON is Go's encoder without HTML escaping, with a space after `:` and `,` (Transformers'
//!   `tojson`); call arguments print strings bare, numbers and booleans as Go's `%v`, null as
//!   `null`, maps and arrays as that JSON;
//! - the prompt ends with `<|start|>assistant`; roles other than system/user/assistant/tool print
//!   nothing.

use serde_json::Value as J;

use super::{image_tags, json, Renderer};
use crate::error::Result;
use crate::prompt::gotmpl::format_float_g;
use crate::prompt::{Message, Think, ToolCall};

/// `glimmer`; `date` fixes "Current date" (today when `None`).
pub struct Glimmer {
    pub date: Option<String>,
}

const BOS: &str = "<|begin_of_text|>";
const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const EOM: &str = "<|eom|>";
const EOT: &str = "<|eot|>";
const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant.";
const KNOWLEDGE_CUTOFF: &str = "2026-01-04";

const TOOLS_PREFIX: &str = "In this environment you have access to a set of tools you can use to answer the user's question.\n\nYou can invoke a function by writing a \"<atem:function_calls>\" block like the following:\n<atem:function_calls>\n<atem:invoke name=\"$FUNCTION_NAME\">\n<atem:parameter name=\"$PARAMETER_NAME\">$PARAMETER_VALUE</atem:parameter>\n...\n</atem:invoke>\n</atem:function_calls>\n\nString and scalar parameters should be specified as is, while lists and objects should use JSON format. Note that spaces for string values are not stripped. The output is not expected to be valid XML and is parsed with regular expressions.\nHere are the functions available in JSONSchema format:\n// Tool metadata\n";

const TOOLS_SUFFIX: &str = "\n\nHere's an example of how to call a function in the tool set:\n(If the tool namespace is not specified, invoke the function directly as `example_function_name` rather than `example_tool_name.example_function_name`)\n\nto=example_tool_name.example_function_name\n\n<atem:function_calls>\n<atem:invoke name=\"example_tool_name.example_function_name\">\n<atem:parameter name=\"example_parameter_1\">value_1</atem:parameter>\n<atem:parameter name=\"example_parameter_2\">This is the value for the second parameter\nthat can span\n\"multiple\" lines\n</atem:parameter>\n</atem:invoke>\n</atem:function_calls>";

impl Renderer for Glimmer {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let strength = strength(think);
        let mut out = BOS.to_string();
        if !messages.iter().any(|m| m.role == "system") {
            let date = self.date.clone().unwrap_or_else(today);
            system(&mut out, DEFAULT_SYSTEM, tools, &strength, Some(&date));
        }
        let mut offset = 0;
        for (i, m) in messages.iter().enumerate() {
            let (content, next) = image_tags(&m.content, m.images, offset);
            offset = next;
            match m.role.as_str() {
                "system" => system(&mut out, &content, tools, &strength, None),
                "user" => message(&mut out, "user", &content, EOT),
                "tool" => {
                    let name = result_name(m, messages);
                    out.push_str(START);
                    out.push_str("tool ");
                    out.push_str(name);
                    out.push_str(MESSAGE);
                    out.push_str("<tool_output name=\"");
                    out.push_str(name);
                    out.push_str("\">\n");
                    out.push_str(&content);
                    out.push_str("\n</tool_output>");
                    out.push_str(EOT);
                }
                "assistant" => {
                    let thinking = m.thinking.as_deref().unwrap_or("");
                    if !thinking.is_empty() {
                        message(&mut out, "assistant to=self", thinking, EOM);
                    }
                    let same_next = messages.get(i + 1).is_some_and(|n| n.role == m.role);
                    for (j, c) in m.tool_calls.iter().enumerate() {
                        let last = j + 1 == m.tool_calls.len();
                        let end = if last && !same_next { EOT } else { EOM };
                        message(&mut out, &format!("assistant to={}", c.name), &atem(c), end);
                    }
                    if m.tool_calls.is_empty() && (!content.is_empty() || thinking.is_empty()) {
                        message(&mut out, "assistant to=user", &content, EOT);
                    }
                }
                _ => {}
            }
        }
        out.push_str(START);
        out.push_str("assistant");
        Ok(out)
    }
}

/// Today as `YYYY-MM-DD` (UTC).
fn today() -> String {
    let d = time::OffsetDateTime::now_utc().date();
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// `glimmerReasoningStrength`.
fn strength(think: Option<&Think>) -> String {
    match think {
        None => "high".into(),
        Some(t) if !t.enabled() => "none".into(),
        Some(Think::Level(l)) => l.clone(),
        Some(Think::Bool(_)) => "high".into(),
    }
}

fn message(out: &mut String, header: &str, body: &str, end: &str) {
    out.push_str(START);
    out.push_str(header);
    out.push_str(MESSAGE);
    out.push_str(body);
    out.push_str(end);
}

/// What a client's system text is normalized with.
const RENAMES: [(&str, &str); 4] = [
    ("Reasoning effort", "Reasoning strength"),
    ("Reasoning Effort", "Reasoning Strength"),
    ("reasoning effort", "reasoning strength"),
    ("REASONING EFFORT", "REASONING STRENGTH"),
];

/// A system message: the default one (with `date`) or the client's.
fn system(out: &mut String, content: &str, tools: &[J], strength: &str, date: Option<&str>) {
    let content = match date {
        Some(_) => content.to_string(),
        None => RENAMES
            .iter()
            .fold(content.to_string(), |c, (from, to)| c.replace(from, to)),
    };
    out.push_str(START);
    out.push_str("system");
    out.push_str(MESSAGE);
    out.push_str(&content);
    if let Some(date) = date {
        out.push_str("\nKnowledge cutoff: ");
        out.push_str(KNOWLEDGE_CUTOFF);
        out.push_str(".\nCurrent date: ");
        out.push_str(date);
        out.push('.');
    }
    if date.is_some() || !content.to_lowercase().contains("reasoning strength") {
        out.push_str("\n\nReasoning strength: ");
        out.push_str(strength);
        out.push('.');
    }
    let spaces = namespaces(tools);
    if !tools.is_empty() {
        out.push_str("\n\n");
        out.push_str(TOOLS_PREFIX);
        for ns in &spaces {
            out.push_str("{\"name\": ");
            out.push_str(&tojson(&J::from(ns.as_str())));
            out.push_str(", \"description\": \"\"}\n");
        }
        out.push_str("// Function schemas");
        for t in tools {
            let printed = json::tool(t);
            let f = &printed["function"];
            out.push_str("\n{\"name\": ");
            out.push_str(&tojson(&f["name"]));
            out.push_str(", \"description\": ");
            out.push_str(&tojson(f.get("description").unwrap_or(&J::from(""))));
            out.push_str(", \"parameters\": ");
            out.push_str(&parameters(&f["parameters"]));
            out.push('}');
        }
        out.push_str(TOOLS_SUFFIX);
    }
    out.push_str("\n\n# Valid recipients: \"self\"");
    for ns in &spaces {
        out.push_str(", \"");
        out.push_str(ns);
        out.push_str(".*\"");
    }
    out.push_str(", \"user\".");
    out.push_str(EOT);
}

fn tool_name(t: &J) -> &str {
    t.pointer("/function/name")
        .and_then(J::as_str)
        .unwrap_or("")
}

/// The tools' namespaces (a name up to its first `.`), first appearance first.
fn namespaces(tools: &[J]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in tools {
        let name = tool_name(t);
        let ns = name.split_once('.').map_or(name, |(ns, _)| ns);
        if !out.iter().any(|n| n == ns) {
            out.push(ns.to_string());
        }
    }
    out
}

/// `glimmerToolResultName`: the tool name, else the name of the (last) call with the result's
/// id, else the id.
fn result_name<'a>(m: &'a Message, messages: &'a [Message]) -> &'a str {
    if let Some(name) = m.tool_name.as_deref().filter(|n| !n.is_empty()) {
        return name;
    }
    let id = m.tool_call_id.as_deref().unwrap_or("");
    if id.is_empty() {
        return id;
    }
    messages
        .iter()
        .rev()
        .flat_map(|c| c.tool_calls.iter().rev())
        .find(|c| c.id == id)
        .map_or(id, |c| c.name.as_str())
}

/// One call as an `<atem:function_calls>` block.
fn atem(c: &ToolCall) -> String {
    let mut out = format!("<atem:function_calls>\n<atem:invoke name=\"{}\">\n", c.name);
    for (name, value) in &c.arguments {
        out.push_str("<atem:parameter name=\"");
        out.push_str(name);
        out.push_str("\">");
        match value {
            J::Null => out.push_str("null"),
            J::Object(_) | J::Array(_) => out.push_str(&tojson(&json::any(value))),
            J::String(s) => out.push_str(s),
            J::Number(n) => out.push_str(&format_float_g(n.as_f64().unwrap_or(0.0))),
            J::Bool(b) => out.push_str(&b.to_string()),
        }
        out.push_str("</atem:parameter>\n");
    }
    out.push_str("</atem:invoke>\n</atem:function_calls>");
    out
}

/// `glimmerJSON` of `api.ToolFunctionParameters`: its `properties` print through their own
/// `MarshalJSON` (Go's `json.Marshal`, which does escape HTML).
fn parameters(p: &J) -> String {
    let Some(fields) = p.as_object() else {
        return tojson(p);
    };
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| {
            let value = match k.as_str() {
                "properties" => json::go(v),
                _ => json::unescape_html(&json::go(v)),
            };
            format!("{}:{value}", json::go(&J::from(k.as_str())))
        })
        .collect();
    json::with_spaces(&format!("{{{}}}", body.join(",")))
}

/// `glimmerJSON`: Go's encoder without HTML escaping, spaced.
fn tojson(v: &J) -> String {
    json::with_spaces(&json::unescape_html(&json::go(v)))
}

#[cfg(test)]
#[path = "glimmer_tests.rs"]
mod tests;
