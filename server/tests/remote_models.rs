//! Cloud and remote models end to end, with two real `herd serve` processes: the "remote" serves
//! SmolLM2; the "local" one has only stub manifests (config with `remote_host`/`remote_model`,
//! no model layer) and `OLLAMA_REMOTES=127.0.0.1`, `OLLAMA_CLOUD_BASE_URL` = the remote. A stub
//! answers what the remote answers (greedy content and counts, chunk by chunk) under its own
//! name with the remote fields added; the allowlist, an unreachable remote, a remote 404 and a
//! remote 401 answer as Ollama does; explicit cloud references are passed through; requests
//! with `OLLAMA_AUTH` carry a signature the server's public key verifies.
//! Needs `cargo build --workspace --bins` and `scripts/fetch-test-models`.

mod herd_proc;
mod serve_support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use base64::Engine as _;
use herd_proc::HerdServe;
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Writes `name:latest` as a stub of `remote_model` on `remote_host`.
fn stub(ts: &TestStore, name: &str, remote_host: &str, remote_model: &str) {
    let config = json!({
        "model_format": "gguf", "model_family": "llama", "model_families": ["llama"],
        "model_type": "135M", "file_type": "Q4_1",
        "remote_host": remote_host, "remote_model": remote_model,
        "capabilities": ["completion", "tools"], "context_length": 8192,
        "embedding_length": 576, "base_name": "smollm2",
        "architecture": "amd64", "os": "linux"
    })
    .to_string();
    let cd = ts.blob(config.as_bytes());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": cd, "size": config.len()},
        "layers": []
    });
    let path = ts.manifest_path(name, "latest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, manifest.to_string()).unwrap();
}

/// The "remote": `herd serve` on the real runner with SmolLM2 as `smol`, and its URL.
fn remote_smol() -> (TestStore, HerdServe, String) {
    let runner = native_runner().expect("runner-llamacpp (cargo build --workspace --bins)");
    let model = test_model(SMOL).expect("SmolLM2 (scripts/fetch-test-models)");
    let store = TestStore::new();
    register_file(&store, "smol", &model, &[]);
    let runner = runner.display().to_string();
    let remote = HerdServe::start(store.root(), &[("HERD_RUNNER", runner.as_str())]);
    let url = format!("http://{}", remote.addr);
    (store, remote, url)
}

async fn post(http: &reqwest::Client, url: String, body: &Value) -> (u16, String) {
    let r = http.post(url).json(body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn parse(t: &str) -> Value {
    serde_json::from_str(t).unwrap_or_else(|e| panic!("{e}: {t}"))
}

fn ndjson(t: &str) -> Vec<Value> {
    t.lines().map(parse).collect()
}

/// A one-shot HTTP listener: records the first request's head and answers 401 as ollama.com
/// does to an unknown key.
fn recorder() -> (u16, std::thread::JoinHandle<String>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed before the request head");
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = r#"{"error":"unauthorized"}"#;
        let reply = format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(reply.as_bytes()).unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    });
    (port, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stubs_and_cloud_refs_are_served_by_the_remote_as_ollama_does() {
    let (_remote_store, remote, remote_url) = remote_smol();

    // A port nothing listens on, the 401 recorder, and the local server's stubs.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (rec_port, rec) = recorder();
    let ts = TestStore::new();
    stub(&ts, "mystub", &remote_url, "smol:latest");
    stub(&ts, "elsewhere", "https://example.com:443", "smol:latest");
    stub(
        &ts,
        "gone",
        &format!("http://127.0.0.1:{closed}"),
        "smol:latest",
    );
    stub(&ts, "missing", &remote_url, "nope:latest");
    stub(&ts, "locked", &format!("http://127.0.0.1:{rec_port}"), "m");
    let home = tempfile::tempdir().unwrap();
    let home_s = home.path().display().to_string();
    let local = HerdServe::start(
        ts.root(),
        &[
            ("HOME", home_s.as_str()),
            ("OLLAMA_REMOTES", "127.0.0.1"),
            ("OLLAMA_CLOUD_BASE_URL", remote_url.as_str()),
            ("OLLAMA_AUTH", "1"),
        ],
    );
    assert!(
        local.log_text().contains("OLLAMA_REMOTES"),
        "the startup config shows the remote settings"
    );
    let http = reqwest::Client::new();

    // /api/tags and /api/show describe the stub from its config.
    let tags = parse(
        &http
            .get(local.url("/api/tags"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let entry = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "mystub:latest")
        .unwrap_or_else(|| panic!("{tags}"))
        .clone();
    assert_eq!(entry["remote_model"], "smol:latest");
    assert_eq!(entry["remote_host"], remote_url.as_str());
    assert_eq!(entry["details"]["family"], "llama");
    assert_eq!(entry["details"]["parameter_size"], "135M");
    assert_eq!(entry["details"]["context_length"], 8192);
    assert_eq!(entry["capabilities"], json!(["completion", "tools"]));
    let (s, t) = post(&http, local.url("/api/show"), &json!({"model": "mystub"})).await;
    assert_eq!(s, 200, "{t}");
    let show = parse(&t);
    assert_eq!(show["remote_model"], "smol:latest");
    assert_eq!(show["remote_host"], remote_url.as_str());
    assert_eq!(
        show["model_info"],
        json!({"general.architecture": "llama", "general.basename": "smollm2",
               "llama.context_length": 8192, "llama.embedding_length": 576})
    );
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
    assert_eq!(show["details"]["quantization_level"], "Q4_1");
    let (s, _) = post(
        &http,
        local.url("/api/show"),
        &json!({"model": "mystub:local"}),
    )
    .await;
    assert_eq!(s, 404, ":local hides a stub");

    // Greedy chat, not streamed: the same answer as the remote's own.
    let chat = json!({"model": "mystub", "stream": false,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "options": {"temperature": 0, "num_predict": 12, "seed": 1}});
    let mut direct = chat.clone();
    direct["model"] = json!("smol:latest");
    let (s, t) = post(&http, local.url("/api/chat"), &chat).await;
    assert_eq!(s, 200, "{t}");
    let via = parse(&t);
    let (s, t) = post(&http, remote.url("/api/chat"), &direct).await;
    assert_eq!(s, 200, "{t}");
    let want = parse(&t);
    assert!(!want["message"]["content"].as_str().unwrap().is_empty());
    assert_eq!(via["message"], want["message"]);
    assert_eq!(via["eval_count"], want["eval_count"]);
    assert_eq!(via["prompt_eval_count"], want["prompt_eval_count"]);
    assert_eq!(via["model"], "mystub");
    assert_eq!(via["remote_model"], "smol:latest");
    assert_eq!(via["remote_host"], remote_url.as_str());

    // Streamed: the same chunks in the same order, each renamed.
    let mut chat_s = chat.clone();
    chat_s["stream"] = json!(true);
    let mut direct_s = direct.clone();
    direct_s["stream"] = json!(true);
    let r = http
        .post(local.url("/api/chat"))
        .json(&chat_s)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let via = ndjson(&r.text().await.unwrap());
    let want = ndjson(&post(&http, remote.url("/api/chat"), &direct_s).await.1);
    assert!(want.len() > 2, "several chunks: {want:?}");
    assert_eq!(via.len(), want.len());
    for (v, w) in via.iter().zip(&want) {
        assert_eq!(v["message"], w["message"]);
        assert_eq!(v["done"], w["done"]);
        assert_eq!(v["model"], "mystub");
        assert_eq!(v["remote_model"], "smol:latest");
    }
    assert_eq!(
        via.last().unwrap()["eval_count"],
        want.last().unwrap()["eval_count"]
    );

    // Generate: Ollama sends the stub's template, here the default `{{ .Prompt }}`.
    let gen = json!({"model": "mystub", "prompt": "The sky is", "stream": false,
        "options": {"temperature": 0, "num_predict": 8}});
    let mut gen_direct = gen.clone();
    gen_direct["model"] = json!("smol:latest");
    gen_direct["template"] = json!("{{ .Prompt }}");
    let (s, t) = post(&http, local.url("/api/generate"), &gen).await;
    assert_eq!(s, 200, "{t}");
    let via = parse(&t);
    let want = parse(
        &post(&http, remote.url("/api/generate"), &gen_direct)
            .await
            .1,
    );
    assert_eq!(via["response"], want["response"]);
    assert_eq!(via["eval_count"], want["eval_count"]);
    assert_eq!(via["model"], "mystub");
    assert_eq!(via["remote_host"], remote_url.as_str());

    // The OpenAI layer reaches the stub through the same handler.
    let (s, t) = post(
        &http,
        local.url("/v1/chat/completions"),
        &json!({"model": "mystub", "temperature": 0, "max_tokens": 12, "seed": 1,
                "messages": [{"role": "user", "content": "Name a colour."}]}),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let direct_content =
        parse(&post(&http, remote.url("/api/chat"), &direct).await.1)["message"]["content"].clone();
    assert_eq!(
        parse(&t)["choices"][0]["message"]["content"],
        direct_content
    );

    // Explicit cloud references go to OLLAMA_CLOUD_BASE_URL with the suffix removed.
    for name in ["smol:latest:cloud", "smol:latest-cloud", "smol:cloud"] {
        let mut c = chat.clone();
        c["model"] = json!(name);
        let (s, t) = post(&http, local.url("/api/chat"), &c).await;
        assert_eq!(s, 200, "{name}: {t}");
        assert_eq!(parse(&t)["message"]["content"], direct_content, "{name}");
    }
    let (s, t) = post(
        &http,
        local.url("/api/chat"),
        &json!({"model": "m:local:cloud"}),
    )
    .await;
    assert_eq!(
        (s, parse(&t)["error"].clone()),
        (
            400,
            json!("use either :local or :cloud, not both: \"m:local:cloud\"")
        )
    );

    // Failures: a host not allowed, a remote that is down, the remote's 404.
    let mut c = chat.clone();
    c["model"] = json!("elsewhere");
    let (s, t) = post(&http, local.url("/api/chat"), &c).await;
    assert_eq!(
        (s, parse(&t)["error"].clone()),
        (400, json!("this server cannot run this remote model"))
    );
    c["model"] = json!("gone");
    let t0 = Instant::now();
    let (s, t) = post(&http, local.url("/api/chat"), &c).await;
    assert_eq!(s, 500, "{t}");
    assert!(t0.elapsed() < Duration::from_secs(10), "no hang");
    let e = parse(&t)["error"].as_str().unwrap().to_owned();
    assert!(
        e.contains(&format!("127.0.0.1:{closed}")) && e.contains("refused"),
        "{e}"
    );
    c["model"] = json!("missing");
    let (s, t) = post(&http, local.url("/api/chat"), &c).await;
    let mut d = direct.clone();
    d["model"] = json!("nope:latest");
    let (ws, wt) = post(&http, remote.url("/api/chat"), &d).await;
    assert_eq!(
        (s, parse(&t)["error"].clone()),
        (ws, parse(&wt)["error"].clone())
    );
    assert_eq!(s, 404);

    // A remote 401 → Ollama's sign-in answer; the request carried a verifiable signature.
    c["model"] = json!("locked");
    let (s, t) = post(&http, local.url("/api/chat"), &c).await;
    assert_eq!(s, 401, "{t}");
    let v = parse(&t);
    assert_eq!(v["error"], "unauthorized");
    let signin = v["signin_url"].as_str().unwrap();
    assert!(
        signin.starts_with("https://ollama.com/connect?name="),
        "{signin}"
    );
    let head = rec.join().unwrap();
    let request_line = head.lines().next().unwrap();
    let ts = request_line
        .split("?ts=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("ts in {request_line}"));
    assert!(
        request_line.starts_with("POST /api/chat?ts="),
        "{request_line}"
    );
    let auth = head
        .lines()
        .find_map(|l| l.strip_prefix("authorization: "))
        .unwrap_or_else(|| panic!("signed: {head}"));
    let (pub_b64, sig_b64) = auth.split_once(':').unwrap();
    let pub_file = std::fs::read_to_string(home.path().join(".ollama/id_ed25519.pub")).unwrap();
    assert_eq!(
        pub_file.split_whitespace().nth(1),
        Some(pub_b64),
        "the server's key"
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let blob = b64.decode(pub_b64).unwrap();
    let key: [u8; 32] = blob[blob.len() - 32..].try_into().unwrap();
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key).unwrap();
    let sig: [u8; 64] = b64.decode(sig_b64).unwrap().try_into().unwrap();
    let challenge = format!("POST,/api/chat?ts={ts}");
    key.verify_strict(
        challenge.as_bytes(),
        &ed25519_dalek::Signature::from_bytes(&sig),
    )
    .expect("signature over Ollama's challenge");

    // Copy and delete work on stubs; nothing was ever loaded locally.
    let (s, t) = post(
        &http,
        local.url("/api/copy"),
        &json!({"source": "mystub", "destination": "stub2"}),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let (s, t) = post(&http, local.url("/api/show"), &json!({"model": "stub2"})).await;
    assert_eq!(
        (s, parse(&t)["remote_model"].clone()),
        (200, json!("smol:latest"))
    );
    let r = http
        .delete(local.url("/api/delete"))
        .json(&json!({"model": "stub2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (s, _) = post(&http, local.url("/api/show"), &json!({"model": "stub2"})).await;
    assert_eq!(s, 404);
    let ps = parse(
        &http
            .get(local.url("/api/ps"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(ps["models"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_off_refuses_stubs_and_cloud_refs_in_ollamas_words() {
    let ts = TestStore::new();
    stub(&ts, "mystub", "https://ollama.com:443", "gpt-oss:120b");
    let local = HerdServe::start(ts.root(), &[("OLLAMA_NO_CLOUD", "1")]);
    let http = reqwest::Client::new();
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (path, body, want) in [
        (
            "/api/chat",
            json!({"model": "mystub", "messages": msgs}),
            "ollama cloud is disabled: remote model is unavailable",
        ),
        (
            "/api/generate",
            json!({"model": "mystub", "prompt": "hi"}),
            "ollama cloud is disabled: remote model is unavailable",
        ),
        (
            "/api/chat",
            json!({"model": "gpt-oss:20b:cloud", "messages": msgs}),
            "ollama cloud is disabled: remote model is unavailable",
        ),
        (
            "/api/show",
            json!({"model": "gpt-oss:20b-cloud"}),
            "ollama cloud is disabled: remote model details are unavailable",
        ),
        (
            "/api/show",
            json!({"model": "mystub"}),
            "ollama cloud is disabled: remote model details are unavailable",
        ),
    ] {
        let (s, t) = post(&http, local.url(path), &body).await;
        assert_eq!(
            (s, parse(&t)["error"].clone()),
            (403, json!(want)),
            "{path} {body}"
        );
    }
    let status = parse(
        &http
            .get(local.url("/api/status"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(
        status,
        json!({"cloud": {"disabled": true, "source": "env"}})
    );
}

/// `/api/create` makes stubs as Ollama's create does: `from` with `remote_host` (normalized as
/// Ollama's `remoteURL`), or `from` a cloud reference (the cloud base); `info` fills the config;
/// the stub's SYSTEM reaches the remote; a DRAFT is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_makes_stubs_from_a_remote_host_or_a_cloud_reference() {
    let (_remote_store, remote, remote_url) = remote_smol();
    let ts = TestStore::new();
    let local = HerdServe::start(
        ts.root(),
        &[
            ("OLLAMA_REMOTES", "127.0.0.1"),
            ("OLLAMA_CLOUD_BASE_URL", remote_url.as_str()),
        ],
    );
    let http = reqwest::Client::new();

    let (s, t) = post(
        &http,
        local.url("/api/create"),
        &json!({"model": "made", "from": "smol", "remote_host": format!("{remote_url}/"),
            "system": "Answer in one word.", "stream": false,
            "info": {"capabilities": ["completion"], "context_length": 8192,
                     "model_family": "llama"}}),
    )
    .await;
    assert_eq!(
        (s, parse(&t)["status"].clone()),
        (200, json!("success")),
        "{t}"
    );
    let (s, t) = post(&http, local.url("/api/show"), &json!({"model": "made"})).await;
    assert_eq!(s, 200, "{t}");
    let show = parse(&t);
    assert_eq!(show["remote_host"], remote_url.as_str(), "{show}");
    assert_eq!(show["remote_model"], "smol", "{show}");
    assert_eq!(show["system"], "Answer in one word.", "{show}");
    assert_eq!(show["details"]["family"], "llama", "{show}");

    // The stub's SYSTEM reaches the remote: it answers as a direct request carrying it.
    let question = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let opts = json!({"temperature": 0, "num_predict": 8});
    let (s, via) = post(
        &http,
        local.url("/api/chat"),
        &json!({"model": "made", "messages": question, "stream": false, "options": opts}),
    )
    .await;
    assert_eq!(s, 200, "{via}");
    let mut direct_msgs = vec![json!({"role": "system", "content": "Answer in one word."})];
    direct_msgs.extend(question.as_array().unwrap().iter().cloned());
    let (s, direct) = post(
        &http,
        remote.url("/api/chat"),
        &json!({"model": "smol", "messages": direct_msgs, "stream": false, "options": opts}),
    )
    .await;
    assert_eq!(s, 200, "{direct}");
    assert_eq!(parse(&via)["message"], parse(&direct)["message"]);
    assert_eq!(parse(&via)["model"], "made");

    // From a cloud reference: a stub of the cloud's model.
    let (s, t) = post(
        &http,
        local.url("/api/create"),
        &json!({"model": "cloudy", "from": "smol:cloud", "stream": false}),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let show = parse(
        &post(&http, local.url("/api/show"), &json!({"model": "cloudy"}))
            .await
            .1,
    );
    assert_eq!(show["remote_model"], "smol", "{show}");
    assert_eq!(show["remote_host"], remote_url.as_str(), "{show}");

    // A DRAFT with a remote model is Ollama's 400.
    let (s, t) = post(
        &http,
        local.url("/api/create"),
        &json!({"model": "drafty", "from": "smol", "remote_host": remote_url,
            "draft_files": {"d.gguf": format!("sha256:{}", "0".repeat(64))}, "stream": false}),
    )
    .await;
    assert_eq!(s, 400, "{t}");
    assert_eq!(
        parse(&t)["error"],
        "DRAFT cannot be used with remote models"
    );
}
