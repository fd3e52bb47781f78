//! The Jinja path: renders a GGUF `tokenizer.chat_template` with minijinja configured like
//! Hugging Face's `apply_chat_template` (trim_blocks + lstrip_blocks, loop controls, Python
//! string/dict methods via `minijinja-contrib`'s pycompat, `raise_exception`, `strftime_now`,
//! and a `tojson` that prints like Python's `json.dumps`).
//!
//! Rendering is bounded like the Go engine's (`gotmpl::limits`): minijinja's fuel (one unit per
//! VM instruction) scales with the size of the context, its recursion limit is lowered to
//! [`MAX_RECURSION`], and the output goes through a writer that fails past the output cap, so a
//! runaway loop answers a 400 within a fraction of a second instead of rendering for minutes.

use minijinja::value::{Kwargs, Value as JValue};
use minijinja::{Environment, ErrorKind};
use serde_json::{json, Map, Value as J};

use super::gotmpl::limits::{BASE_OUTPUT, BASE_STEPS, OUTPUT_PER_INPUT_BYTE, STEPS_PER_VALUE};
use super::render::{Message, Think};
use crate::error::{Error, Result};

const NAME: &str = "chat_template";

/// Nested macro calls / includes minijinja may make (its default is 500; a 2 MiB stack wants
/// less).
const MAX_RECURSION: usize = 100;

/// A compiled Jinja chat template plus the special-token strings it may reference.
pub struct JinjaChat {
    env: Environment<'static>,
    src: String,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for JinjaChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JinjaChat")
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

impl JinjaChat {
    pub fn new(
        source: String,
        bos: String,
        eos: String,
    ) -> std::result::Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        env.set_recursion_limit(MAX_RECURSION);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<JValue, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, strip_generation_tags(&source))?;
        Ok(JinjaChat {
            env,
            src: source,
            bos,
            eos,
        })
    }

    pub fn source(&self) -> &str {
        &self.src
    }

    /// Renders with the message shape the template accepts. Templates disagree on two points
    /// (llama.cpp probes for the same): tool-call `arguments` as an object (most) or a JSON
    /// string (DeepSeek), and `content` as a string (most) or a list of typed parts (Gemma 3).
    /// We try the common shape first and fall back only when rendering fails; if every shape
    /// fails, the first error is reported.
    pub fn render(
        &self,
        messages: &[Message],
        tools: &[J],
        think: Option<&Think>,
    ) -> Result<String> {
        let mut first_err = None;
        for shape in SHAPES {
            let msgs = messages.iter().map(|m| message_json(m, shape)).collect();
            let mut ctx = Map::new();
            ctx.insert("messages".into(), J::Array(msgs));
            // HF passes `tools=None` / `documents=None` when absent; an undefined value would
            // pass `tools is not none` checks.
            let tools_val = if tools.is_empty() {
                J::Null
            } else {
                J::Array(tools.to_vec())
            };
            ctx.insert("tools".into(), tools_val);
            ctx.insert("documents".into(), J::Null);
            ctx.insert("add_generation_prompt".into(), J::Bool(true));
            ctx.insert("bos_token".into(), J::String(self.bos.clone()));
            ctx.insert("eos_token".into(), J::String(self.eos.clone()));
            if let Some(t) = think {
                // Ollama's native mode sends these as chat_template_kwargs.
                ctx.insert("enable_thinking".into(), J::Bool(t.enabled()));
                if let Think::Level(l) = t {
                    ctx.insert("reasoning_effort".into(), J::String(l.clone()));
                }
            }
            let ctx = J::Object(ctx);
            match self.render_bounded(&ctx) {
                Ok(out) => return Ok(out),
                // A bound is hit by every shape alike: report it at once.
                Err(e @ Error::TemplateLimit(_)) => return Err(e),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or_else(|| Error::Internal("chat template: no shape".into())))
    }

    /// One render of `ctx` under fuel and an output cap that grow with the context's size.
    fn render_bounded(&self, ctx: &J) -> Result<String> {
        let (nodes, bytes) = json_size(ctx);
        let fuel = BASE_STEPS.saturating_add(nodes.saturating_mul(STEPS_PER_VALUE));
        let cap = BASE_OUTPUT.saturating_add(bytes.saturating_mul(OUTPUT_PER_INPUT_BYTE));
        // Environments share their compiled templates and function tables (Arc), so a clone
        // per render only carries this render's fuel.
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        let tmpl = env
            .get_template(NAME)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let mut out = Capped {
            buf: Vec::new(),
            cap,
            over: false,
        };
        let r = tmpl
            .render_captured_to(JValue::from_serialize(ctx), &mut out)
            .map(drop);
        drop(tmpl);
        match r {
            Ok(_) => String::from_utf8(out.buf)
                .map_err(|e| Error::Internal(format!("chat template: {e}"))),
            Err(_) if out.over => Err(Error::TemplateLimit(format!(
                "chat template: output exceeds {cap} bytes"
            ))),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(Error::TemplateLimit(format!(
                "chat template: execution exceeded its step limit ({e})"
            ))),
            Err(e) if e.to_string().contains("recursion limit exceeded") => {
                Err(Error::TemplateLimit(format!("chat template: {e}")))
            }
            Err(e) => Err(Error::Internal(format!("chat template: {e}"))),
        }
    }
}

/// A writer that refuses to grow past `cap` bytes (and remembers that it did).
struct Capped {
    buf: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(b.len()) > self.cap {
            self.over = true;
            return Err(std::io::Error::other("template output cap"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (nodes, string bytes) of a JSON value, iteratively.
fn json_size(v: &J) -> (u64, usize) {
    let (mut nodes, mut bytes) = (0u64, 0usize);
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        nodes += 1;
        bytes += 8;
        match v {
            J::String(s) => bytes += s.len(),
            J::Array(a) => stack.extend(a.iter()),
            J::Object(o) => {
                for (k, v) in o {
                    bytes += k.len();
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    (nodes, bytes)
}

/// How messages are shaped for the template.
#[derive(Clone, Copy)]
struct Shape {
    /// Tool-call arguments as a JSON string instead of an object.
    string_args: bool,
    /// Content as `[{"type": "text", "text": ...}]` instead of a string.
    typed_content: bool,
}

const SHAPES: [Shape; 4] = [
    Shape {
        string_args: false,
        typed_content: false,
    },
    Shape {
        string_args: true,
        typed_content: false,
    },
    Shape {
        string_args: false,
        typed_content: true,
    },
    Shape {
        string_args: true,
        typed_content: true,
    },
];

/// HF's `AssistantTracker` extension adds `{% generation %}...{% endgeneration %}` (marks
/// assistant tokens for training masks; no output of its own). minijinja lacks it, so the tags
/// become an always-true `if` with the same trim markers, keeping whitespace control intact.
fn strip_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("{%") {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lt, body) = inner.strip_prefix('-').map_or(("", inner), |b| ("-", b));
        let (body, rt) = body.strip_suffix('-').map_or((body, ""), |b| (b, "-"));
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lt} if true {rt}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lt} endif {rt}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// OpenAI-style message dict, the shape HF templates read.
fn message_json(m: &Message, shape: Shape) -> J {
    let mut o = Map::new();
    o.insert("role".into(), J::String(m.role.clone()));
    let content = if shape.typed_content {
        json!([{"type": "text", "text": m.content}])
    } else {
        J::String(m.content.clone())
    };
    o.insert("content".into(), content);
    if let Some(t) = &m.thinking {
        o.insert("reasoning_content".into(), J::String(t.clone()));
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<J> = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut call = Map::new();
                if !c.id.is_empty() {
                    call.insert("id".into(), J::String(c.id.clone()));
                }
                call.insert("type".into(), J::String("function".into()));
                let args = if shape.string_args {
                    J::String(serde_json::to_string(&c.arguments).unwrap_or_default())
                } else {
                    J::Object(c.arguments.clone())
                };
                call.insert(
                    "function".into(),
                    json!({"name": c.name, "arguments": args}),
                );
                J::Object(call)
            })
            .collect();
        o.insert("tool_calls".into(), J::Array(calls));
    }
    if let Some(n) = &m.tool_name {
        o.insert("name".into(), J::String(n.clone()));
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), J::String(id.clone()));
    }
    J::Object(o)
}

/// `tojson(value, indent=None)` formatted like Python's `json.dumps(..., ensure_ascii=False)`:
/// `", "` and `": "` separators when compact, newline + indent otherwise.
fn tojson(
    v: JValue,
    indent: Option<usize>,
    kwargs: Kwargs,
) -> std::result::Result<JValue, minijinja::Error> {
    let indent = match kwargs.get::<Option<usize>>("indent")? {
        Some(i) => Some(i),
        None => indent,
    };
    kwargs.assert_all_used()?;
    let j: J = serde_json::to_value(&v)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_dump(&j, indent, 0, &mut out);
    Ok(JValue::from_safe_string(out))
}

fn py_dump(j: &J, indent: Option<usize>, level: usize, out: &mut String) {
    let nl = |out: &mut String, lvl: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * lvl));
        }
    };
    match j {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(if indent.is_some() { "," } else { ", " });
                }
                nl(out, level + 1);
                py_dump(v, indent, level + 1, out);
            }
            nl(out, level);
            out.push(']');
        }
        J::Object(o) if !o.is_empty() => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(if indent.is_some() { "," } else { ", " });
                }
                nl(out, level + 1);
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(": ");
                py_dump(v, indent, level + 1, out);
            }
            nl(out, level);
            out.push('}');
        }
        J::Number(n) if n.is_f64() => {
            // Python prints floats with repr: always a fraction or exponent.
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e16 {
                out.push_str(&format!("{f:.1}"));
            } else {
                out.push_str(&f.to_string());
            }
        }
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// `strftime_now(fmt)` over UTC for the directives chat templates use.
fn strftime_now(fmt: &str) -> String {
    let now = time::OffsetDateTime::now_utc();
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let month = now.month();
        let wd = now.weekday();
        match chars.next() {
            Some('Y') => out.push_str(&format!("{:04}", now.year())),
            Some('y') => out.push_str(&format!("{:02}", now.year() % 100)),
            Some('m') => out.push_str(&format!("{:02}", u8::from(month))),
            Some('d') => out.push_str(&format!("{:02}", now.day())),
            Some('e') => out.push_str(&format!("{:>2}", now.day())),
            Some('j') => out.push_str(&format!("{:03}", now.ordinal())),
            Some('B') => out.push_str(&month.to_string()),
            Some('b') => out.push_str(&month.to_string()[..3]),
            Some('A') => out.push_str(&wd.to_string()),
            Some('a') => out.push_str(&wd.to_string()[..3]),
            Some('H') => out.push_str(&format!("{:02}", now.hour())),
            Some('I') => out.push_str(&format!("{:02}", (now.hour() + 11) % 12 + 1)),
            Some('p') => out.push_str(if now.hour() < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{:02}", now.minute())),
            Some('S') => out.push_str(&format!("{:02}", now.second())),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tojson_prints_like_python() {
        let mut s = String::new();
        py_dump(&json!({"b": [1, 2.0, "x<"], "a": {}}), None, 0, &mut s);
        assert_eq!(s, r#"{"b": [1, 2.0, "x<"], "a": {}}"#);
        let mut s = String::new();
        py_dump(&json!({"k": [1]}), Some(2), 0, &mut s);
        assert_eq!(s, "{\n  \"k\": [\n    1\n  ]\n}");
    }

    #[test]
    fn think_kwargs() {
        let src = "{{ enable_thinking is defined }}|{{ enable_thinking }}|{{ reasoning_effort }}";
        let j = JinjaChat::new(src.into(), String::new(), String::new()).unwrap();
        assert_eq!(j.render(&[], &[], None).unwrap(), "False||");
        let high = Think::Level("high".into());
        assert_eq!(j.render(&[], &[], Some(&high)).unwrap(), "True|True|high");
        assert_eq!(
            j.render(&[], &[], Some(&Think::Bool(false))).unwrap(),
            "True|False|"
        );
    }

    #[test]
    fn generation_tags_become_transparent() {
        assert_eq!(
            strip_generation_tags("a{%- generation %}b{% endgeneration -%} {% if x %}"),
            "a{%- if true %}b{% endif -%} {% if x %}"
        );
        let j = JinjaChat::new(
            "x {%- generation -%} y {% endgeneration %}z".into(),
            String::new(),
            String::new(),
        );
        assert_eq!(j.unwrap().render(&[], &[], None).unwrap(), "xy z");
    }

    #[test]
    fn falls_back_to_string_arguments_and_typed_content() {
        let calls = vec![super::super::render::ToolCall {
            name: "f".into(),
            arguments: serde_json::from_str(r#"{"a":1}"#).unwrap(),
            ..Default::default()
        }];
        let msgs = [Message {
            tool_calls: calls,
            ..Message::new("assistant", "hi")
        }];
        // String concatenation only works when arguments is a string (DeepSeek style).
        let src = "{{ 'args=' + messages[0].tool_calls[0].function.arguments }}";
        let j = JinjaChat::new(src.into(), String::new(), String::new()).unwrap();
        assert_eq!(j.render(&msgs, &[], None).unwrap(), r#"args={"a":1}"#);
        // Typed content parts (Gemma 3 style).
        let src = "{{ messages[0].content[0].text + '!' }}";
        let j = JinjaChat::new(src.into(), String::new(), String::new()).unwrap();
        assert_eq!(j.render(&msgs, &[], None).unwrap(), "hi!");
    }

    #[test]
    fn hf_features() {
        // trim_blocks eats the newline after `{% endif %}`; `-%}` eats the one after endfor.
        let src = "{%- for m in messages %}{{ m.content.strip() | upper }}{% if m.content.startswith(' h') %}!{% endif %}\n{% endfor -%}\n{{ bos_token }}{{ tools | tojson }}{% for i in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}";
        let j = JinjaChat::new(src.into(), "<s>".into(), "</s>".into()).unwrap();
        let out = j
            .render(
                &[Message::new("user", " hi ")],
                &[json!({"type": "function"})],
                None,
            )
            .unwrap();
        assert_eq!(out, "HI!<s>[{\"type\": \"function\"}]1");
        let src = "{% if tools is not none %}T{% endif %}{% if documents is none %}D{% endif %}";
        let j = JinjaChat::new(src.into(), String::new(), String::new()).unwrap();
        assert_eq!(j.render(&[], &[], None).unwrap(), "D");
        let j = JinjaChat::new(
            "{{ raise_exception('bad roles') }}".into(),
            String::new(),
            String::new(),
        )
        .unwrap();
        let e = j.render(&[], &[], None).unwrap_err();
        assert!(e.to_string().contains("bad roles"), "{e}");
        let j = JinjaChat::new(
            "{{ strftime_now('%Y-%m-%d') }}".into(),
            String::new(),
            String::new(),
        )
        .unwrap();
        assert_eq!(j.render(&[], &[], None).unwrap().len(), 10);
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn limit(src: &str) -> String {
        let j = JinjaChat::new(src.into(), String::new(), String::new()).unwrap();
        let t0 = Instant::now();
        let e = j
            .render(&[Message::new("user", "hi")], &[], None)
            .unwrap_err();
        // Debug build on a shared 2-core box; release takes milliseconds.
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert!(matches!(e, Error::TemplateLimit(_)), "{e:?}");
        e.to_string()
    }

    #[test]
    fn runaway_loops_run_out_of_fuel() {
        let e = limit(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        );
        assert!(e.contains("step limit"), "{e}");
    }

    #[test]
    fn output_is_capped() {
        let e = limit("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}");
        assert!(e.contains("output exceeds"), "{e}");
    }

    #[test]
    fn recursion_is_bounded() {
        limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    }

    #[test]
    fn long_chats_still_render() {
        let j = JinjaChat::new(
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}".into(),
            String::new(),
            String::new(),
        )
        .unwrap();
        let msgs: Vec<_> = (0..5000)
            .map(|i| Message::new("user", &format!("m{i}")))
            .collect();
        let out = j.render(&msgs, &[], None).unwrap();
        assert!(out.starts_with("<user>m0<user>m1") && out.ends_with("m4999"));
    }
}
