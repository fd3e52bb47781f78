//! Model-management endpoints over the store: `/api/tags`, `/api/show`, `/api/copy`,
//! `/api/delete`, `/api/ps`. Each 404/400 uses the wording of the matching Ollama handler (they
//! differ per endpoint, ollama.md §1). Store and GGUF work runs in `spawn_blocking`.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json_};

use super::show::{go_quote, ModelDetails, ModelView};
use super::{AppState, OJson};
use crate::create::Message;
use crate::error::{Error, Result};
use crate::prompt::prefer::GoTemplate;
use crate::store::{ManifestEntry, ModelName, Store};

mod show;
pub use show::{show, ShowRequest, ShowResponse};

/// Runs blocking store/GGUF work off the async workers.
pub async fn blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("blocking task failed: {e}")))?
}

/// RFC 3339 with nanoseconds, UTC (Go's `time.Time` JSON form, trailing zeros trimmed).
pub fn rfc3339_nano(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[derive(Debug, Serialize)]
pub struct ListResponse {
    pub models: Vec<ListModel>,
}

#[derive(Debug, Serialize)]
pub struct ListModel {
    pub name: String,
    pub model: String,
    /// A stub's upstream model and server (`crate::remote`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote_model: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    pub modified_at: String,
    pub size: u64,
    pub digest: String,
    /// What the model can do, as `/api/show` computes it (Ollama lists them too, since its
    /// model list cache); left out when unknown (a model whose layers cannot be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    pub details: ListDetails,
}

/// The list's `details`: the common fields plus the GGUF's training context and embedding width
/// (`api.ModelDetails` `context_length`/`embedding_length`, `omitempty`), which Ollama's model
/// list fills from the GGUF header (`server/model_list_cache.go` `buildModelListSummary`) and
/// `/api/show` and `/api/ps` leave out.
#[derive(Debug, Default, Serialize)]
pub struct ListDetails {
    #[serde(flatten)]
    pub common: ModelDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_length: Option<u64>,
}

impl From<ModelDetails> for ListDetails {
    fn from(common: ModelDetails) -> ListDetails {
        ListDetails {
            common,
            context_length: None,
            embedding_length: None,
        }
    }
}

pub async fn tags(State(state): State<AppState>) -> Result<Json<ListResponse>> {
    let store = state.store.clone();
    let mode = state.defaults.go_template;
    let models = blocking(move || list_models(&store, mode)).await?;
    Ok(Json(ListResponse { models }))
}

fn list_models(store: &Store, mode: GoTemplate) -> Result<Vec<ListModel>> {
    let mut entries = store.list()?;
    // Newest first by whole seconds, as Ollama compares `ModTime().Unix()`; the sort is stable,
    // so ties keep the store's name order.
    entries.sort_by_key(|e| {
        std::cmp::Reverse(
            e.modified
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        )
    });
    Ok(entries
        .iter()
        .map(|e| {
            let name = e.name.display_shortest();
            let (details, capabilities, remote) = list_details(store, e, mode);
            ListModel {
                model: name.clone(),
                name,
                remote_model: remote.as_ref().map(|r| r.1.clone()).unwrap_or_default(),
                remote_host: remote.map(|r| r.0).unwrap_or_default(),
                modified_at: rfc3339_nano(e.modified),
                size: e.size,
                digest: e.digest_hex.clone(),
                capabilities,
                details,
            }
        })
        .collect())
}

/// Details and capabilities for the list: the config blob, falling back to the GGUF header when
/// the config lacks them (capabilities always read the header: pooling and vision live there).
/// A broken model still lists (with whatever is known) rather than failing the whole list.
fn list_details(
    store: &Store,
    entry: &ManifestEntry,
    mode: GoTemplate,
) -> (ListDetails, Vec<String>, Option<(String, String)>) {
    let view = match ModelView::load(store, entry, mode) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(model = %entry.name, error = %e, "cannot read model layers");
            return (ModelDetails::default().into(), Vec::new(), None);
        }
    };
    let c = &view.config;
    if !c.remote_host.is_empty() || !c.remote_model.is_empty() {
        // A stub: all it says is in its config (Ollama's list never opens a model file for one).
        let details = ListDetails {
            common: view.details(None),
            context_length: (c.context_length > 0).then_some(c.context_length),
            embedding_length: (c.embedding_length > 0).then_some(c.embedding_length),
        };
        let remote = Some((c.remote_host.clone(), c.remote_model.clone()));
        return (details, view.capabilities(None), remote);
    }
    let (details, caps) = local_list_details(entry, view);
    (details, caps, None)
}

fn local_list_details(entry: &ManifestEntry, view: ModelView) -> (ListDetails, Vec<String>) {
    if view.is_safetensors() {
        let caps = view.capabilities(None);
        let details = match crate::mlx::view::details(&view) {
            Ok(mut d) => {
                d.parent_model.clear();
                d
            }
            Err(e) => {
                tracing::warn!(model = %entry.name, error = %e, "cannot read safetensors model");
                view.details(None)
            }
        };
        return (details.into(), caps);
    }
    let mut details = view.details(None);
    let gguf = match view.gguf(false) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(model = %entry.name, error = %e, "cannot read GGUF metadata");
            None
        }
    };
    if details.format.is_empty() || details.family.is_empty() {
        details = view.details(gguf.as_ref());
    }
    let caps = view.capabilities(gguf.as_ref());
    // `parent_model` stays: Ollama's list reads it from the model layer's `from`
    // (`server/model_list_cache.go` `readModelListLayers`); only `/api/ps` leaves it empty.
    let details = ListDetails {
        common: details,
        // `omitempty`: a zero is left out like a missing key.
        context_length: gguf.as_ref().and_then(|g| g.context_length()),
        embedding_length: gguf.as_ref().and_then(|g| g.embedding_length()),
    };
    (details, caps)
}

#[derive(Debug, Deserialize)]
pub struct CopyRequest {
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub destination: Option<String>,
}

pub async fn copy(
    State(state): State<AppState>,
    OJson(req): OJson<CopyRequest>,
) -> Result<StatusCode> {
    let source = req.source.unwrap_or_default();
    let destination = req.destination.unwrap_or_default();
    let src = ModelName::parse(&source)
        .map_err(|_| Error::BadRequest(format!("source {} is invalid", go_quote(&source))))?;
    let dst = ModelName::parse(&destination).map_err(|_| {
        Error::BadRequest(format!("destination {} is invalid", go_quote(&destination)))
    })?;
    let store = state.store.clone();
    match blocking(move || store.copy(&src, &dst)).await? {
        Some(written) => {
            tracing::info!(from = %source, to = %written, "copied model");
            Ok(StatusCode::OK)
        }
        None => Err(Error::NotFound(format!(
            "model {} not found",
            go_quote(&source)
        ))),
    }
}

#[derive(Debug, Deserialize)]
pub struct DeleteRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// Deprecated spelling of `model`.
    #[serde(default)]
    pub name: Option<String>,
}

pub async fn delete(
    State(state): State<AppState>,
    OJson(req): OJson<DeleteRequest>,
) -> Result<StatusCode> {
    let raw = req
        .model
        .filter(|m| !m.is_empty())
        .or(req.name)
        .unwrap_or_default();
    // A cloud reference deletes the stub it was pulled as (`m:tag:cloud` → `m:tag-cloud`).
    let normalized = crate::remote::modelref::pull_name(&raw)
        .map_err(Error::BadRequest)?
        .unwrap_or_else(|| raw.clone());
    let name = ModelName::parse(&normalized)
        .map_err(|_| Error::BadRequest(format!("name {} is invalid", go_quote(&raw))))?;
    let store = state.store.clone();
    match blocking(move || store.delete(&name)).await? {
        Some(deleted) => {
            tracing::info!(model = %deleted.name, blobs = deleted.blobs_removed, bytes = deleted.bytes_freed, "deleted model");
            Ok(StatusCode::OK)
        }
        None => Err(Error::NotFound(format!("model '{raw}' not found"))),
    }
}

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
    /// herd's addition (issue 20): layers per device, local and remote (ggml RPC).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<runner_protocol::LayerPlacement>,
}

/// Loaded models, longest remaining keep-alive first; empty without an inference engine.
pub async fn ps(State(state): State<AppState>) -> Result<Json<PsResponse>> {
    let Some(engine) = state.inference.clone() else {
        return Ok(Json(PsResponse { models: Vec::new() }));
    };
    let mut running = engine.ps().await;
    // `None` (never expires) sorts first, then later deadlines (Ollama compares Unix seconds).
    running.sort_by_key(|r| {
        std::cmp::Reverse(r.expires_at.map_or(u64::MAX, |t| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        }))
    });
    let store = state.store.clone();
    let mode = state.defaults.go_template;
    let models = blocking(move || {
        Ok(running
            .into_iter()
            .map(|r| {
                let parsed = ModelName::parse(&r.name).ok();
                let details = parsed
                    .as_ref()
                    .and_then(|n| store.read(n).ok().flatten())
                    .and_then(|e| ModelView::load(&store, &e, mode).ok())
                    .map(|v| {
                        let mut d = v.details(None);
                        d.parent_model.clear();
                        d
                    })
                    .unwrap_or_default();
                let display = parsed.map_or_else(|| r.name.clone(), |n| n.display_shortest());
                PsModel {
                    name: display.clone(),
                    model: display,
                    size: r.size,
                    digest: r.digest,
                    details,
                    expires_at: expires_at(r.expires_at),
                    size_vram: r.size_vram,
                    context_length: r.context_length,
                    placement: r.placement,
                }
            })
            .collect())
    })
    .await?;
    Ok(Json(PsResponse { models }))
}

/// Never expiring is shown as Ollama shows it: now plus the largest Go duration (~292 years).
fn expires_at(t: Option<SystemTime>) -> String {
    match t {
        Some(t) => rfc3339_nano(t),
        None => {
            let forever = time::OffsetDateTime::now_utc() + time::Duration::nanoseconds(i64::MAX);
            forever
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_nano_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 120_000_000);
        assert_eq!(rfc3339_nano(t), "2023-11-14T22:13:20.12Z");
        let whole = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339_nano(whole), "2023-11-14T22:13:20Z");
    }
}
