//! `herd serve` + `herd push` / `herd pull` against the real loopback registry, and a pull
//! survives a SIGKILL of the server: the restarted server resumes from the `-partial` files.

mod registry_support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry_support::*;
use server::store::{ModelName, Store};

#[test]
fn cli_push_rm_pull_round_trip() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();
    let name = reg.name("library/tiny:q4");
    let text = format!("http://127.0.0.1:{}/library/tiny:q4", reg.port);
    let manifest = make_model(&store, &name, 5, 300_000);
    let serve = Serve::start(&models, t.path());
    assert!(
        t.path().join(".ollama/id_ed25519").exists(),
        "serve creates the key pair"
    );

    let (ok, err) = serve.herd(&["push", &text]);
    assert!(!ok && err.contains("insecure protocol http"), "{err}");
    let (ok, err) = serve.herd(&["push", &text, "--insecure"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("pushing manifest") && err.contains("success"),
        "{err}"
    );
    let (ok, err) = serve.herd(&["rm", &text]);
    assert!(ok, "{err}");
    assert!(store.read(&name).unwrap().is_none());
    let (ok, err) = serve.herd(&["pull", &text, "--insecure"]);
    assert!(ok, "{err}");
    for s in [
        "pulling manifest",
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ] {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert!(err.contains("100% ▕"), "{err}");
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
    let (ok, err) = serve.herd(&[
        "pull",
        &format!("http://127.0.0.1:{}/library/nope", reg.port),
        "--insecure",
    ]);
    assert!(
        !ok && err.contains("pull model manifest: file does not exist"),
        "{err}"
    );
}

/// `--insecure` with a plain `host:port/…` name speaks HTTP, as Ollama's request helper does
/// (issue 14, item 4): push and pull to a local registry without TLS work; without `--insecure`
/// the same name is tried over TLS and fails.
#[test]
fn insecure_host_port_names_speak_plain_http() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();
    let text = format!("127.0.0.1:{}/library/plain:v1", reg.port);
    let name = ModelName::parse(&text).unwrap();
    let manifest = make_model(&store, &name, 9, 200_000);
    let serve = Serve::start(&models, t.path());
    let (ok, err) = serve.herd(&["push", &text]);
    assert!(!ok, "TLS to a plain-HTTP registry cannot work: {err}");
    let (ok, err) = serve.herd(&["push", &text, "--insecure"]);
    assert!(ok && err.contains("success"), "{err}");
    let (ok, err) = serve.herd(&["rm", &text]);
    assert!(ok, "{err}");
    let (ok, err) = serve.herd(&["pull", &text, "--insecure"]);
    assert!(ok && err.contains("success"), "{err}");
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
}

/// Every visible blob's bytes hash to its name.
fn assert_blobs_verify(blobs: &Path) {
    for f in files(blobs) {
        if let Some(d) = server::store::Digest::from_blob_file_name(&f) {
            let data = std::fs::read(blobs.join(&f)).unwrap();
            assert_eq!(server::store::Digest::of_bytes(&data), d, "{f}");
        }
    }
}

fn persisted(blobs: &Path) -> u64 {
    std::fs::read_dir(blobs)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.contains("-partial-")
        })
        .map(|e| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            v["Completed"].as_u64().unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_pull_then_restart_resumes() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let direct = reg.name("library/big:latest");
    let manifest = make_model(&src_store, &direct, 9, 96 << 20);
    registry(&src_store, test_options(None))
        .push(&direct, true, server::store::registry::progress::discard())
        .await
        .unwrap();
    let total = src_store.read(&direct).unwrap().unwrap().size;

    let count = Arc::new(AtomicU64::new(0));
    let port = counting_proxy(reg.port, Arc::default(), count.clone()).await;
    let text = format!("http://127.0.0.1:{port}/library/big:latest");
    let name = ModelName::parse(&text).unwrap();
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();

    // Two SIGKILLs at random points of the download, each followed by a restart.
    let mut sent_before = 0;
    let mut kept = 0;
    for (lo, hi) in [(0.1, 0.45), (0.5, 0.9)] {
        let at = (total as f64 * (lo + rand::random::<f64>() * (hi - lo))) as u64;
        let mut serve = Serve::start(&models, t.path());
        let url = format!("http://{}/api/pull", serve.addr);
        let body = serde_json::json!({ "model": text, "insecure": true });
        let pull = tokio::spawn(reqwest::Client::new().post(url).json(&body).send());
        let deadline = Instant::now() + Duration::from_secs(60);
        while sent_before + count.load(Ordering::Relaxed) < at.max(kept + 1) {
            assert!(Instant::now() < deadline, "pull made no progress");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        serve.child.kill().unwrap(); // SIGKILL
        serve.child.wait().unwrap();
        let _ = pull.await;
        sent_before += count.swap(0, Ordering::Relaxed);
        kept = persisted(store.blobs().dir());
        assert!(
            store.read(&name).unwrap().is_none(),
            "no manifest before all blobs"
        );
        assert_blobs_verify(store.blobs().dir());
    }

    let serve = Serve::start(&models, t.path());
    count.store(0, Ordering::Relaxed);
    let body = serde_json::json!({ "model": text, "insecure": true, "stream": false });
    let r = reqwest::Client::new()
        .post(format!("http://{}/api/pull", serve.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "{\"status\":\"success\"}");
    let after = count.load(Ordering::Relaxed);
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
    let reused = total.saturating_sub(after);
    println!(
        "sigkill: proxy sent {sent_before} B before the kills, {kept} B were on disk, {reused} B reused, {after} B fetched after restart (of {total})"
    );
    assert_blobs_verify(store.blobs().dir());
    assert!(kept > 0);
    assert!(
        reused as f64 >= 0.9 * kept as f64,
        "reused {reused} of {kept}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pull_error_shapes() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let serve = Serve::start(&t.path().join("models"), t.path());
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("http://{}{path}", serve.addr))
            .json(&body)
            .send()
    };
    let missing = format!("http://127.0.0.1:{}/library/nope:latest", reg.port);
    // Streamed: a first status line, then the error line, status 200.
    let r = post(
        "/api/pull",
        serde_json::json!({"model": missing, "insecure": true}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    assert_eq!(
        r.text().await.unwrap(),
        "{\"status\":\"pulling manifest\"}\n{\"error\":\"pull model manifest: file does not exist\"}\n"
    );
    // Not streamed: 500 with the error.
    let r = post(
        "/api/pull",
        serde_json::json!({"name": missing, "insecure": true, "stream": false}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"pull model manifest: file does not exist\"}"
    );
    // Bad names and bodies.
    let r = post("/api/pull", serde_json::json!({"model": "a/b/c/d/e"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"invalid model name\"}"
    );
    let r = post("/api/push", serde_json::json!({"model": "http://127.0.0.1:1/library/absent", "insecure": true, "stream": false}))
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"model '127.0.0.1:1/library/absent:latest' not found\"}"
    );
}

/// Issue 7: push the real gemma3-270m from one store to the loopback registry with `herd push`,
/// `herd pull` it into an EMPTY store served by a fresh `herd serve`, and generate with the real
/// runner: the manifest is byte-identical and the greedy answer is the one the original gave.
/// Skipped when the test model or runner-llamacpp is not built/fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulled_gemma3_answers_like_the_original() {
    use server::store::manifest::{MEDIA_TYPE_CONFIG, MEDIA_TYPE_MODEL};
    use server::store::{Layer, Manifest};
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let gguf = home.join(".cache/herd/models/gemma-3-270m-q4_k_m.gguf");
    let runner = Path::new(HERD).parent().unwrap().join("runner-llamacpp");
    if !gguf.exists() || !runner.exists() {
        registry_support::prereq::missing(format!("{} and {}", gguf.display(), runner.display()));
        return;
    }
    let a = tempfile::tempdir().unwrap();
    let store_a = Store::open(a.path().join("models")).unwrap();
    let (md, n) = store_a
        .blobs()
        .write_stream(tokio::fs::File::open(&gguf).await.unwrap())
        .await
        .unwrap();
    let meta = server::gguf::read_path(&gguf, Default::default()).unwrap();
    let family = meta.architecture().unwrap_or_default().to_owned();
    assert_eq!(family, "gemma3");
    let config = format!(
        r#"{{"model_format":"gguf","model_family":"{family}","model_families":["{family}"],"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{md}"]}}}}"#
    );
    let cd = store_a.blobs().write_bytes(config.as_bytes()).unwrap();
    let name = reg.name("library/gemma3:270m");
    let text = format!("http://127.0.0.1:{}/library/gemma3:270m", reg.port);
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cd, config.len() as u64),
        vec![Layer::new(MEDIA_TYPE_MODEL, md.clone(), n)],
    );
    store_a.write_manifest(&name, &m).unwrap();
    let original = store_a.read(&name).unwrap().unwrap().bytes;

    let body = serde_json::json!({
        "model": text, "prompt": "The capital of France is", "raw": true, "stream": false,
        "options": {"temperature": 0, "top_k": 1, "seed": 7, "num_predict": 12, "num_thread": 1},
        "keep_alive": 0,
    });
    let generate = |addr: String, body: serde_json::Value| async move {
        let r = reqwest::Client::new()
            .post(format!("http://{addr}/api/generate"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["eval_count"], 12, "{v}");
        v["response"].as_str().unwrap().to_owned()
    };
    let serve_a = Serve::start(&a.path().join("models"), a.path());
    let before = generate(serve_a.addr.clone(), body.clone()).await;
    assert!(!before.trim().is_empty());
    let (ok, err) = serve_a.herd(&["push", &text, "--insecure"]);
    assert!(ok && err.contains("success"), "{err}");
    drop(serve_a);

    let b = tempfile::tempdir().unwrap();
    let models_b = b.path().join("models");
    let serve_b = Serve::start(&models_b, b.path());
    let store_b = Store::open(&models_b).unwrap();
    assert!(store_b.list().unwrap().is_empty(), "an empty store");
    let (ok, err) = serve_b.herd(&["pull", &text, "--insecure"]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("pulling {}", &md.hex()[..12])),
        "{err}"
    );
    assert_eq!(store_b.read(&name).unwrap().unwrap().bytes, original);
    let after = generate(serve_b.addr.clone(), body).await;
    assert_eq!(
        after, before,
        "the pulled model answers as the original did"
    );
}

/// Disk full under `herd serve`: the store on a 1 MB tmpfs (needs root; skipped otherwise), a
/// pull of a 3 MB model ends in a clean error line, leaves no visible partial blob and no
/// manifest, and the server keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_pull_under_serve_is_clean_and_the_server_stays_up() {
    if nix::unistd::geteuid().as_raw() != 0 {
        registry_support::prereq::missing("root, to mount a tmpfs");
        return;
    }
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let name = reg.name("library/fat:latest");
    make_model(&src_store, &name, 17, 3 << 20);
    registry(&src_store, test_options(None))
        .push(&name, true, server::store::registry::progress::discard())
        .await
        .unwrap();
    let model = src_store.read(&name).unwrap().unwrap().manifest.layers[0]
        .digest
        .clone();

    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        registry_support::prereq::missing("a tmpfs mount (mount -t tmpfs failed)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let models = mnt.join("models");
    let serve = Serve::start(&models, t.path());
    let text = format!("http://127.0.0.1:{}/library/fat:latest", reg.port);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("http://{}/api/pull", serve.addr))
        .json(&serde_json::json!({ "model": text, "insecure": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let last: serde_json::Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("No space left on device")),
        "{body}"
    );
    let store = Store::open(&models).unwrap();
    assert!(store.list().unwrap().is_empty(), "no manifest");
    assert!(!store.blobs().exists(&model), "no visible partial blob");
    assert_blobs_verify(store.blobs().dir());
    let v = http
        .get(format!("http://{}/api/version", serve.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(v.status(), 200, "the server stays up");
    let tags: serde_json::Value = http
        .get(format!("http://{}/api/tags", serve.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tags["models"], serde_json::json!([]));
}

/// A cloud model's stub (a config naming `remote_host`/`remote_model`, no layers) pushes and
/// pulls like any model, and a pull of the cloud reference `m:tag:cloud` stores the registry's
/// stub under its legacy name `m:tag-cloud` (Ollama's `NormalizePullName`), which then lists
/// with its remote fields.
#[tokio::test]
async fn cloud_stubs_push_and_pull_by_their_cloud_reference() {
    use server::store::manifest::MEDIA_TYPE_CONFIG;
    use server::store::{Layer, Manifest};
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();
    let name = reg.name("library/gpt-oss:20b-cloud");
    let config = br#"{"model_format":"","remote_host":"https://ollama.com:443","remote_model":"gpt-oss:20b","capabilities":["completion","tools","thinking"]}"#;
    let cd = store.blobs().write_bytes(config).unwrap();
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cd, config.len() as u64),
        vec![],
    );
    store.write_manifest(&name, &m).unwrap();
    let serve = Serve::start(&models, t.path());
    let base = format!("http://127.0.0.1:{}/library/gpt-oss", reg.port);
    let (ok, err) = serve.herd(&["push", &format!("{base}:20b-cloud"), "--insecure"]);
    assert!(ok, "{err}");
    let (ok, err) = serve.herd(&["rm", &format!("{base}:20b-cloud")]);
    assert!(ok, "{err}");
    assert!(store.read(&name).unwrap().is_none());
    let (ok, err) = serve.herd(&["pull", &format!("{base}:20b:cloud"), "--insecure"]);
    assert!(ok, "{err}");
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, m.to_bytes());
    let tags: serde_json::Value = reqwest::get(format!("http://{}/api/tags", serve.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stub = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().unwrap().ends_with("gpt-oss:20b-cloud"))
        .unwrap_or_else(|| panic!("{tags}"));
    assert_eq!(stub["remote_model"], "gpt-oss:20b", "{stub}");
    // Two source suffixes are refused as Ollama refuses them.
    let (ok, err) = serve.herd(&["pull", &format!("{base}:20b:local:cloud"), "--insecure"]);
    assert!(
        !ok && err.contains("use either :local or :cloud, not both"),
        "{err}"
    );
    // Deleting the cloud reference deletes the stub it was pulled as.
    let r = reqwest::Client::new()
        .delete(format!("http://{}/api/delete", serve.addr))
        .json(&serde_json::json!({"model": format!("127.0.0.1:{}/library/gpt-oss:20b:cloud", reg.port)}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    assert!(store.read(&name).unwrap().is_none());
}
