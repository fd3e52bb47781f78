//! `POST /v1/embeddings`: `input` (a string or an array of strings; `""` is one empty input, an
//! empty array a 400 `invalid input`) and `dimensions` become a native `EmbedRequest` through
//! `/api/embed` (so vectors are normalized exactly as there); `encoding_format: "base64"` sends
//! each vector as base64 of its little-endian float32 bytes.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::common;
use super::error::{openai_response, ApiError};
use super::native;
use crate::api::types::{EmbedRequest, EmbedResponse};
use crate::api::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EmbeddingsRequest {
    pub model: String,
    pub input: Option<Value>,
    pub dimensions: Option<i64>,
    pub encoding_format: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

pub async fn embeddings(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let req: EmbeddingsRequest = common::decode(body)?;
        let (native_req, encoding) = to_native(req)?;
        let r = native::embed(&state, native_req).await?;
        Ok::<_, ApiError>(Json(response(&r, encoding)).into_response())
    };
    run.await.unwrap_or_else(|e| openai_response(&e))
}

/// `input` goes to `/api/embed` as given, which checks its shape, except that `""` becomes
/// `[""]` (one empty input) and a missing input or an empty array is 400 `invalid input`.
pub fn to_native(req: EmbeddingsRequest) -> Result<(EmbedRequest, Encoding), ApiError> {
    let encoding = match req.encoding_format.as_deref() {
        None | Some("") => Encoding::Float,
        Some(f) if f.eq_ignore_ascii_case("float") => Encoding::Float,
        Some(f) if f.eq_ignore_ascii_case("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
            "Invalid value for 'encoding_format' = {other}. Supported values: ['float', 'base64']."
        )))
        }
    };
    let input = match req.input {
        None | Some(Value::Null) => return Err(ApiError::bad_request("invalid input")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::bad_request("invalid input"))
        }
        Some(Value::String(s)) if s.is_empty() => json!([""]),
        Some(v) => v,
    };
    let native_req = EmbedRequest {
        model: req.model,
        input: Some(input),
        dimensions: req.dimensions.unwrap_or(0),
        ..EmbedRequest::default()
    };
    Ok((native_req, encoding))
}

/// Base64 of the vector's little-endian float32 bytes.
pub fn base64_f32(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `/v1/embeddings`' body. Typed rather than a `serde_json::Value`, so each component is
/// written as the float32 it is (Go's shortest float32 form, as Ollama's `ToEmbeddingList`
/// encodes `[]float32`), not widened to float64 digits that parse to a different number.
#[derive(Debug, Serialize)]
pub struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem<'a>>,
    model: &'a str,
    usage: Usage,
}

#[derive(Debug, Serialize)]
struct EmbeddingItem<'a> {
    object: &'static str,
    embedding: Vector<'a>,
    index: usize,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Float(&'a [f32]),
    Base64(String),
}

#[derive(Debug, Serialize)]
struct Usage {
    prompt_tokens: u64,
    total_tokens: u64,
}

pub fn response(r: &EmbedResponse, encoding: Encoding) -> EmbeddingList<'_> {
    let data = r
        .embeddings
        .iter()
        .enumerate()
        .map(|(index, v)| EmbeddingItem {
            object: "embedding",
            embedding: match encoding {
                Encoding::Float => Vector::Float(v),
                Encoding::Base64 => Vector::Base64(base64_f32(v)),
            },
            index,
        })
        .collect();
    EmbeddingList {
        object: "list",
        data,
        model: &r.model,
        usage: Usage {
            prompt_tokens: r.prompt_eval_count,
            total_tokens: r.prompt_eval_count,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> EmbeddingsRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn inputs() {
        let (n, enc) = to_native(req(json!({"model": "g", "input": "", "dimensions": 8}))).unwrap();
        assert_eq!(
            (n.input, n.dimensions, enc),
            (Some(json!([""])), 8, Encoding::Float)
        );
        let (n, enc) = to_native(req(
            json!({"model": "g", "input": ["a", "b"], "encoding_format": "base64"}),
        ))
        .unwrap();
        assert_eq!((n.input, enc), (Some(json!(["a", "b"])), Encoding::Base64));
        let (n, enc) = to_native(req(
            json!({"model": "g", "input": "x", "encoding_format": "BASE64"}),
        ))
        .unwrap();
        assert_eq!((n.input, enc), (Some(json!("x")), Encoding::Base64));
        // Other shapes are /api/embed's to judge (it answers `invalid input type`).
        let (n, _) = to_native(req(json!({"model": "g", "input": [1, 2]}))).unwrap();
        assert_eq!(n.input, Some(json!([1, 2])));
        for bad in [json!([]), json!(null)] {
            let e = to_native(req(json!({"model": "g", "input": bad}))).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.message.as_str()),
                (400, "invalid input")
            );
        }
        assert!(to_native(req(
            json!({"model": "g", "input": "x", "encoding_format": "int8"})
        ))
        .is_err());
    }

    #[test]
    fn float_and_base64_shapes() {
        let r = EmbedResponse {
            model: "gemma3".into(),
            embeddings: vec![vec![1.0, -0.5], vec![0.0, 0.25]],
            prompt_eval_count: 6,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&response(&r, Encoding::Float)).unwrap(),
            r#"{"object":"list","data":[{"object":"embedding","embedding":[1.0,-0.5],"index":0},{"object":"embedding","embedding":[0.0,0.25],"index":1}],"model":"gemma3","usage":{"prompt_tokens":6,"total_tokens":6}}"#
        );
        // float32 components keep their own shortest form (0.1f32 is not 0.10000000149011612).
        let tenth = EmbedResponse {
            embeddings: vec![vec![0.1, -3.4e-8]],
            ..Default::default()
        };
        let text = serde_json::to_string(&response(&tenth, Encoding::Float)).unwrap();
        assert!(text.contains(r#""embedding":[0.1,-3.4e-8]"#), "{text}");
        let b = serde_json::to_value(response(&r, Encoding::Base64)).unwrap();
        // 1.0f32 = 00 00 80 3f, -0.5f32 = 00 00 00 bf (little-endian).
        assert_eq!(b["data"][0]["embedding"], json!("AACAPwAAAL8="));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b["data"][1]["embedding"].as_str().unwrap())
            .unwrap();
        let back: Vec<f32> = decoded
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, vec![0.0, 0.25]);
    }
}
