//! `/api/embed` and the legacy `/api/embeddings`: the handlers (model lookup with the embed
//! not-found wording, a runner slot through the scheduler, the runner's raw vectors) and the
//! pure post-processing — input shapes, L2 normalization (then cut to `dimensions` and
//! normalize again), and the legacy raw float64 vector.

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use runner_protocol::{EmbedRequest as RunnerEmbed, ErrorKind, Prompt};
use serde_json::Value;

use super::infer::{self, NotFound};
use super::request;
use super::types::{EmbedRequest, EmbedResponse, EmbeddingRequest, EmbeddingResponse};
use super::{AppState, OJson};
use crate::error::{Error, Result};

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Raw vectors for `inputs` from a runner of `model_name`, plus load time and prompt tokens.
async fn raw_embeddings(
    state: &AppState,
    model_name: &str,
    inputs: Vec<String>,
    truncate: bool,
    keep_alive: Option<&Value>,
    options: Option<&serde_json::Map<String, Value>>,
) -> Result<(Vec<Vec<f32>>, std::time::Duration, u32)> {
    let keep_alive = infer::keep_alive(request::parse_keep_alive(keep_alive)?);
    let engine = infer::engine(state)?.clone();
    let model = infer::lookup(state, model_name, NotFound::TryPulling).await?;
    let opts = infer::options(&engine, &model, options)?;
    let (lease, load) = engine.acquire(&model, &opts, keep_alive).await?;
    let req = RunnerEmbed {
        inputs: inputs.into_iter().map(Prompt::Text).collect(),
        truncate,
    };
    let resp = lease.embed(&req).await.map_err(|e| match e {
        Error::Runner(r) if r.kind == ErrorKind::ContextOverflow => {
            Error::BadRequest("the input length exceeds the context length".into())
        }
        other => other,
    })?;
    Ok((resp.embeddings, load, resp.prompt_eval_count))
}

/// `POST /api/embed`.
pub async fn embed(
    State(state): State<AppState>,
    OJson(req): OJson<EmbedRequest>,
) -> Result<Json<EmbedResponse>> {
    let started = Instant::now();
    let input = inputs(req.input.as_ref())?;
    if input.is_empty() {
        // Still a known model, or the usual 404.
        infer::lookup(&state, &req.model, NotFound::TryPulling).await?;
        return Ok(Json(EmbedResponse {
            model: req.model,
            embeddings: Vec::new(),
            ..Default::default()
        }));
    }
    let (raw, load, count) = raw_embeddings(
        &state,
        &req.model,
        input,
        req.truncate.unwrap_or(true),
        req.keep_alive.as_ref(),
        req.options.as_ref(),
    )
    .await?;
    let embeddings = raw
        .into_iter()
        .map(|v| finish(v, req.dimensions))
        .collect::<Result<Vec<_>>>()?;
    Ok(Json(EmbedResponse {
        model: req.model,
        embeddings,
        total_duration: nanos(started.elapsed()),
        load_duration: nanos(load),
        prompt_eval_count: u64::from(count),
    }))
}

/// `POST /api/embeddings` (legacy): one raw, unnormalized float64 vector.
pub async fn embeddings(
    State(state): State<AppState>,
    OJson(req): OJson<EmbeddingRequest>,
) -> Result<Json<EmbeddingResponse>> {
    if req.prompt.is_empty() {
        infer::lookup(&state, &req.model, NotFound::TryPulling).await?;
        return Ok(Json(EmbeddingResponse::default()));
    }
    let (raw, _, _) = raw_embeddings(
        &state,
        &req.model,
        vec![req.prompt],
        true,
        req.keep_alive.as_ref(),
        req.options.as_ref(),
    )
    .await?;
    let first = raw
        .into_iter()
        .next()
        .ok_or_else(|| Error::Internal("the runner returned no embedding".into()))?;
    Ok(Json(EmbeddingResponse {
        embedding: legacy(&first),
    }))
}

/// `input`: a string (empty → no inputs), an array of strings, or absent. Anything else is 400
/// `invalid input type`.
pub fn inputs(input: Option<&Value>) -> Result<Vec<String>> {
    let bad = || Error::BadRequest("invalid input type".into());
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// Scales `vec` to unit L2 norm (Ollama's `normalize`: float32 sum, norm floored at 1e-12 so a
/// zero vector stays zero). NaN or infinite components are a 400, as Ollama's embed handler
/// reports every non-status error.
pub fn normalize(mut vec: Vec<f32>) -> Result<Vec<f32>> {
    let mut sum = 0f32;
    for v in &vec {
        if !v.is_finite() {
            return Err(Error::BadRequest(
                "embedding contains NaN or Inf values".into(),
            ));
        }
        sum += v * v;
    }
    let norm = (1.0 / f64::from(sum).sqrt().max(1e-12)) as f32;
    for v in &mut vec {
        *v *= norm;
    }
    Ok(vec)
}

/// `/api/embed`'s processing of one raw vector: normalize; if `dimensions` is positive and
/// smaller than the vector, keep that many components and normalize again.
pub fn finish(raw: Vec<f32>, dimensions: i64) -> Result<Vec<f32>> {
    let mut v = normalize(raw)?;
    if dimensions > 0 && (dimensions as usize) < v.len() {
        v.truncate(dimensions as usize);
        v = normalize(v)?;
    }
    Ok(v)
}

/// `/api/embeddings` returns the runner's vector unchanged, widened to float64.
pub fn legacy(raw: &[f32]) -> Vec<f64> {
    raw.iter().map(|&v| f64::from(v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn norm(v: &[f32]) -> f32 {
        v.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    #[test]
    fn input_shapes() {
        assert_eq!(inputs(None).unwrap(), Vec::<String>::new());
        assert_eq!(inputs(Some(&json!(""))).unwrap(), Vec::<String>::new());
        assert_eq!(inputs(Some(&json!("hi"))).unwrap(), vec!["hi"]);
        assert_eq!(inputs(Some(&json!(["a", ""]))).unwrap(), vec!["a", ""]);
        assert_eq!(inputs(Some(&json!([]))).unwrap(), Vec::<String>::new());
        for bad in [json!(1), json!(["a", 2]), json!({"a": 1})] {
            let e = inputs(Some(&bad)).unwrap_err();
            assert_eq!(
                (e.status().as_u16(), e.to_string()),
                (400, "invalid input type".into())
            );
        }
    }

    #[test]
    fn normalization() {
        let v = normalize(vec![3.0, 4.0]).unwrap();
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(normalize(vec![0.0, 0.0]).unwrap(), vec![0.0, 0.0]);
        assert!(normalize(vec![1.0, f32::NAN]).is_err());
        assert!(normalize(vec![f32::INFINITY]).is_err());
    }

    #[test]
    fn dimensions_cut_then_renormalize() {
        let raw = vec![1.0, 2.0, 2.0, 4.0];
        let full = finish(raw.clone(), 0).unwrap();
        assert_eq!(full.len(), 4);
        assert!((norm(&full) - 1.0).abs() < 1e-6);
        let cut = finish(raw.clone(), 2).unwrap();
        assert_eq!(cut.len(), 2);
        assert!((norm(&cut) - 1.0).abs() < 1e-6);
        // Same direction as the first two components of the raw vector.
        assert!((cut[1] / cut[0] - 2.0).abs() < 1e-6);
        // dimensions >= len and negative leave the length alone.
        assert_eq!(finish(raw.clone(), 4).unwrap(), full);
        assert_eq!(finish(raw, -3).unwrap(), full);
        assert_eq!(legacy(&[0.5, -1.0]), vec![0.5, -1.0]);
    }
}
