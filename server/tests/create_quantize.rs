//! Create-time quantization and real-model create, end to end: the built `herd` binary serves a
//! temp store with the real runner. A tiny random-weight F16 llama (built here with the server's
//! GGUF writer) is created with `herd create -q q8_0` and with `/api/create` `quantize: Q4_K_M`
//! (Ollama's progress lines checked); both load in the runner and generate, `/api/show` reports
//! the new type and the layers shrink as expected, and no temp file is left. Unknown types and a
//! quantized source (SmolLM2's Q4_1) are refused with Ollama's messages, creating nothing.
//! SmolLM2-135M-Instruct created from a Modelfile (SYSTEM, PARAMETER, MESSAGE, Go TEMPLATE) by
//! the CLI answers through `herd run`. Skips when the runner or the model is missing.

mod quantize_support;
#[path = "create_util/tiny_llama.rs"]
mod tiny_llama;

use quantize_support::{native_runner, ndjson, test_model, Serve};
use serde_json::{json, Value};
use server::gguf::GgmlType;
use sha2::{Digest as _, Sha256};

fn model_layer(serve: &Serve, name: &str) -> Value {
    let path = serve
        .models
        .join("manifests/registry.ollama.ai/library")
        .join(name)
        .join("latest");
    let m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")
        .unwrap()
        .clone()
}

async fn generates(serve: &Serve, name: &str) {
    let (st, body) = serve
        .post(
            "/api/generate",
            json!({"model": name, "prompt": "Hello world", "raw": true, "stream": false,
                   "options": {"num_predict": 4, "temperature": 0, "num_ctx": 256}}),
        )
        .await;
    assert_eq!(st, 200, "{name}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["done"], true, "{body}");
    assert!(v["eval_count"].as_u64().unwrap() >= 1, "{name}: {body}");
}

#[tokio::test]
async fn f16_model_quantized_to_q8_0_and_q4_k_m_loads_and_generates() {
    let Some(runner) = native_runner() else {
        return;
    };
    let serve = Serve::start(&runner, &[]);
    let dir = tempfile::tempdir().unwrap();
    let bytes = tiny_llama::tiny_llama(GgmlType::F16, 11);
    let f16_size = bytes.len() as u64;
    std::fs::write(dir.path().join("tiny-f16.gguf"), &bytes).unwrap();
    std::fs::write(dir.path().join("Modelfile"), "FROM ./tiny-f16.gguf\n").unwrap();
    let f16_digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));

    // The CLI: hashes, uploads, creates with -q, prints Ollama's statuses.
    let (ok, _, err) = serve.herd(
        &["create", "tiny-q8", "-f", "Modelfile", "-q", "q8_0"],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert!(err.contains("quantizing F16 model to Q8_0"), "{err}");
    assert!(err.contains("verifying conversion"), "{err}");
    assert!(err.trim_end().ends_with("success"), "{err}");

    // The API, streaming: the blob is already there (the CLI uploaded it).
    let (st, body) = serve
        .post(
            "/api/create",
            json!({"model": "tiny-q4", "files": {"tiny-f16.gguf": f16_digest}, "quantize": "q4_K_M"}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let lines = ndjson(&body);
    let statuses: Vec<&str> = lines
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses[0], "parsing GGUF");
    let quant: Vec<&Value> = lines
        .iter()
        .filter(|l| l["status"] == "quantizing F16 model to Q4_K_M")
        .collect();
    assert!(quant.len() >= 2, "{statuses:?}");
    let mut last = 0;
    for l in &quant {
        assert_eq!(l["digest"], "0000000000000000000");
        assert_eq!(l["total"], f16_size);
        let c = l["completed"].as_u64().unwrap_or(0);
        assert!(c >= last, "progress goes forward: {quant:?}");
        last = c;
    }
    assert_eq!(last, f16_size, "progress ends complete");
    let after = statuses
        .iter()
        .position(|s| *s == "verifying conversion")
        .unwrap();
    let q4 = model_layer(&serve, "tiny-q4");
    assert_eq!(
        statuses[after + 1],
        format!("creating new layer {}", q4["digest"].as_str().unwrap())
    );
    assert_eq!(
        statuses[statuses.len() - 2..],
        ["writing manifest", "success"]
    );
    // Ollama's progress names the type as asked: Q4_K, though Q4_K_M is what it writes.
    let (st, body) = serve
        .post(
            "/api/create",
            json!({"model": "tiny-q4k", "files": {"tiny-f16.gguf": f16_digest}, "quantize": "q4_k"}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let lines = ndjson(&body);
    assert!(
        lines
            .iter()
            .any(|l| l["status"] == "quantizing F16 model to Q4_K"),
        "{body}"
    );
    let again = format!("using existing layer {}", q4["digest"].as_str().unwrap());
    assert!(lines.iter().any(|l| l["status"] == again), "{body}");

    let q8 = model_layer(&serve, "tiny-q8");
    for (name, layer, level, lo, hi) in [
        ("tiny-q8", &q8, "Q8_0", 0.50, 0.56),
        ("tiny-q4", &q4, "Q4_K_M", 0.28, 0.40),
    ] {
        assert_ne!(layer["digest"], f16_digest.as_str());
        let r = layer["size"].as_u64().unwrap() as f64 / f16_size as f64;
        assert!((lo..hi).contains(&r), "{name}: {r:.3} of the F16 size");
        let (st, body) = serve.post("/api/show", json!({"model": name})).await;
        assert_eq!(st, 200, "{body}");
        let show: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(show["details"]["quantization_level"], level, "{name}");
        assert_eq!(show["details"]["format"], "gguf");
        generates(&serve, name).await;
    }
    assert_eq!(serve.stray_blob_files(), Vec::<String>::new());

    // Unknown type: Ollama's message, nothing created.
    let (st, body) = serve
        .post(
            "/api/create",
            json!({"model": "tiny-bad", "files": {"tiny-f16.gguf": f16_digest}, "quantize": "q5_k_m"}),
        )
        .await;
    assert_eq!(st, 400);
    assert_eq!(
        body,
        r#"{"error":"unsupported quantization type Q5_K_M - supported types are F32, F16, Q4_K_S, Q4_K_M, Q8_0"}"#
    );
    let (st, _) = serve.post("/api/show", json!({"model": "tiny-bad"})).await;
    assert_eq!(st, 404);
}

const TEMPLATE: &str = "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}\
{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";

#[tokio::test]
async fn smollm2_from_a_modelfile_answers_and_refuses_quantization() {
    let Some(runner) = native_runner() else {
        return;
    };
    let Some(model) = test_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let serve = Serve::start(&runner, &[]);
    let dir = tempfile::tempdir().unwrap();
    let modelfile = format!(
        "FROM {}\nSYSTEM \"\"\"You are a helpful geography assistant. Answer briefly.\"\"\"\n\
         PARAMETER temperature 0\nPARAMETER num_ctx 1024\nPARAMETER stop <|im_end|>\n\
         MESSAGE user What is the capital of Italy?\nMESSAGE assistant The capital of Italy is Rome.\n\
         TEMPLATE \"\"\"{TEMPLATE}\"\"\"\n",
        model.display()
    );
    std::fs::write(dir.path().join("Modelfile"), modelfile).unwrap();
    let (ok, _, err) = serve.herd(&["create", "smol", "-f", "Modelfile"], dir.path());
    assert!(ok, "{err}");
    assert!(err.trim_end().ends_with("success"), "{err}");
    // The model layer is the uploaded file itself (one copy in the store).
    let layer = model_layer(&serve, "smol");
    assert_eq!(
        layer["size"].as_u64().unwrap(),
        std::fs::metadata(&model).unwrap().len()
    );

    let (st, body) = serve.post("/api/show", json!({"model": "smol"})).await;
    assert_eq!(st, 200);
    let show: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(show["template"], TEMPLATE);
    assert_eq!(show["details"]["quantization_level"], "Q4_1");
    assert_eq!(
        show["messages"][1]["content"],
        "The capital of Italy is Rome."
    );

    // First request (nothing cached yet): the rendered prompt carried the SYSTEM and MESSAGE
    // turns, many more tokens than the question.
    let (st, body) = serve
        .post(
            "/api/chat",
            json!({"model": "smol", "stream": false, "options": {"num_predict": 8},
                   "messages": [{"role": "user", "content": "Capital of Spain?"}]}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["prompt_eval_count"].as_u64().unwrap() > 30, "{body}");
    assert!(!v["message"]["content"].as_str().unwrap().is_empty());

    let (ok, out, err) = serve.herd(
        &["run", "smol", "What is the capital of France?"],
        dir.path(),
    );
    assert!(ok, "{err}");
    eprintln!("smol answered: {out:?}");
    assert!(out.contains("Paris"), "{out:?}");

    // A Q4_1 source cannot be quantized: Ollama's message, no model.
    let (ok, _, err) = serve.herd(
        &["create", "smol-q8", "-f", "Modelfile", "-q", "q8_0"],
        dir.path(),
    );
    assert!(!ok);
    assert!(
        err.contains("quantization is only supported for F16, BF16 and F32 models"),
        "{err}"
    );
    let (st, _) = serve.post("/api/show", json!({"model": "smol-q8"})).await;
    assert_eq!(st, 404);
    assert_eq!(serve.stray_blob_files(), Vec::<String>::new());
}
