//! `POST /v1/completions` (legacy text completions): the request becomes a native
//! `GenerateRequest` (`prompt` must be a string; `max_tokens` → `num_predict`; integer
//! `logprobs` → native logprobs with that many alternatives) and runs through `/api/generate`.
//! Replies are `text_completion` objects with id `cmpl-<n>`; streams are SSE chunks of the same
//! object, a final chunk with `finish_reason`, an optional usage chunk, then `data: [DONE]`.

use crate::api::gojson;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat::StreamOptions;
use super::common::{self, Sampling};
use super::error::{openai_body, openai_response, ApiError};
use super::native::{self, Reply};
use super::sse::{self, Frames};
use crate::api::types::{GenerateRequest, GenerateResponse, Logprob};
use crate::api::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Option<Value>,
    pub suffix: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub logprobs: Option<i64>,
}

pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => openai_response(&e),
    }
}

async fn run(state: AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: CompletionRequest = common::decode(body)?;
    let streaming = req.stream.unwrap_or(false);
    let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let reply = native::generate(&state, to_native(req)?).await?;
    let id = common::short_id("cmpl-");
    let created = common::unix_now();
    if streaming {
        let frames = TextFrames {
            id,
            created,
            include_usage,
        };
        return Ok(sse::response(reply.into_stream(), frames));
    }
    let r = match reply {
        Reply::One(r) => r,
        Reply::Stream(mut s) => {
            // Only reached if the native handler streamed anyway: fold it.
            let mut acc: Option<GenerateResponse> = None;
            while let Some(c) = s.next().await {
                let c = c?;
                match acc.as_mut() {
                    None => acc = Some(c),
                    Some(a) => {
                        a.response.push_str(&c.response);
                        a.logprobs.extend(c.logprobs);
                        a.done_reason = c.done_reason;
                        a.metrics = c.metrics;
                    }
                }
            }
            acc.unwrap_or_default()
        }
    };
    Ok(Json(completion(&r, &id, created)).into_response())
}

pub fn to_native(req: CompletionRequest) -> Result<GenerateRequest, ApiError> {
    let prompt = match req.prompt {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        // Ollama's field is a string: any other value fails its bind with Go's text.
        Some(v) => {
            let found = match v {
                Value::Array(_) => "array",
                Value::Object(_) => "object",
                Value::Bool(_) => "bool",
                _ => "number",
            };
            let path = [gojson::Step::Key("prompt".into())];
            let msg = gojson::go_struct("CompletionRequest")
                .and_then(|root| gojson::type_error(root, &path, found))
                .unwrap_or_else(|| "invalid type for 'prompt': expected a string".into());
            return Err(ApiError::bad_request(msg));
        }
    };
    // Ollama's FromCompleteRequest: only a positive count asks for logprobs (0 and below are
    // none); past 20 the generate request refuses it.
    let (logprobs, top) = match req.logprobs {
        Some(n) if n > 0 => (true, n),
        _ => (false, 0),
    };
    let mut options = common::options(&req.sampling, req.max_tokens, common::Dialect::Text)?;
    // Ollama's completions layer always sends both penalties (0 when absent).
    for key in ["frequency_penalty", "presence_penalty"] {
        options.entry(key).or_insert(json!(0.0));
    }
    Ok(GenerateRequest {
        model: req.model,
        prompt,
        suffix: req.suffix.unwrap_or_default(),
        stream: Some(req.stream.unwrap_or(false)),
        options: Some(options),
        logprobs,
        top_logprobs: top,
        ..GenerateRequest::default()
    })
}

/// Native logprobs in the legacy completions shape (`tokens`, `token_logprobs`,
/// `top_logprobs` as token → logprob maps, `text_offset`), offsets counted from `offset`.
pub fn legacy_logprobs(lp: &[Logprob], offset: usize) -> Value {
    if lp.is_empty() {
        return Value::Null;
    }
    let mut at = offset;
    let mut offsets = Vec::with_capacity(lp.len());
    for l in lp {
        offsets.push(at);
        at += l.token.token.len();
    }
    let tops: Vec<Value> = lp
        .iter()
        .map(|l| {
            let m: Map<String, Value> = l
                .top_logprobs
                .iter()
                .map(|t| (t.token.clone(), json!(t.logprob)))
                .collect();
            Value::Object(m)
        })
        .collect();
    json!({
        "tokens": lp.iter().map(|l| l.token.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lp.iter().map(|l| l.token.logprob).collect::<Vec<_>>(),
        "top_logprobs": tops,
        "text_offset": offsets,
    })
}

/// One choice, in the field order of Ollama's CompleteChunkChoice; `logprobs` only when there
/// are some (its `omitempty`).
fn choice(text: &str, lp: &[Logprob], finish_reason: Value) -> Value {
    let mut c = Map::new();
    c.insert("text".into(), json!(text));
    c.insert("index".into(), json!(0));
    c.insert("finish_reason".into(), finish_reason);
    if !lp.is_empty() {
        c.insert("logprobs".into(), legacy_logprobs(lp, 0));
    }
    Value::Object(c)
}

pub fn completion(r: &GenerateResponse, id: &str, created: i64) -> Value {
    let reason = common::finish_reason(r.done_reason.as_deref(), false);
    json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": r.model,
        "system_fingerprint": "fp_ollama",
        "choices": [choice(&r.response, &r.logprobs, reason)],
        "usage": common::usage(r.metrics.prompt_eval_count, r.metrics.eval_count),
    })
}

pub struct TextFrames {
    pub id: String,
    pub created: i64,
    pub include_usage: bool,
}

impl TextFrames {
    fn frame(&self, model: &str, choices: Value, usage: Option<Value>) -> String {
        let mut v = json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": model,
            "system_fingerprint": "fp_ollama",
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        sse::data(&v)
    }
}

impl Frames<GenerateResponse> for TextFrames {
    fn chunk(&mut self, c: GenerateResponse) -> String {
        let mut out = String::new();
        // With include_usage every chunk before the usage one carries zero usage (Ollama's
        // CompleteWriter sets an empty Usage on each).
        let zero = self.include_usage.then(|| common::usage(0, 0));
        if !c.response.is_empty() {
            let choices = json!([choice(&c.response, &c.logprobs, Value::Null)]);
            out += &self.frame(&c.model, choices, zero.clone());
        }
        if c.done {
            let reason = common::finish_reason(c.done_reason.as_deref(), false);
            out += &self.frame(&c.model, json!([choice("", &[], reason)]), zero);
            if self.include_usage {
                let usage = common::usage(c.metrics.prompt_eval_count, c.metrics.eval_count);
                out += &self.frame(&c.model, json!([]), Some(usage));
            }
        }
        out
    }

    fn error(&mut self, e: &ApiError) -> String {
        sse::data(&openai_body(e))
    }

    fn finish(&mut self) -> String {
        sse::DONE.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{Metrics, TokenLogprob};

    fn gen(text: &str, done: bool) -> GenerateResponse {
        GenerateResponse {
            model: "gemma3:latest".into(),
            created_at: "t".into(),
            response: text.into(),
            done,
            done_reason: done.then(|| "length".into()),
            metrics: Metrics {
                prompt_eval_count: u64::from(done) * 4,
                eval_count: u64::from(done) * 2,
                ..Metrics::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn request_becomes_native() {
        let r: CompletionRequest = serde_json::from_value(json!({
            "model": "gemma3", "prompt": "Once", "suffix": "end", "max_tokens": 5, "logprobs": 2,
            "top_p": 0, "stop": "\n", "echo": false, "n": 1
        }))
        .unwrap();
        let n = to_native(r).unwrap();
        assert_eq!(
            (n.prompt.as_str(), n.suffix.as_str(), n.stream),
            ("Once", "end", Some(false))
        );
        assert!(n.logprobs);
        assert_eq!(n.top_logprobs, 2);
        assert_eq!(
            Value::Object(n.options.unwrap()),
            json!({"num_predict": 5, "temperature": 1.0, "top_p": 1.0, "stop": ["\n"],
                   "frequency_penalty": 0.0, "presence_penalty": 0.0})
        );
        let r: CompletionRequest =
            serde_json::from_value(json!({"model": "m", "prompt": ["a"]})).unwrap();
        let e = to_native(r).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.message.as_str()),
            (400, "json: cannot unmarshal array into Go struct field CompletionRequest.prompt of type string")
        );
        // Only a positive logprobs count asks for logprobs (Ollama's FromCompleteRequest).
        for (n, want) in [(0, false), (-1, false), (3, true)] {
            let r: CompletionRequest =
                serde_json::from_value(json!({"model": "m", "prompt": "a", "logprobs": n}))
                    .unwrap();
            let g = to_native(r).unwrap();
            assert_eq!(
                (g.logprobs, g.top_logprobs),
                (want, if want { n } else { 0 })
            );
        }
    }

    #[test]
    fn completion_shape() {
        let mut r = gen("upon a time", true);
        r.logprobs = vec![
            Logprob {
                token: TokenLogprob {
                    token: "up".into(),
                    logprob: -0.5,
                    bytes: vec![],
                },
                top_logprobs: vec![TokenLogprob {
                    token: "up".into(),
                    logprob: -0.5,
                    bytes: vec![],
                }],
            },
            Logprob {
                token: TokenLogprob {
                    token: "on".into(),
                    logprob: -1.0,
                    bytes: vec![],
                },
                top_logprobs: vec![],
            },
        ];
        assert_eq!(
            serde_json::to_string(&completion(&r, "cmpl-3", 9)).unwrap(),
            r#"{"id":"cmpl-3","object":"text_completion","created":9,"model":"gemma3:latest","system_fingerprint":"fp_ollama","choices":[{"text":"upon a time","index":0,"finish_reason":"length","logprobs":{"tokens":["up","on"],"token_logprobs":[-0.5,-1.0],"top_logprobs":[{"up":-0.5},{}],"text_offset":[0,2]}}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}"#
        );
    }

    #[test]
    fn stream_frames() {
        let mut f = TextFrames {
            id: "cmpl-1".into(),
            created: 5,
            include_usage: true,
        };
        let out = f.chunk(gen("up", false))
            + &f.chunk(gen("", false))
            + &f.chunk(gen("", true))
            + &f.finish();
        let head = r#"{"id":"cmpl-1","object":"text_completion","created":5,"model":"gemma3:latest","system_fingerprint":"fp_ollama","choices":"#;
        // include_usage: zero usage on each chunk before the usage one (Ollama's CompleteWriter).
        let zero = r#"{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}"#;
        let expected = [
            format!(r#"data: {head}[{{"text":"up","index":0,"finish_reason":null}}],"usage":{zero}}}"#),
            format!(r#"data: {head}[{{"text":"","index":0,"finish_reason":"length"}}],"usage":{zero}}}"#),
            format!(r#"data: {head}[],"usage":{{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}}}"#),
            "data: [DONE]".to_owned(),
        ]
        .join("\n\n")
            + "\n\n";
        assert_eq!(out, expected);
    }
}
