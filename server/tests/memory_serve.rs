//! Memory through the real `herd serve` and the real runner on CPU: startup device discovery
//! finds host RAM only (so the 4096-token tier), `/api/ps` `size` holds the
//! KV cache and compute buffers besides the weights (more than the file), `size_vram` is 0 and
//! `herd ps` says `100% CPU`; under `HERD_MEMORY_BUDGET` two real models that do not fit together
//! swap instead of both loading, and a model bigger than the budget fails with Ollama's error
//! while the server stays up.
//!
//! Needs `cargo build -p server --bin herd -p runner-llamacpp` and `scripts/fetch-test-models`.

mod serve_support;

#[path = "herd_proc/mod.rs"]
mod herd_proc;

use herd_proc::{HerdServe, HERD};
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

/// One real model load at a time on the shared 2-core machine.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static M: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    M.lock().await
}

struct Setup {
    ts: TestStore,
    runner: std::path::PathBuf,
    smol: std::path::PathBuf,
}

fn setup() -> Option<Setup> {
    let runner = native_runner()?;
    let smol = test_model(SMOL)?;
    let gemma = test_model(GEMMA)?;
    let ts = TestStore::new();
    register_file(&ts, "smol", &smol, &[]);
    register_file(&ts, "gemma", &gemma, &[]);
    Some(Setup { ts, runner, smol })
}

fn start(s: &Setup, env: &[(&str, &str)]) -> HerdServe {
    let runner = s.runner.to_str().unwrap();
    let mut all = vec![
        ("HERD_RUNNER", runner),
        ("OLLAMA_NOPRUNE", "1"),
        ("OLLAMA_NUM_PARALLEL", "1"),
    ];
    all.extend_from_slice(env);
    HerdServe::start(s.ts.root(), &all)
}

/// Loads `model` (Ollama: a generate without a prompt) and returns (status, body).
async fn load(srv: &HerdServe, model: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(srv.url("/api/generate"))
        .json(&json!({"model": model, "options": {"num_thread": 1}}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn ps(srv: &HerdServe) -> Vec<Value> {
    let v: Value = reqwest::get(srv.url("/api/ps"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["models"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps_size_holds_kv_and_compute_and_cpu_models_show_100_percent_cpu() {
    let Some(s) = setup() else { return };
    let _g = serial().await;
    let srv = start(&s, &[]);
    let (st, body) = load(&srv, "smol").await;
    assert_eq!(st, 200, "{body}");
    let models = ps(&srv).await;
    assert_eq!(models.len(), 1, "{models:?}");
    let m = &models[0];
    let file = std::fs::metadata(&s.smol).unwrap().len();
    let size = m["size"].as_u64().unwrap();
    // SmolLM2 at the default 4096-token context: 30 layers × 384 × f16 = 23040 bytes a token.
    let kv = 4096 * 30 * 384 * 2;
    assert_eq!(m["context_length"], 4096);
    assert!(
        size > file * 9 / 10 + kv,
        "size {size} holds the weights ({file}) and the KV cache ({kv})"
    );
    assert!(
        size < file + kv + 200 * 1024 * 1024,
        "size {size}: weights + KV + compute"
    );
    assert_eq!(m["size_vram"], 0, "a CPU build holds nothing on a GPU");
    eprintln!("smol: file {file}, /api/ps size {size}");
    // Startup discovery (`runner-llamacpp devices`) found host RAM and no GPU: the 4096 tier.
    let log = srv.log_text();
    assert!(log.contains("device device=CPU"), "{log}");
    assert!(!log.contains("kind=Gpu"), "{log}");

    let out = std::process::Command::new(HERD)
        .arg("ps")
        .env("OLLAMA_HOST", &srv.addr)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("smol:latest"))
        .expect(&text);
    assert!(row.contains("100% CPU"), "{text}");
    assert!(text.lines().next().unwrap().contains("PROCESSOR"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_that_do_not_fit_together_swap_and_a_too_big_one_fails() {
    let Some(s) = setup() else { return };
    let _g = serial().await;
    // Without a budget both stay loaded; their sizes set the budget below.
    let (gemma, smol) = {
        let srv = start(&s, &[]);
        assert_eq!(load(&srv, "gemma").await.0, 200);
        assert_eq!(load(&srv, "smol").await.0, 200);
        let models = ps(&srv).await;
        assert_eq!(models.len(), 2, "{models:?}");
        let size = |name: &str| {
            models
                .iter()
                .find(|m| m["name"] == name)
                .and_then(|m| m["size"].as_u64())
                .unwrap()
        };
        (size("gemma:latest"), size("smol:latest"))
    };
    eprintln!("measured /api/ps size: gemma {gemma}, smol {smol}");

    // Room for either alone, not for both: the second load evicts the first.
    let budget = (gemma.max(smol) + 1024 * 1024).to_string();
    let srv = start(&s, &[("HERD_MEMORY_BUDGET", budget.as_str())]);
    let big_first = if gemma >= smol { "gemma" } else { "smol" };
    let small_next = if big_first == "gemma" {
        "smol"
    } else {
        "gemma"
    };
    assert_eq!(load(&srv, big_first).await.0, 200);
    assert_eq!(ps(&srv).await[0]["name"], format!("{big_first}:latest"));
    assert_eq!(load(&srv, small_next).await.0, 200);
    let models = ps(&srv).await;
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [format!("{small_next}:latest")],
        "swapped, not both loaded"
    );
    let log = srv.log_with("evicting model to make room");
    assert!(log.contains("evicting model to make room"), "{log}");
    drop(srv);

    // A budget below what SmolLM2 needs: Ollama's error, no runner started, server still up.
    let srv = start(&s, &[("HERD_MEMORY_BUDGET", "50MiB")]);
    let (st, body) = load(&srv, "smol").await;
    assert_eq!(st, 500, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.starts_with("model requires more system memory (")
            && msg.ends_with(" MiB) than is available (50.0 MiB)"),
        "{msg}"
    );
    assert!(ps(&srv).await.is_empty());
    let v = reqwest::get(srv.url("/api/version")).await.unwrap();
    assert_eq!(v.status(), 200, "the server stays up");
}
