//! GPU placement on the real `herd serve` with the fake runner scripting two GPUs
//! (`HERD_RUNNER_FAKE_GPUS`, answered by its `devices` subcommand at startup and in `/info`):
//! without `OLLAMA_SCHED_SPREAD` a model that fits on one GPU is spawned with `--main-gpu` of the
//! GPU with the most free memory (so a second small model lands on the other GPU, and a repeat
//! request reuses the placed runner); with `OLLAMA_SCHED_SPREAD=1` no `--main-gpu` is passed;
//! a request's own `main_gpu` wins, and one out of range is Ollama's 400 `{"error": …}`.
//! Needs `cargo build -p fake-runner` first.

mod herd_proc;
mod serve_support;

use herd_proc::HerdServe;
use serde_json::{json, Value};
use serve_support::api_support::{ago, TestStore};
use serve_support::scheduler_support::{children_of, fake_runner};

const GIB: u64 = 1 << 30;

/// A fake model holding 2 GiB on GPUs (of 3 GiB in all); returns its blob's `sha256-HEX` name.
fn fake_model(ts: &TestStore, name: &str) -> String {
    // The name makes each model's blob its own (an unknown flag and its value are skipped).
    let script = format!(
        "#fake-runner\n--tokens\nok\n--memory\n{}\n--vram\n{}\n--name\n{name}\n",
        3 * GIB,
        2 * GIB
    );
    let m = ts.model(name, "latest", script.as_bytes(), &[], ago(60));
    m.model_blob.replace(':', "-")
}

/// Two GPUs: 4 GiB free on GPU 0, 5 GiB on GPU 1.
fn serve(ts: &TestStore, spread: Option<&str>) -> HerdServe {
    let runner = fake_runner().display().to_string();
    let gpus = format!("{},{}", 4 * GIB, 5 * GIB);
    let mut env = vec![
        ("HERD_RUNNER", runner.as_str()),
        ("HERD_RUNNER_FAKE_GPUS", gpus.as_str()),
    ];
    if let Some(v) = spread {
        env.push(("OLLAMA_SCHED_SPREAD", v));
    }
    HerdServe::start(ts.root(), &env)
}

async fn generate(herd: &HerdServe, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(herd.url("/api/generate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn ok(herd: &HerdServe, model: &str, options: Value) {
    let body = json!({"model": model, "prompt": "hi", "stream": false, "options": options});
    let (status, v) = generate(herd, body).await;
    assert_eq!(status, 200, "{model}: {v}");
    assert_eq!(v["response"], "ok");
}

/// (pid, argv) of the server's runner processes for the model whose blob is `blob`.
fn runners_of(herd: &HerdServe, blob: &str) -> Vec<(u32, Vec<String>)> {
    children_of(herd.pid())
        .into_iter()
        .filter(|(_, argv)| argv.iter().any(|a| a.ends_with(blob)))
        .collect()
}

/// The one runner of `blob`: its pid and `--main-gpu` value, if any.
fn placed(herd: &HerdServe, blob: &str) -> (u32, Option<String>) {
    let runners = runners_of(herd, blob);
    assert_eq!(runners.len(), 1, "one runner for {blob}: {runners:?}");
    let (pid, argv) = &runners[0];
    let main_gpu = argv
        .iter()
        .position(|a| a == "--main-gpu")
        .map(|i| argv[i + 1].clone());
    (*pid, main_gpu)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_fits_goes_to_the_freest_gpu_unless_spreading() {
    let ts = TestStore::new();
    let a = fake_model(&ts, "a");
    let b = fake_model(&ts, "b");
    let c = fake_model(&ts, "c");
    assert!(a != b && b != c);

    let herd = serve(&ts, None);
    ok(&herd, "a", json!({})).await;
    let (pid_a, gpu) = placed(&herd, &a);
    assert_eq!(gpu.as_deref(), Some("1"), "GPU 1 has the most free memory");
    // GPU 1 now has 5 - 2 = 3 GiB free by a's report: b goes to GPU 0 (4 GiB).
    ok(&herd, "b", json!({})).await;
    assert_eq!(
        placed(&herd, &b).1.as_deref(),
        Some("0"),
        "b gets the other GPU"
    );
    // The placement's main_gpu is not the request's: a's runner serves a again.
    ok(&herd, "a", json!({})).await;
    assert_eq!(placed(&herd, &a), (pid_a, Some("1".into())), "no reload");
    // The request's own main_gpu wins over the freest GPU.
    ok(&herd, "c", json!({"main_gpu": 1})).await;
    assert_eq!(placed(&herd, &c).1.as_deref(), Some("1"));

    // Out of range for the two GPUs: 400 before any runner starts.
    let body = json!({"model": "c", "prompt": "hi", "stream": false, "options": {"main_gpu": 2}});
    let (status, v) = generate(&herd, body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v,
        json!({"error": "main_gpu 2 is out of range: this server has 2 GPUs (main_gpu 0 to 1)"})
    );
    assert_eq!(runners_of(&herd, &c).len(), 1, "c's runner is untouched");
    let log = herd.log_with("OLLAMA_SCHED_SPREAD");
    assert!(log.contains("OLLAMA_SCHED_SPREAD"), "{log}");
    drop(herd);

    // OLLAMA_SCHED_SPREAD (Ollama's bool: any non-false value): llama.cpp splits over all GPUs.
    let herd = serve(&ts, Some("yes"));
    ok(&herd, "a", json!({})).await;
    assert_eq!(placed(&herd, &a).1, None, "spread: no --main-gpu");
    ok(&herd, "b", json!({"main_gpu": 0})).await;
    assert_eq!(
        placed(&herd, &b).1.as_deref(),
        Some("0"),
        "the request's own wins"
    );
    let body = json!({"model": "b", "prompt": "hi", "stream": false, "options": {"main_gpu": 9}});
    let (status, v) = generate(&herd, body).await;
    assert_eq!((status, v["error"].is_string()), (400, true), "{v}");
}
