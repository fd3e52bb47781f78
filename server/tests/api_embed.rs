//! `/api/embed`, `/api/embeddings` and `/api/ps` through the real app with a scripted
//! `Inference` (inference_support), and validation without any engine.

mod api_support;
mod inference_support;

use axum::http::{Method, StatusCode};
use serde_json::json;

use api_support::*;
use inference_support::*;

#[tokio::test]
async fn embed_normalizes_and_cuts_dimensions() {
    let (_ts, fake, app) = setup();
    let r = post_json(
        &app,
        "/api/embed",
        json!({"model": "tiny", "input": ["a", "b"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let body = r.json();
    assert_eq!(body["model"], "tiny");
    let want = [3.0 / 13.0, 4.0 / 13.0, 0.0, 12.0 / 13.0];
    let got = body["embeddings"].as_array().unwrap();
    assert_eq!(got.len(), 2);
    for v in got {
        let v: Vec<f64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), 4);
        for (g, w) in v.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{v:?}");
        }
    }
    assert_eq!(body["prompt_eval_count"], 7);
    assert_eq!(body["load_duration"], 5);
    assert!(body["total_duration"].as_u64().unwrap() > 0);

    let r = post_json(
        &app,
        "/api/embed",
        json!({"model": "tiny", "input": "a", "dimensions": 2, "truncate": false}),
    )
    .await;
    assert_eq!(r.json()["embeddings"], json!([[0.6, 0.8]]));

    let r = post_json(&app, "/api/embed", json!({"model": "tiny", "input": [1]})).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid input type"})
        )
    );
    let r = post_json(&app, "/api/embed", json!({"model": "tiny", "input": ""})).await;
    assert_eq!(r.json(), json!({"model": "tiny", "embeddings": []}));
    let r = post_json(&app, "/api/embed", json!({"model": "nope", "input": "x"})).await;
    // Ollama's embed handlers word it through handleScheduleError.
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model \"nope\" not found, try pulling it first"})
        )
    );

    let r = post_json(
        &app,
        "/api/embeddings",
        json!({"model": "tiny", "prompt": "a"}),
    )
    .await;
    assert_eq!(r.json(), json!({"embedding": [3.0, 4.0, 0.0, 12.0]}));
    let r = post_json(
        &app,
        "/api/embeddings",
        json!({"model": "tiny", "prompt": ""}),
    )
    .await;
    assert_eq!(r.json(), json!({"embedding": []}));

    // A blank name (Ollama trims it: modelref.ParseRef) is worded per handler: /api/embed falls
    // back to 404 `model '…' not found`, /api/embeddings to 400 `model is required`
    // (routes.go EmbedHandler / EmbeddingsHandler, writeModelRefParseError).
    for (uri, body, status, msg) in [
        (
            "/api/embed",
            json!({"model": "", "input": "a"}),
            404,
            "model '' not found",
        ),
        (
            "/api/embed",
            json!({"model": " ", "input": "a"}),
            404,
            "model ' ' not found",
        ),
        (
            "/api/embeddings",
            json!({"model": "", "prompt": "a"}),
            400,
            "model is required",
        ),
        (
            "/api/embeddings",
            json!({"model": " ", "prompt": "a"}),
            400,
            "model is required",
        ),
        (
            "/api/embeddings",
            json!({"prompt": "a"}),
            400,
            "model is required",
        ),
    ] {
        let r = post_json(&app, uri, body).await;
        assert_eq!(
            (r.status.as_u16(), r.json()),
            (status, json!({ "error": msg })),
            "{uri}"
        );
    }

    // ParseRef's trim also means a padded name finds the model.
    let r = post_json(&app, "/api/embed", json!({"model": " tiny ", "input": "a"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let calls = fake.calls.lock().unwrap();
    let embeds: Vec<String> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Embed(inputs, truncate) => Some(format!("{inputs:?} {truncate}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        embeds,
        [
            "[\"a\", \"b\"] true",
            "[\"a\"] false",
            "[\"a\"] true",
            "[\"a\"] true"
        ]
    );
}

#[tokio::test]
async fn without_an_engine_validation_still_answers() {
    let ts = TestStore::new();
    ts.model("tiny", "latest", &tiny_gguf(), &[], ago(1));
    let app = ts.app();
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "nope", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = post_json(
        &app,
        "/api/generate",
        json!({"model": "tiny", "prompt": "x"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.json(),
        json!({"error": "inference is not available in this server build"})
    );
    let r = send(
        &app,
        request(Method::GET, "/api/chat", axum::body::Body::empty()),
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn ps_lists_loaded_models_longest_keep_alive_first() {
    let (_ts, _fake, app) = setup();
    let body = get(&app, "/api/ps").await.json();
    let models = body["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    // Never-expiring first, shown ~292 years ahead like Ollama's MaxInt64 duration.
    assert_eq!(models[0]["name"], "gone:latest");
    let year: i32 = models[0]["expires_at"].as_str().unwrap()[..4]
        .parse()
        .unwrap();
    assert!(year > 2300, "{}", models[0]["expires_at"]);
    assert_eq!(
        models[0]["details"]["format"], "",
        "no such model in the store"
    );
    let mut tiny = models[1].clone();
    tiny.as_object_mut().unwrap().remove("details");
    assert_eq!(
        tiny,
        json!({"name": "tiny:latest", "model": "tiny:latest", "size": 1000, "digest": "ab".repeat(32),
               "expires_at": "2030-03-17T17:46:40Z", "size_vram": 0, "context_length": 4096})
    );
    assert_eq!(models[1]["details"]["family"], "llama");
}
