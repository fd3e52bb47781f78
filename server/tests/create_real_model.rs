//! SmolLM2-135M-Instruct (Q4_1 GGUF from scripts/fetch-test-models) through the whole client +
//! server create path: Modelfile → hashed files → blob upload → create → manifest; and the
//! quantize refusal for a quantized source. Passes with a notice when the model is absent.

mod create_util;
#[path = "prereq/mod.rs"]
mod prereq;

use std::path::PathBuf;
use std::time::Instant;

use server::cli::create::prepare;
use server::create::{create_model, CreateRequest};
use server::gguf::{read_path, ReadOptions};
use server::modelfile::parse;
use server::store::manifest::*;

const TEMPLATE: &str = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";

fn smollm2() -> Option<PathBuf> {
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()??
        .dir;
    let p = home.join(".cache/herd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        Some(p)
    } else {
        prereq::missing(format!("{} (scripts/fetch-test-models)", p.display()));
        None
    }
}

#[tokio::test]
async fn smollm2_create_with_modelfile_then_quantize_refused() {
    let Some(model) = smollm2() else { return };
    let t = create_util::store();
    let modelfile = format!(
        "FROM {}\nSYSTEM You are a concise assistant.\nPARAMETER temperature 0.2\n\
         PARAMETER stop <|im_end|>\nMESSAGE user What is 2+2?\nMESSAGE assistant 4\n\
         TEMPLATE \"\"\"{TEMPLATE}\"\"\"\n",
        model.display()
    );
    let mf = parse(&modelfile).unwrap();

    let started = Instant::now();
    let prep = prepare(&mf, t.dir.path()).unwrap();
    let secs = started.elapsed().as_secs_f64();
    let size = std::fs::metadata(&model).unwrap().len();
    eprintln!(
        "hashed {} MB in {secs:.3}s ({:.0} MB/s)",
        size >> 20,
        size as f64 / 1e6 / secs
    );
    assert_eq!(prep.uploads.len(), 1);
    let up = &prep.uploads[0];
    // The upload a server receives: verified against the client's digest while streaming.
    let f = tokio::fs::File::open(&up.path).await.unwrap();
    assert_eq!(
        t.store.blobs().write_verified(&up.digest, f).await.unwrap(),
        size
    );

    let mut req: CreateRequest = prep.request.clone();
    req.model = "smol".into();
    let store = t.store.clone();
    let r = req.clone();
    let statuses = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        create_model(&store, &r, &mut |p| seen.push(p.status)).map(|_| seen)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(statuses.first().map(String::as_str), Some("parsing GGUF"));
    assert_eq!(statuses.last().map(String::as_str), Some("success"));

    let m = t.read("smol").unwrap().manifest;
    let layer = |mt: &str| m.layers.iter().find(|l| l.media_type == mt).unwrap();
    // The model layer is the uploaded blob: one copy of the data in the store.
    assert_eq!(layer(MEDIA_TYPE_MODEL).digest, up.digest);
    let blob_bytes: u64 = std::fs::read_dir(t.store.blobs().dir())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(blob_bytes < size + 4096, "{blob_bytes} vs {size}");
    assert_eq!(t.blob_text(&layer(MEDIA_TYPE_TEMPLATE).digest), TEMPLATE);
    assert_eq!(
        t.blob_text(&layer(MEDIA_TYPE_SYSTEM).digest),
        "You are a concise assistant."
    );
    assert_eq!(
        t.blob_text(&layer(MEDIA_TYPE_PARAMS).digest),
        "{\"stop\":[\"\\u003c|im_end|\\u003e\"],\"temperature\":0.2}\n"
    );
    assert_eq!(
        t.blob_text(&layer(MEDIA_TYPE_MESSAGES).digest),
        "[{\"role\":\"user\",\"content\":\"What is 2+2?\"},{\"role\":\"assistant\",\"content\":\"4\"}]\n"
    );
    let g = read_path(&model, ReadOptions::default()).unwrap();
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
    assert_eq!(config["model_format"], "gguf");
    assert_eq!(config["model_family"], "llama");
    assert_eq!(config["file_type"], "Q4_1");
    assert_eq!(config["model_type"], g.parameter_size().as_str());

    // A Q4_1 source cannot be quantized; nothing changes.
    let before = t.read("smol").unwrap().bytes;
    req.quantize = "q8_0".into();
    let store = t.store.clone();
    let err = tokio::task::spawn_blocking(move || create_model(&store, &req, &mut |_| {}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.status(), 400);
    assert_eq!(
        err.to_string(),
        "quantization is only supported for F16, BF16 and F32 models"
    );
    assert_eq!(t.read("smol").unwrap().bytes, before);
}

/// The same model through HTTP, as `herd create` does it: upload the blob, create with the
/// Modelfile's fields, then `/api/show` returns them; `-q q8_0` is refused with a 400.
#[tokio::test]
async fn smollm2_over_http_then_show() {
    let Some(model) = smollm2() else { return };
    let t = create_util::store();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = server::api::app(server::api::AppState::new(t.store.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mf = parse(&format!(
        "FROM {}\nSYSTEM Answer in one word.\nPARAMETER temperature 0.1\nPARAMETER stop <|im_end|>\n\
         MESSAGE user Capital of France?\nMESSAGE assistant Paris\nTEMPLATE \"\"\"{TEMPLATE}\"\"\"\n",
        model.display()
    ))
    .unwrap();
    let prep = prepare(&mf, t.dir.path()).unwrap();
    let http = reqwest::Client::new();
    for u in &prep.uploads {
        server::cli::create::upload(&http, &base, u).await.unwrap();
    }
    let mut req = prep.request.clone();
    req.model = "smol-http".into();
    let mut statuses = Vec::new();
    server::cli::create::send_create(&http, &base, &req, &mut |p| statuses.push(p.status.clone()))
        .await
        .unwrap();
    assert_eq!(statuses.last().map(String::as_str), Some("success"));

    let show: serde_json::Value = http
        .post(format!("{base}/api/show"))
        .json(&serde_json::json!({"model": "smol-http"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(show["template"], TEMPLATE);
    assert_eq!(show["system"], "Answer in one word.");
    assert_eq!(
        show["messages"],
        serde_json::json!([
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris"}
        ])
    );
    let params = show["parameters"].as_str().unwrap();
    assert!(
        params.contains("temperature                    0.1"),
        "{params}"
    );
    assert!(
        params.contains("stop                           \"<|im_end|>\""),
        "{params}"
    );
    assert_eq!(show["details"]["family"], "llama");
    assert_eq!(show["details"]["quantization_level"], "Q4_1");
    // The generated Modelfile parses back to the same text fields.
    let back = parse(show["modelfile"].as_str().unwrap()).unwrap();
    assert!(back
        .commands
        .contains(&server::modelfile::Command::Template(TEMPLATE.into())));

    req.quantize = "q8_0".into();
    let resp = http
        .post(format!("{base}/api/create"))
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.text().await.unwrap(),
        "{\"error\":\"quantization is only supported for F16, BF16 and F32 models\"}"
    );
}
