//! Deep Cogito output (Ollama's `CogitoParser`, the `PARSER` name `cogito`): DeepSeek's tokens
//! parsed by the machine in [`super::deepseek3`], with Cogito's rules:
//! - a call's body is `function<｜tool▁sep｜>name` + "\n```json\n" + arguments + "\n```";
//! - a tool-output group the model writes itself (`<｜tool▁outputs▁begin｜>…`
//!   `<｜tool▁outputs▁end｜>`) is dropped, and so is the whitespace before it;
//! - thinking is on only when the request asks for it (`think` true or a level; unset is off),
//!   no non-empty assistant prefill is continued (nor herd's two-pass thinking prefill,
//!   [`super::deepseek3::after_thinking`]), and the request has no tools.

use serde_json::{Map, Value as J};

use super::deepseek3::{prefilled, DeepSeekTokens, Flavor, SEP};
use super::{govalue, Options};
use crate::prompt::Think;

/// The parser for `cogito`.
pub fn cogito(o: &Options) -> DeepSeekTokens {
    let tools = !o.tools.is_empty() || !o.schemas.is_empty();
    let thinking = o.think.is_some_and(Think::enabled) && !prefilled(o) && !tools;
    DeepSeekTokens::new(Flavor::Cogito, thinking)
}

/// `function<｜tool▁sep｜>name\n```json\n{args}\n```` (whatever stands before the separator is
/// ignored).
pub(super) fn call_body(body: &str) -> Option<(String, Map<String, J>)> {
    const FENCE: &str = "\n```json\n";
    let (_, rest) = body.split_once(SEP)?;
    let (name, rest) = rest.split_once(FENCE)?;
    let (args, _) = rest.split_once("\n```")?;
    Some((name.trim().to_string(), govalue::arguments(args)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{self, run};
    use crate::prompt::parsers::Parser;
    use crate::prompt::Message;
    use serde_json::json;

    fn make(think: Option<Think>, tools: &[String], last: Option<&Message>) -> DeepSeekTokens {
        cogito(&Options {
            think: think.as_ref(),
            tools,
            last,
            ..Default::default()
        })
    }

    fn on() -> DeepSeekTokens {
        make(Some(Think::Bool(true)), &[], None)
    }

    fn off() -> DeepSeekTokens {
        make(None, &[], None)
    }

    fn check(mk: fn() -> DeepSeekTokens, text: &str, want: (&str, &str, &[(&str, &str)])) {
        testutil::check(mk, text, want);
    }

    #[test]
    fn init_needs_think_and_no_tools() {
        assert_eq!(on().thinking_close(), ["</think>"]);
        assert!(off().thinking_close().is_empty());
        let tools = ["get_weather".to_string()];
        assert!(make(Some(Think::Bool(true)), &tools, None)
            .thinking_close()
            .is_empty());
        let prefill = Message::new("assistant", "Partial");
        assert!(make(Some(Think::Bool(true)), &[], Some(&prefill))
            .thinking_close()
            .is_empty());
        let schemas = [json!({"type": "function", "function": {"name": "f"}})];
        let o = Options {
            think: Some(&Think::Bool(true)),
            schemas: &schemas,
            ..Default::default()
        };
        assert!(cogito(&o).thinking_close().is_empty());
    }

    #[test]
    fn thinking_then_fenced_calls() {
        let text = "\nPlan it. </think> Sure.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\":\"Paris\",\"n\":2}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜> get_time \n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        check(
            on,
            text,
            (
                "Sure.",
                "\nPlan it.",
                &[
                    ("get_weather", r#"{"location":"Paris","n":2}"#),
                    ("get_time", "{}"),
                ],
            ),
        );
    }

    #[test]
    fn malformed_bodies_drop_the_block() {
        for body in [
            "get_weather\n```json\n{}\n```",                   // no separator
            "function<｜tool▁sep｜>get_weather {}",            // no fence
            "function<｜tool▁sep｜>f\n```json\n{}",            // no closing fence
            "function<｜tool▁sep｜>f\n```json\n{\"a\":}\n```", // bad JSON
        ] {
            let text = format!("A <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{body}<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{{}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> B");
            let r = run(&mut off(), &[&text]);
            assert_eq!(
                (r.content.as_str(), r.tool_calls.len()),
                ("AB", 0),
                "{body}"
            );
        }
    }

    #[test]
    fn tool_output_groups_are_dropped() {
        let text = "Calling. \n<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>22C<｜tool▁output▁end｜>\njunk<｜tool▁output▁begin｜>x<｜tool▁output▁end｜><｜tool▁outputs▁end｜>\n It is 22C.";
        check(off, text, ("Calling.It is 22C.", "", &[]));
        // A lone output tag is plain content for cogito; a group cut short by its end is dropped.
        check(
            off,
            "a<｜tool▁output▁begin｜>b<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>c<｜tool▁outputs▁end｜>d",
            ("a<｜tool▁output▁begin｜>bd", "", &[]),
        );
    }
}
