//! One model across two hosts through ggml RPC behind herd's tunnel (issue 20), on CPU: the
//! "hosts" are two network namespaces joined by a veth pair, `herd worker` in one and
//! `herd serve` (HERD_RPC_WORKERS) in the other. Greedy output with the layers split between
//! them is byte-identical to a local-only run (SmolLM2 and gemma3-270m); killing the worker
//! mid-stream ends the stream with an error line and the next request loads local-only; and a
//! client without the credential (no token, a wrong one, raw RPC bytes, plain TCP, no client
//! certificate under mutual TLS) is refused before the worker opens any connection to its RPC
//! server (whose "Accepted client connection" line would show it). Needs root or
//! CAP_NET_ADMIN, iproute2, openssl, curl, the real runner and the test models.

mod rpc_support;
mod serve_support;

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use rpc_support::{certs, get, post, post_stream, serve, worker, Netns, Proc, TOKEN};
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

/// ggml's RPC server prints this for each client it accepts (and flushes it).
const ACCEPTED: &str = "Accepted client connection";
const WORKER_PORT: u16 = 7411;

fn generate(ns: &str, addr: &str, model: &str, num_gpu: u32) -> String {
    let body = json!({
        "model": model, "prompt": "Why is the sky blue?", "stream": false,
        "options": {"temperature": 0, "seed": 7, "num_predict": 12, "num_gpu": num_gpu}
    });
    let out = post(ns, &format!("http://{addr}/api/generate"), &body);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["response"]
        .as_str()
        .unwrap_or_else(|| panic!("no response: {v}"))
        .to_string()
}

/// `/api/ps`'s placement of the one loaded model: (remote layers, local layers).
fn placement(ns: &str, addr: &str) -> (u64, u64) {
    let ps = get(ns, &format!("http://{addr}/api/ps"));
    let p = ps["models"][0]["placement"]
        .as_array()
        .unwrap_or_else(|| panic!("no placement in /api/ps: {ps}"))
        .clone();
    let sum = |remote: bool| -> u64 {
        p.iter()
            .filter(|d| d["remote"] == remote)
            .map(|d| d["layers"].as_u64().unwrap())
            .sum()
    };
    (sum(true), sum(false))
}

fn worker_env(c: &rpc_support::Certs) -> Vec<(&'static str, String)> {
    vec![
        ("HERD_RPC_TOKEN", TOKEN.to_string()),
        ("HERD_RPC_TLS_CERT", c.cert.display().to_string()),
        ("HERD_RPC_TLS_KEY", c.key.display().to_string()),
    ]
}

fn env_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

struct Setup {
    // Field order is drop order: processes go before the namespaces they run in.
    worker: Proc,
    ts: TestStore,
    _dir: tempfile::TempDir,
    certs: rpc_support::Certs,
    ns: Netns,
}

fn setup(models: &[(&str, &Path)]) -> Setup {
    let ns = Netns::create();
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path(), &ns.worker_ip);
    let ts = TestStore::new();
    for (name, path) in models {
        register_file(&ts, name, path, &[]);
    }
    let listen = format!("{}:{WORKER_PORT}", ns.worker_ip);
    let worker = worker(Some(&ns.worker), &listen, &env_refs(&worker_env(&certs)));
    Setup {
        worker,
        ts,
        _dir: dir,
        certs,
        ns,
    }
}

fn rpc_env(s: &Setup) -> Vec<(&'static str, String)> {
    vec![
        (
            "HERD_RPC_WORKERS",
            format!("{}:{WORKER_PORT}", s.ns.worker_ip),
        ),
        ("HERD_RPC_TOKEN", TOKEN.to_string()),
        ("HERD_RPC_TLS_CA", s.certs.ca.display().to_string()),
    ]
}

#[test]
fn layers_split_across_hosts_give_the_local_only_output() {
    let (Some(_), Some(smol), Some(gemma)) = (
        native_runner(),
        test_model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        test_model("gemma-3-270m-q4_k_m.gguf"),
    ) else {
        return;
    };
    let s = setup(&[("smol", &smol), ("gemma", &gemma)]);
    let home = tempfile::tempdir().unwrap();
    // (model, n_gpu_layers: about half of n_layer + 1 on the worker, n_layer)
    let models = [("smol", 16u32, 30u64), ("gemma", 10, 18)];
    let mut split = Vec::new();
    {
        let mut env = rpc_env(&s);
        // llama.cpp then logs where it put each layer, which /api/ps must agree with.
        env.push(("OLLAMA_DEBUG", "1".into()));
        let (srv, addr) = serve(&s.ns.serve, s.ts.root(), home.path(), &env_refs(&env));
        srv.wait_for("RPC worker up", Duration::from_secs(30));
        for (model, ngl, n_layer) in models {
            let before = s.worker.count(ACCEPTED);
            let logged = srv.count("assigned to device RPC");
            split.push(generate(&s.ns.serve, &addr, model, ngl));
            assert_eq!(
                srv.count("assigned to device RPC") - logged,
                ngl as usize,
                "{model}: llama.cpp's own log of the layers it put on the worker"
            );
            assert_eq!(
                placement(&s.ns.serve, &addr),
                (ngl as u64, n_layer + 1 - ngl as u64),
                "{model}: layers on the worker and here"
            );
            assert!(
                s.worker.count(ACCEPTED) > before,
                "{model}: the worker's RPC server served this load"
            );
        }
    }
    let (_local, addr) = serve(&s.ns.serve, s.ts.root(), home.path(), &[]);
    for ((model, ngl, n_layer), want) in models.iter().zip(&split) {
        let got = generate(&s.ns.serve, &addr, model, *ngl);
        assert_eq!(placement(&s.ns.serve, &addr), (0, n_layer + 1), "{model}");
        assert!(!got.is_empty());
        assert_eq!(&got, want, "{model}: split output differs from local-only");
    }
}

#[test]
fn killing_the_worker_mid_stream_ends_the_stream_and_the_next_load_is_local() {
    let (Some(_), Some(smol)) = (
        native_runner(),
        test_model("SmolLM2-135M-Instruct.Q4_1.gguf"),
    ) else {
        return;
    };
    let mut s = setup(&[("smol", &smol)]);
    let home = tempfile::tempdir().unwrap();
    let env = rpc_env(&s);
    let (srv, addr) = serve(&s.ns.serve, s.ts.root(), home.path(), &env_refs(&env));
    srv.wait_for("RPC worker up", Duration::from_secs(30));
    let body = json!({
        "model": "smol", "prompt": "Tell me a long story about a dragon.",
        "options": {"temperature": 0, "num_predict": 400, "num_gpu": 16}
    });
    let (mut curl, mut lines) =
        post_stream(&s.ns.serve, &format!("http://{addr}/api/generate"), &body);
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        lines.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["done"], false, "{v}");
    }
    s.worker.kill();
    let mut last = Value::Null;
    for l in lines.lines() {
        let l = l.unwrap();
        if l.trim().is_empty() {
            continue;
        }
        last = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
    let _ = curl.wait();
    assert!(
        last["error"].is_string(),
        "the stream ends with an error line, got {last}; serve log:\n{}",
        srv.text()
    );
    // The worker is gone: the next request reloads on this host alone.
    let text = generate(&s.ns.serve, &addr, "smol", 16);
    assert!(!text.is_empty());
    assert_eq!(placement(&s.ns.serve, &addr), (0, 31));
}

/// A TLS client of the worker on loopback: the TLS stream, or the handshake error.
async fn tls_client(
    port: u16,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let connector = server::worker::tls::connector(ca, client)?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    // TLS 1.3: a refused client certificate shows on the first read, not in the handshake.
    use tokio::io::AsyncWriteExt;
    tls.flush().await.map_err(|e| e.to_string())?;
    Ok(tls)
}

/// Sends `bytes` and returns the worker's answer byte (None: it closed without one).
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    bytes: &[u8],
) -> Option<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
    let mut b = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await {
        Ok(Ok(1)) => Some(b[0]),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_credential_never_reach_the_rpc_server() {
    use server::worker::handshake::{hello, Kind};
    if native_runner().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path(), "127.0.0.1");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = worker_env(&c);
    let w = worker(None, &format!("127.0.0.1:{port}"), &env_refs(&env));
    // ggml RPC's HELLO command (14) with an empty body: what an RPC client sends first.
    let rpc_hello = [14u8, 0, 0, 0, 0, 0, 0, 0, 0];

    // Plain TCP speaking raw RPC: the TLS handshake fails; at most a TLS alert record (content
    // type 21) comes back before the close.
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let got = answer(tcp, &rpc_hello).await;
    assert!(matches!(got, None | Some(21)), "raw RPC over TCP: {got:?}");
    // TLS, then raw RPC, or a hello with no token, or with a wrong one: denied (1).
    let cases: [(&str, Vec<u8>); 3] = [
        ("raw RPC inside TLS", rpc_hello.to_vec()),
        ("no token", hello(Kind::Connect, None)),
        (
            "wrong token",
            hello(Kind::Connect, Some("rpc-test-token-0123456780")),
        ),
    ];
    for (what, bytes) in cases {
        let tls = tls_client(port, &c.ca, None).await.unwrap();
        assert_eq!(answer(tls, &bytes).await, Some(1), "{what}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.count(ACCEPTED),
        0,
        "a refused client reached the RPC server:\n{}",
        w.text()
    );
    assert!(
        w.count("refused") >= 4,
        "each refusal is logged:\n{}",
        w.text()
    );

    // The right token: accepted (0), and only now does the RPC server see a client.
    let tls = tls_client(port, &c.ca, None).await.unwrap();
    let mut ok = tls;
    assert_eq!(
        answer(&mut ok, &hello(Kind::Connect, Some(TOKEN))).await,
        Some(0)
    );
    w.wait_for(ACCEPTED, Duration::from_secs(15));
    drop(ok);
    drop(w);

    // Mutual TLS (HERD_RPC_TLS_CA on the worker, no token): a client without a certificate
    // the CA signed is refused by the handshake; with one it is accepted.
    let mut env = worker_env(&c);
    env.retain(|(k, _)| *k != "HERD_RPC_TOKEN");
    env.push(("HERD_RPC_TLS_CA", c.ca.display().to_string()));
    let m = worker(None, &format!("127.0.0.1:{port}"), &env_refs(&env));
    let no_cert = match tls_client(port, &c.ca, None).await {
        Err(_) => None,
        Ok(tls) => answer(tls, &hello(Kind::Connect, None)).await,
    };
    assert_eq!(no_cert, None, "no client certificate");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(m.count(ACCEPTED), 0, "{}", m.text());
    let tls = tls_client(port, &c.ca, Some((&c.client_cert, &c.client_key)))
        .await
        .unwrap();
    let mut ok = tls;
    assert_eq!(answer(&mut ok, &hello(Kind::Connect, None)).await, Some(0));
    m.wait_for(ACCEPTED, Duration::from_secs(15));
}
