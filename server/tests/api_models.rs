//! `/`, `/api/version`, `/api/tags`, `/api/show`, `/api/copy`, `/api/delete`, `/api/ps` and the
//! generic error behaviour (404/405 texts, missing/bad/huge bodies), against an Ollama-layout
//! store built byte-for-byte in the test.

mod api_support;

use api_support::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;
use server::api::{app, AppState};

#[tokio::test]
async fn root_and_version_answer_get_and_head() {
    let ts = TestStore::new();
    let app = ts.app();
    let r = get(&app, "/").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::OK, "Ollama is running")
    );
    let r = send(&app, request(Method::HEAD, "/", Body::empty())).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    let r = get(&app, "/api/version").await;
    // Ollama's field exactly, plus herd's provenance (extra fields Ollama's clients ignore).
    let v = r.json();
    // `version` is the Ollama release herd implements (clients gate features on it, and a
    // 0.1.0 reads as an outdated Ollama); herd's own version is an extra field.
    assert_eq!(v["version"], json!(server::OLLAMA_COMPAT_VERSION));
    assert_eq!(v["herd_version"], json!(server::VERSION));
    assert_eq!(
        v["engines"]["llama.cpp"]["build"],
        json!(server::provenance::LLAMACPP_BUILD)
    );
    assert!(v["engines"]["llama.cpp"]["build"]
        .as_str()
        .is_some_and(|b| b.starts_with('b')));
    assert_eq!(v["git_commit"], json!(server::provenance::GIT_COMMIT));
    // runner-mlx's pin beside llama.cpp's (issue 18): the wheels' version from native/mlx.lock.
    assert_eq!(
        v["engines"]["mlx"]["build"],
        json!(server::provenance::MLX_VERSION)
    );
    assert!(v["engines"]["mlx"]["build"]
        .as_str()
        .is_some_and(|b| b.split('.').count() == 3));
    for path in ["/api/version", "/api/tags"] {
        let r = send(&app, request(Method::HEAD, path, Body::empty())).await;
        assert_eq!(r.status, StatusCode::OK, "HEAD {path}");
    }
}

#[tokio::test]
async fn unknown_route_and_wrong_method_use_gin_texts() {
    let app = TestStore::new().app();
    let r = get(&app, "/api/nope").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::NOT_FOUND, "404 page not found")
    );
    let r = send(&app, request(Method::POST, "/api/tags", "{}")).await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed")
    );
    let r = get(&app, "/api/show").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn empty_store_lists_an_empty_array() {
    let app = TestStore::new().app();
    assert_eq!(get(&app, "/api/tags").await.json(), json!({"models": []}));
    assert_eq!(get(&app, "/api/ps").await.json(), json!({"models": []}));
}

#[tokio::test]
async fn tags_lists_newest_first_with_manifest_digest_and_total_size() {
    let ts = TestStore::new();
    let gguf = tiny_gguf();
    let old = ts.model("alpha", "latest", &gguf, &[], ago(7200));
    let new = ts.model("beta", "7b", &gguf, &[(MT_SYSTEM, b"be brief")], ago(60));
    let r = get(&ts.app(), "/api/tags").await;
    assert_eq!(r.status, StatusCode::OK);
    let details = json!({
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "24",
        "quantization_level": "F32",
        // The list (only) adds the GGUF's training context and width (model_list_cache.go).
        "context_length": 4096,
        "embedding_length": 8
    });
    let stamp = |secs| {
        time::OffsetDateTime::from(ago(secs))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    // Stamps are whole seconds, so recomputing them here can only differ across a second
    // boundary; compare everything else exactly and the stamps by parsing.
    let mut body = r.json();
    let got_stamps: Vec<String> = body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["modified_at"].as_str().unwrap().to_owned())
        .collect();
    for m in body["models"].as_array_mut().unwrap() {
        m.as_object_mut().unwrap().remove("modified_at");
    }
    assert_eq!(
        body,
        json!({"models": [
            {"name": "beta:7b", "model": "beta:7b", "size": new.size,
             "digest": new.manifest_digest, "capabilities": ["completion"], "details": details},
            {"name": "alpha:latest", "model": "alpha:latest", "size": old.size,
             "digest": old.manifest_digest, "capabilities": ["completion"], "details": details},
        ]})
    );
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
    };
    assert!(
        (parse(&got_stamps[0]) - parse(&stamp(60)))
            .whole_seconds()
            .abs()
            <= 1
    );
    assert!(
        (parse(&got_stamps[1]) - parse(&stamp(7200)))
            .whole_seconds()
            .abs()
            <= 1
    );

    // A model created FROM another lists its parent (the model layer's `from`), as /api/show
    // reports it (model_list_cache.go readModelListLayers).
    let app = ts.app();
    let r = post_json(
        &app,
        "/api/create",
        json!({"model": "derived", "from": "alpha", "system": "hi", "stream": false}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let shown = post_json(&app, "/api/show", json!({"model": "derived"}))
        .await
        .json();
    let parent = shown["details"]["parent_model"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(parent.contains("alpha"), "{parent}");
    let tags = get(&app, "/api/tags").await.json();
    let derived = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "derived:latest")
        .unwrap()
        .clone();
    assert_eq!(derived["details"]["parent_model"], parent.as_str());
}

#[tokio::test]
async fn show_reports_layers_gguf_metadata_and_modelfile() {
    let ts = TestStore::new();
    let gguf = tiny_gguf();
    let params = br#"{"stop":["<|im_end|>"],"temperature":0.7}"#;
    let w = ts.model(
        "tiny",
        "latest",
        &gguf,
        &[
            (MT_TEMPLATE, b"{{ .System }}{{ .Prompt }}{{ .Tools }}"),
            (MT_SYSTEM, b"be brief"),
            (MT_PARAMS, params),
            (MT_LICENSE, b"MIT License\nline two\nline three"),
        ],
        ago(30),
    );
    let app = ts.app();
    let r = post_json(&app, "/api/show", json!({"model": "TINY"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let body = r.json();
    let blob_path = ts.root().join("blobs").join(w.model_blob.replace(':', "-"));
    assert_eq!(
        body["modelfile"],
        format!(
            "# Modelfile generated by \"ollama show\"\n\
             # To build a new Modelfile based on this, replace FROM with:\n\
             # FROM tiny:latest\n\n\
             FROM {}\n\
             TEMPLATE {{{{ .System }}}}{{{{ .Prompt }}}}{{{{ .Tools }}}}\n\
             SYSTEM be brief\n\
             PARAMETER stop <|im_end|>\n\
             PARAMETER temperature 0.7\n\
             LICENSE \"MIT License\nline two\nline three\"\n",
            blob_path.display()
        )
    );
    assert_eq!(
        body["parameters"],
        format!("{:<30} \"<|im_end|>\"\n{:<30} 0.7", "stop", "temperature")
    );
    assert_eq!(body["template"], "{{ .System }}{{ .Prompt }}{{ .Tools }}");
    assert_eq!(body["system"], "be brief");
    assert_eq!(body["license"], "MIT License\nline two\nline three");
    assert_eq!(body["capabilities"], json!(["completion", "tools"]));
    assert_eq!(
        body["model_info"],
        json!({
            "general.architecture": "llama",
            "general.file_type": 0,
            "general.parameter_count": 24,
            "llama.attention.head_count": 2,
            "llama.attention.head_count_kv": 1,
            "llama.block_count": 1,
            "llama.context_length": 4096,
            "llama.embedding_length": 8,
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": null
        })
    );
    assert_eq!(body["details"]["family"], "llama");
    assert_eq!(
        body["tensors"][0],
        json!({"name": "token_embd.weight", "type": "F32", "shape": [8, 2]})
    );
    assert!(body["modified_at"].as_str().unwrap().ends_with('Z'));

    // verbose: arrays in full.
    let r = post_json(&app, "/api/show", json!({"name": "tiny", "verbose": true})).await;
    assert_eq!(
        r.json()["model_info"]["tokenizer.ggml.tokens"],
        json!(["a", "b"])
    );

    // Copilot Chat's user agent gets the requested name as general.basename (routes.go
    // ShowHandler, copilotChatUserAgentPrefix); other agents get the GGUF's own (none here).
    let mut req = request(
        Method::POST,
        "/api/show",
        json!({"model": "Tiny"}).to_string(),
    );
    req.headers_mut()
        .insert("user-agent", "GitHubCopilotChat/0.30.1".parse().unwrap());
    let info = send(&app, req).await.json()["model_info"].clone();
    assert_eq!(info["general.basename"], "Tiny");
    assert_eq!(info["general.architecture"], "llama");
    let mut req = request(
        Method::POST,
        "/api/show",
        json!({"model": "Tiny"}).to_string(),
    );
    req.headers_mut()
        .insert("user-agent", "curl/8.5.0".parse().unwrap());
    assert!(send(&app, req).await.json()["model_info"]
        .get("general.basename")
        .is_none());
    // Names are trimmed first (modelref.ParseRef).
    let r = post_json(&app, "/api/show", json!({"model": " tiny "})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn show_errors_use_ollamas_wording() {
    let ts = TestStore::new();
    let app = ts.app();
    let cases = [
        (
            json!({"model": "missing"}),
            404,
            "model 'missing:latest' not found",
        ),
        (
            json!({"model": "ns/missing:7b"}),
            404,
            "model 'ns/missing:7b' not found",
        ),
        (json!({}), 400, "model is required"),
        (json!({"model": "  "}), 400, "model is required"),
        (json!({"model": "bad name!"}), 400, "invalid model name"),
    ];
    for (req, status, msg) in cases {
        let r = post_json(&app, "/api/show", req.clone()).await;
        assert_eq!(r.status.as_u16(), status, "{req}");
        assert_eq!(r.json(), json!({"error": msg}), "{req}");
    }
    let r = send(&app, request(Method::POST, "/api/show", Body::empty())).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "missing request body"})
        )
    );
    let r = send(&app, request(Method::POST, "/api/show", "{\"model\": ")).await;
    assert_eq!(
        (r.status, r.json()),
        (StatusCode::BAD_REQUEST, json!({"error": "unexpected EOF"}))
    );
    let r = send(&app, request(Method::POST, "/api/show", "{\"model\": 5}")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["error"],
        "json: cannot unmarshal number into Go struct field ShowRequest.model of type string"
    );
}

#[tokio::test]
async fn malformed_gguf_is_an_error_for_that_model_only() {
    let ts = TestStore::new();
    ts.model("good", "latest", &tiny_gguf(), &[], ago(10));
    ts.model(
        "broken",
        "latest",
        b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff",
        &[],
        ago(20),
    );
    let app = ts.app();
    let r = post_json(&app, "/api/show", json!({"model": "broken"})).await;
    assert!(
        r.status.is_client_error() || r.status.is_server_error(),
        "{}",
        r.status
    );
    assert!(
        r.json()["error"].as_str().unwrap().contains("GGUF"),
        "{}",
        r.text()
    );
    // The server is still up and the good model is still served and listed.
    let r = post_json(&app, "/api/show", json!({"model": "good"})).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<String> = get(&app, "/api/tags").await.json()["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["good:latest", "broken:latest"]);

    // A manifest whose model blob is gone reads as a missing model.
    let w = ts.model("hollow", "latest", &tiny_gguf(), &[], ago(30));
    std::fs::remove_file(ts.root().join("blobs").join(w.model_blob.replace(':', "-"))).unwrap();
    let r = post_json(&app, "/api/show", json!({"model": "hollow"})).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model 'hollow:latest' not found"})
        )
    );
}

#[tokio::test]
async fn copy_and_delete_follow_ollama() {
    let ts = TestStore::new();
    let w = ts.model("llama3", "latest", &tiny_gguf(), &[], ago(100));
    let app = ts.app();

    let r = post_json(
        &app,
        "/api/copy",
        json!({"source": "llama3", "destination": "mine:v1"}),
    )
    .await;
    assert_eq!((r.status, r.body.len()), (StatusCode::OK, 0));
    assert_eq!(
        std::fs::read(ts.manifest_path("mine", "v1")).unwrap(),
        std::fs::read(ts.manifest_path("llama3", "latest")).unwrap()
    );

    let r = post_json(
        &app,
        "/api/copy",
        json!({"source": "nope", "destination": "x"}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model \"nope\" not found"})
        )
    );
    let r = post_json(
        &app,
        "/api/copy",
        json!({"source": "a b", "destination": "x"}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "source \"a b\" is invalid"})
        )
    );
    let r = post_json(
        &app,
        "/api/copy",
        json!({"source": "llama3", "destination": ""}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "destination \"\" is invalid"})
        )
    );

    // A destination differing only in case overwrites the existing manifest, no second entry.
    let r = post_json(
        &app,
        "/api/copy",
        json!({"source": "llama3", "destination": "MINE:V1"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let tags = get(&app, "/api/tags").await.json();
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"mine:v1"), "{names:?}");

    let r = send(
        &app,
        request(
            Method::DELETE,
            "/api/delete",
            json!({"model": "Mine:V1"}).to_string(),
        ),
    )
    .await;
    assert_eq!((r.status, r.body.len()), (StatusCode::OK, 0));
    assert!(!ts.manifest_path("mine", "v1").exists());
    // Shared blobs survive while another manifest uses them.
    let blob = ts.root().join("blobs").join(w.model_blob.replace(':', "-"));
    assert!(blob.exists());

    let r = send(
        &app,
        request(
            Method::DELETE,
            "/api/delete",
            json!({"model": "Mine:V1"}).to_string(),
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "model 'Mine:V1' not found"})
        )
    );
    let r = send(
        &app,
        request(
            Method::DELETE,
            "/api/delete",
            json!({"model": "x y"}).to_string(),
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "name \"x y\" is invalid"})
        )
    );

    // Deleting the last user removes the blob too.
    let r = send(
        &app,
        request(
            Method::DELETE,
            "/api/delete",
            json!({"name": "llama3"}).to_string(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!blob.exists());
    assert_eq!(get(&app, "/api/tags").await.json(), json!({"models": []}));
}

#[tokio::test]
async fn oversized_json_body_is_413() {
    let ts = TestStore::new();
    let app = app(AppState::new(ts.store()).with_max_json_body(1024));
    let big = json!({"model": "x".repeat(4096)}).to_string();
    let r = send(&app, request(Method::POST, "/api/show", big.clone())).await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": "request entity too large"})
        )
    );
    // Without a Content-Length (a chunked stream) the limit still holds while reading.
    let chunks = futures_util::stream::iter(
        big.into_bytes()
            .chunks(100)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let r = send(
        &app,
        request(Method::POST, "/api/show", Body::from_stream(chunks)),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
}
