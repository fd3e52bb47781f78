//! The Lark grammar text for a protocol `Constraint` (DESIGN 6): pure string building, so the
//! compile cache can key on the result.
//!
//! Without closing strings the grammar is just the JSON schema. With closing strings it is the
//! single-pass form: free text that contains none of them, then (optionally) the first closing
//! string and the schema. Two lexemes carry the thinking:
//! - `THINK`: any text containing no textual closing string — where a response may end (the tail
//!   is optional, so a response that never closes its thinking is delivered unchanged);
//! - `THINK_CLOSE`: text ending in a closing string, with no closing string completed earlier —
//!   it cannot extend past the first completed one, so the lexeme ends exactly there ("lazy").
//!
//! One regex lexeme per role (rather than text + a separate closing lexeme) matters for closing
//! strings that share a prefix with the text: with "\n\n", text ending in "\n" followed by "\n"
//! would otherwise need the lexer to move the first "\n" back out of the text lexeme.
//! A closing string that the vocabulary holds as one special token (e.g. `</think>` as a control
//! token) is also accepted as that token, after `THINK`.
//!
//! Harmony-style closes (`<|channel|>final<|message|>`: a control token, text, more parts) get a
//! token-level form ([`mixed_grammar`]): the thinking is a run of text and control tokens in which
//! the opening control token is always followed by text that does not start the close's text.

use serde_json::{json, Value};

/// Whitespace the JSON grammar allows between tokens: one space, or one newline and up to 20
/// indentation chars (llama.cpp's JSON grammar bounds it the same way), so a small model can
/// pretty-print but cannot spend its budget on blank lines.
pub const JSON_WHITESPACE: &str = r"(\x20|\x0A[\x20\x09]{0,20})";

/// Whitespace allowed between the closing string and the JSON ("</think>\n\n{").
const BODY_WHITESPACE: &str = r"[\x20\x0A\x0D\x09]{1,4}";

/// Ollama's `format: "json"` is llama.cpp's JSON grammar, whose root is an object.
pub fn any_json_object() -> Value {
    json!({"type": "object"})
}

/// The schema as compiled: objects closed as llama.cpp closes them ([`close_objects`]), our
/// whitespace bound and `oneOf` as `anyOf` (llama.cpp's converter does the same), unless the
/// caller set its own llguidance options.
pub fn with_options(schema: &Value) -> Value {
    let mut s = schema.clone();
    close_objects(&mut s, false);
    if let Value::Object(m) = &mut s {
        m.entry("x-guidance").or_insert_with(
            || json!({"whitespace_pattern": JSON_WHITESPACE, "coerce_one_of": true}),
        );
    }
    s
}

/// Ollama's schema semantics (llama.cpp's json_schema_to_grammar): an object schema that lists
/// `properties` admits only those keys unless it says `additionalProperties` itself (true or a
/// schema) or has `patternProperties`. JSON Schema proper (and llguidance) leave such objects
/// open, which lets a small model add keys until it runs out of tokens. An object without
/// `properties` stays any object, as in llama.cpp. Members of an `allOf` are left open: closing
/// each would make their intersection admit only the keys they share, where llama.cpp merges them.
pub fn close_objects(schema: &mut Value, in_all_of: bool) {
    let Value::Object(m) = schema else { return };
    if !in_all_of
        && m.contains_key("properties")
        && !m.contains_key("additionalProperties")
        && !m.contains_key("patternProperties")
        && !m.contains_key("unevaluatedProperties")
    {
        m.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, v) in m.iter_mut() {
        match key.as_str() {
            // Maps of name -> subschema.
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                if let Value::Object(sub) = v {
                    sub.values_mut().for_each(|s| close_objects(s, false));
                }
            }
            "allOf" => {
                if let Value::Array(list) = v {
                    list.iter_mut().for_each(|s| close_objects(s, true));
                }
            }
            "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(list) = v {
                    list.iter_mut().for_each(|s| close_objects(s, false));
                }
            }
            // A single subschema (an `items` array is the old tuple form).
            "items"
            | "additionalProperties"
            | "not"
            | "contains"
            | "then"
            | "else"
            | "if"
            | "additionalItems"
            | "unevaluatedItems" => match v {
                Value::Array(list) => list.iter_mut().for_each(|s| close_objects(s, false)),
                other => close_objects(other, false),
            },
            _ => {}
        }
    }
}

/// Lark for `schema` behind the closing strings. `special` maps a closing string to a special
/// token id when the vocabulary has it as one control token.
pub fn grammar(
    schema: &Value,
    closing: &[String],
    special: impl Fn(&str) -> Option<u32>,
) -> String {
    let json = format!("%json {}", with_options(schema));
    let closing: Vec<&String> = closing.iter().filter(|c| !c.is_empty()).collect();
    if closing.is_empty() {
        return format!("start: {json}\n");
    }
    let alt = closing
        .iter()
        .map(|c| escape(c))
        .collect::<Vec<_>>()
        .join("|");
    let mut out = String::from("start: THINK | THINK_CLOSE body");
    let mut specials: Vec<u32> = closing.iter().filter_map(|c| special(c)).collect();
    specials.sort_unstable();
    specials.dedup();
    for id in &specials {
        out.push_str(&format!(" | THINK <[{id}]> body"));
    }
    out.push('\n');
    // Whitespace after the closing string ("</think>\n\n{…}") is natural and harmless.
    out.push_str(&format!(
        "body: BODY_WS? value\nvalue: {json}\nBODY_WS: /{BODY_WHITESPACE}/\n"
    ));
    out.push_str(&format!(
        "THINK: /(?s:.*)/ & ~/(?s:.*({alt}).*)/\n\
         THINK_CLOSE: /(?s:.*({alt}))/ & ~/(?s:.*({alt}).+)/\n"
    ));
    out
}

/// A closing string cut into control tokens and the text between them.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Special(u32),
}

/// Cut `s` at every control token's text (longest match first at each position).
pub fn segments(s: &str, special: impl Fn(&str) -> Option<u32>, max_len: usize) -> Vec<Part> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < s.len() {
        let hit = (1..=max_len.min(s.len() - i))
            .rev()
            .filter(|&n| s.is_char_boundary(i + n))
            .find_map(|n| special(&s[i..i + n]).map(|id| (n, id)));
        match hit {
            Some((n, id)) => {
                if !text.is_empty() {
                    out.push(Part::Text(std::mem::take(&mut text)));
                }
                out.push(Part::Special(id));
                i += n;
            }
            None => {
                let c = s[i..].chars().next().unwrap_or_default();
                text.push(c);
                i += c.len_utf8().max(1);
            }
        }
    }
    if !text.is_empty() {
        out.push(Part::Text(text));
    }
    out
}

/// Single-pass grammar for one close of the form `<[a]> TEXT …` (harmony's final header).
/// `others`: every other control token the thinking may contain (never the end tokens).
pub fn mixed_grammar(schema: &Value, parts: &[Part], others: &[u32]) -> Option<String> {
    let (Some(Part::Special(a)), Some(Part::Text(t))) = (parts.first(), parts.get(1)) else {
        return None;
    };
    let json = format!("%json {}", with_options(schema));
    let mut close = format!("<[{a}]> CLOSE_TEXT");
    for (k, p) in parts[2..].iter().enumerate() {
        match p {
            Part::Special(id) => close.push_str(&format!(" <[{id}]>")),
            Part::Text(_) => close.push_str(&format!(" CLOSE_{k}")),
        }
    }
    let mut item = format!("item: TEXT | <[{a}]> AFTER_OPEN");
    if !others.is_empty() {
        // One token-range lexeme, not one alternative per token: vocabularies hold thousands of
        // control tokens and the parser bounds the items per row.
        item.push_str(&format!(" | <[{}]>", ranges(others)));
    }
    let mut out = format!(
        "start: pre | pre {close} body\npre: item*\n{item}\n\
         body: BODY_WS? value\nvalue: {json}\nBODY_WS: /{BODY_WHITESPACE}/\n\
         TEXT: /(?s:.+)/\nAFTER_OPEN: /(?s:.+)/ & ~/{t}(?s:.*)/\nCLOSE_TEXT: /{t}/\n",
        t = escape(t)
    );
    for (k, p) in parts[2..].iter().enumerate() {
        if let Part::Text(u) = p {
            out.push_str(&format!("CLOSE_{k}: /{}/\n", escape(u)));
        }
    }
    Some(out)
}

/// Ids as llguidance token ranges, sorted and merged: `1-3,7`.
pub fn ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// A regex matching exactly `s`: every non-alphanumeric char as a `\x{..}` escape, which the
/// regex syntax accepts everywhere and which cannot end the Lark `/…/` literal.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push_str(&format!("\\x{{{:X}}}", c as u32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_closing_strings_is_the_bare_schema() {
        let g = grammar(&json!({"type": "integer"}), &[], |_| None);
        assert!(g.starts_with("start: %json {"), "{g}");
        assert!(!g.contains("THINK"));
        // Empty strings are not closing strings.
        assert_eq!(
            grammar(&json!({}), &[String::new()], |_| None),
            grammar(&json!({}), &[], |_| None)
        );
    }

    #[test]
    fn ranges_merge_runs() {
        assert_eq!(ranges(&[7, 1, 2, 3, 3, 9, 10]), "1-3,7,9-10");
        assert_eq!(ranges(&[5]), "5");
    }

    #[test]
    fn escape_covers_regex_and_lark_metacharacters() {
        assert_eq!(escape("a.b"), r"a\x{2E}b");
        assert_eq!(escape("</think>"), r"\x{3C}\x{2F}think\x{3E}");
        assert_eq!(escape("\n\n"), r"\x{A}\x{A}");
        assert_eq!(escape("é"), r"\x{E9}");
    }

    #[test]
    fn options_are_added_but_never_override_the_callers() {
        let s = with_options(&json!({"type": "object"}));
        assert_eq!(s["x-guidance"]["whitespace_pattern"], JSON_WHITESPACE);
        let mine = json!({"type": "object", "x-guidance": {"whitespace_flexible": false}});
        assert_eq!(with_options(&mine), mine);
    }

    #[test]
    fn objects_with_properties_are_closed_as_llama_cpp_closes_them() {
        let closed = |s: Value| {
            let mut s = s;
            close_objects(&mut s, false);
            s
        };
        let p = json!({"a": {"type": "string"}});
        let cases = [
            // (input, expected)
            (
                json!({"type": "object", "properties": p}),
                json!({"type": "object", "properties": p, "additionalProperties": false}),
            ),
            // The caller's own choice stays, true or a schema.
            (
                json!({"properties": p, "additionalProperties": true}),
                json!({"properties": p, "additionalProperties": true}),
            ),
            (
                json!({"properties": p, "additionalProperties": {"type": "integer"}}),
                json!({"properties": p, "additionalProperties": {"type": "integer"}}),
            ),
            // No properties: any object (format "json" is this schema).
            (json!({"type": "object"}), json!({"type": "object"})),
            (
                json!({"properties": p, "patternProperties": {"^x": {}}}),
                json!({"properties": p, "patternProperties": {"^x": {}}}),
            ),
            // Nested: properties, items, $defs, anyOf.
            (
                json!({"type": "array", "items": {"properties": p}}),
                json!({"type": "array", "items": {"properties": p, "additionalProperties": false}}),
            ),
            (
                json!({"$defs": {"D": {"properties": p}}, "anyOf": [{"properties": p}]}),
                json!({"$defs": {"D": {"properties": p, "additionalProperties": false}},
                       "anyOf": [{"properties": p, "additionalProperties": false}]}),
            ),
            (
                json!({"properties": {"o": {"properties": p}}}),
                json!({"properties": {"o": {"properties": p, "additionalProperties": false}},
                       "additionalProperties": false}),
            ),
            // allOf members stay open (their keys are merged, not intersected).
            (
                json!({"allOf": [{"properties": p}, {"properties": {"b": {}}}]}),
                json!({"allOf": [{"properties": p}, {"properties": {"b": {}}}]}),
            ),
            (json!(true), json!(true)),
        ];
        for (input, want) in cases {
            assert_eq!(closed(input.clone()), want, "{input}");
        }
    }

    #[test]
    fn special_closing_tokens_get_their_own_alternative() {
        let close = vec!["</think>".to_string(), "\n\n".to_string()];
        let g = grammar(&json!({}), &close, |c| (c == "</think>").then_some(7));
        assert!(g.contains("| THINK <[7]> body"), "{g}");
        assert_eq!(g.matches("<[").count(), 1);
    }
}
