//! The `laguna` and `poolside-v1` parsers (Ollama's `LagunaParser` and `LagunaV8Parser`,
//! Poolside's Laguna models): thinking up to `</think>`, content, and tool calls in
//! `<tool_call>…</tool_call>` blocks, in `<user>…</user>` blocks naming a tool, or as bare
//! `{"name": …, "arguments": …}` objects ([`super::laguna_call`] reads a call's text).
//!
//! Rules (Ollama's):
//! - thinking is on only when the request asks (`think` true or a known level). Then the response
//!   starts in thinking (the prompt opened `<think>`; leading whitespace and an echoed `<think>`
//!   are dropped) unless the last message is an assistant prefill (`laguna` only:
//!   `poolside-v1`'s prompt always opens a fresh turn). With thinking off, `<think>` blocks the
//!   model writes anyway are dropped;
//! - thinking ends at `</think>` or at `<tool_call>`, whitespace before either dropped;
//! - content: leading whitespace of the response's content is dropped; `<think>` starts a
//!   thinking block; a stray `</think>` is dropped with the whitespace before it; `<tool_call>`
//!   starts a call (whitespace before it dropped) that ends at `</tool_call>` or the end;
//! - with tools only: a `<user>…</user>` block naming a declared tool is a call (else it stays
//!   content); a `{` followed by `"` or a line break opens a JSON object that is a call once it is
//!   complete and valid JSON. Either is cut short by `<think>`, `<tool_call>` or (the JSON) a
//!   `<user>`, and then is content;
//! - trailing whitespace at the end of the response is dropped.
//!
//! Go's result depends on where the model's tokens split the text (its parser trims only
//! whitespace that arrives in the same chunk as a tag, and it searches its whole buffer for tags
//! in a fixed order). herd gives the result of Ollama's streaming with each tag and each JSON
//! start (`{"`) arriving whole, as a tokenizer with these tags as special tokens delivers them:
//! whitespace right after a tag is kept (except at the start of thinking or content), tags count
//! in the order they appear, and a JSON object is checked as soon as its closing brace arrives.
//! Text that merely looks like the start of a tag right before `</think>` keeps that tag as
//! content with thinking on, as Go's held-back text does. Go fails the whole request on a call it
//! cannot parse (a JSON object without a `name`, invalid JSON in a block); herd, as its other
//! parsers do, delivers that call's text as content. Go also emits an empty call (no name) when a
//! JSON object starts after other text in one chunk and is not complete yet; herd does not. Calls
//! get `index` 0, 1, … and an id.
//!
//! `thinking_close` is `</think>` when the response starts in thinking.

use serde::de::IgnoredAny;
use serde_json::Value as J;

use super::laguna_call::{alias, looks_like_call, parse, Call};
use super::{partial_tag_len, thinking_close_if, Options, Parsed, Parser};
use crate::prompt::Think;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const TOOL_OPEN: &str = "<tool_call>";
const TOOL_CLOSE: &str = "</tool_call>";
const USER_OPEN: &str = "<user>";
const USER_CLOSE: &str = "</user>";
/// Tags whose beginnings Go holds back in content.
const HELD: [&str; 4] = [THINK_OPEN, THINK_CLOSE, TOOL_OPEN, USER_OPEN];
/// How a JSON call starts in content.
const JSON_STARTS: [&str; 3] = ["{\"", "{\n", "{\r\n"];

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Think,
    Content,
    /// Inside `<tool_call>`.
    Tool,
    /// A `<user>` block (the buffer starts with the tag).
    User,
    /// A JSON object (the buffer starts with the whitespace before it).
    Json,
}

pub struct Laguna {
    state: State,
    buf: String,
    index: i64,
    /// Thinking is delivered (think on); otherwise think blocks are dropped.
    emit_thinking: bool,
    /// The primed thinking has not started yet: whitespace and an echoed `<think>` go.
    lead: bool,
    /// No content yet: its leading whitespace goes.
    content_start: bool,
    /// In `Json`: where the object starts, how much of it is known incomplete, and whether it can
    /// no longer become valid JSON.
    json_at: usize,
    checked: usize,
    dead: bool,
    /// In `Json`: a `<user>` block inside it was not a call, and Go's search for `<user>` stops
    /// there for good.
    absorbed: bool,
    schemas: Vec<J>,
    starts_thinking: bool,
}

enum Event {
    Tag(usize, &'static str),
    None,
}

/// The first of `tags` in `s`.
fn earliest(s: &str, tags: &[&'static str]) -> Event {
    tags.iter()
        .filter_map(|t| s.find(t).map(|i| (i, *t)))
        .min_by_key(|(i, _)| *i)
        .map_or(Event::None, |(i, t)| Event::Tag(i, t))
}

enum Json {
    /// A complete value of this many bytes.
    Complete(usize),
    Incomplete,
    Invalid,
}

/// Whether `s` starts with a complete JSON value.
fn json_value(s: &str) -> Json {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<IgnoredAny>();
    match it.next() {
        Some(Ok(_)) => Json::Complete(it.byte_offset()),
        Some(Err(e)) if !e.is_eof() => Json::Invalid,
        _ => Json::Incomplete,
    }
}

impl Laguna {
    /// `laguna` (`v8: false`) or `poolside-v1` (`v8: true`, which ignores a prefill).
    pub fn new(o: &Options, v8: bool) -> Laguna {
        let thinking = o.think.is_some_and(Think::enabled);
        let prefill = !v8 && o.prefill();
        let starts_thinking = thinking && !prefill;
        Laguna {
            state: if starts_thinking {
                State::Think
            } else {
                State::Content
            },
            buf: String::new(),
            index: 0,
            emit_thinking: thinking,
            lead: starts_thinking,
            content_start: true,
            json_at: 0,
            checked: 0,
            dead: false,
            absorbed: false,
            schemas: o.schemas.to_vec(),
            starts_thinking,
        }
    }

    fn tools(&self) -> bool {
        !self.schemas.is_empty()
    }

    fn thinking(&self, out: &mut Parsed, text: &str) {
        if self.emit_thinking {
            out.thinking.push_str(text);
        }
    }

    fn call(&mut self, out: &mut Parsed, (name, arguments): Call) {
        out.push_call(&mut self.index, name, arguments);
    }

    /// Moves `buf[..at]` (right-trimmed when `trim`) to content and drops it and `skip` more.
    fn content_until(&mut self, out: &mut Parsed, at: usize, trim: bool, skip: usize) {
        let text = &self.buf[..at];
        out.content
            .push_str(if trim { text.trim_end() } else { text });
        self.buf.drain(..at + skip);
    }

    /// One step; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        match self.state {
            State::Think => self.think(out, done),
            State::Content => self.content(out, done),
            State::Tool => self.tool(out, done),
            State::User => self.user(out, done),
            State::Json => self.json(out, done),
        }
    }

    fn think(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.lead {
            let lead = self.buf.len() - self.buf.trim_start().len();
            self.buf.drain(..lead);
            if self.buf.starts_with(THINK_OPEN) {
                self.buf.drain(..THINK_OPEN.len());
                self.lead = false;
                return true;
            }
            if !done && THINK_OPEN.starts_with(self.buf.as_str()) {
                return false;
            }
            self.lead = false;
        }
        match earliest(&self.buf, &[THINK_CLOSE, TOOL_OPEN]) {
            Event::Tag(i, tag) => {
                let text = self.buf[..i].trim_end().to_string();
                self.thinking(out, &text);
                self.buf.drain(..i + tag.len());
                self.state = if tag == TOOL_OPEN {
                    State::Tool
                } else {
                    State::Content
                };
                true
            }
            Event::None if done => {
                let text = std::mem::take(&mut self.buf);
                self.thinking(out, text.trim_end());
                self.state = State::Content;
                false
            }
            Event::None => {
                let keep = partial_tag_len(&self.buf, &[THINK_CLOSE, TOOL_OPEN]);
                let emit = self.buf[..self.buf.len() - keep].trim_end().len();
                let text: String = self.buf.drain(..emit).collect();
                self.thinking(out, &text);
                false
            }
        }
    }

    fn content(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.content_start {
            let lead = self.buf.len() - self.buf.trim_start().len();
            self.buf.drain(..lead);
            if self.buf.is_empty() {
                return false;
            }
            self.content_start = false;
        }
        let mut events = vec![THINK_OPEN, THINK_CLOSE, TOOL_OPEN];
        if self.tools() {
            events.push(USER_OPEN);
            events.extend(JSON_STARTS);
        }
        match earliest(&self.buf, &events) {
            Event::Tag(i, THINK_OPEN) => {
                self.content_until(out, i, false, THINK_OPEN.len());
                self.state = State::Think;
            }
            // With thinking on, `</think>` right after text Go held back as a possible tag is
            // content.
            Event::Tag(i, THINK_CLOSE)
                if self.emit_thinking && partial_tag_len(&self.buf[..i], &HELD) > 0 =>
            {
                self.content_until(out, i + THINK_CLOSE.len(), false, 0)
            }
            Event::Tag(i, THINK_CLOSE) => self.content_until(out, i, true, THINK_CLOSE.len()),
            Event::Tag(i, TOOL_OPEN) => {
                self.content_until(out, i, true, TOOL_OPEN.len());
                self.state = State::Tool;
            }
            Event::Tag(i, USER_OPEN) => {
                self.content_until(out, i, true, 0);
                self.state = State::User;
            }
            Event::Tag(i, _) => {
                // A JSON start: the whitespace before it stays with the object.
                let text = self.buf[..i].trim_end().len();
                self.content_until(out, text, false, 0);
                self.state = State::Json;
                (self.json_at, self.checked) = (i - text, 0);
                (self.dead, self.absorbed) = (false, false);
            }
            Event::None if done => {
                let text = std::mem::take(&mut self.buf);
                out.content.push_str(text.trim_end());
                return false;
            }
            Event::None => {
                let keep =
                    partial_tag_len(&self.buf, &events).max(partial_tag_len(&self.buf, &HELD));
                let emit = self.buf[..self.buf.len() - keep].trim_end().len();
                self.content_until(out, emit, false, 0);
                return false;
            }
        }
        true
    }

    fn tool(&mut self, out: &mut Parsed, done: bool) -> bool {
        let (raw, closed) = match self.buf.find(TOOL_CLOSE) {
            Some(i) => (self.buf[..i].to_string(), true),
            None if done && !self.buf.trim().is_empty() => (self.buf.clone(), false),
            None => return false,
        };
        match parse(&raw, &self.schemas) {
            Some(call) => self.call(out, call),
            // A call Go cannot parse fails its request; herd returns its text.
            None => {
                out.content.push_str(TOOL_OPEN);
                out.content.push_str(&raw);
                if closed {
                    out.content.push_str(TOOL_CLOSE);
                }
            }
        }
        self.buf
            .drain(..raw.len() + if closed { TOOL_CLOSE.len() } else { 0 });
        self.state = State::Content;
        closed
    }

    fn user(&mut self, out: &mut Parsed, done: bool) -> bool {
        let body = USER_OPEN.len();
        match earliest(&self.buf[body..], &[THINK_OPEN, TOOL_OPEN, USER_CLOSE]) {
            Event::Tag(i, THINK_OPEN) => {
                self.content_until(out, body + i, false, THINK_OPEN.len());
                self.state = State::Think;
            }
            Event::Tag(i, TOOL_OPEN) => {
                self.content_until(out, body + i, true, TOOL_OPEN.len());
                self.state = State::Tool;
            }
            Event::Tag(i, _) => {
                let block: String = self.buf.drain(..body + i + USER_CLOSE.len()).collect();
                self.state = State::Content;
                match alias(&block[body..body + i], &self.schemas) {
                    Some(call) => self.call(out, call),
                    None => self.not_a_call(out, &block),
                }
            }
            Event::None if done => {
                self.at_end(out);
                return false;
            }
            Event::None => return false,
        }
        true
    }

    /// A `<user>` block that is not a call: Go reads it again as content, all at once. Its first
    /// `{` may start a JSON call, which the `</user>` after it keeps from ever completing, and
    /// within which a further `<user>` block (closed by the same `</user>`) is tried as a call.
    fn not_a_call(&mut self, out: &mut Parsed, block: &str) {
        let Some(j) = block
            .find('{')
            .filter(|&j| looks_like_call(&block[j..], false))
        else {
            out.content.push_str(block);
            return;
        };
        out.content.push_str(block[..j].trim_end());
        let region = &block[j..];
        let mut absorbed = false;
        if let Some(p) = region.find(USER_OPEN) {
            let inner = &region[p + USER_OPEN.len()..region.len() - USER_CLOSE.len()];
            if let Some(call) = alias(inner, &self.schemas) {
                out.content.push_str(region[..p].trim_end());
                self.call(out, call);
                return;
            }
            absorbed = true;
        }
        self.buf.insert_str(0, region);
        self.state = State::Json;
        (self.json_at, self.checked, self.dead, self.absorbed) = (0, 0, true, absorbed);
    }

    fn json(&mut self, out: &mut Parsed, done: bool) -> bool {
        let at = self.json_at;
        let events: &[&'static str] = if self.absorbed {
            &[THINK_OPEN, TOOL_OPEN]
        } else {
            &[THINK_OPEN, TOOL_OPEN, USER_OPEN]
        };
        let event = earliest(&self.buf[at..], events);
        let limit = match event {
            Event::Tag(i, _) => at + i,
            Event::None => self.buf.len(),
        };
        let from = (at + self.checked).min(limit);
        if !self.dead && self.buf[from..limit].contains('}') {
            match json_value(&self.buf[at..limit]) {
                Json::Complete(n) => {
                    match parse(&self.buf[at..at + n], &self.schemas) {
                        Some(call) => {
                            self.call(out, call);
                            self.buf.drain(..at + n);
                        }
                        // Go fails the request; herd returns the object as content.
                        None => self.content_until(out, at + n, false, 0),
                    }
                    self.state = State::Content;
                    return true;
                }
                Json::Invalid => self.dead = true,
                Json::Incomplete => self.checked = limit - at,
            }
        }
        match event {
            Event::Tag(i, THINK_OPEN) => {
                self.content_until(out, at + i, false, THINK_OPEN.len());
                self.state = State::Think;
            }
            Event::Tag(i, TOOL_OPEN) => {
                self.content_until(out, at + i, true, TOOL_OPEN.len());
                self.state = State::Tool;
            }
            Event::Tag(i, _) => {
                self.content_until(out, at + i, true, 0);
                self.state = State::User;
            }
            Event::None if done => {
                self.at_end(out);
                return false;
            }
            Event::None => return false,
        }
        true
    }

    /// The end of the response inside a `<user>` block or a JSON object: Go reads its text as
    /// content, where the first `{` may still start a call that parses.
    fn at_end(&mut self, out: &mut Parsed) {
        let text = std::mem::take(&mut self.buf);
        let call = text
            .find('{')
            .filter(|&j| looks_like_call(&text[j..], true))
            .and_then(|j| Some((j, parse(&text[j..], &self.schemas)?)));
        match call {
            Some((j, call)) => {
                out.content.push_str(text[..j].trim_end());
                self.call(out, call);
            }
            None => out.content.push_str(text.trim_end()),
        }
        self.state = State::Content;
    }
}

impl Parser for Laguna {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, done) {}
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, THINK_CLOSE)
    }
}

#[cfg(test)]
#[path = "laguna_tests.rs"]
mod tests;
