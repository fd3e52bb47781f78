//! Scale-out behind nginx (issue 20 part B), end to end with real components: Debian's nginx
//! with the njs router and the `/readyz` checker of scripts/nginx/, three `herd serve` replicas
//! (own stores, own ports) on the real runner, and the loopback docker-registry. SmolLM2 and
//! gemma3-270m are pushed to the registry from a source server and pulled into every replica
//! by scripts/nginx/distribute. Then 200 mixed requests for both models (Ollama streaming and
//! not, OpenAI SSE, /api/show) go through nginx, four at a time; half-way the replica serving
//! SmolLM2 is SIGKILLed mid-stream. Asserted: each model's requests land on one replica (and
//! each surviving replica's /metrics counts one load per model it serves); the checker takes
//! the dead replica out (config marked `down`, nginx reloaded, no request tries it again);
//! only requests in flight at the dead replica fail; every other request got 200 and `done`;
//! requests without a model spread over the replicas (least-connections); a replica drained
//! with SIGTERM is taken out while its in-flight stream still completes.
//!
//! Needs scripts/setup (nginx, libnginx-mod-http-js, docker-registry, curl),
//! `cargo build --workspace --bins` and scripts/fetch-test-models; a missing prerequisite fails
//! the test unless HERD_ALLOW_SKIP=1.

mod nginx_support;
// Both support modules include prereq/mod.rs; its one `missing` is all either uses.
#[allow(clippy::duplicate_mod)]
mod registry_support;
mod serve_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nginx_support::mix::*;
use nginx_support::{access_log, loads, replica, script, text, wait_line, Front, Proc};
use registry_support::{free_port, RealRegistry};
use serde_json::{json, Value};
use serve_support::api_support::{TestStore, MT_PARAMS};
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const CONCURRENCY: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_behind_nginx_route_by_model_and_survive_a_killed_replica() {
    if !nginx_support::installed() {
        return;
    }
    let (Some(runner), Some(smol), Some(gemma)) =
        (native_runner(), test_model(SMOL), test_model(GEMMA))
    else {
        return;
    };
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t0 = Instant::now();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(180))
        .build()
        .unwrap();

    // The models, each with one inference thread in its params, pushed from a source server.
    let src = TestStore::new();
    let params: &[(&str, &[u8])] = &[(MT_PARAMS, br#"{"num_thread":1}"#)];
    register_file(&src, "smol", &smol, params);
    register_file(&src, "gemma", &gemma, params);
    let src_port = free_port();
    let source = replica(&runner, src.root(), src_port, vec![]);
    let mut refs = Vec::new();
    for name in ["smol", "gemma"] {
        let r = format!("127.0.0.1:{}/library/{name}:latest", reg.port);
        let base = format!("http://127.0.0.1:{src_port}");
        let c = http
            .post(format!("{base}/api/copy"))
            .json(&json!({"source": name, "destination": r}))
            .send()
            .await
            .unwrap();
        assert_eq!(c.status(), 200);
        let p = http
            .post(format!("{base}/api/push"))
            .json(&json!({"model": r, "insecure": true, "stream": false}))
            .send()
            .await
            .unwrap();
        assert_eq!(p.status(), 200, "{}", p.text().await.unwrap());
        refs.push(format!("{r}={name}"));
    }
    drop(source);

    // Three replicas with empty stores; each pulls both models from the registry.
    let mut replicas: Vec<Option<Proc>> = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let store = tempfile::tempdir().unwrap();
        let port = free_port();
        let path = store.path().to_owned();
        replicas.push(Some(replica(&runner, &path, port, vec![store])));
        addrs.push(format!("127.0.0.1:{port}"));
    }
    let mut args = vec!["--insecure".to_owned()];
    args.extend(refs);
    args.push("--".into());
    args.extend(addrs.iter().cloned());
    let said = script("distribute", &args);
    assert_eq!(said.matches("pulled ").count(), 6, "{said}");
    eprintln!(
        "nginx_replicas: models pushed and distributed in {:?}",
        t0.elapsed()
    );

    let front = Front::start(&addrs);
    let (base, checks, conf) = (front.base.clone(), front.checks.clone(), front.conf.clone());

    // Requests without a model: least-connections spreads them; every replica lists both.
    for (i, path) in ["/api/tags", "/api/version", "/api/ps"]
        .repeat(3)
        .iter()
        .enumerate()
    {
        let r = http
            .get(format!("{base}{path}"))
            .header("X-Request-Id", format!("any-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        if *path == "/api/tags" {
            let names: BTreeSet<&str> = body["models"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|m| m["name"].as_str())
                .collect();
            assert!(
                names.contains("smol:latest") && names.contains("gemma:latest"),
                "{body}"
            );
        }
    }

    // The load: CONCURRENCY workers take the next request number; the one that takes KILL_AT
    // kills the replica serving SmolLM2 once that request's stream has begun there.
    let next = Arc::new(AtomicUsize::new(0));
    // (replica, the kill signal sent, the process reaped).
    let killed: Arc<Mutex<Option<(usize, Instant, Instant)>>> = Arc::default();
    let replicas = Arc::new(Mutex::new(replicas));
    let log_path = front.access_log.clone();
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (http, base, next, killed, replicas) = (
            http.clone(),
            base.clone(),
            next.clone(),
            killed.clone(),
            replicas.clone(),
        );
        let (addrs, log_path) = (addrs.clone(), log_path.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= REQUESTS {
                    return out;
                }
                if i != KILL_AT {
                    out.push((i, send(&http, &base, i, None).await));
                    continue;
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                let stream = tokio::spawn({
                    let (http, base) = (http.clone(), base.clone());
                    async move { send(&http, &base, i, Some(tx)).await }
                });
                rx.await.expect("the long stream began");
                let log = access_log(&log_path);
                let victim = log
                    .values()
                    .find(|(m, _)| m == SMOL_KEY)
                    .and_then(|(_, tried)| tried.last().cloned())
                    .expect("SmolLM2 requests were served before the kill");
                let n = addrs.iter().position(|a| *a == victim).unwrap();
                let mut p = replicas.lock().unwrap()[n].take().unwrap();
                let signalled = Instant::now();
                p.child.kill().unwrap();
                p.child.wait().unwrap();
                *killed.lock().unwrap() = Some((n, signalled, Instant::now()));
                drop(p);
                out.push((i, stream.await.unwrap()));
            }
        }));
    }
    let mut outcomes = BTreeMap::new();
    for w in workers {
        outcomes.extend(w.await.unwrap());
    }
    let (dead, killed_at, reaped_at) = killed.lock().unwrap().expect("a replica was killed");
    let victim = addrs[dead].clone();
    eprintln!(
        "nginx_replicas: {REQUESTS} requests done at {:?}",
        t0.elapsed()
    );
    let mut took: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    for (i, o) in &outcomes {
        let (_, kind, _, _) = request(*i);
        let k = format!("{kind:?} {}", o.model.split('/').next_back().unwrap());
        took.entry(k).or_default().push(o.ended - o.sent);
    }
    for (k, d) in &took {
        let mean = d.iter().sum::<Duration>() / d.len() as u32;
        eprintln!(
            "nginx_replicas: {k}: {} requests, mean {mean:?}, max {:?}",
            d.len(),
            d.iter().max().unwrap()
        );
    }

    // The checker took the dead replica out: config marked `down`, nginx reloaded.
    let removed_at = wait_line(
        &checks,
        &format!("{victim} down"),
        killed_at,
        Duration::from_secs(5),
    );
    let reloaded_at = wait_line(
        &checks,
        "reloaded nginx",
        removed_at,
        Duration::from_secs(5),
    );
    let now_conf = std::fs::read_to_string(&conf).unwrap();
    assert!(
        now_conf.contains(&format!("server {victim} down;")),
        "{now_conf}"
    );
    assert!(
        text(&checks).contains("reloaded nginx"),
        "{}",
        text(&checks)
    );

    // Every request is in nginx's log (written when its response ends).
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = access_log(&log_path);
        if (0..REQUESTS).all(|i| log.contains_key(&format!("req-{i}"))) || Instant::now() > deadline
        {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let served_by = |i: usize| {
        let (_, tried) = log
            .get(&format!("req-{i}"))
            .unwrap_or_else(|| panic!("req-{i} not in nginx's access log"));
        tried.clone()
    };

    // Only requests in flight at the dead replica failed; all others got 200 and done.
    let mut failed = Vec::new();
    for (i, o) in &outcomes {
        if let Err((cut, e)) = &o.result {
            let tried = served_by(*i);
            assert!(
                *cut && tried.last() == Some(&victim) && o.sent < reaped_at && o.ended > killed_at,
                "req-{i} ({}) lost: {e}; tried {tried:?}; sent before the replica died: {}, \
                 ended after the kill: {}",
                o.model,
                o.sent < reaped_at,
                o.ended > killed_at,
            );
            failed.push(*i);
        }
    }
    assert_eq!(outcomes.len(), REQUESTS);
    assert!(
        failed.contains(&KILL_AT),
        "the stream cut by the kill failed: {failed:?}"
    );
    eprintln!(
        "nginx_replicas: {} requests failed in flight at the killed replica: {failed:?}",
        failed.len()
    );

    // Each model on one replica before the kill, and on one (not the dead one) after it; a
    // model that was not on the dead replica did not move (consistent hashing).
    // nginx's new workers take over within a moment of the signal.
    let settled = reloaded_at + Duration::from_secs(1);
    let mut before: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut after: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (i, o) in &outcomes {
        let tried = served_by(*i);
        let last = tried.last().unwrap().clone();
        if o.sent < killed_at && o.result.is_ok() {
            before.entry(o.model).or_default().insert(last);
        } else if o.sent > settled {
            assert_eq!(
                tried.len(),
                1,
                "req-{i} tried {tried:?} after the checker's reload"
            );
            after.entry(o.model).or_default().insert(last);
        }
    }
    for key in [SMOL_KEY, GEMMA_KEY] {
        let (b, a) = (&before[key], &after[key]);
        assert_eq!(b.len(), 1, "{key} before the kill: {b:?}");
        assert_eq!(a.len(), 1, "{key} after the checker's reload: {a:?}");
        assert!(!a.contains(&victim), "{key}: {a:?}");
        if !b.contains(&victim) {
            assert_eq!(a, b, "{key} moved though its replica lived");
        }
    }
    assert!(before[SMOL_KEY].contains(&victim));

    // Loads: on the survivors each model was loaded exactly once, where it was served.
    let names = [(SMOL_KEY, "smol:latest"), (GEMMA_KEY, "gemma:latest")];
    for (n, addr) in addrs.iter().enumerate().filter(|(n, _)| *n != dead) {
        let l = loads(&http, addr).await;
        for (key, name) in names {
            let want = u64::from(after[key].contains(addr));
            assert_eq!(
                l.get(name).copied().unwrap_or(0),
                want,
                "replica {n} {addr}: {l:?}"
            );
        }
    }

    // The model-less requests were spread (least_conn with idle replicas rotates).
    let any: BTreeSet<String> = log
        .iter()
        .filter(|(id, _)| id.starts_with("any-"))
        .map(|(_, (m, tried))| {
            assert_eq!(m, "");
            tried.last().unwrap().clone()
        })
        .collect();
    assert!(any.len() >= 2, "model-less requests all went to {any:?}");

    // A drain (SIGTERM, as a rolling restart does) is not a failure: /readyz turns 503, the
    // checker takes the replica out, the stream in flight there still ends with done, and the
    // next gemma request goes to another replica.
    let home = after[GEMMA_KEY].first().unwrap().clone();
    let n = addrs.iter().position(|a| *a == home).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stream = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move { send(&http, &base, DRAIN_AT, Some(tx)).await }
    });
    rx.await.expect("the drained stream began");
    let pid = replicas.lock().unwrap()[n].as_ref().unwrap().child.id();
    let sigterm_at = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let down = wait_line(
        &checks,
        &format!("{home} down (readyz answered 503)"),
        sigterm_at,
        Duration::from_secs(10),
    );
    wait_line(&checks, "reloaded nginx", down, Duration::from_secs(5));
    let drained = stream.await.unwrap();
    assert!(drained.result.is_ok(), "{:?}", drained.result);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let next = send(&http, &base, DRAIN_AT + 2, None).await;
    assert!(next.result.is_ok(), "{:?}", next.result);
    let log = access_log(&front.access_log);
    let (_, tried) = &log[&format!("req-{}", DRAIN_AT + 2)];
    assert!(
        tried.len() == 1 && tried[0] != home && tried[0] != victim,
        "{tried:?}"
    );
    drop(front);
    eprintln!("nginx_replicas: done in {:?}", t0.elapsed());
}

/// The router and the checker without models (seconds): every spelling of a name is one key
/// on one replica, distinct names spread over the ring, bodies it cannot read (not JSON, or
/// spilled past `--body-buffer`) go least-connections, and a replica that comes back is put
/// back by the checker and gets its models' keys again (consistent hashing kept its place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_keys_fallbacks_and_a_returning_replica() {
    if !nginx_support::installed() {
        return;
    }
    let Some(runner) = native_runner() else {
        return;
    };
    let t0 = Instant::now();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let start = |port: u16| {
        let store = tempfile::tempdir().unwrap();
        let path = store.path().to_owned();
        replica(&runner, &path, port, vec![store])
    };
    let mut replicas: Vec<Option<Proc>> = ports.iter().map(|p| Some(start(*p))).collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let front = Front::start_with(&addrs, &["--body-buffer", "4k"]);
    let mut n = 0;
    let mut post = async |body: String| {
        n += 1;
        let id = format!("r-{n}");
        let r = http
            .post(format!("{}/api/show", front.base))
            .header("X-Request-Id", &id)
            .body(body)
            .send()
            .await
            .unwrap();
        // herd's answer for a model its store lacks (or a body it cannot read).
        assert!(r.status() == 404 || r.status() == 400, "{}", r.status());
        let _ = r.bytes().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(e) = access_log(&front.access_log).remove(&id) {
                return e;
            }
            assert!(Instant::now() < deadline, "{id} not logged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let model = |m: &str| json!({ "model": m }).to_string();

    let mut smol_on = BTreeSet::new();
    for spelling in [
        "smol",
        "smol:latest",
        "library/smol",
        "SMOL",
        " registry.ollama.ai/library/smol:latest",
    ] {
        let (key, tried) = post(model(spelling)).await;
        assert_eq!(key, SMOL_KEY, "{spelling}");
        smol_on.insert(tried.last().unwrap().clone());
    }
    let (key, tried) = post(json!({ "name": "smol" }).to_string()).await;
    assert_eq!(key, SMOL_KEY, "the older `name` field");
    smol_on.insert(tried.last().unwrap().clone());
    assert_eq!(smol_on.len(), 1, "one key, one replica: {smol_on:?}");
    let home = smol_on.pop_first().unwrap();
    let (key, _) = post(model("127.0.0.1:5000/ns/smol")).await;
    assert_eq!(key, "127.0.0.1:5000/ns/smol:latest", "a port is not a tag");

    let mut spread = BTreeSet::new();
    for i in 0..12 {
        spread.insert(
            post(model(&format!("m{i}")))
                .await
                .1
                .last()
                .unwrap()
                .clone(),
        );
    }
    assert!(spread.len() >= 2, "12 names all hashed to {spread:?}");

    for body in [
        "not json".to_owned(),
        "[1]".into(),
        json!({"model": "smol", "prompt": "x".repeat(8000)}).to_string(),
    ] {
        let (key, _) = post(body).await;
        assert_eq!(key, "", "unreadable body routed by model");
    }

    // The replica holding smol dies: its key moves; it returns on its port: the key moves back.
    let n_home = addrs.iter().position(|a| *a == home).unwrap();
    let mut p = replicas[n_home].take().unwrap();
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    drop(p);
    let down = wait_line(
        &front.checks,
        &format!("{home} down"),
        t0,
        Duration::from_secs(5),
    );
    wait_line(
        &front.checks,
        "reloaded nginx",
        down,
        Duration::from_secs(5),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, tried) = post(model("smol")).await;
    assert_eq!(
        tried.len(),
        1,
        "the checker's reload, not a retry: {tried:?}"
    );
    assert_ne!(tried[0], home);
    replicas[n_home] = Some(start(ports[n_home]));
    let up = wait_line(
        &front.checks,
        &format!("{home} up"),
        down,
        Duration::from_secs(10),
    );
    wait_line(&front.checks, "reloaded nginx", up, Duration::from_secs(5));
    let conf = std::fs::read_to_string(&front.conf).unwrap();
    assert!(!conf.contains(" down;"), "{conf}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, tried) = post(model("smol")).await;
    assert_eq!(tried, [home], "smol is back on its replica");
}
