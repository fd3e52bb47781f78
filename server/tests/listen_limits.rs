//! The listener's bounds on the real `herd serve` (issue 22 item 5): request bodies that trickle
//! are cut with 408 within the body timeout while `/api/version` keeps answering, a steady
//! upload slower than the timeout is not cut, the connection cap holds extra connections in
//! the accept backlog until slots free, and an idle h2c connection is closed.

mod herd_proc;
mod serve_support;

use std::time::{Duration, Instant};

use herd_proc::HerdServe;
use serve_support::api_support::TestStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a connection that sends a request head promising a 1 MB body, then 1 byte each 200 ms
/// until the server closes it. Returns how long that took and what the server answered.
async fn trickle(addr: String) -> (Duration, String) {
    let started = Instant::now();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/show HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if w.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut answer)).await;
    writer.abort();
    (
        started.elapsed(),
        String::from_utf8_lossy(&answer).into_owned(),
    )
}

async fn version_answers(http: &reqwest::Client, herd: &HerdServe) -> Duration {
    let t = Instant::now();
    let r = http
        .get(herd.url("/api/version"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("/api/version answers");
    assert_eq!(r.status(), 200);
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_bodies_are_cut_and_the_api_keeps_answering() {
    let ts = TestStore::new();
    let herd = HerdServe::start(
        ts.root(),
        &[("HERD_BODY_TIMEOUT", "2s"), ("HERD_BODY_MIN_RATE", "1024")],
    );
    let http = reqwest::Client::new();
    version_answers(&http, &herd).await;
    let baseline_fds = herd.open_fds();

    let slow: Vec<_> = (0..300)
        .map(|_| tokio::spawn(trickle(herd.addr.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // While 300 bodies trickle, the API answers at once.
    for _ in 0..5 {
        let took = version_answers(&http, &herd).await;
        assert!(took < Duration::from_secs(2), "/api/version took {took:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut cut_408 = 0;
    for h in slow {
        let (took, answer) = h.await.unwrap();
        // Cut after the 2 s body timeout (1 byte per 200 ms is 5 B/s, far below 1 KiB/s).
        assert!(took >= Duration::from_secs(2), "cut too early: {took:?}");
        assert!(
            took < Duration::from_secs(10),
            "not cut within the bound: {took:?}"
        );
        if answer.starts_with("HTTP/1.1 408") {
            assert!(
                answer.contains("request body arrived too slowly"),
                "{answer}"
            );
            cut_408 += 1;
        }
    }
    assert_eq!(cut_408, 300, "every trickling body is answered 408");
    version_answers(&http, &herd).await;
    // Their descriptors are released.
    let deadline = Instant::now() + Duration::from_secs(5);
    while herd.open_fds() > baseline_fds + 5 {
        assert!(
            Instant::now() < deadline,
            "fds stay open: {} vs {baseline_fds}",
            herd.open_fds()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_upload_slower_than_the_timeout_is_not_cut() {
    let ts = TestStore::new();
    let herd = HerdServe::start(
        ts.root(),
        &[("HERD_BODY_TIMEOUT", "1s"), ("HERD_BODY_MIN_RATE", "1024")],
    );
    // 600 KB at ~200 KB/s: three times longer than the body timeout, far above the rate.
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let digest = {
        use sha2::Digest;
        let h = sha2::Sha256::digest(&data);
        format!(
            "sha256:{}",
            h.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    };
    let chunks: Vec<Vec<u8>> = data.chunks(20_000).map(<[u8]>::to_vec).collect();
    let stream =
        futures_util::StreamExt::then(futures_util::stream::iter(chunks), |c| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, std::io::Error>(c)
        });
    let started = Instant::now();
    let r = reqwest::Client::new()
        .post(herd.url(&format!("/api/blobs/{digest}")))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    assert!(started.elapsed() > Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_new_connections_wait_for_a_free_slot() {
    let ts = TestStore::new();
    let herd = HerdServe::start(
        ts.root(),
        &[("HERD_BODY_TIMEOUT", "2s"), ("HERD_MAX_CONNECTIONS", "20")],
    );
    assert!(
        herd.log_text().contains("max_connections=20"),
        "{}",
        herd.log_text()
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    version_answers(&http, &herd).await;
    let started = Instant::now();
    let slow: Vec<_> = (0..20)
        .map(|_| tokio::spawn(trickle(herd.addr.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The 21st connection waits in the backlog until the slow ones are cut, then is served.
    let t = Instant::now();
    version_answers(&http, &herd).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "answered at {waited:?}, before a slot was free (cap not applied)"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "waited {:?}",
        t.elapsed()
    );
    for h in slow {
        let (_, answer) = h.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2c_connection_is_closed() {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let ts = TestStore::new();
    let herd = HerdServe::start(ts.root(), &[("HERD_IDLE_TIMEOUT", "1s")]);
    let tcp = TcpStream::connect(&herd.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, http_body_util::Empty<bytes::Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{}/api/version", herd.addr))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    resp.into_body().collect().await.unwrap();
    let idle_since = Instant::now();
    // The client would keep it open forever; the server closes it after the idle timeout.
    tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("the idle h2c connection was not closed")
        .unwrap()
        .ok();
    let closed = idle_since.elapsed();
    assert!(closed >= Duration::from_millis(900), "closed at {closed:?}");
    assert!(closed < Duration::from_secs(5), "closed at {closed:?}");
}

/// Plain HTTP GET of `/api/version` on `addr`; the status line.
async fn version_status(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = "GET /api/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

/// A service file carried over from Ollama: `OLLAMA_HOST=0.0.0.0` listens on every address as
/// Go's `net.Listen` does (IPv6 too, where the machine has it), and values Ollama's envconfig
/// would not parse fall back to their defaults with a warning instead of stopping the server.
#[tokio::test]
async fn an_ollama_service_environment_starts_and_listens_everywhere() {
    let ts = TestStore::new();
    let herd = HerdServe::start(
        ts.root(),
        &[
            ("OLLAMA_HOST", "0.0.0.0:0"),
            ("OLLAMA_KEEP_ALIVE", "1d"),
            ("OLLAMA_CONTEXT_LENGTH", "8k"),
            ("OLLAMA_LOAD_TIMEOUT", "???"),
        ],
    );
    let port = herd.addr.rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        version_status(&format!("127.0.0.1:{port}")).await,
        "HTTP/1.1 200 OK"
    );
    // Where this machine has IPv6 loopback, the same listener answers on it.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        assert!(herd.addr.starts_with("[::]:"), "{}", herd.addr);
        assert_eq!(
            version_status(&format!("[::1]:{port}")).await,
            "HTTP/1.1 200 OK"
        );
    }
    let log = herd.log_text();
    for v in ["\"1d\"", "\"8k\"", "\"???\""] {
        assert!(
            log.contains(&format!(
                "invalid environment variable, using default: invalid value {v}"
            )),
            "{v}: {log}"
        );
    }
}
