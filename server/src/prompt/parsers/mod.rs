//! Output parsers: split a model's streamed text into `content`, `thinking` and tool calls, per
//! model family (DESIGN 7), and name the strings that end the thinking a response begins with
//! (`thinking_close`, which the runner's single-pass grammar needs — DESIGN 6).
//!
//! Every parser is streaming: `add` takes any chunking of the output (tags may be split across
//! chunks at any byte) and returns only what is certain; text that could still turn out to be the
//! start of a tag is held back until the next chunk or `done`. Concatenating the outputs of any
//! chunking of a stream gives the same result as one `add(all, true)`.
//!
//! Selection ([`for_model`]): the model's `PARSER` ([`NAMED`]; a gpt-oss model with a harmony
//! template gets `harmony`, see [`parser_name`]); otherwise the template's thinking tags (Go:
//! the text around `.Thinking`; Jinja: `<think>`) → [`thinking`], with tool calls ([`tools`], tag
//! from the template) parsed from its content.
//!
//! How the chat/generate handlers use it:
//! ```
//! use server::prompt::parsers::{for_model, Options};
//! use server::prompt::{Template, Think};
//! let t = Template::parse_go(
//!     "{{ range .Messages }}{{ .Content }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ end }}",
//! ).unwrap();
//! let think = Think::Bool(true);
//! let mut p = for_model(&t, &Options { think: Some(&think), prompt: "Q: hi\nA: ", ..Default::default() });
//! assert_eq!(p.thinking_close(), vec!["</think>".to_string()]); // → Constraint.thinking_close
//! let a = p.add("<think>hmm</thi", false);
//! let b = p.add("nk>Hello", true);
//! assert_eq!((a.thinking + &b.thinking, b.content), ("hmm".to_string(), "Hello".to_string()));
//! ```

pub mod cogito;
pub mod cohere;
pub mod deepseek3;
pub mod functiongemma;
pub mod gemma4;
pub mod gemma4_args;
pub mod glimmer;
pub mod glm;
pub mod govalue;
pub mod harmony;
pub mod harmony_names;
pub mod laguna;
mod laguna_call;
pub mod lfm2;
pub mod lfm2_calls;
pub mod ministral;
pub mod nemotron;
pub mod olmo3;
pub mod qwen3;
pub mod qwen35;
pub mod qwen3coder;
mod qwen3coder_call;
pub mod qwen3vl;
pub mod thinking;
pub mod tools;

use super::{Message, Template, Think, ToolCall};

/// What one `add` produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub content: String,
    pub thinking: String,
    pub tool_calls: Vec<ToolCall>,
}

impl Parsed {
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.thinking.is_empty() && self.tool_calls.is_empty()
    }

    /// Appends a tool call with a fresh id ([`call_id`]) and the response's next `index`.
    pub(crate) fn push_call(
        &mut self,
        index: &mut i64,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) {
        self.tool_calls.push(ToolCall {
            id: call_id(),
            index: *index,
            name,
            arguments,
        });
        *index += 1;
    }

    fn extend(&mut self, o: Parsed) {
        self.content.push_str(&o.content);
        self.thinking.push_str(&o.thinking);
        self.tool_calls.extend(o.tool_calls);
    }
}

/// A streaming output parser for one response.
pub trait Parser: Send {
    /// Feed the next chunk of model output; `done` on the last one (which may be empty).
    fn add(&mut self, chunk: &str, done: bool) -> Parsed;
    /// The strings any of which ends the thinking this response begins with; empty when the
    /// response starts in content (thinking off, an assistant prefill being continued).
    fn thinking_close(&self) -> Vec<String>;
}

/// What the parser must know about the request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// The request's `think`; `None` (unset) on a thinking-capable model means on.
    pub think: Option<&'a Think>,
    /// Names of the request's tools (`tools[].function.name`); empty = no tool parsing.
    pub tools: &'a [String],
    /// The last message of a chat: an assistant message is a prefill the response continues.
    pub last: Option<&'a Message>,
    /// The rendered prompt: a prompt ending in the opening thinking tag pre-opens it.
    pub prompt: &'a str,
    /// The model's Modelfile `PARSER` (its config's `parser`, or `harmony` for a harmony model:
    /// [`parser_name`]); empty = inferred from the template. One of [`NAMED`].
    pub named: &'a str,
    /// The request's tools as the client sent them (`{type, function:{name, parameters}}`):
    /// parsers that type a call's arguments by the tool's schema read them here.
    pub schemas: &'a [serde_json::Value],
}

/// What a named parser adds to a model's capabilities (Ollama's `HasToolSupport` /
/// `HasThinkingSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    pub tools: bool,
    pub thinking: bool,
}

/// Tools and thinking.
const BOTH: Support = Support {
    tools: true,
    thinking: true,
};
/// Tools only.
const TOOLS: Support = Support {
    tools: true,
    thinking: false,
};
/// Thinking only.
const THINKING: Support = Support {
    tools: false,
    thinking: true,
};
/// Neither (a parser that only cleans up output).
#[allow(dead_code)]
const NEITHER: Support = Support {
    tools: false,
    thinking: false,
};

/// Modelfile `PARSER` names herd has a built-in parser for, with what each supports (create
/// refuses other names). Each family's module registers here and in [`named`].
pub const NAMED: &[(&str, Support)] = &[
    ("harmony", BOTH),
    ("qwen3", TOOLS),
    ("qwen3-thinking", BOTH),
    ("deepseek-r1", BOTH),
    ("cogito", BOTH),
    ("qwen3-coder", TOOLS),
    ("gemma4", BOTH),
    ("gemma4-no-thinking", TOOLS),
    ("deepseek3", BOTH),
    ("glm-4.7", BOTH),
    ("glm-ocr", TOOLS),
    ("olmo3", TOOLS),
    ("olmo3-think", THINKING),
    ("nemotron-3-nano", BOTH),
    ("nemotron-3.5-nano", BOTH),
    ("lfm2", TOOLS),
    ("lfm2-thinking", BOTH),
    ("ministral", TOOLS),
    ("functiongemma", TOOLS),
    ("qwen3-vl-instruct", TOOLS),
    ("qwen3-vl-thinking", BOTH),
    ("qwen3.5", BOTH),
    ("ornith", BOTH),
    ("cohere", BOTH),
    ("laguna", BOTH),
    ("poolside-v1", BOTH),
    ("glimmer", BOTH),
];

/// The support of a named parser; `None` for names herd does not know.
pub fn support(name: &str) -> Option<Support> {
    NAMED.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Whether `name` is a parser herd has.
pub fn is_named(name: &str) -> bool {
    support(name).is_some()
}

/// A family's own parser for `o.named`, when that family has one (harmony and the `<think>`
/// families are built by [`for_model`] itself).
fn named(o: &Options) -> Option<Box<dyn Parser>> {
    // A prefill with content: the response continues it (Ollama's parsers then start in content).
    let prefilled = o
        .last
        .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
    Some(match o.named {
        "qwen3-coder" => Box::new(qwen3coder::Qwen3Coder::new(o.schemas)),
        "gemma4" => Box::new(gemma4::Gemma4::new(o, true)),
        "gemma4-no-thinking" => Box::new(gemma4::Gemma4::new(o, false)),
        "deepseek3" => Box::new(deepseek3::DeepSeekTokens::deepseek3(o)),
        "cogito" => Box::new(cogito::cogito(o)),
        "glm-4.7" => Box::new(glm::Glm::glm47(o)),
        "glm-ocr" => Box::new(glm::Glm::glm_ocr(o)),
        "olmo3" => Box::new(olmo3::Olmo3::new()),
        "olmo3-think" => Box::new(olmo3::Olmo3Think::new(prefilled)),
        "nemotron-3-nano" | "nemotron-3.5-nano" => Box::new(nemotron::Nemotron3Nano::new(
            o.thinking_on(),
            prefilled,
            o.schemas,
        )),
        "lfm2" => Box::new(lfm2::Lfm2::new(false, o.think, prefilled)),
        "lfm2-thinking" => Box::new(lfm2::Lfm2::new(true, o.think, prefilled)),
        "ministral" => Box::new(ministral::Ministral::new(o.tools)),
        "functiongemma" => Box::new(functiongemma::FunctionGemma::new()),
        "qwen3-vl-instruct" => Box::new(qwen3vl::Qwen3Vl::new(false, o)),
        "qwen3-vl-thinking" => Box::new(qwen3vl::Qwen3Vl::new(true, o)),
        "qwen3" => Box::new(qwen3::QwenParser::qwen3(false, o)),
        "qwen3-thinking" => Box::new(qwen3::QwenParser::qwen3(true, o)),
        "qwen3.5" | "ornith" => Box::new(qwen35::parser(o)),
        "cohere" => Box::new(cohere::Cohere::new(o)),
        "laguna" => Box::new(laguna::Laguna::new(o, false)),
        "poolside-v1" => Box::new(laguna::Laguna::new(o, true)),
        "glimmer" => Box::new(glimmer::Glimmer::new(o)),
        _ => return None,
    })
}

impl Options<'_> {
    fn thinking_on(&self) -> bool {
        self.think.is_none_or(Think::enabled)
    }

    fn prefill(&self) -> bool {
        self.last.is_some_and(|m| m.role == "assistant")
    }
}

/// Ollama's `shouldUseHarmony`: a gpt-oss model (`family` as its config or GGUF names it) whose
/// template has harmony's message tags.
pub fn is_harmony(t: &Template, family: &str) -> bool {
    let s = t.source();
    matches!(family, "gptoss" | "gpt-oss") && s.contains("<|start|>") && s.contains("<|end|>")
}

/// The parser a model's responses get: its configured `PARSER`, else `harmony` for a harmony
/// model ([`is_harmony`]; Ollama sets the model's parser to `harmony` then), else none (`""`:
/// inferred from the template).
pub fn parser_name<'a>(t: &Template, family: &str, configured: &'a str) -> &'a str {
    if configured.is_empty() && is_harmony(t, family) {
        "harmony"
    } else {
        configured
    }
}

/// The request's tools as the prompt shows them, for responses parsed by `parser` (a
/// [`parser_name`]): Ollama's `Parser.Init` returns them, and only harmony changes them (its
/// tool names, [`harmony_names`]). The parser itself is given the tools as the client sent them.
pub fn prompt_tools(parser: &str, tools: &[serde_json::Value]) -> Vec<serde_json::Value> {
    match parser {
        "harmony" => harmony_names::prompt_tools(tools),
        _ => tools.to_vec(),
    }
}

/// Tool names of a request's `tools` array (`[{type, function:{name,…}}]`).
pub fn tool_names(tools: &[serde_json::Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(|n| n.as_str()))
        .map(str::to_string)
        .collect()
}

/// The parser for a model's responses to one request.
pub fn for_model(t: &Template, o: &Options) -> Box<dyn Parser> {
    Box::new(GoArguments(family(t, o)))
}

/// The family's parser, by name or by template.
fn family(t: &Template, o: &Options) -> Box<dyn Parser> {
    if let Some(p) = named(o) {
        return p;
    }
    if o.named == "harmony" {
        return Box::new(harmony::Harmony::new(o));
    }
    let tools = (!o.tools.is_empty())
        .then(|| Box::new(tools::ToolParser::new(&t.tool_call_tag(), o.tools)) as Box<dyn Parser>);
    // A named `<think>` family parses those tags whatever the template shows.
    let tags = match o.named {
        "" => t.thinking_tags(),
        _ => Some(("<think>".to_string(), "</think>".to_string())),
    };
    let thinking = match tags {
        Some((open, close)) if o.thinking_on() && !o.prefill() => {
            let pre_opened = o.prompt.trim_end().ends_with(open.as_str());
            Some(Box::new(thinking::TagThinking::new(&open, &close, pre_opened)) as Box<dyn Parser>)
        }
        _ => None,
    };
    Box::new(Chain { thinking, tools })
}

/// Tool-call arguments as Ollama's API prints them: Ollama keeps the top-level keys in order but
/// holds every nested value as Go's `encoding/json` fills an `any` (objects are maps, printed with
/// sorted keys; numbers float64, and a float64 without a fraction prints as an integer: `3`, not
/// `3.0`). Integers a family parsed as integers stay as they are.
struct GoArguments(Box<dyn Parser>);

impl Parser for GoArguments {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        let mut out = self.0.add(chunk, done);
        for call in &mut out.tool_calls {
            call.arguments.values_mut().for_each(go_value);
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        self.0.thinking_close()
    }
}

fn go_value(v: &mut serde_json::Value) {
    use serde_json::Value as J;
    match v {
        J::Object(m) => {
            let mut entries: Vec<(String, J)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, x) in &mut entries {
                go_value(x);
            }
            *m = entries.into_iter().collect();
        }
        J::Array(a) => a.iter_mut().for_each(go_value),
        J::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                *v = J::from(f as i64);
            }
        }
        _ => {}
    }
}

/// A parser that delivers the output unchanged as content (raw generate prompts).
pub fn passthrough() -> Box<dyn Parser> {
    Box::new(Chain {
        thinking: None,
        tools: None,
    })
}

/// Thinking split first, then tool calls out of the content; either may be absent.
struct Chain {
    thinking: Option<Box<dyn Parser>>,
    tools: Option<Box<dyn Parser>>,
}

impl Parser for Chain {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        let mut out = match &mut self.thinking {
            Some(t) => t.add(chunk, done),
            None => Parsed {
                content: chunk.to_string(),
                ..Parsed::default()
            },
        };
        if let Some(tp) = &mut self.tools {
            let content = std::mem::take(&mut out.content);
            out.extend(tp.add(&content, done));
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        self.thinking
            .as_ref()
            .map(|t| t.thinking_close())
            .unwrap_or_default()
    }
}

/// Length of the longest suffix of `buf` that is a proper prefix of one of `tags`: text that may
/// still become a tag and must be held back. Always a char boundary of `buf`.
pub(crate) fn partial_tag_len(buf: &str, tags: &[&str]) -> usize {
    let mut best = 0;
    for tag in tags {
        let max = tag.len().saturating_sub(1).min(buf.len());
        for n in (best + 1..=max).rev() {
            let start = buf.len() - n;
            if buf.is_char_boundary(start) && tag.as_bytes().starts_with(&buf.as_bytes()[start..]) {
                best = n;
                break;
            }
        }
    }
    best
}

/// Moves the start of `buf` to `out`: all of it but what may still become one of `tags` and the
/// whitespace before that (Ollama's parsers hold both back, with `overlap` and
/// `trailingWhitespaceLen`, until more text shows whether a tag follows, which would trim it).
pub(crate) fn emit_certain(buf: &mut String, tags: &[&str], out: &mut String) {
    let keep = partial_tag_len(buf, tags);
    let emit = buf[..buf.len() - keep].trim_end().len();
    out.push_str(&buf[..emit]);
    buf.drain(..emit);
}

/// Drops `buf`'s leading whitespace (what Ollama trims after a tag, however many chunks it
/// takes to arrive); whether text follows it.
pub(crate) fn skip_space(buf: &mut String) -> bool {
    let lead = buf.len() - buf.trim_start().len();
    buf.drain(..lead);
    !buf.is_empty()
}

/// `thinking_close` of a parser whose thinking ends at `tag`: the tag when the response starts in
/// thinking, nothing when it starts in content.
pub(crate) fn thinking_close_if(starts_thinking: bool, tag: &str) -> Vec<String> {
    if starts_thinking {
        vec![tag.to_string()]
    } else {
        Vec::new()
    }
}

/// Ollama's tool-call id: `call_` + 8 chars of `[a-z0-9]`.
pub fn call_id() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let tail: String = (0..8)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect();
    format!("call_{tail}")
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;
