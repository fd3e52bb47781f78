//! The real `herd serve` with the real runner: `/metrics` moves with real requests (tokens
//! counted equal the responses' `eval_count`/`prompt_eval_count` sums, requests by route
//! template and status, latency histograms, load time, loaded-model gauges) and passes
//! `promtool check metrics` (Debian's prometheus package); the policy variables reach the
//! scheduler and the API (`HERD_PIN`, `HERD_MAX_KEEP_ALIVE`, `HERD_ALLOW_PULL_HOSTS`); and
//! `herd --version` prints Ollama's lines plus the engine pins.
//!
//! Needs `cargo build --workspace --bins`, `scripts/fetch-test-models` and `scripts/setup`
//! (promtool); a missing prerequisite fails the test unless HERD_ALLOW_SKIP=1.

mod herd_proc;
mod serve_support;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use herd_proc::{listen, piped, Listening, HERD};
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, prereq, register_file, rfc3339, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const KEY: &str = "sk-metrics-test-41c2";
const PROMTOOL: &str = "/usr/bin/promtool";

/// `herd serve` on a free loopback port; killed on drop.
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(ts: &TestStore, runner: &std::path::Path, env: &[(&str, &str)]) -> Server {
    let home = ts.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(HERD);
    cmd.arg("serve")
        .env("HOME", &home)
        .env("OLLAMA_HOST", "127.0.0.1:0")
        .env("OLLAMA_MODELS", ts.root())
        .env("OLLAMA_NOPRUNE", "1")
        .env("HERD_RUNNER", runner)
        .env_remove("HERD_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let Listening { child, addr, log } = listen(&mut cmd, Duration::from_secs(30), None);
    Server {
        child,
        base: format!("http://{addr}"),
        log,
    }
}

/// The value of the one sample line `series` (name and labels exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn promtool_check(text: &str) {
    if !std::path::Path::new(PROMTOOL).exists() {
        prereq::missing(format!(
            "{PROMTOOL} (apt-get install prometheus; scripts/setup)"
        ));
        return;
    }
    let out = piped(Command::new(PROMTOOL).args(["check", "metrics"]), text);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool failed: {said}\n{text}");
    assert!(said.trim().is_empty(), "promtool lint: {said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_real_requests_and_pass_promtool() {
    let Some(runner) = native_runner() else {
        return;
    };
    let Some(model) = test_model(SMOL) else {
        return;
    };
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let srv = serve(&ts, &runner, &[("HERD_API_KEYS", KEY)]);
    let base = &srv.base;
    let http = reqwest::Client::new();
    let auth = format!("Bearer {KEY}");
    assert_eq!(
        http.get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        401,
        "/metrics needs the key like every route but the probes"
    );

    let opts = json!({"temperature": 0, "seed": 1, "num_thread": 1, "num_predict": 6});
    let mut eval = 0.0;
    let mut prompt = 0.0;
    let mut add = |v: &Value| {
        eval += v["eval_count"].as_f64().unwrap_or(0.0);
        prompt += v["prompt_eval_count"].as_f64().unwrap_or(0.0);
    };
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .header("authorization", &auth)
            .json(&body)
            .send()
    };
    let r = post(
        "/api/generate",
        json!({"model": "smol", "prompt": "Count to five.", "stream": false, "options": opts}),
    )
    .await
    .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert!(v["eval_count"].as_u64().unwrap() > 0, "{v}");
    add(&v);
    let r = post(
        "/api/chat",
        json!({"model": "smol", "messages": [{"role": "user", "content": "Hi there"}],
               "stream": false, "options": opts}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    add(&r.json::<Value>().await.unwrap());
    // Streamed: the counts are on the final line.
    let r = post(
        "/api/chat",
        json!({"model": "smol", "messages": [{"role": "user", "content": "Name a color"}],
               "options": opts}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["done"], true, "{text}");
    add(&last);
    let r = post(
        "/api/chat",
        json!({"model": "missing", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .get(format!("{base}/no/such/path"))
        .header("authorization", &auth)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let model = r#"{model="smol:latest"}"#;
    // A lease is handed back just after its response's last byte, so the in-flight gauge may
    // still read 1 for a moment: scrape until it settles (at most 5 s).
    let mut m = String::new();
    for _ in 0..50 {
        let r = http
            .get(format!("{base}/metrics"))
            .header("authorization", &auth)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        m = r.text().await.unwrap();
        if sample(&m, &format!("herd_requests_in_flight{model}")) == Some(0.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let s = |name: &str| sample(&m, name);
    assert_eq!(
        s(&format!("herd_output_tokens_total{model}")),
        Some(eval),
        "{m}"
    );
    assert_eq!(
        s(&format!("herd_prompt_tokens_total{model}")),
        Some(prompt),
        "{m}"
    );
    let req = |route: &str, method: &str, status: u16| {
        s(&format!(
            r#"herd_http_requests_total{{method="{method}",route="{route}",status="{status}"}}"#
        ))
    };
    assert_eq!(req("/api/generate", "POST", 200), Some(1.0), "{m}");
    assert_eq!(req("/api/chat", "POST", 200), Some(2.0), "{m}");
    assert_eq!(req("/api/chat", "POST", 404), Some(1.0), "{m}");
    assert_eq!(req("unmatched", "GET", 404), Some(1.0), "{m}");
    assert_eq!(req("/metrics", "GET", 401), Some(1.0), "{m}");
    assert_eq!(
        s(&format!("herd_time_to_first_token_seconds_count{model}")),
        Some(3.0)
    );
    let gaps = s(&format!("herd_time_per_output_token_seconds_count{model}")).unwrap();
    assert!(gaps > 0.0 && gaps < eval, "{gaps} gaps for {eval} tokens");
    assert_eq!(
        s(&format!("herd_queue_wait_seconds_count{model}")),
        Some(3.0)
    );
    assert_eq!(
        s(&format!("herd_model_load_seconds_count{model}")),
        Some(1.0)
    );
    let load = s(&format!("herd_model_load_seconds_sum{model}")).unwrap();
    assert!(load > 0.0 && load < 60.0, "{load}");
    assert_eq!(s("herd_loaded_models"), Some(1.0));
    assert!(
        s(&format!("herd_model_memory_bytes{model}")).unwrap() > 1e6,
        "{m}"
    );
    assert_eq!(s(&format!("herd_requests_in_flight{model}")), Some(0.0));
    assert_eq!(s(&format!("herd_queue_depth{model}")), Some(0.0));
    assert!(
        !m.contains("herd_runner_restarts_total{"),
        "no runner died: {m}"
    );
    promtool_check(&m);

    // Embeddings count their input tokens only.
    let r = post(
        "/api/embed",
        json!({"model": "smol", "input": "hello metrics"}),
    )
    .await
    .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    let embedded = v["prompt_eval_count"].as_f64().unwrap();
    assert!(embedded > 0.0, "{v}");
    let m = http
        .get(format!("{base}/metrics"))
        .header("authorization", &auth)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let s = |name: &str| sample(&m, name);
    assert_eq!(
        s(&format!("herd_prompt_tokens_total{model}")),
        Some(prompt + embedded)
    );
    assert_eq!(s(&format!("herd_output_tokens_total{model}")), Some(eval));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_settings_reach_the_real_server() {
    let Some(runner) = native_runner() else {
        return;
    };
    let (Some(smol), Some(gemma)) = (test_model(SMOL), test_model(GEMMA)) else {
        return;
    };
    let ts = TestStore::new();
    register_file(&ts, "smol", &smol, &[]);
    register_file(&ts, "gemma", &gemma, &[]);
    // Allowed: a host on a port nothing listens on; the refused one is a listener we watch.
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    refused.set_nonblocking(true).unwrap();
    let refused_port = refused.local_addr().unwrap().port();
    let srv = serve(
        &ts,
        &runner,
        &[
            ("OLLAMA_MAX_LOADED_MODELS", "2"),
            ("HERD_PIN", "Smol"),
            ("HERD_MAX_KEEP_ALIVE", "2s"),
            ("HERD_ALLOW_PULL_HOSTS", "registry.example:5000"),
        ],
    );
    let base = &srv.base;
    {
        let log = srv.log.lock().unwrap();
        let config = log.iter().find(|l| l.contains("server config:")).unwrap();
        for want in [
            "HERD_PIN:Smol:latest",
            "HERD_MAX_KEEP_ALIVE:2s",
            "HERD_ALLOW_PULL_HOSTS:registry.example:5000",
        ] {
            assert!(config.contains(want), "{want} in {config}");
        }
    }
    let http = reqwest::Client::new();
    let generate = |model: &str| {
        http.post(format!("{base}/api/generate"))
            .json(
                &json!({"model": model, "prompt": "Hi", "stream": false, "keep_alive": -1,
                          "options": {"num_predict": 1, "num_thread": 1}}),
            )
            .send()
    };
    assert_eq!(generate("smol").await.unwrap().status(), 200);
    assert_eq!(generate("gemma").await.unwrap().status(), 200);
    let ps: Value = http
        .get(format!("{base}/api/ps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let models = ps["models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{ps}");
    let until = |name: &str| {
        let m = models.iter().find(|m| m["name"] == name).unwrap();
        let at = rfc3339(m["expires_at"].as_str().unwrap());
        at - time::OffsetDateTime::from(SystemTime::now())
    };
    // keep_alive -1 capped at 2 s; the pinned model stays (Ollama's far-future forever).
    let gemma_left = until("gemma:latest");
    assert!(gemma_left <= time::Duration::seconds(2), "{gemma_left}");
    assert!(until("smol:latest") > time::Duration::days(365), "{ps}");
    let end = Instant::now() + Duration::from_secs(8);
    loop {
        let ps: Value = http
            .get(format!("{base}/api/ps"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let names: Vec<&str> = ps["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        if names == ["smol:latest"] {
            break;
        }
        assert!(Instant::now() < end, "gemma did not unload: {ps}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A registry host outside HERD_ALLOW_PULL_HOSTS: 403 before any connection.
    let name = format!("http://127.0.0.1:{refused_port}/library/m:latest");
    for (path, body) in [
        ("/api/pull", json!({"model": name, "insecure": true})),
        ("/api/push", json!({"model": name, "insecure": true})),
        ("/api/create", json!({"model": "made", "from": name})),
    ] {
        let r = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            json!({"error": format!(
                "registry host '127.0.0.1:{refused_port}' is not allowed on this server (HERD_ALLOW_PULL_HOSTS)"
            )}),
            "{path}"
        );
    }
    assert!(
        matches!(refused.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the refused host was contacted"
    );

    // `herd --version`: Ollama's line for the answering server, then the engine pins.
    let out = Command::new(HERD)
        .arg("--version")
        .env("OLLAMA_HOST", base.trim_start_matches("http://"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let own = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = text.lines().chain(own.lines()).collect();
    let version: Value = http
        .get(format!("{base}/api/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let v = version["version"].as_str().unwrap();
    let pin = &version["engines"]["llama.cpp"];
    assert_eq!(lines[0], format!("ollama version is {v}"), "{text}");
    assert_eq!(
        lines[1],
        format!(
            "herd {} (git {}) llama.cpp {} (commit {}) mlx {} (commit {})",
            version["herd_version"].as_str().unwrap(),
            version["git_commit"].as_str().unwrap(),
            pin["build"].as_str().unwrap(),
            pin["commit"].as_str().unwrap(),
            version["engines"]["mlx"]["build"].as_str().unwrap(),
            version["engines"]["mlx"]["commit"].as_str().unwrap()
        )
    );
    assert_eq!(lines.len(), 2, "{text}");
    // No server (the watched port, closed now): Ollama's warnings, and still the pins.
    drop(refused);
    let out = Command::new(HERD)
        .arg("-v")
        .env("OLLAMA_HOST", format!("127.0.0.1:{}", refused_port))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let own = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = text.lines().chain(own.lines()).collect();
    assert_eq!(
        lines[..2],
        [
            "Warning: could not connect to a running Ollama instance".to_string(),
            format!("Warning: client version is {v}")
        ],
        "{text}"
    );
    let herd_version = version["herd_version"].as_str().unwrap();
    assert!(
        lines[2].starts_with(&format!("herd {herd_version} (git ")),
        "{text}"
    );
}
