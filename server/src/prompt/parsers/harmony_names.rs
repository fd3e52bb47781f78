//! Tool names for harmony (gpt-oss), Ollama's `FunctionNameMap`: harmony names functions as
//! TypeScript identifiers, so the prompt shows each of the request's tools under a valid one
//! (`get-weather` and `get weather` → `get_weather`, a second `get_weather` → `get_weather_2`)
//! and the model's calls to that name come back under the client's own name.
//!
//! Ollama renames only the request's `tools` list (the parser's `Init` returns them renamed for
//! the prompt); the conversation's earlier assistant `tool_calls` and the tool results'
//! `tool_name` reach the template as the client sent them. `/api/generate` has no tools, so
//! nothing is renamed there.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;

/// Harmony's built-in tools keep their names (they are not TypeScript identifiers).
const BUILTINS: [&str; 4] = ["browser.open", "browser.search", "browser.find", "python"];

/// The harmony names handed out for one request, and the client name behind each.
#[derive(Debug, Default, Clone)]
pub struct ToolNames {
    client: HashMap<String, String>,
}

impl ToolNames {
    /// The names of `tools` (`[{type, function:{name,…}}]`, as the client sent them), in order;
    /// a tool without a name is left out (Ollama leaves it unnamed and unmapped).
    pub fn of(tools: &[Value]) -> ToolNames {
        let mut names = ToolNames::default();
        for name in tools.iter().filter_map(name_of) {
            names.add(name);
        }
        names
    }

    /// The harmony name for `client`: its valid characters, numbered `_2`, `_3`, … when an
    /// earlier tool already took that name; a built-in keeps its own name whatever was taken.
    pub fn add(&mut self, client: &str) -> String {
        let base = valid_chars(client);
        let mut name = base.clone();
        let mut n = 2;
        while self.client.contains_key(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        if BUILTINS.contains(&client) {
            name = client.to_owned();
        }
        self.client.insert(name.clone(), client.to_owned());
        name
    }

    /// The client's name for a harmony name the model called; a name no tool was given under
    /// (a built-in the request did not declare, a name the model made up) stays as it is.
    pub fn client<'a>(&'a self, harmony: &'a str) -> &'a str {
        self.client.get(harmony).map_or(harmony, String::as_str)
    }
}

/// The request's tools as the prompt shows them to a harmony model: each named tool under its
/// harmony name, everything else unchanged.
pub fn prompt_tools(tools: &[Value]) -> Vec<Value> {
    let mut names = ToolNames::default();
    tools
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if let Some(name) = name_of(&t).map(str::to_owned) {
                t["function"]["name"] = Value::String(names.add(&name));
            }
            t
        })
        .collect()
}

fn name_of(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// Ollama's `convertToValidChars`: space, `-` and `.` become `_`; letters (Unicode category L),
/// decimal digits (Nd), `_` and `$` stay; anything else is dropped. Nothing left → `unnamed`; a
/// leading ASCII digit gets a `_` before it (Go tests the first byte, so only `0`-`9` count).
fn valid_chars(name: &str) -> String {
    static INVALID: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"[^\p{L}\p{Nd}_$]").expect("valid pattern"));
    let spaced = name.replace([' ', '-', '.'], "_");
    let kept = INVALID.replace_all(&spaced, "");
    match kept.as_bytes().first() {
        None => "unnamed".to_owned(),
        Some(b) if b.is_ascii_digit() => format!("_{kept}"),
        Some(_) => kept.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_become_identifiers() {
        let cases = [
            ("get weather", "get_weather"),
            ("get-weather", "get_weather"),
            ("get.weather", "get_weather"),
            ("get weather!", "get_weather"),
            ("a🫠bc", "abc"),
            ("🫠", "unnamed"),
            ("", "unnamed"),
            ("123", "_123"),
            ("9lives", "_9lives"),
            ("$", "$"),
            ("tab\tname", "tabname"),
            // Letters of any script stay; digits other than ASCII stay without a `_` before them.
            ("𝓸𝓵𝓵𝓪𝓶𝓪", "𝓸𝓵𝓵𝓪𝓶𝓪"),
            ("名前", "名前"),
            ("٣x", "٣x"),
            // Circled letters are symbols (So), not letters: dropped.
            ("ⓞⓛⓛⓐⓜⓐ123", "_123"),
            // Superscripts are numbers (No), not decimal digits.
            ("x²", "x"),
        ];
        for (client, want) in cases {
            assert_eq!(valid_chars(client), want, "{client:?}");
        }
    }

    #[test]
    fn repeated_names_are_numbered_and_builtins_kept() {
        let cases: &[(&[&str], &[&str])] = &[
            (
                &["get weather", "get weather"],
                &["get_weather", "get_weather_2"],
            ),
            (
                &[
                    "get weather",
                    "get_weather",
                    "get-weather",
                    "something-different",
                ],
                &[
                    "get_weather",
                    "get_weather_2",
                    "get_weather_3",
                    "something_different",
                ],
            ),
            (
                &["a", "a", "b", "a", "a", "b", "a"],
                &["a", "a_2", "b", "a_3", "a_4", "b_2", "a_5"],
            ),
            (
                &[
                    "browser.open",
                    "python",
                    "not.a.built-in.function",
                    "browser.not_real",
                ],
                &[
                    "browser.open",
                    "python",
                    "not_a_built_in_function",
                    "browser_not_real",
                ],
            ),
            // A built-in keeps its name even when its converted form was taken.
            (
                &["browser_open", "browser.open"],
                &["browser_open", "browser.open"],
            ),
            (&["python", "python"], &["python", "python"]),
            // A numbered name can itself collide with a later tool's name.
            (&["f", "f", "f_2"], &["f", "f_2", "f_2_2"]),
        ];
        for (clients, want) in cases {
            let mut names = ToolNames::default();
            let got: Vec<String> = clients.iter().map(|c| names.add(c)).collect();
            assert_eq!(&got, want, "{clients:?}");
            // Each harmony name leads back to the tool it was handed out for.
            for (c, h) in clients.iter().zip(*want) {
                assert_eq!(names.client(h), *c, "{h}");
            }
        }
    }

    #[test]
    fn prompt_tools_rename_in_place_and_map_back() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "get-weather", "description": "W",
                "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "get weather"}}),
            json!({"type": "function", "function": {"name": ""}}),
            json!({"type": "function", "function": {"name": "browser.search"}}),
        ];
        let shown = prompt_tools(&tools);
        let names: Vec<&str> = shown
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["get_weather", "get_weather_2", "", "browser.search"]
        );
        // Only the name changes.
        assert_eq!(shown[0]["function"]["description"], "W");
        assert_eq!(shown[0]["type"], "function");
        let back = ToolNames::of(&tools);
        assert_eq!(back.client("get_weather"), "get-weather");
        assert_eq!(back.client("get_weather_2"), "get weather");
        assert_eq!(back.client("browser.search"), "browser.search");
        // A name no tool was given under is the model's own.
        assert_eq!(back.client("lookup"), "lookup");
        assert_eq!(back.client("unnamed"), "unnamed");
    }
}
