//! Pull and push against a real registry: Debian's `docker-registry` (distribution 2.8) on
//! loopback. Each test skips with a notice when the binary is absent (CI installs it).

mod registry_support;

use std::time::Duration;

use registry_support::*;
use server::error::Error;
use server::store::registry::progress;
use server::store::Store;

#[tokio::test]
async fn push_delete_pull_round_trip_is_byte_identical() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path().join("models")).unwrap();
    let name = reg.name("library/tiny:q4");
    // 2.5 MB model blob: several 1 MB parts on pull, several 512 KB PATCH chunks on push.
    let manifest = make_model(&store, &name, 1, 2_500_000);
    let entry = store.read(&name).unwrap().unwrap();
    let blobs: Vec<(String, Vec<u8>)> = entry
        .manifest
        .blobs()
        .map(|l| {
            (
                l.digest.to_string(),
                std::fs::read(store.blobs().path(&l.digest)).unwrap(),
            )
        })
        .collect();
    let registry = registry(&store, test_options(None));

    // Plain https to an http registry is refused without `insecure`.
    let err = registry
        .push(&name, false, progress::discard())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "insecure protocol http");

    let (sink, log) = recorder();
    registry.push(&name, true, sink).await.unwrap();
    let statuses: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|p| p.status.clone())
        .collect();
    assert_eq!(statuses.first().unwrap(), "retrieving manifest");
    assert_eq!(
        &statuses[statuses.len() - 2..],
        ["pushing manifest", "success"]
    );
    let model = &entry.manifest.layers[0];
    let pushing = format!("pushing {}", &model.digest.hex()[..12]);
    let lines: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.status == pushing)
        .cloned()
        .collect();
    assert_eq!(lines.last().unwrap().completed, model.size);
    assert!(lines
        .iter()
        .all(|p| p.total == model.size && p.digest == model.digest.to_string()));

    // Pushing again finds every blob present (HEAD) and still succeeds.
    registry
        .push(&name, true, progress::discard())
        .await
        .unwrap();

    // Delete locally, pull back: identical manifest bytes and blobs.
    store.delete(&name).unwrap().unwrap();
    assert!(store.read(&name).unwrap().is_none());
    let (sink, log) = recorder();
    registry.pull(&name, true, sink).await.unwrap();
    let again = store.read(&name).unwrap().unwrap();
    assert_eq!(again.bytes, manifest);
    for (d, bytes) in &blobs {
        let d = server::store::Digest::parse(d).unwrap();
        assert_eq!(&std::fs::read(store.blobs().path(&d)).unwrap(), bytes);
    }
    let statuses: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|p| p.status.clone())
        .collect();
    assert_eq!(statuses.first().unwrap(), "pulling manifest");
    let tail: Vec<&str> = statuses.iter().map(String::as_str).rev().take(3).collect();
    assert_eq!(
        tail,
        ["success", "writing manifest", "verifying sha256 digest"]
    );
    let pulling = format!("pulling {}", &model.digest.hex()[..12]);
    assert!(statuses.contains(&pulling), "{statuses:?}");
    // No download leftovers.
    let names = files(store.blobs().dir());
    assert_eq!(names.len(), 3, "{names:?}");

    // Into a second, empty store too.
    let t2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(t2.path()).unwrap();
    let r2 = registry_support::registry(&store2, test_options(None));
    r2.pull(&name, true, progress::discard()).await.unwrap();
    assert_eq!(store2.read(&name).unwrap().unwrap().bytes, manifest);
    assert_eq!(r2.bytes_downloaded(), entry.size);
}

#[tokio::test]
async fn unknown_model_is_ollamas_error_and_writes_nothing() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let registry = registry(&store, test_options(None));
    let (sink, log) = recorder();
    let err = registry
        .pull(&reg.name("library/missing:latest"), true, sink)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    assert_eq!(err.to_string(), "pull model manifest: file does not exist");
    assert_eq!(log.lock().unwrap()[0].status, "pulling manifest");
    assert!(files(t.path()).is_empty(), "{:?}", files(t.path()));
}

#[tokio::test]
async fn interrupted_pulls_resume_and_reuse_downloaded_bytes() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let name = reg.name("library/resume:latest");
    let manifest = make_model(&src_store, &name, 7, 24 << 20);
    // Rounds alternate page-cache and direct writes: a resume may switch how blocks are written.
    let opts = |direct_io: bool| {
        let mut o = test_options(None);
        o.part_min = 2 << 20;
        o.part_max = 2 << 20;
        o.direct_io = direct_io;
        o
    };
    registry(&src_store, opts(false))
        .push(&name, true, progress::discard())
        .await
        .unwrap();
    let total = src_store.read(&name).unwrap().unwrap().size;

    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let mut fetched_before_abort = 0;
    // Abort at several points (by downloaded bytes), dropping the whole client each time as a
    // killed server would, then finish.
    for (i, frac) in [0.15, 0.4, 0.7].into_iter().enumerate() {
        let r = registry(&store, opts(i % 2 == 0));
        let target = (total as f64 * frac) as u64 - fetched_before_abort;
        let pull = r.pull(&name, true, progress::discard());
        let watcher = async {
            while r.bytes_downloaded() < target {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        };
        tokio::select! {
            res = pull => panic!("pull {i} finished before the abort point: {res:?}"),
            _ = watcher => {}
        }
        fetched_before_abort += r.bytes_downloaded();
        drop(r);
        assert!(
            store.read(&name).unwrap().is_none(),
            "manifest before all blobs"
        );
        let visible: Vec<String> = files(store.blobs().dir())
            .into_iter()
            .filter(|f| !f.contains("partial"))
            .collect();
        // Only the small template/config blobs may be complete; never the model blob.
        let model_digest = src_store.read(&name).unwrap().unwrap().manifest.layers[0]
            .digest
            .blob_file_name();
        assert!(!visible.contains(&model_digest), "{visible:?}");
    }
    let r = registry(&store, opts(true));
    r.pull(&name, true, progress::discard()).await.unwrap();
    let last = r.bytes_downloaded();
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
    assert_eq!(
        fetched_before_abort + last,
        total,
        "every byte fetched exactly once"
    );
    let reused = total - last;
    println!(
        "resume: {fetched_before_abort} bytes fetched before aborts, {reused} reused, {last} fetched after"
    );
    assert!(reused as f64 >= 0.9 * fetched_before_abort as f64);
    let left = files(store.blobs().dir());
    assert_eq!(left.len(), 3, "{left:?}");
}

#[tokio::test]
async fn concurrent_pulls_share_one_download_and_replaced_layers_are_pruned() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let name = reg.name("library/shared:latest");
    let v1 = make_model(&src_store, &name, 11, 3 << 20);
    let src_reg = registry(&src_store, test_options(None));
    src_reg
        .push(&name, true, progress::discard())
        .await
        .unwrap();

    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let r = registry(&store, test_options(None));
    let (a, b) = tokio::join!(
        r.pull(&name, true, progress::discard()),
        r.pull(&name, true, progress::discard())
    );
    a.unwrap();
    b.unwrap();
    let size = store.read(&name).unwrap().unwrap().size;
    assert_eq!(r.bytes_downloaded(), size, "two pulls, one download");
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, v1);
    let old_model = store.read(&name).unwrap().unwrap().manifest.layers[0]
        .digest
        .clone();

    // A new version under the same tag: the old model blob goes, the new one arrives.
    let v2 = make_model(&src_store, &name, 12, 1 << 20);
    src_reg
        .push(&name, true, progress::discard())
        .await
        .unwrap();
    let (sink, log) = recorder();
    r.pull(&name, true, sink).await.unwrap();
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, v2);
    assert!(!store.blobs().exists(&old_model));
    assert!(log
        .lock()
        .unwrap()
        .iter()
        .any(|p| p.status == "removing unused layers"));
}

#[tokio::test]
async fn two_processes_pulling_one_blob_download_it_once() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let name = reg.name("library/twice:latest");
    let bytes = make_model(&src_store, &name, 21, 6 << 20);
    registry(&src_store, test_options(None))
        .push(&name, true, progress::discard())
        .await
        .unwrap();

    // Two registry clients on one store share nothing in memory: two herd processes.
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let (r1, r2) = (
        registry(&store, test_options(None)),
        registry(&store, test_options(None)),
    );
    let (a, b) = tokio::join!(
        r1.pull(&name, true, progress::discard()),
        r2.pull(&name, true, progress::discard())
    );
    a.unwrap();
    b.unwrap();
    let size = store.read(&name).unwrap().unwrap().size;
    assert_eq!(
        r1.bytes_downloaded() + r2.bytes_downloaded(),
        size,
        "the second waits for the first and finds the blobs stored"
    );
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, bytes);
    let left: Vec<String> = files(t.path())
        .into_iter()
        .filter(|f| f.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The `scripts/bench registry` section (run it in release):
/// `cargo test --release -p server --test registry_real -- --ignored --nocapture pull_throughput`.
/// One run measures, on a 1 GiB random blob: `cp` of the blob file (and the `sync` after it: the
/// disk ceilings), the store's import (hash + write + fsync) and plain hashing, and `herd pull`
/// through `herd serve` into an empty store, wall clock from the API call to `success`; then the
/// library pull with 1, 2, 4 and 16 parts in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn pull_throughput_1gib() {
    use server::store::manifest::{MEDIA_TYPE_CONFIG, MEDIA_TYPE_MODEL};
    use server::store::registry::RegistryOptions;
    use server::store::{Layer, Manifest};
    use std::time::Instant;
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let sync = || {
        let t = Instant::now();
        assert!(std::process::Command::new("sync")
            .status()
            .unwrap()
            .success());
        t.elapsed().as_secs_f64()
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let raw = src.path().join("raw");
    {
        use std::io::Write;
        let block = bytes(42, 1 << 20);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&raw).unwrap());
        for i in 0u64..1024 {
            f.write_all(&i.to_le_bytes()).unwrap();
            f.write_all(&block[8..]).unwrap();
        }
    }
    sync();
    let start = Instant::now();
    let (hd, n) = server::cli::create::hash_file(&raw).unwrap();
    let hash = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let file = tokio::fs::File::open(&raw).await.unwrap();
    let (md, n2) = src_store.blobs().write_stream(file).await.unwrap();
    let import = start.elapsed().as_secs_f64();
    assert_eq!((hd.clone(), n), (md.clone(), n2));
    let cd = src_store.blobs().write_bytes(b"{}").unwrap();
    let name = reg.name("library/bench:latest");
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cd, 2),
        vec![Layer::new(MEDIA_TYPE_MODEL, md.clone(), n)],
    );
    src_store.write_manifest(&name, &m).unwrap();
    registry(&src_store, RegistryOptions::default())
        .push(&name, true, progress::discard())
        .await
        .unwrap();
    sync();

    let t = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let ok = std::process::Command::new("cp")
        .arg(src_store.blobs().path(&md))
        .arg(t.path().join("copy"))
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let cp = start.elapsed().as_secs_f64();
    let cp_sync = cp + sync();
    std::fs::remove_file(t.path().join("copy")).unwrap();

    let models = t.path().join("models");
    let serve = Serve::start(&models, t.path());
    let text = format!("http://127.0.0.1:{}/library/bench:latest", reg.port);
    let body = serde_json::json!({ "model": text, "insecure": true, "stream": false });
    let (serve_pid, reg_pid) = (serve.child.id().to_string(), reg.child.id().to_string());
    let cpu0 = (cpu_seconds(&serve_pid), cpu_seconds(&reg_pid));
    let start = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("http://{}/api/pull", serve.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    let pull = start.elapsed().as_secs_f64();
    let cpu = (
        cpu_seconds(&serve_pid) - cpu0.0,
        cpu_seconds(&reg_pid) - cpu0.1,
    );
    assert_eq!(
        (status.as_u16(), text.as_str()),
        (200, "{\"status\":\"success\"}")
    );
    drop(serve);
    let store = Store::open(&models).unwrap();
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, m.to_bytes());
    assert_eq!(store.blobs().size(&md).unwrap(), Some(n));

    let mb = n as f64 / 1e6;
    println!("registry: 1 GiB blob, loopback docker-registry");
    println!("cp         {:>6.0} MB/s  ({cp:.2} s)", mb / cp);
    println!("cp+sync    {:>6.0} MB/s  ({cp_sync:.2} s)", mb / cp_sync);
    println!(
        "herd pull  {:>6.0} MB/s  ({pull:.2} s, API call to success, fsynced)",
        mb / pull
    );
    println!(
        "cpu        herd {:.2} s/GB, registry {:.2} s/GB  (user+system, both processes)",
        cpu.0 / (mb / 1e3),
        cpu.1 / (mb / 1e3)
    );
    println!(
        "hashing    {:>6.2} GB/s  ({hash:.2} s, cli::create::hash_file)",
        mb / 1e3 / hash
    );
    println!(
        "import     {:>6.2} GB/s  ({import:.2} s, BlobStore::write_stream: hash+write+fsync)",
        mb / 1e3 / import
    );
    println!(
        "ratio pull/cp {:.2}  pull/cp+sync {:.2}",
        cp / pull,
        cp_sync / pull
    );
    for (lanes, direct_io) in [(1, false), (2, false), (4, false), (16, false), (4, true)] {
        sync();
        let t = tempfile::tempdir().unwrap();
        let store = Store::open(t.path()).unwrap();
        let r = registry(
            &store,
            RegistryOptions {
                lan_parts_in_flight: lanes,
                direct_io,
                ..RegistryOptions::default()
            },
        );
        let cpu0 = cpu_seconds("self");
        let start = Instant::now();
        r.pull(&name, true, progress::discard()).await.unwrap();
        let s = start.elapsed().as_secs_f64();
        let cpu = (cpu_seconds("self") - cpu0) / (mb / 1e3);
        println!(
            "library pull, {lanes:>2} parts in flight{}: {:>6.0} MB/s ({s:.2} s, {cpu:.2} CPU s/GB)",
            if direct_io { ", direct I/O" } else { "" },
            mb / s
        );
    }
}

/// A real model file (SmolLM2-135M, from `scripts/fetch-test-models`) survives push and pull
/// byte for byte; skipped when the test models are not fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_gguf_round_trip() {
    use server::store::manifest::{MEDIA_TYPE_CONFIG, MEDIA_TYPE_MODEL};
    use server::store::{Layer, Manifest};
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let gguf = home.join(".cache/herd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !gguf.exists() {
        registry_support::prereq::missing(format!(
            "{} (scripts/fetch-test-models)",
            gguf.display()
        ));
        return;
    }
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let file = tokio::fs::File::open(&gguf).await.unwrap();
    let (md, n) = src_store.blobs().write_stream(file).await.unwrap();
    let cfg = br#"{"model_format":"gguf","model_family":"llama"}"#;
    let cd = src_store.blobs().write_bytes(cfg).unwrap();
    let name = reg.name("library/smollm2:135m");
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cd, cfg.len() as u64),
        vec![Layer::new(MEDIA_TYPE_MODEL, md.clone(), n)],
    );
    src_store.write_manifest(&name, &m).unwrap();
    registry(&src_store, test_options(None))
        .push(&name, true, progress::discard())
        .await
        .unwrap();
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let r = registry(&store, server::store::registry::RegistryOptions::default());
    r.pull(&name, true, progress::discard()).await.unwrap();
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, m.to_bytes());
    assert_eq!(
        std::fs::read(store.blobs().path(&md)).unwrap(),
        std::fs::read(&gguf).unwrap()
    );
}

/// Cross-repository mount: a layer that records the repository it came from (`from`, as Ollama
/// sets it) is pushed as `POST …/blobs/uploads/?mount=<digest>&from=<ns/model>`; the real registry
/// answers 201 and the bytes are not sent again. Without `from`, the same layer is uploaded.
#[tokio::test]
async fn push_mounts_a_shared_layer_from_another_repository() {
    use server::store::manifest::MEDIA_TYPE_CONFIG;
    use server::store::{Layer, Manifest, ModelName};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let up = Arc::new(AtomicU64::new(0));
    let port = counting_proxy(reg.port, up.clone(), Arc::default()).await;
    let via = |rest: &str| ModelName::parse(&format!("http://127.0.0.1:{port}/{rest}")).unwrap();
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let base = via("library/base:latest");
    let size = 4 << 20;
    make_model(&store, &base, 21, size);
    let r = registry(&store, test_options(None));
    r.push(&base, true, progress::discard()).await.unwrap();
    assert!(
        up.load(Ordering::Relaxed) > size as u64,
        "the base model was uploaded"
    );

    let shared = store.read(&base).unwrap().unwrap().manifest.layers[0].clone();
    let derived = |name: &str, from: Option<String>, seed: u8| {
        let cfg = format!(r#"{{"model_format":"gguf","model_family":"derived{seed}"}}"#);
        let cd = store.blobs().write_bytes(cfg.as_bytes()).unwrap();
        let mut layer = shared.clone();
        layer.from = from;
        let m = Manifest::new(
            Layer::new(MEDIA_TYPE_CONFIG, cd, cfg.len() as u64),
            vec![layer],
        );
        store.write_manifest(&via(name), &m).unwrap();
        m.to_bytes()
    };
    let manifest = derived(
        "library/derived:latest",
        Some(format!("127.0.0.1:{port}/library/base:latest")),
        1,
    );
    up.store(0, Ordering::Relaxed);
    let (sink, log) = recorder();
    r.push(&via("library/derived:latest"), true, sink)
        .await
        .unwrap();
    let sent = up.load(Ordering::Relaxed);
    assert!(
        sent < 64 << 10,
        "the {size}-byte layer was mounted, not uploaded ({sent} bytes sent)"
    );
    let line = format!("pushing {}", &shared.digest.hex()[..12]);
    let last = log
        .lock()
        .unwrap()
        .iter()
        .rfind(|p| p.status == line)
        .cloned()
        .unwrap();
    assert_eq!((last.total, last.completed), (shared.size, shared.size));

    // The registry serves the mounted layer under the new repository: pull it into an empty store.
    let t2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(t2.path()).unwrap();
    let direct = reg.name("library/derived:latest");
    registry(&store2, test_options(None))
        .pull(&direct, true, progress::discard())
        .await
        .unwrap();
    assert_eq!(store2.read(&direct).unwrap().unwrap().bytes, manifest);
    assert_eq!(
        std::fs::read(store2.blobs().path(&shared.digest)).unwrap(),
        std::fs::read(store.blobs().path(&shared.digest)).unwrap()
    );

    // Control: the same layer without `from` goes up in full.
    derived("library/other:latest", None, 2);
    up.store(0, Ordering::Relaxed);
    r.push(&via("library/other:latest"), true, progress::discard())
        .await
        .unwrap();
    assert!(up.load(Ordering::Relaxed) > size as u64);
}
