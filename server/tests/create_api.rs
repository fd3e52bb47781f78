//! `/api/create` over HTTP: NDJSON progress, `stream:false`, error statuses, and the full
//! `herd create` client path (HEAD/POST blobs, create) against a real listening server, checked
//! through `/api/show` (whose generated Modelfile must parse back to what was created).

mod create_util;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use server::api::{app, AppState};
use server::cli::create::{prepare, send_create, upload};
use server::modelfile::{parse, Command};
use tower::ServiceExt;

use create_util::{store, tiny_gguf, TestStore};

fn router(t: &TestStore) -> Router {
    app(AppState::new(t.store.clone()))
}

async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    body: Vec<u8>,
) -> (StatusCode, String, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn post(app: &Router, uri: &str, body: Value) -> (StatusCode, String, String) {
    call(app, Method::POST, uri, serde_json::to_vec(&body).unwrap()).await
}

#[tokio::test]
async fn create_streams_progress_and_show_round_trips() {
    let t = store();
    let app = router(&t);
    let gguf = tiny_gguf();
    let digest = server::store::Digest::of_bytes(&gguf).to_string();
    let (s, _, _) = call(
        &app,
        Method::POST,
        &format!("/api/blobs/{digest}"),
        gguf.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);

    let template = "{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ end }}<|assistant|>";
    let (s, ct, body) = post(
        &app,
        "/api/create",
        json!({
            "model": "tiny",
            "files": {"model.gguf": digest},
            "template": template,
            "system": "Be brief.\nVery brief.",
            "parameters": {"temperature": 0.3, "stop": ["<|end|>", "</s>"], "num_ctx": 1024},
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            "license": "MIT"
        }),
    )
    .await;
    assert_eq!(
        (s, ct.as_str()),
        (StatusCode::OK, "application/x-ndjson"),
        "{body}"
    );
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], json!({"status": "parsing GGUF"}));
    assert_eq!(
        lines[1],
        json!({"status": format!("using existing layer {digest}")})
    );
    assert_eq!(
        lines[lines.len() - 2],
        json!({"status": "writing manifest"})
    );
    assert_eq!(lines[lines.len() - 1], json!({"status": "success"}));

    let (s, _, body) = post(&app, "/api/show", json!({"model": "tiny"})).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let show: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(show["template"], template);
    assert_eq!(show["system"], "Be brief.\nVery brief.");
    assert_eq!(show["license"], "MIT");
    assert_eq!(
        show["messages"],
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    );
    let mf = parse(show["modelfile"].as_str().unwrap()).unwrap();
    let blob_path = t
        .store
        .blobs()
        .path(&server::store::Digest::parse(&digest).unwrap());
    let mut params: Vec<(String, String)> = mf
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Parameter { name, value } => Some((name.clone(), value.clone())),
            _ => None,
        })
        .collect();
    params.sort();
    assert_eq!(
        params,
        [
            ("num_ctx".into(), "1024".into()),
            ("stop".into(), "</s>".into()),
            ("stop".into(), "<|end|>".into()),
            ("temperature".into(), "0.3".into())
        ]
    );
    let others: Vec<&Command> = mf
        .commands
        .iter()
        .filter(|c| !matches!(c, Command::Parameter { .. }))
        .collect();
    assert_eq!(
        others,
        [
            &Command::From(blob_path.display().to_string()),
            &Command::Template(template.into()),
            &Command::System("Be brief.\nVery brief.".into()),
            &Command::License("MIT".into()),
            &Command::Message {
                role: "user".into(),
                content: "hi".into()
            },
            &Command::Message {
                role: "assistant".into(),
                content: "hello".into()
            },
        ]
    );

    // stream:false answers with the last progress object only.
    let (s, ct, body) = post(
        &app,
        "/api/create",
        json!({"model": "tiny2", "from": "tiny", "system": "x", "stream": false}),
    )
    .await;
    assert_eq!(
        (s, ct.as_str(), body.as_str()),
        (
            StatusCode::OK,
            "application/json",
            "{\"status\":\"success\"}"
        )
    );
}

#[tokio::test]
async fn errors_keep_their_status_in_both_modes() {
    let t = store();
    let app = router(&t);
    let junk = t.upload(b"definitely not a gguf");
    for stream in [true, false] {
        let cases = [
            (
                json!({"model": "m", "files": {"m.gguf": junk.to_string()}}),
                400,
                "supplied file was not in GGUF format",
            ),
            (
                json!({"model": "m", "files": {"../m.gguf": junk.to_string()}}),
                400,
                "file path must be relative",
            ),
            (
                json!({"model": "m", "files": {"/m.gguf": junk.to_string()}}),
                400,
                "file path must be relative",
            ),
            (
                json!({"model": "m"}),
                400,
                "neither 'from' or 'files' was specified",
            ),
            (
                json!({"model": "no good", "from": "x"}),
                400,
                "invalid model name",
            ),
        ];
        for (mut body, status, msg) in cases {
            body["stream"] = json!(stream);
            let (s, ct, text) = post(&app, "/api/create", body.clone()).await;
            assert_eq!(s.as_u16(), status, "{body} {text}");
            assert!(ct.starts_with("application/json"), "{ct}");
            assert_eq!(
                serde_json::from_str::<Value>(&text).unwrap(),
                json!({"error": msg}),
                "{body}"
            );
        }
    }
    let (s, _, text) = call(&app, Method::POST, "/api/create", Vec::new()).await;
    assert_eq!(
        (s.as_u16(), text.as_str()),
        (400, "{\"error\":\"missing request body\"}")
    );
    assert!(t.store.list().unwrap().is_empty());
}

#[tokio::test]
async fn cli_client_uploads_once_and_creates_over_http() {
    let t = store();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(&t);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("tiny.gguf"), tiny_gguf()).unwrap();
    let mf = parse("FROM ./tiny.gguf\nSYSTEM hello\nPARAMETER top_k 7\n").unwrap();
    let prep = prepare(&mf, work.path()).unwrap();
    let http = reqwest::Client::new();
    assert!(
        upload(&http, &base, &prep.uploads[0]).await.unwrap(),
        "first upload sends bytes"
    );
    assert!(
        !upload(&http, &base, &prep.uploads[0]).await.unwrap(),
        "second is skipped (HEAD 200)"
    );
    let mut req = prep.request.clone();
    req.model = "via-cli".into();
    let mut statuses = Vec::new();
    send_create(&http, &base, &req, &mut |p| statuses.push(p.status.clone()))
        .await
        .unwrap();
    assert_eq!(statuses.last().map(String::as_str), Some("success"));
    assert!(t.read("via-cli").is_some());

    // A server-side refusal surfaces as the error text.
    req.quantize = "q4_k_m".into();
    req.files = Some(
        [(
            "x.gguf".to_string(),
            server::store::Digest::of_bytes(b"x").to_string(),
        )]
        .into(),
    );
    let err = send_create(&http, &base, &req, &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("was not uploaded"), "{err}");
}

/// A registry that serves one store's manifests and blobs (GET and HEAD), for the auto-pull of an
/// unknown `from`.
async fn fake_registry(src: server::store::Store) -> u16 {
    use axum::extract::{Request, State};
    use axum::response::Response;
    async fn handle(State(src): State<server::store::Store>, req: Request) -> Response {
        let path = req.uri().path().to_owned();
        let not_found = || {
            Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::empty())
                .unwrap()
        };
        let bytes = if let Some(rest) = path.strip_prefix("/v2/library/") {
            if let Some((model, tag)) = rest.split_once("/manifests/") {
                match src.read(&server::store::ModelName::parse(&format!("{model}:{tag}")).unwrap())
                {
                    Ok(Some(e)) => e.bytes,
                    _ => return not_found(),
                }
            } else if let Some((_, d)) = rest.split_once("/blobs/") {
                match server::store::Digest::parse(d) {
                    Ok(d) if src.blobs().exists(&d) => std::fs::read(src.blobs().path(&d)).unwrap(),
                    _ => return not_found(),
                }
            } else {
                return not_found();
            }
        } else {
            return not_found();
        };
        let len = bytes.len();
        let body = if req.method() == Method::HEAD {
            Body::empty()
        } else {
            Body::from(bytes)
        };
        Response::builder()
            .header(header::CONTENT_LENGTH, len)
            .body(body)
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new().fallback(handle).with_state(src);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

#[tokio::test]
async fn unknown_from_is_pulled_then_derived() {
    // The registry's copy of `base`.
    let remote = store();
    let gguf = remote.upload(&tiny_gguf());
    remote
        .create(&server::create::CreateRequest {
            model: "base".into(),
            files: create_util::files(&[("model.gguf", &gguf)]),
            system: "remote system".into(),
            ..Default::default()
        })
        .unwrap();
    let port = fake_registry(remote.store.clone()).await;

    let t = store();
    let app = router(&t);
    let from = format!("http://127.0.0.1:{port}/library/base:latest");
    let (s, _, body) = post(
        &app,
        "/api/create",
        json!({"model": "derived", "from": from, "system": "local system"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let statuses: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            assert!(v.get("error").is_none(), "{v}");
            v["status"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(statuses[0], "pulling manifest");
    assert_eq!(statuses.last().unwrap(), "success");
    assert!(statuses.contains(&"writing manifest".to_string()));
    let m = t.read("derived").unwrap().manifest;
    assert_eq!(m.layers[0].digest, gguf);
    let system = m
        .layers
        .iter()
        .find(|l| l.media_type == server::store::manifest::MEDIA_TYPE_SYSTEM)
        .unwrap();
    assert_eq!(t.blob_text(&system.digest), "local system");
    // The pulled base is in the store too, byte for byte.
    let pulled = t
        .store
        .read(&server::store::ModelName::parse(&from).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(pulled.bytes, remote.read("base").unwrap().bytes);

    // A `from` the registry does not have: the pull's error ends the stream (Ollama's shape).
    let missing = format!("http://127.0.0.1:{port}/library/ghost:latest");
    let (s, _, body) = post(&app, "/api/create", json!({"model": "d2", "from": missing})).await;
    assert_eq!(s, StatusCode::OK);
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], json!({"status": "pulling manifest"}));
    assert_eq!(
        lines.last().unwrap(),
        &json!({"error": "pull model manifest: file does not exist"})
    );
    assert!(t.read("d2").is_none());
}
