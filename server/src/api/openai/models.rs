//! `GET /v1/models` and `GET /v1/models/{model}`: the native `/api/tags` and `/api/show`
//! replies in OpenAI's model shape (`created` = modification time in Unix seconds, `owned_by` =
//! the name's namespace). An empty list has `data: null`, as Ollama sends it.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{openai_response, ApiError};
use super::native;
use crate::api::models::ListResponse;
use crate::api::AppState;
use crate::store::ModelName;

pub async fn list(State(state): State<AppState>) -> Response {
    match native::tags(&state).await {
        Ok(r) => Json(list_body(&r)).into_response(),
        Err(e) => openai_response(&e),
    }
}

pub async fn retrieve(State(state): State<AppState>, Path(model): Path<String>) -> Response {
    let run = async {
        let r = native::show(&state, &model).await?;
        Ok::<_, ApiError>(model_object(&model, &r.modified_at))
    };
    match run.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => openai_response(&e),
    }
}

fn unix(rfc3339: &str) -> i64 {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .map_or(0, |t| t.unix_timestamp())
}

pub fn model_object(name: &str, modified_at: &str) -> Value {
    let owner = ModelName::parse(name)
        .map(|n| n.namespace().to_owned())
        .unwrap_or_default();
    json!({"id": name, "object": "model", "created": unix(modified_at), "owned_by": owner})
}

pub fn list_body(r: &ListResponse) -> Value {
    let data: Vec<Value> = r
        .models
        .iter()
        .map(|m| model_object(&m.name, &m.modified_at))
        .collect();
    json!({"object": "list", "data": if data.is_empty() { Value::Null } else { Value::Array(data) }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::models::ListModel;

    #[test]
    fn shapes() {
        assert_eq!(
            list_body(&ListResponse { models: vec![] }),
            json!({"object": "list", "data": null})
        );
        let m = ListModel {
            name: "smollm2:latest".into(),
            model: "smollm2:latest".into(),
            remote_model: String::new(),
            remote_host: String::new(),
            modified_at: "2024-05-01T10:00:00.5Z".into(),
            size: 1,
            digest: "d".into(),
            capabilities: vec!["completion".into()],
            details: Default::default(),
        };
        let mut other = ListModel {
            name: "me/tiny:q4".into(),
            ..m.clone_shallow()
        };
        other.modified_at = "bad".into();
        assert_eq!(
            serde_json::to_string(&list_body(&ListResponse {
                models: vec![m, other]
            }))
            .unwrap(),
            r#"{"object":"list","data":[{"id":"smollm2:latest","object":"model","created":1714557600,"owned_by":"library"},{"id":"me/tiny:q4","object":"model","created":0,"owned_by":"me"}]}"#
        );
    }

    trait CloneShallow {
        fn clone_shallow(&self) -> ListModel;
    }
    impl CloneShallow for ListModel {
        fn clone_shallow(&self) -> ListModel {
            ListModel {
                name: self.name.clone(),
                model: self.model.clone(),
                remote_model: self.remote_model.clone(),
                remote_host: self.remote_host.clone(),
                modified_at: self.modified_at.clone(),
                size: self.size,
                digest: self.digest.clone(),
                capabilities: self.capabilities.clone(),
                details: Default::default(),
            }
        }
    }
}
