//! Memory after large request bodies (issue 22 item 8), on the real `herd serve`: eight
//! concurrent 250 MB JSON bodies (under the 256 MiB cap) are read into one buffer each, sized
//! from Content-Length, and the server's resident set returns near its baseline afterwards
//! (before: a list of chunks plus their concatenation, 2.99 GB peak and 748 MB kept). A body
//! declared over the cap is refused with 413 before it is read.

mod herd_proc;
mod serve_support;

use std::time::{Duration, Instant};

use herd_proc::HerdServe;
use serve_support::api_support::TestStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MB: u64 = 1_000_000;

fn peak(herd: &HerdServe) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", herd.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_returns_after_a_burst_of_large_bodies() {
    let ts = TestStore::new();
    let herd = HerdServe::start(ts.root(), &[]);
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(herd.url("/api/version"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let baseline = herd.rss();

    let mut body = Vec::with_capacity(250 * MB as usize);
    body.extend_from_slice(br#"{"model":"missing","prompt":""#);
    body.resize(250 * MB as usize - 2, b'w');
    body.extend_from_slice(br#""}"#);
    let body = bytes::Bytes::from(body);
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let (http, url, body) = (http.clone(), herd.url("/api/generate"), body.clone());
            tokio::spawn(async move { http.post(url).body(body).send().await.unwrap().status() })
        })
        .collect();
    for h in burst {
        // Read and decoded in full: the model is what is missing.
        assert_eq!(h.await.unwrap(), 404);
    }
    let peak = peak(&herd);
    // Settles at once (the buffers were whole mappings), give it a moment anyway.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = herd.rss();
    while after > baseline + 64 * MB && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = herd.rss();
    }
    eprintln!(
        "baseline {} MB, peak {} MB, after {} MB",
        baseline / MB,
        peak / MB,
        after / MB
    );
    assert!(
        after <= baseline + 64 * MB,
        "RSS after the burst {} MB vs baseline {} MB",
        after / MB,
        baseline / MB
    );
    // A sanity bound (two copies of every body at once); the settled RSS above is the criterion.
    assert!(peak < 8 * 2 * 250 * MB + 200 * MB, "peak {} MB", peak / MB);

    // Declared over the cap: 413 at once, nothing read.
    let mut s = tokio::net::TcpStream::connect(&herd.addr).await.unwrap();
    let head = format!(
        "POST /api/generate HTTP/1.1\r\nHost: {}\r\nContent-Length: 300000000\r\n\r\n{{",
        herd.addr
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answered before the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("request entity too large"), "{answer}");
}
