//! Pieces the OpenAI endpoints share: body decoding with OpenAI error shapes, the sampling
//! option mapping (OpenAI's defaults differ from Ollama's), `stop`, reasoning effort → `think`,
//! tool definitions and tool calls in both directions, ids and timestamps.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use rand::Rng;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use crate::api::types::{Logprob, Tool, ToolCall};

/// Decodes a request body with the native decoder's rules and messages (empty body, bad JSON,
/// unknown fields ignored), for an API whose errors have another shape.
pub fn decode<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::from(crate::error::Error::PayloadTooLarge)
        } else {
            ApiError::bad_request(r.body_text())
        }
    })?;
    Ok(crate::api::error::decode_json(&bytes)?)
}

/// The request body after its `Content-Encoding`: `zstd` is decoded with the output bounded by
/// `limit` (a small body must not expand into unbounded memory); identity passes through; any
/// other coding is a 400 rather than JSON garbage.
pub fn content_decode(
    headers: &axum::http::HeaderMap,
    body: Bytes,
    limit: usize,
) -> Result<Bytes, ApiError> {
    use std::io::Read;
    let coding = headers
        .get(axum::http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    match coding.as_deref() {
        None | Some("") | Some("identity") => Ok(body),
        Some("zstd") => {
            let bad = |e: &dyn std::fmt::Display| {
                ApiError::bad_request(format!("invalid zstd request body: {e}"))
            };
            let dec = ruzstd::decoding::StreamingDecoder::new(&body[..]).map_err(|e| bad(&e))?;
            let mut out = Vec::new();
            dec.take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| bad(&e))?;
            if out.len() > limit {
                return Err(crate::error::Error::PayloadTooLarge.into());
            }
            Ok(Bytes::from(out))
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "unsupported Content-Encoding '{other}'"
        ))),
    }
}

/// Seconds since the Unix epoch, OpenAI's `created`.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `<prefix><0..998>`, Ollama's id scheme for chat/text completions.
pub fn short_id(prefix: &str) -> String {
    format!("{prefix}{}", rand::thread_rng().gen_range(0..999))
}

/// `<prefix>` + `n` random `[a-z0-9]`.
pub fn random_id(prefix: &str, n: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let tail: String = (0..n)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect();
    format!("{prefix}{tail}")
}

/// The sampling fields OpenAI requests share.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Value>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    /// herd's image budgets as extra body fields (issue 17), passed on as the native options
    /// of the same names, which check them.
    pub image_min_tokens: Option<Value>,
    pub image_max_tokens: Option<Value>,
}

/// Which endpoint's option rules apply; Ollama's chat and text-completion layers differ in two
/// corners (see [`options`] and [`stops`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/responses`: as chat, except that an absent `top_p` is left to the model (Ollama's
    /// FromResponsesRequest, which does not assume OpenAI's 1.0 there).
    Responses,
    /// `/v1/completions`.
    Text,
}

/// Native `options` for an OpenAI request: `temperature` and `top_p` are 1.0 when absent
/// (OpenAI's defaults, not Ollama's 0.8/0.9), except `top_p` on responses ([`Dialect`]); on text
/// completions a `top_p` of 0 also means 1.0.
pub fn options(
    s: &Sampling,
    max_tokens: Option<i64>,
    dialect: Dialect,
) -> Result<Map<String, Value>, ApiError> {
    let mut o = Map::new();
    if let Some(n) = max_tokens {
        o.insert("num_predict".into(), json!(n));
    }
    o.insert("temperature".into(), json!(s.temperature.unwrap_or(1.0)));
    let top_p = match (s.top_p, dialect) {
        (Some(0.0), Dialect::Text) => Some(1.0),
        (Some(p), _) => Some(p),
        (None, Dialect::Responses) => None,
        (None, _) => Some(1.0),
    };
    if let Some(p) = top_p {
        o.insert("top_p".into(), json!(p));
    }
    if let Some(seed) = s.seed {
        o.insert("seed".into(), json!(seed));
    }
    let stop = stops(s.stop.as_ref(), dialect)?;
    if !stop.is_empty() {
        o.insert("stop".into(), json!(stop));
    }
    if let Some(p) = s.frequency_penalty {
        o.insert("frequency_penalty".into(), json!(p));
    }
    if let Some(p) = s.presence_penalty {
        o.insert("presence_penalty".into(), json!(p));
    }
    for (k, v) in [
        ("image_min_tokens", &s.image_min_tokens),
        ("image_max_tokens", &s.image_max_tokens),
    ] {
        if let Some(v) = v {
            o.insert(k.into(), v.clone());
        }
    }
    Ok(o)
}

/// The Go type name Ollama's messages print for a JSON value (`%T` of the decoded `any`).
pub fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `stop`: a string or an array of strings. Like Ollama, other shapes are ignored, and a
/// non-string element is skipped on chat but a 400 (`invalid type for 'stop' field: T`) on text
/// completions.
pub fn stops(v: Option<&Value>, dialect: Dialect) -> Result<Vec<String>, ApiError> {
    match v {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for x in a {
                match (x.as_str(), dialect) {
                    (Some(s), _) => out.push(s.to_owned()),
                    (None, Dialect::Chat | Dialect::Responses) => {}
                    (None, Dialect::Text) => {
                        return Err(ApiError::bad_request(format!(
                            "invalid type for 'stop' field: {}",
                            go_type(x)
                        )))
                    }
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// OpenAI reasoning effort → native `think`: `none` turns thinking off, `minimal` is `low`,
/// `xhigh`/`ultra` are `max`.
pub fn think(effort: Option<&str>) -> Result<Option<Value>, ApiError> {
    // An empty effort is no effort, as in Ollama's thinkFromReasoningEffort.
    let Some(e) = effort.filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(match e {
        "none" => json!(false),
        "minimal" => json!("low"),
        "low" | "medium" | "high" | "max" => json!(e),
        "xhigh" | "ultra" => json!("max"),
        other => {
            return Err(ApiError::bad_request(format!(
                "invalid reasoning value: {} (must be \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\", \"ultra\", \"max\", or \"none\")",
                crate::api::show::go_quote(other)
            )))
        }
    }))
}

/// The `tools` array itself: absent or null is no tools; anything but an array is a 400.
pub(super) fn tool_items(v: Option<&Value>) -> Result<&[Value], ApiError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(ApiError::bad_request("invalid 'tools': expected an array")),
    }
}

/// Function tools in the Chat Completions shape (`{type, function:{name, description,
/// parameters}}`), checked so that a malformed definition is a 400 rather than a silently
/// empty tool.
pub fn chat_tools(v: Option<&Value>) -> Result<Vec<Tool>, ApiError> {
    tool_items(v)?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.get("function").cloned().unwrap_or(Value::Null);
            check_tool(&format!("tools[{i}]"), t.get("type"), &f)?;
            tool_from(t.get("type"), &f)
        })
        .collect()
}

/// One function tool in the Responses shape (`{type:"function", name, description,
/// parameters}`), checked like [`chat_tools`]' items. `at` is where the client wrote it
/// (`tools[2]`, or `tools[0].tools[1]` inside a namespace), so an error points at the
/// client's own declaration rather than at a position after namespaces were expanded.
pub fn flat_tool(at: &str, t: &Value) -> Result<Tool, ApiError> {
    check_tool(at, t.get("type"), t)?;
    tool_from(t.get("type"), t)
}

fn check_tool(at: &str, kind: Option<&Value>, f: &Value) -> Result<(), ApiError> {
    let bad =
        |what: &str| ApiError::bad_request(format!("invalid tool definition at {at}: {what}"));
    match kind {
        Some(Value::String(k)) if k == "function" => {}
        Some(Value::String(k)) => {
            return Err(bad(&format!(
                "unsupported type '{k}' (only 'function' is supported)"
            )))
        }
        _ => return Err(bad("'type' must be \"function\"")),
    }
    if !f.is_object() {
        return Err(bad("'function' must be an object"));
    }
    match f.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        _ => return Err(bad("'name' must be a non-empty string")),
    }
    match f.get("parameters") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => return Err(bad("'parameters' must be a JSON schema object")),
    }
    match f.get("description") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(bad("'description' must be a string")),
    }
}

fn tool_from(kind: Option<&Value>, f: &Value) -> Result<Tool, ApiError> {
    let mut function = Map::new();
    for key in ["name", "description", "parameters"] {
        if let Some(v) = f.get(key).filter(|v| !v.is_null()) {
            function.insert(key.into(), v.clone());
        }
    }
    serde_json::from_value(json!({"type": kind, "function": function}))
        .map_err(|e| ApiError::bad_request(format!("invalid tool definition: {e}")))
}

/// A tool call's `arguments` JSON string as the native ordered object. An empty string is no
/// arguments; anything but a JSON object is a 400.
pub fn parse_arguments(s: &str) -> Result<Map<String, Value>, ApiError> {
    if s.trim().is_empty() {
        return Ok(Map::new());
    }
    // Go's json.Unmarshal (openai.go): a lone surrogate escape is U+FFFD, not an error.
    let text = crate::prompt::parsers::govalue::go_surrogates(s.as_bytes());
    match serde_json::from_slice::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(ApiError::bad_request("invalid tool call arguments")),
    }
}

/// A native tool call in OpenAI's shape (arguments as a JSON string); `index` is included for
/// stream deltas. Calls without an id get `call_` + 8 random characters, like Ollama's.
pub fn tool_call(c: &ToolCall) -> Value {
    let id = if c.id.is_empty() {
        random_id("call_", 8)
    } else {
        c.id.clone()
    };
    // `index` is the native call's, streamed or not (Ollama's ToToolCalls).
    json!({
        "id": id,
        "index": c.function.index,
        "type": "function",
        "function": {
            "name": c.function.name,
            "arguments": crate::api::gomarshal::arguments_string(&c.function.arguments),
        }
    })
}

/// Native logprobs as OpenAI's `{"content":[{token, logprob, bytes, top_logprobs}]}`; `bytes`
/// and `top_logprobs` are left out when empty, as Ollama's `api.Logprob` (omitempty) writes them.
pub fn logprobs(lp: &[Logprob]) -> Option<Value> {
    if lp.is_empty() {
        return None;
    }
    let entry = |t: &crate::api::types::TokenLogprob| {
        let mut e = json!({"token": t.token, "logprob": t.logprob});
        if !t.bytes.is_empty() {
            e["bytes"] = json!(t.bytes);
        }
        e
    };
    let content: Vec<Value> = lp
        .iter()
        .map(|l| {
            let mut e = entry(&l.token);
            if !l.top_logprobs.is_empty() {
                e["top_logprobs"] = Value::Array(l.top_logprobs.iter().map(entry).collect());
            }
            e
        })
        .collect();
    Some(json!({ "content": content }))
}

/// `usage` from the native final chunk's counts.
pub fn usage(prompt: u64, completion: u64) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// Native `done_reason` → OpenAI `finish_reason` (`tool_calls` once tools were called).
pub fn finish_reason(done_reason: Option<&str>, called_tools: bool) -> Value {
    match done_reason {
        Some("stop") if called_tools => json!("tool_calls"),
        Some(r) if !r.is_empty() => json!(r),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zstd_headers() -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert("content-encoding", "zstd".parse().unwrap());
        h
    }

    #[test]
    fn zstd_bodies_decode_within_the_limit_only() {
        use ruzstd::encoding::{compress_to_vec, CompressionLevel};
        let json = br#"{"model":"m","input":"hi"}"#;
        let packed = Bytes::from(compress_to_vec(&json[..], CompressionLevel::Fastest));
        assert_ne!(&packed[..], &json[..]);
        let out = content_decode(&zstd_headers(), packed, 1024).unwrap();
        assert_eq!(&out[..], &json[..]);

        // 8 MiB of zeros packs into a few hundred bytes: bounded by the limit, not the input.
        let bomb = compress_to_vec(&vec![0u8; 8 << 20][..], CompressionLevel::Fastest);
        assert!(bomb.len() < 4096);
        let e = content_decode(&zstd_headers(), Bytes::from(bomb), 1 << 20).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);

        let e = content_decode(&zstd_headers(), Bytes::from_static(b"not zstd"), 1024).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);

        let plain = Bytes::from_static(b"{}");
        assert_eq!(
            content_decode(&Default::default(), plain.clone(), 1).unwrap(),
            plain
        );
        let mut gz = axum::http::HeaderMap::new();
        gz.insert("content-encoding", "gzip".parse().unwrap());
        assert_eq!(
            content_decode(&gz, plain, 1024).unwrap_err().status,
            axum::http::StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn openai_defaults_and_mapping() {
        let o = options(&Sampling::default(), None, Dialect::Chat).unwrap();
        assert_eq!(Value::Object(o), json!({"temperature": 1.0, "top_p": 1.0}));
        let o = options(&Sampling::default(), None, Dialect::Responses).unwrap();
        assert_eq!(
            Value::Object(o),
            json!({"temperature": 1.0}),
            "top_p left to the model"
        );
        let s = Sampling {
            temperature: Some(0.0),
            top_p: Some(0.0),
            seed: Some(42),
            stop: Some(json!("\n")),
            frequency_penalty: Some(0.5),
            presence_penalty: Some(-0.5),
            ..Sampling::default()
        };
        assert_eq!(
            Value::Object(options(&s, Some(7), Dialect::Text).unwrap()),
            json!({"num_predict": 7, "temperature": 0.0, "top_p": 1.0, "seed": 42, "stop": ["\n"],
                   "frequency_penalty": 0.5, "presence_penalty": -0.5})
        );
        // Image budgets pass through as the native options.
        let b = Sampling {
            image_max_tokens: Some(json!(560)),
            ..Sampling::default()
        };
        assert_eq!(
            options(&b, None, Dialect::Chat).unwrap()["image_max_tokens"],
            560
        );
        // Chat keeps an explicit top_p of 0; text completions read it as "unset".
        let o = options(&s, None, Dialect::Chat).unwrap();
        assert_eq!(o["top_p"], json!(0.0));
        assert_eq!(
            stops(Some(&json!(["a", "b"])), Dialect::Text).unwrap(),
            vec!["a", "b"]
        );
        assert!(
            stops(Some(&json!(5)), Dialect::Text).unwrap().is_empty(),
            "other shapes are ignored"
        );
        assert_eq!(
            stops(Some(&json!(["a", 1])), Dialect::Chat).unwrap(),
            vec!["a"]
        );
        assert_eq!(
            stops(Some(&json!([1, 2])), Dialect::Text)
                .unwrap_err()
                .message,
            "invalid type for 'stop' field: float64"
        );
        assert_eq!(
            stops(Some(&json!([{"a": 1}])), Dialect::Text)
                .unwrap_err()
                .message,
            "invalid type for 'stop' field: map[string]interface {}"
        );
    }

    #[test]
    fn reasoning_effort_table() {
        let table = [
            ("none", json!(false)),
            ("minimal", json!("low")),
            ("low", json!("low")),
            ("medium", json!("medium")),
            ("high", json!("high")),
            ("max", json!("max")),
            ("xhigh", json!("max")),
            ("ultra", json!("max")),
        ];
        for (effort, want) in table {
            assert_eq!(think(Some(effort)).unwrap(), Some(want), "{effort}");
        }
        assert_eq!(think(None).unwrap(), None);
        assert_eq!(think(Some("extreme")).unwrap_err().status, 400);
    }

    #[test]
    fn tools_are_validated() {
        let ok = json!([{"type": "function", "function": {"name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        let tools = chat_tools(Some(&ok)).unwrap();
        assert_eq!(tools[0].kind, "function");
        assert_eq!(tools[0].function.name, "get_weather");
        assert_eq!(tools[0].function.parameters["required"], json!(["city"]));
        let bad = [
            json!("x"),
            json!([5]),
            json!([{"type": "function"}]),
            json!([{"type": "function", "function": {"name": ""}}]),
            json!([{"type": "function", "function": {"name": "f", "parameters": "nope"}}]),
            json!([{"type": "retrieval", "function": {"name": "f"}}]),
            json!([{"function": {"name": "f"}}]),
        ];
        for b in bad {
            let e = chat_tools(Some(&b)).unwrap_err();
            assert_eq!(e.status, 400, "{b}");
        }
        assert_eq!(
            chat_tools(Some(&json!([{"type": "function", "function": {"name": "f"}}, {"type": "web_search"}])))
                .unwrap_err()
                .message,
            "invalid tool definition at tools[1]: unsupported type 'web_search' (only 'function' is supported)"
        );
        let flat = flat_tool(
            "tools[0]",
            &json!({"type": "function", "name": "f", "parameters": {"type": "object"}}),
        )
        .unwrap();
        assert_eq!(flat.function.name, "f");
        assert_eq!(
            flat_tool("tools[3].tools[1]", &json!({"type": "function"}))
                .unwrap_err()
                .message,
            "invalid tool definition at tools[3].tools[1]: 'name' must be a non-empty string"
        );
    }

    #[test]
    fn tool_call_conversions() {
        let args = parse_arguments(r#"{"b":1,"a":"x"}"#).unwrap();
        assert_eq!(args.keys().collect::<Vec<_>>(), ["b", "a"], "order kept");
        assert!(parse_arguments("").unwrap().is_empty());
        assert_eq!(
            parse_arguments("[1]").unwrap_err().message,
            "invalid tool call arguments"
        );
        let call = ToolCall {
            id: String::new(),
            function: crate::api::types::ToolCallFunction {
                index: 2,
                name: "f".into(),
                arguments: args,
            },
        };
        let v = tool_call(&call);
        let id = v["id"].as_str().unwrap();
        assert!(id.len() == 13 && id.starts_with("call_"), "{id}");
        assert!(id[5..]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        assert_eq!(v["function"]["arguments"], json!(r#"{"b":1,"a":"x"}"#));
        assert_eq!(v["index"], json!(2));
        assert_eq!(finish_reason(Some("stop"), true), json!("tool_calls"));
        assert_eq!(finish_reason(Some("length"), true), json!("length"));
        assert_eq!(finish_reason(Some("stop"), false), json!("stop"));
        assert_eq!(finish_reason(None, false), Value::Null);
        assert_eq!(
            usage(3, 4),
            json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
        );
    }
}
