//! The `glimmer` parser (Ollama's `GlimmerParser`): the response is a run of messages, each a
//! header (the prompt opened the first with `<|start|>assistant`; later ones repeat it) naming a
//! recipient, `<|message|>`, and a body ended by `<|eom|>` or `<|eot|>`. The recipient decides
//! what the body is: `self` → thinking, a declared tool → a call written as
//! `<atem:function_calls><atem:invoke name="…"><atem:parameter name="…">…` XML, anything else
//! (`user`, none) → content.
//!
//! Rules (Ollama's):
//! - a header is `to=recipient` (or nothing) up to `<|message|>`; text without `<|message|>` is
//!   content at the end of the response;
//! - a body also ends where a new assistant header starts (`<|start|>assistant` then
//!   `<|message|>` or ` to=R<|message|>` with R `self`, `user` or a declared tool's exact name);
//!   other `<|start|>` text is part of the body;
//! - a tool name resolves exactly, or as `ns.fn` for a declared `fn` whose own namespace is `ns`;
//! - a call body is read up to `</atem:function_calls>` before an end marker counts; parameter
//!   values are typed by the tool's schema (Ollama's `parseTypedToolValue`); the invoke name
//!   must resolve to the recipient's tool; a `<|message|>` the model slips into the invoke name is
//!   dropped;
//! - with tools, a content message that opens with `<atem:function_calls>` is held until it ends
//!   and is a call if it is exactly one well-formed block invoking a declared tool;
//! - thinking is delivered unless `think` is off; calls get `index` 0, 1, … and an id.
//!
//! Go's result depends on how the text is chunked in one place: it checks a header's recipient
//! for whitespace and stray `<` while the header is still arriving, so a header that arrives
//! whole is judged by its name alone. herd judges headers as they arrive on a token stream (a
//! recipient with whitespace or `<` is never a header), the same for every chunking. Go fails
//! the whole request on a tool message whose body does not parse as a call to that tool; herd,
//! as its other parsers do, delivers the body as content.
//!
//! `thinking_close` is `to=user<|message|>`, the header of the answer (as harmony's final header).

use serde_json::{Map, Value as J};

use super::qwen3coder_call::{param_types, typed_value};
use super::{call_id, partial_tag_len, Options, Parsed, Parser};
use crate::prompt::{Think, ToolCall};

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const EOM: &str = "<|eom|>";
const EOT: &str = "<|eot|>";
const ASSISTANT: &str = "<|start|>assistant";
const CALLS_OPEN: &str = "<atem:function_calls>";
const CALLS_CLOSE: &str = "</atem:function_calls>";
const INVOKE_OPEN: &str = "<atem:invoke name=\"";
const INVOKE_CLOSE: &str = "</atem:invoke>";
const PARAM_OPEN: &str = "<atem:parameter name=\"";
const PARAM_CLOSE: &str = "</atem:parameter>";

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Header,
    Content,
    Thinking,
    Tool,
}

pub struct Glimmer {
    state: State,
    buf: String,
    recipient: String,
    /// Declared tools by trimmed name (a later duplicate replaces an earlier one).
    tools: Vec<(String, J)>,
    index: i64,
    emit_thinking: bool,
    /// Some of the current content message was delivered (it can no longer become a call).
    streamed: bool,
}

/// What a `<|start|>` in a body begins.
#[derive(PartialEq)]
enum Header {
    Valid,
    Pending,
    Invalid,
}

impl Glimmer {
    pub fn new(o: &Options) -> Glimmer {
        let mut tools: Vec<(String, J)> = Vec::new();
        for t in o.schemas {
            let name = t
                .pointer("/function/name")
                .and_then(J::as_str)
                .unwrap_or("");
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            tools.retain(|(n, _)| n != name);
            tools.push((name.to_string(), t.clone()));
        }
        Glimmer {
            state: State::Header,
            buf: String::new(),
            recipient: String::new(),
            tools,
            index: 0,
            emit_thinking: o.think.is_none_or(Think::enabled),
            streamed: false,
        }
    }

    fn tool(&self, name: &str) -> Option<&J> {
        self.tools.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// `glimmerResolveToolName`: the declared tool a recipient or invoke name means.
    fn resolve(&self, name: &str) -> Option<String> {
        if self.tool(name).is_some() {
            return Some(name.to_string());
        }
        let (ns, f) = name.split_once('.')?;
        let own = f.split_once('.').map_or(f, |(n, _)| n);
        (self.tool(f).is_some() && own == ns).then(|| f.to_string())
    }

    fn header(&mut self, out: &mut Parsed, done: bool) -> bool {
        while self.buf.starts_with(ASSISTANT) {
            self.buf.drain(..ASSISTANT.len());
        }
        if !done && self.buf.starts_with('<') && ASSISTANT.starts_with(self.buf.as_str()) {
            return false;
        }
        let Some(i) = self.buf.find(MESSAGE) else {
            if done {
                out.content.push_str(&std::mem::take(&mut self.buf));
            }
            return false;
        };
        let header = self.buf[..i].trim();
        self.recipient = header
            .strip_prefix("to=")
            .unwrap_or(header)
            .trim()
            .to_string();
        self.buf.drain(..i + MESSAGE.len());
        self.state = if self.recipient == "self" {
            State::Thinking
        } else if self.resolve(&self.recipient).is_some() {
            State::Tool
        } else {
            State::Content
        };
        true
    }

    /// `holdContent`: a content message that may be a call the model addressed wrongly.
    fn hold_content(&self) -> bool {
        if self.state != State::Content || self.streamed || self.tools.is_empty() {
            return false;
        }
        let t = self.buf.trim_start_matches([' ', '\t', '\r', '\n']);
        CALLS_OPEN.starts_with(t) || t.starts_with(CALLS_OPEN)
    }

    /// What a `<|start|>` at the start of `s` begins, judged as a token stream delivers it.
    fn header_status(&self, s: &str, done: bool) -> Header {
        let pending = if done {
            Header::Invalid
        } else {
            Header::Pending
        };
        let Some(rest) = s.strip_prefix(ASSISTANT) else {
            return if ASSISTANT.starts_with(s) {
                pending
            } else {
                Header::Invalid
            };
        };
        if rest.starts_with(MESSAGE) {
            return Header::Valid;
        }
        if MESSAGE.starts_with(rest) || (rest.len() < 4 && " to=".starts_with(rest)) {
            return pending;
        }
        let Some(to) = rest.strip_prefix(" to=") else {
            return Header::Invalid;
        };
        let (name, complete) = match to.find(MESSAGE) {
            Some(i) => (&to[..i], true),
            None => (to, false),
        };
        // Whitespace, or a `<` that does not start `<|message|>`, ends it as it arrives.
        let lt = name.find('<');
        if name[..lt.unwrap_or(name.len())].contains([' ', '\t', '\r', '\n'])
            || lt.is_some_and(|l| complete || !MESSAGE.starts_with(&name[l..]))
        {
            return Header::Invalid;
        }
        if !complete {
            return pending;
        }
        let valid = name == "self" || name == "user" || self.tool(name).is_some();
        if valid {
            Header::Valid
        } else {
            Header::Invalid
        }
    }

    /// `implicitHeaderStart`: where a new assistant header starts in `buf[from..]`, and whether
    /// it is still arriving.
    fn implicit(&self, from: usize, done: bool) -> Option<(usize, bool)> {
        let mut search = from;
        while let Some(i) = self.buf[search..].find(START) {
            let i = search + i;
            match self.header_status(&self.buf[i..], done) {
                Header::Valid => return Some((i, false)),
                Header::Pending => return Some((i, true)),
                Header::Invalid => search = i + START.len(),
            }
        }
        let keep = partial_tag_len(&self.buf[search..], &[ASSISTANT]);
        (!done && keep > 0).then(|| (self.buf.len() - keep, true))
    }

    /// `consumeBody`: the next piece of the current body and whether the message is complete;
    /// `None` when nothing can be decided yet.
    fn body(&mut self, done: bool) -> Option<(String, bool)> {
        let hold = self.state == State::Tool || self.hold_content();
        let from = match hold {
            true => self
                .buf
                .find(CALLS_CLOSE)
                .map_or(self.buf.len(), |i| i + CALLS_CLOSE.len()),
            false => 0,
        };
        let end = [EOM, EOT]
            .iter()
            .filter_map(|m| self.buf[from..].find(m).map(|i| (from + i, m.len())))
            .min();
        let implicit = self.implicit(from, done);
        if let Some((i, false)) = implicit {
            if end.is_none_or(|(e, _)| i < e) {
                let body: String = self.buf.drain(..i).collect();
                return Some((body, true));
            }
        }
        if let Some((e, len)) = end {
            let body: String = self.buf.drain(..e).collect();
            self.buf.drain(..len);
            return Some((body, true));
        }
        if done {
            return Some((std::mem::take(&mut self.buf), true));
        }
        if hold {
            return None;
        }
        let cut = match implicit {
            Some((i, _)) => i,
            None => self.buf.len() - partial_tag_len(&self.buf, &[EOM, EOT]),
        };
        (cut > 0).then(|| (self.buf.drain(..cut).collect(), false))
    }

    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.state == State::Header {
            return self.header(out, done);
        }
        let Some((body, complete)) = self.body(done) else {
            return false;
        };
        match self.state {
            State::Content => match self.fallback_call(&body, complete) {
                Some(call) => out.tool_calls.push(call),
                None if !body.is_empty() => {
                    out.content.push_str(&body);
                    self.streamed = true;
                }
                None => {}
            },
            State::Thinking if self.emit_thinking => out.thinking.push_str(&body),
            State::Tool if complete => match self.tool_call(&body) {
                Some(call) => out.tool_calls.push(call),
                // Go fails the request; herd delivers the body.
                None => out.content.push_str(&body),
            },
            _ => {}
        }
        if complete {
            self.state = State::Header;
            self.recipient.clear();
            self.streamed = false;
        }
        true
    }

    fn call(&mut self, name: String, arguments: Map<String, J>) -> ToolCall {
        self.index += 1;
        ToolCall {
            id: call_id(),
            index: self.index - 1,
            name,
            arguments,
        }
    }

    /// `contentToolCallFallback`: a whole content message that is exactly one well-formed
    /// ATEM block invoking a declared tool (the invoke names the tool, not the header).
    fn fallback_call(&mut self, body: &str, complete: bool) -> Option<ToolCall> {
        if !complete || self.streamed || self.tools.is_empty() {
            return None;
        }
        let t = body.trim();
        let inner = t
            .strip_prefix(CALLS_OPEN)?
            .strip_suffix(CALLS_CLOSE)?
            .trim();
        let (name, _) = cut_invoke_name(inner.strip_prefix(INVOKE_OPEN)?)?;
        let name = self.resolve(&name)?;
        let args = atem(t, self.tool(&name)?)?.1;
        Some(self.call(name, args))
    }

    /// `parseToolCall`: a tool message's body, which must invoke the recipient's tool.
    fn tool_call(&mut self, body: &str) -> Option<ToolCall> {
        let name = self.resolve(&self.recipient)?;
        let (invoked, args) = atem(body, self.tool(&name)?)?;
        (self.resolve(&invoked)? == name).then(|| self.call(name, args))
    }
}

impl Parser for Glimmer {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, done) {}
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        vec![format!("to=user{MESSAGE}")]
    }
}

/// `glimmerCutInvokeName`: the invoke name up to `">` and the text after it; a `<|message|>` in
/// the name is dropped, and one followed by a parameter stands for the `">`.
fn cut_invoke_name(s: &str) -> Option<(String, &str)> {
    let mut name = String::new();
    let mut rest = s;
    loop {
        let term = rest.find("\">");
        match rest.find(MESSAGE) {
            Some(t) if term.is_none_or(|e| t < e) => {
                name.push_str(&rest[..t]);
                rest = &rest[t + MESSAGE.len()..];
                if rest.starts_with(PARAM_OPEN) {
                    return Some((name, rest));
                }
            }
            _ => {
                let e = term?;
                name.push_str(&rest[..e]);
                return Some((name, &rest[e + 2..]));
            }
        }
    }
}

/// `parseGlimmerATEM`: the invoked name and the typed parameters of one ATEM block; `None`
/// where Go returns an error.
fn atem(body: &str, tool: &J) -> Option<(String, Map<String, J>)> {
    let inner = body
        .trim()
        .strip_prefix(CALLS_OPEN)?
        .strip_suffix(CALLS_CLOSE)?
        .trim();
    let invoke = inner.strip_prefix(INVOKE_OPEN)?;
    if !invoke.ends_with(INVOKE_CLOSE) {
        return None;
    }
    let (name, rest) = cut_invoke_name(invoke)?;
    let mut params = rest.strip_suffix(INVOKE_CLOSE)?;
    params = params.strip_prefix('\n').unwrap_or(params);
    params = params.strip_suffix('\n').unwrap_or(params);
    let tool_name = tool
        .pointer("/function/name")
        .and_then(J::as_str)
        .unwrap_or("");
    let mut args = Map::new();
    while !params.is_empty() {
        let p = params.strip_prefix(PARAM_OPEN)?;
        let (key, p) = p.split_once("\">")?;
        let (value, p) = p.split_once(PARAM_CLOSE)?;
        params = p.strip_prefix('\n').unwrap_or(p);
        let types = param_types(std::slice::from_ref(tool), tool_name, key);
        // `parseTypedToolValue` is `parseValue` without its newline trimming.
        args.insert(
            key.to_string(),
            typed_value(&format!("\n{value}\n"), &types),
        );
    }
    Some((name, args))
}

#[cfg(test)]
#[path = "glimmer_tests.rs"]
mod tests;
