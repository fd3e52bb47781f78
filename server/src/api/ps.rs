//! `GET /api/ps`: the scheduler's loaded runners in Ollama's shape, longest remaining keep-alive
//! first. `expires_at` is when the keep-alive timer unloads the model (now + keep-alive while it
//! is busy); a model kept forever shows Go's far-future sentinel, as Ollama does.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::models::rfc3339_nano;
use super::show::ModelDetails;
use super::AppState;
use crate::scheduler::RunningModel;

#[derive(Debug, Serialize)]
pub struct PsResponse {
    pub models: Vec<PsModel>,
}

#[derive(Debug, Serialize)]
pub struct PsModel {
    pub name: String,
    pub model: String,
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
    pub expires_at: String,
    pub size_vram: u64,
    pub context_length: u32,
}

/// Ollama stores "forever" as a time ~292 years ahead (Go's max duration from now); clients
/// print it as "Forever". We pick the same distance.
fn forever() -> SystemTime {
    SystemTime::now() + Duration::from_nanos(i64::MAX as u64)
}

pub fn entry(m: RunningModel, details: ModelDetails) -> PsModel {
    PsModel {
        name: m.name.clone(),
        model: m.name,
        size: m.size,
        digest: m.digest,
        details,
        expires_at: rfc3339_nano(m.expires_at.unwrap_or_else(forever)),
        size_vram: m.size_vram,
        context_length: m.context_length,
    }
}

pub async fn ps(State(state): State<AppState>) -> Json<PsResponse> {
    let Some(engine) = state.engine.as_ref() else {
        return Json(PsResponse { models: Vec::new() });
    };
    let models = engine
        .scheduler()
        .ps()
        .await
        .into_iter()
        .map(|m| {
            let details = engine
                .cached(&m.digest)
                .map(|model| model.details.clone())
                .unwrap_or_default();
            entry(m, details)
        })
        .collect();
    Json(PsResponse { models })
}
