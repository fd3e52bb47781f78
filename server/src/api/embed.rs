//! `/api/embed` and `/api/embeddings`: input shapes, L2 normalization (then cut to
//! `dimensions` and normalize again), and the legacy raw float64 vector. The processing is
//! pure; the runner produces the raw vectors through the `Inference` seam.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::inference::{engine, resolve_model, EmbedJob, Inference, NameErrors, ResolvedModel};
use super::options::Options;
use super::request::parse_keep_alive;
use super::types::{EmbedRequest, EmbedResponse, EmbeddingRequest, EmbeddingResponse};
use super::{AppState, OJson};
use crate::config::KeepAlive;
use crate::error::{Error, Result};

pub async fn embed(
    State(state): State<AppState>,
    OJson(req): OJson<EmbedRequest>,
) -> Result<Json<EmbedResponse>> {
    let start = Instant::now();
    let texts = inputs(req.input.as_ref())?;
    let Prepared {
        model,
        options,
        keep_alive,
        engine,
    } = prepare(
        &state,
        &req.model,
        NameErrors::TryPulling,
        req.keep_alive.as_ref(),
        req.options.as_ref(),
    )
    .await?;
    if texts.is_empty() {
        engine.load(model, options, keep_alive).await?;
        return Ok(Json(EmbedResponse {
            model: req.model,
            ..EmbedResponse::default()
        }));
    }
    let out = engine
        .embed(EmbedJob {
            model,
            inputs: texts,
            truncate: req.truncate.unwrap_or(true),
            options,
            keep_alive,
        })
        .await?;
    let embeddings = out
        .embeddings
        .into_iter()
        .map(|v| finish(v, req.dimensions))
        .collect::<Result<Vec<_>>>()?;
    Ok(Json(EmbedResponse {
        model: req.model,
        embeddings,
        total_duration: start.elapsed().as_nanos() as u64,
        load_duration: out.load_duration.as_nanos() as u64,
        prompt_eval_count: out.prompt_eval_count,
    }))
}

/// The legacy endpoint: one prompt, the raw vector as float64, no normalization.
pub async fn embeddings(
    State(state): State<AppState>,
    OJson(req): OJson<EmbeddingRequest>,
) -> Result<Json<EmbeddingResponse>> {
    let Prepared {
        model,
        options,
        keep_alive,
        engine,
    } = prepare(
        &state,
        &req.model,
        NameErrors::TryPullingRequired,
        req.keep_alive.as_ref(),
        req.options.as_ref(),
    )
    .await?;
    if req.prompt.is_empty() {
        engine.load(model, options, keep_alive).await?;
        return Ok(Json(EmbeddingResponse::default()));
    }
    let out = engine
        .embed(EmbedJob {
            model,
            inputs: vec![req.prompt],
            truncate: true,
            options,
            keep_alive,
        })
        .await?;
    let raw = out
        .embeddings
        .first()
        .ok_or_else(|| Error::Internal("the runner returned no embedding".into()))?;
    Ok(Json(EmbeddingResponse {
        embedding: legacy(raw),
    }))
}

/// What both endpoints resolve before embedding: the model, its options merged with the
/// request's, the keep-alive (request, else the server default) and the engine.
struct Prepared {
    model: Arc<ResolvedModel>,
    options: Options,
    keep_alive: KeepAlive,
    engine: Arc<dyn Inference>,
}

async fn prepare(
    state: &AppState,
    name: &str,
    names: NameErrors,
    keep_alive: Option<&Value>,
    options: Option<&serde_json::Map<String, Value>>,
) -> Result<Prepared> {
    // keep_alive is validated before the model is looked up, as Ollama orders its errors.
    let keep_alive = parse_keep_alive(keep_alive)?;
    let model = resolve_model(state, name, names).await?;
    super::inference::check_requires(&model)?;
    let options = Options::resolve(state.defaults.context_length, &model.view.options, options)?;
    Ok(Prepared {
        model,
        options,
        keep_alive: keep_alive.unwrap_or(state.defaults.keep_alive),
        engine: engine(state)?,
    })
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
