//! Safetensors (MLX) models in the store: `/api/create` with `"experimental": true` (what
//! `herd create --experimental` sends) writes Ollama's layout — one tensor layer per tensor or
//! packed quantized group, json layers, config `model_format: "safetensors"` — and `/api/tags`,
//! `/api/show`, copy and delete report and handle it as Ollama does; bad checkpoints get a 400
//! and leave nothing stored.

mod mlx_support;
mod registry_support;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use server::api::{app, AppState};
use server::create::{create_model, CreateRequest};
use server::store::{ModelName, Store};
use tower::ServiceExt;

use mlx_support::*;

async fn call(app: &Router, method: Method, uri: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        // NDJSON: the last line.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
    });
    (status, v)
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("models")).unwrap();
    (dir, store)
}

fn request(name: &str, files: std::collections::BTreeMap<String, String>) -> CreateRequest {
    CreateRequest {
        model: name.into(),
        files: Some(files),
        experimental: true,
        ..CreateRequest::default()
    }
}

fn manifest(store: &Store, name: &str) -> server::store::Manifest {
    store
        .read(&ModelName::parse(name).unwrap())
        .unwrap()
        .unwrap()
        .manifest
}

#[tokio::test]
async fn a_bf16_checkpoint_is_stored_tensor_by_tensor_and_shown_as_ollama_does() {
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let (_t, store) = store();
    let files = upload_dir(&store, src.path());
    let app = app(AppState::new(store.clone()));
    let mut body = serde_json::to_value(request("tiny-mlx", files)).unwrap();
    body["stream"] = json!(false);
    let (s, v) = call(&app, Method::POST, "/api/create", body).await;
    assert_eq!(
        (s, &v["status"]),
        (StatusCode::OK, &json!("success")),
        "{v}"
    );

    let m = manifest(&store, "tiny-mlx");
    let tensors = tiny_llama_tensors();
    let tensor_layers: Vec<_> = m
        .layers
        .iter()
        .filter(|l| l.media_type == "application/vnd.ollama.image.tensor")
        .collect();
    let mut want: Vec<&str> = tensors.iter().map(|t| t.0.as_str()).collect();
    want.sort();
    let names: Vec<&str> = tensor_layers
        .iter()
        .map(|l| l.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, want);
    // Each blob is one safetensors tensor holding exactly the source bytes.
    for l in &tensor_layers {
        let (h, data) = blob_header(&store.blobs().path(&l.digest));
        let name = l.name.as_deref().unwrap();
        let src = tensors.iter().find(|t| t.0 == name).unwrap();
        assert_eq!(h.as_object().unwrap().len(), 1, "{h}");
        assert_eq!(h[name]["dtype"], "BF16");
        assert_eq!(h[name]["shape"], json!(src.2));
        assert_eq!(data % 8, 0);
        let bytes = std::fs::read(store.blobs().path(&l.digest)).unwrap();
        assert_eq!(&bytes[data..], &src.3[..], "{name}");
    }
    let json_names: Vec<&str> = m
        .layers
        .iter()
        .filter(|l| l.media_type == "application/vnd.ollama.image.json")
        .map(|l| l.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        json_names,
        ["config.json", "tokenizer.json", "tokenizer_config.json"]
    );
    let config: Value =
        serde_json::from_slice(&std::fs::read(store.blobs().path(&m.config.digest)).unwrap())
            .unwrap();
    assert_eq!(config["model_format"], "safetensors");
    assert_eq!(config["file_type"], "");
    assert_eq!(config["capabilities"], json!(["completion"]));

    let params: u64 = tensors.iter().map(|t| t.2.iter().product::<u64>()).sum();
    let (s, tags) = call(&app, Method::GET, "/api/tags", Value::Null).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        tags["models"][0]["details"],
        json!({"parent_model": "", "format": "safetensors", "family": "llama", "families": null,
               "parameter_size": server::gguf::human_number(params), "quantization_level": "bfloat16"})
    );
    let (s, show) = call(
        &app,
        Method::POST,
        "/api/show",
        json!({"model": "tiny-mlx"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{show}");
    assert_eq!(show["details"]["format"], "safetensors");
    assert_eq!(show["capabilities"], json!(["completion"]));
    assert_eq!(show["template"], CHATML);
    assert_eq!(
        show["model_info"],
        json!({"general.architecture": "llama", "general.parameter_count": params,
            "llama.context_length": 2048, "llama.embedding_length": HIDDEN, "llama.block_count": LAYERS,
            "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
            "llama.feed_forward_length": FFN, "llama.vocab_size": VOCAB})
    );
    assert!(
        show.get("tensors").is_none(),
        "tensors only when verbose: {show}"
    );
    let (_, verbose) = call(
        &app,
        Method::POST,
        "/api/show",
        json!({"model": "tiny-mlx", "verbose": true}),
    )
    .await;
    let t = &verbose["tensors"];
    assert_eq!(t.as_array().unwrap().len(), tensors.len());
    assert_eq!(
        t[0],
        json!({"name": "model.embed_tokens.weight", "type": "BF16", "shape": [VOCAB, HIDDEN]})
    );

    // Copy and delete treat the layers as any blobs.
    let (s, _) = call(
        &app,
        Method::POST,
        "/api/copy",
        json!({"source": "tiny-mlx", "destination": "tiny2"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        &app,
        Method::DELETE,
        "/api/delete",
        json!({"model": "tiny-mlx"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, again) = call(&app, Method::POST, "/api/show", json!({"model": "tiny2"})).await;
    assert_eq!(
        (s, &again["model_info"]),
        (StatusCode::OK, &show["model_info"])
    );
}

#[tokio::test]
async fn the_smollm2_mlx_checkpoint_packs_quantized_weights_with_their_scales() {
    let dir = smollm2_mlx();
    let (_t, store) = store();
    let files = upload_dir(&store, &dir);
    let mut seen = Vec::new();
    create_model(&store, &request("smol-mlx", files), &mut |p| {
        seen.push(p.status)
    })
    .unwrap();
    assert_eq!(seen.last().unwrap(), "success");
    let m = manifest(&store, "smol-mlx");
    let layer = |name: &str| {
        m.layers
            .iter()
            .find(|l| l.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name}"))
    };
    // The 8-bit embedding and a 4-bit projection, each one blob with its scales and biases.
    for (name, quant) in [
        ("model.embed_tokens.weight", "int8"),
        ("model.layers.0.self_attn.q_proj.weight", "int4"),
    ] {
        let (h, _) = blob_header(&store.blobs().path(&layer(name).digest));
        let mut keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let want = [
            String::from("__metadata__"),
            name.into(),
            format!("{name}.bias"),
            format!("{name}.scale"),
        ];
        assert_eq!(
            keys,
            want.iter().map(String::as_str).collect::<Vec<_>>(),
            "{h}"
        );
        assert_eq!(
            h["__metadata__"],
            json!({"quant_type": quant, "group_size": "32"})
        );
        assert_eq!(h[name]["dtype"], "U32");
    }
    assert!(m
        .layers
        .iter()
        .all(|l| !l.name.as_deref().unwrap_or_default().ends_with(".scales")));
    let config: Value =
        serde_json::from_slice(&std::fs::read(store.blobs().path(&m.config.digest)).unwrap())
            .unwrap();
    assert_eq!(config["file_type"], "int4");

    // The parameter count from unpacked shapes equals the GGUF it was converted from.
    let gguf = dir
        .parent()
        .unwrap()
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let g = server::gguf::read_path(&gguf, Default::default()).unwrap();
    let app = app(AppState::new(store.clone()));
    let (_, show) = call(
        &app,
        Method::POST,
        "/api/show",
        json!({"model": "smol-mlx"}),
    )
    .await;
    assert_eq!(
        show["details"]["parameter_size"],
        g.details().parameter_size,
        "{show}"
    );
    assert_eq!(show["details"]["quantization_level"], "int4");
    assert_eq!(show["details"]["family"], "llama");
    assert_eq!(show["model_info"]["llama.block_count"], 30);
    assert_eq!(show["capabilities"], json!(["completion"]));
}

/// Each bad checkpoint, the message its 400 must carry.
#[tokio::test]
async fn bad_checkpoints_are_refused_with_400_and_store_nothing() {
    type Edit = Box<dyn Fn(&std::path::Path)>;
    let st = |d: &std::path::Path| d.join("model.safetensors");
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "header longer than the file",
            Box::new(move |d| {
                let mut b = std::fs::read(st(d)).unwrap();
                let n = b.len() as u64;
                b[..8].copy_from_slice(&n.to_le_bytes());
                std::fs::write(st(d), b).unwrap();
            }),
            "longer than the file",
        ),
        (
            "tensor offsets past the end",
            Box::new(move |d| {
                let b = std::fs::read(st(d)).unwrap();
                std::fs::write(st(d), &b[..b.len() - 100]).unwrap();
            }),
            "past the end of the file",
        ),
        (
            "shapes that disagree with config.json",
            Box::new(|d| {
                let mut c = tiny_config();
                c["vocab_size"] = json!(VOCAB + 1);
                std::fs::write(d.join("config.json"), c.to_string()).unwrap();
            }),
            "model.embed_tokens.weight has shape [96, 64] but config.json implies [97, 64]",
        ),
        (
            "layer count",
            Box::new(|d| {
                let mut c = tiny_config();
                c["num_hidden_layers"] = json!(3);
                std::fs::write(d.join("config.json"), c.to_string()).unwrap();
            }),
            "num_hidden_layers 3 but the tensors hold 2 layers",
        ),
        (
            "unknown architecture",
            Box::new(|d| {
                let mut c = tiny_config();
                c["model_type"] = json!("gpt2");
                std::fs::write(d.join("config.json"), c.to_string()).unwrap();
            }),
            "unsupported architecture \"gpt2\"",
        ),
        (
            "gemma3's text + vision wrapper",
            Box::new(|d| {
                let mut c = tiny_config();
                c["model_type"] = json!("gemma3");
                c["architectures"] = json!(["Gemma3ForConditionalGeneration"]);
                std::fs::write(d.join("config.json"), c.to_string()).unwrap();
            }),
            "unsupported architecture \"gemma3\"",
        ),
        (
            "no tokenizer",
            Box::new(|d| std::fs::remove_file(d.join("tokenizer.json")).unwrap()),
            "no tokenizer",
        ),
        (
            "no config",
            Box::new(|d| std::fs::remove_file(d.join("config.json")).unwrap()),
            "config.json not found",
        ),
    ];
    for (what, edit, want) in cases {
        let src = tempfile::tempdir().unwrap();
        write_tiny_llama(src.path());
        edit(src.path());
        let (_t, store) = store();
        let files = upload_dir(&store, src.path());
        let before = blob_names(&store);
        let app = app(AppState::new(store.clone()));
        let (s, v) = call(
            &app,
            Method::POST,
            "/api/create",
            serde_json::to_value(request("bad", files)).unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{what}: {v}");
        let msg = v["error"].as_str().unwrap_or_default();
        assert!(
            msg.contains(want),
            "{what}: {msg:?} should contain {want:?}"
        );
        assert_eq!(blob_names(&store), before, "{what}: a blob was written");
        assert!(
            store
                .read(&ModelName::parse("bad").unwrap())
                .unwrap()
                .is_none(),
            "{what}"
        );
    }
}

#[tokio::test]
async fn experimental_quantize_names_are_ollamas() {
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let (_t, store) = store();
    let files = upload_dir(&store, src.path());
    let app = app(AppState::new(store.clone()));
    for (q, want) in [
        ("q4_K_M", "unsupported --quantize \"q4_K_M\": supported types are int4, int8, nvfp4, mxfp4, mxfp8"),
        ("nvfp8", "unsupported --quantize \"nvfp8\""),
    ] {
        let mut body = serde_json::to_value(request("q", files.clone())).unwrap();
        body["quantize"] = json!(q);
        let (s, v) = call(&app, Method::POST, "/api/create", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{q}: {v}");
    }
}

/// Push and pull need nothing new: the tensor and json layers are blobs. Against Debian's
/// docker-registry: push, delete, pull back byte-identical, and show still reads it.
#[tokio::test]
async fn push_and_pull_round_trip_through_a_real_registry() {
    use registry_support::{registry, test_options, RealRegistry};
    use server::store::registry::progress;
    let reg = RealRegistry::start().expect("docker-registry is required");
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let (_t, store) = store();
    let files = upload_dir(&store, src.path());
    let name = reg.name("library/tiny-mlx:bf16");
    create_model(&store, &request(&name.to_string(), files), &mut |_| {}).unwrap();
    let entry = store.read(&name).unwrap().unwrap();
    let r = registry(&store, test_options(None));
    r.push(&name, true, progress::discard()).await.unwrap();

    let (_t2, store2) = self::store();
    let r2 = registry(&store2, test_options(None));
    r2.pull(&name, true, progress::discard()).await.unwrap();
    let pulled = store2.read(&name).unwrap().unwrap();
    assert_eq!(pulled.bytes, entry.bytes);
    for l in entry.manifest.blobs() {
        assert_eq!(
            std::fs::read(store2.blobs().path(&l.digest)).unwrap(),
            std::fs::read(store.blobs().path(&l.digest)).unwrap()
        );
    }
    let app = app(AppState::new(store2.clone()));
    let (s, show) = call(
        &app,
        Method::POST,
        "/api/show",
        json!({"model": name.to_string()}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{show}");
    assert_eq!(show["details"]["format"], "safetensors");
    assert_eq!(show["model_info"]["llama.block_count"], LAYERS);
}

/// TEMPLATE, SYSTEM and PARAMETER from a Modelfile apply to an experimental create as to any.
#[tokio::test]
async fn modelfile_layers_apply_to_an_experimental_create() {
    let src = tempfile::tempdir().unwrap();
    write_tiny_llama(src.path());
    let (_t, store) = store();
    let files = upload_dir(&store, src.path());
    let mut req = request("tiny-mf", files);
    req.template = "{{ if .Tools }}T{{ end }}{{ .Prompt }}".into();
    req.system = "Be brief.".into();
    req.parameters =
        Some(serde_json::from_value(json!({"stop": ["<|im_end|>"], "temperature": 0.2})).unwrap());
    create_model(&store, &req, &mut |_| {}).unwrap();
    let app = app(AppState::new(store.clone()));
    let (s, show) = call(&app, Method::POST, "/api/show", json!({"model": "tiny-mf"})).await;
    assert_eq!(s, StatusCode::OK, "{show}");
    assert_eq!(show["template"], "{{ if .Tools }}T{{ end }}{{ .Prompt }}");
    assert_eq!(show["system"], "Be brief.");
    assert!(
        show["parameters"].as_str().unwrap().contains("stop"),
        "{show}"
    );
    // The Go TEMPLATE takes precedence: its `.Tools` adds the tools capability.
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
}

/// The slice's other architectures (tiny random qwen3 and gemma3 text checkpoints) import and
/// report their family as Ollama does (`model_type`).
#[tokio::test]
async fn qwen3_and_gemma3_text_checkpoints_import() {
    for (model_type, arch_name) in [
        ("qwen3", "Qwen3ForCausalLM"),
        ("gemma3_text", "Gemma3ForCausalLM"),
    ] {
        let src = tempfile::tempdir().unwrap();
        write_tiny_llama(src.path());
        let mut c = tiny_config();
        c["model_type"] = json!(model_type);
        c["architectures"] = json!([arch_name]);
        std::fs::write(src.path().join("config.json"), c.to_string()).unwrap();
        // Their extra per-layer norms ([head_dim] q/k norms) ride along as ordinary tensors.
        let mut tensors = tiny_llama_tensors();
        for l in 0..LAYERS {
            for n in ["q_norm", "k_norm"] {
                tensors.push((
                    format!("model.layers.{l}.self_attn.{n}.weight"),
                    "BF16",
                    vec![16],
                    noise(99, 32),
                ));
            }
        }
        write_safetensors(&src.path().join("model.safetensors"), &tensors);
        let (_t, store) = store();
        let files = upload_dir(&store, src.path());
        create_model(&store, &request("m", files), &mut |_| {}).unwrap();
        let app = app(AppState::new(store.clone()));
        let (s, show) = call(&app, Method::POST, "/api/show", json!({"model": "m"})).await;
        assert_eq!(s, StatusCode::OK, "{show}");
        assert_eq!(show["details"]["family"], model_type, "{show}");
        assert_eq!(
            show["model_info"][format!("{model_type}.block_count")],
            LAYERS
        );
        let names = manifest(&store, "m")
            .layers
            .iter()
            .filter_map(|l| l.name.clone())
            .filter(|n| n.contains("q_norm"))
            .count();
        assert_eq!(names, LAYERS as usize);
    }
}
