//! `OLLAMA_DEBUG_LOG_REQUESTS` through the real app (routes_request_log_test.go): an inference
//! request's body is written as received beside a curl script that replays it, the handler still
//! gets the same body, and other routes are not logged.

mod api_support;

use axum::http::StatusCode;
use serde_json::json;

use api_support::*;
use server::api::request_log::RequestLog;
use server::api::{app, AppState};

#[tokio::test]
async fn inference_requests_are_logged_with_a_replay_script() {
    let ts = TestStore::new();
    let logs = tempfile::tempdir().unwrap();
    let state = AppState::new(ts.store())
        .with_request_log(RequestLog::in_dir(logs.path().to_owned(), "http"));
    let app = app(state);
    let body = r#"{"model":"nope","messages":[{"role":"user","content":"hello"}]}"#;
    let r = send(
        &app,
        request(axum::http::Method::POST, "/v1/chat/completions", body),
    )
    .await;
    // The handler read the body after the log did: it got as far as looking the model up.
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert!(r.text().contains("nope"), "{}", r.text());
    // Not inference routes: not logged.
    get(&app, "/api/tags").await;
    post_json(&app, "/api/show", json!({"model": "nope"})).await;

    let mut names: Vec<String> = std::fs::read_dir(logs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names[0].ends_with("_v1_chat_completions_body.json"),
        "{names:?}"
    );
    assert!(
        names[1].ends_with("_v1_chat_completions_request.sh"),
        "{names:?}"
    );
    assert_eq!(
        std::fs::read_to_string(logs.path().join(&names[0])).unwrap(),
        body
    );
    let script = std::fs::read_to_string(logs.path().join(&names[1])).unwrap();
    assert!(
        script.contains("--request POST --url 'http://localhost:11434/v1/chat/completions'"),
        "{script}"
    );
    assert!(
        script.contains(&format!("@\"${{SCRIPT_DIR}}/{}\"", names[0])),
        "{script}"
    );
}
