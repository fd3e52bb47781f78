//! HTTPS on the listener (issue 16): `herd serve` with `HERD_TLS_CERT`/`HERD_TLS_KEY` (a
//! certificate from a test CA made here with the openssl CLI) serves the official openai Python
//! client over https with the CA trusted, negotiates h2 by ALPN, answers a plain-HTTP request
//! on the TLS port by closing it and keeps serving, holds TLS bodies to the body timeout, and
//! refuses to start with only one of the two settings. Needs the real runner and SmolLM2, the
//! openai client (installed like scripts/test-clients does) and openssl.

mod herd_proc;
mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herd_proc::{HerdServe, HERD};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, prereq, register_file, test_model};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pinned official Python clients, installed as scripts/test-clients installs them (same
/// cache key), or `None` when pip cannot.
fn pyclients() -> Option<PathBuf> {
    let reqs = root().join("tests/clients/requirements.txt");
    let out = Command::new("sha256sum").arg(&reqs).output().unwrap();
    let key = String::from_utf8(out.stdout).unwrap()[..16].to_owned();
    let cache = std::env::var_os("HERD_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/herd"),
        PathBuf::from,
    );
    let dir = cache.join("pyclients").join(key);
    if !dir.join(".complete").exists() {
        let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
        let ok = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
            ])
            .arg(&tmp)
            .arg("-r")
            .arg(&reqs)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            prereq::missing(
                "the openai Python client (pip install -r tests/clients/requirements.txt)",
            );
            return None;
        }
        std::fs::write(tmp.join(".complete"), "").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).unwrap();
    }
    Some(dir)
}

/// A test CA (self-signed) and a certificate for 127.0.0.1 it signed: (ca.pem, cert.pem,
/// key.pem). Clients trust the CA; webpki refuses a CA certificate used as the server's own.
fn certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let p = |n: &str| dir.join(n);
    std::fs::write(
        p("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: Vec<Vec<std::ffi::OsString>> = vec![
        [
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=herd test CA", "-keyout"],
        ]
        .concat()
        .into_iter()
        .map(Into::into)
        .chain([p("ca.key").into(), "-out".into(), p("ca.pem").into()])
        .collect(),
        [&["req"][..], &ec, &["-subj", "/CN=127.0.0.1", "-keyout"]]
            .concat()
            .into_iter()
            .map(Into::into)
            .chain([p("key.pem").into(), "-out".into(), p("leaf.csr").into()])
            .collect(),
        ["x509", "-req", "-days", "1", "-set_serial", "7", "-in"]
            .into_iter()
            .map(Into::into)
            .chain([
                p("leaf.csr").into(),
                "-CA".into(),
                p("ca.pem").into(),
                "-CAkey".into(),
                p("ca.key").into(),
                "-extfile".into(),
                p("leaf.ext").into(),
                "-out".into(),
                p("cert.pem").into(),
            ])
            .collect(),
    ];
    for args in steps {
        let ok = Command::new("openssl")
            .args(&args)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            prereq::missing("openssl (scripts/setup)");
            return None;
        }
    }
    Some((p("ca.pem"), p("cert.pem"), p("key.pem")))
}

fn tls_client(cert: &Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    addr: &str,
    cert: &Path,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tls_client(cert, alpn).connect(name, tcp).await.unwrap()
}

const OPENAI: &str = r#"
import json, ssl, sys
import httpx2, openai
base, ca = sys.argv[1], sys.argv[2]
http = httpx2.Client(verify=ssl.create_default_context(cafile=ca))
ai = openai.OpenAI(base_url=base, api_key="herd", max_retries=0, http_client=http)
models = [m.id for m in ai.models.list().data]
r = ai.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Say hi"}],
                               max_tokens=4, temperature=0)
print(json.dumps({"models": models, "content": r.choices[0].message.content,
                  "tokens": r.usage.completion_tokens}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_the_openai_client_and_survives_plain_http() {
    let Some(runner) = native_runner() else {
        return;
    };
    let Some(model) = test_model(SMOL) else {
        return;
    };
    let Some(py) = pyclients() else { return };
    let certs = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(certs.path()) else {
        return;
    };
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let (runner, cert_s, key_s) = (
        runner.display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
    );
    let herd = HerdServe::start(
        ts.root(),
        &[
            ("HERD_RUNNER", runner.as_str()),
            ("HERD_TLS_CERT", cert_s.as_str()),
            ("HERD_TLS_KEY", key_s.as_str()),
            ("HERD_BODY_TIMEOUT", "2s"),
        ],
    );
    assert!(herd.log_text().contains("(https,"), "{}", herd.log_text());
    let base = format!("https://{}/v1", herd.addr);

    // The official openai client, CA trusted through httpx's verify.
    let out = Command::new("python3")
        .arg("-c")
        .arg(OPENAI)
        .arg(&base)
        .arg(&ca)
        .env("PYTHONPATH", &py)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openai over https: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "smol:latest"),
        "{v}"
    );
    assert!(!v["content"].as_str().unwrap().is_empty(), "{v}");
    assert!(v["tokens"].as_u64().unwrap() >= 1, "{v}");

    // Without the CA the same client refuses the server (the certificate is what is checked).
    let untrusted = Command::new("python3")
        .arg("-c")
        .arg("import sys, openai; openai.OpenAI(base_url=sys.argv[1], api_key='x', max_retries=0).models.list()")
        .arg(&base)
        .env("PYTHONPATH", &py)
        .output()
        .unwrap();
    assert!(!untrusted.status.success());
    assert!(
        String::from_utf8_lossy(&untrusted.stderr).contains("CERTIFICATE_VERIFY_FAILED")
            || String::from_utf8_lossy(&untrusted.stderr).contains("certificate verify failed"),
        "{}",
        String::from_utf8_lossy(&untrusted.stderr)
    );

    // h2 by ALPN.
    {
        use http_body_util::BodyExt;
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let tls = tls_connect(&herd.addr, &ca, &[b"h2", b"http/1.1"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake::<_, http_body_util::Empty<bytes::Bytes>>(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = hyper::Request::get(format!("https://{}/api/version", herd.addr))
            .body(http_body_util::Empty::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(
            (resp.status().as_u16(), resp.version()),
            (200, hyper::Version::HTTP_2)
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("version"));
    }

    // Plain HTTP on the TLS port: no HTTP answer, the connection is closed promptly.
    let mut plain = TcpStream::connect(&herd.addr).await.unwrap();
    plain
        .write_all(format!("GET /api/version HTTP/1.1\r\nHost: {}\r\n\r\n", herd.addr).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut got))
        .await
        .expect("closed")
        .ok();
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    let err = reqwest::get(format!("http://{}/api/version", herd.addr)).await;
    assert!(err.is_err() || !err.unwrap().status().is_success());

    // A trickling body over TLS is cut like a plain one.
    let started = Instant::now();
    let mut tls = tls_connect(&herd.addr, &ca, &[b"http/1.1"]).await;
    tls.write_all(
        format!(
            "POST /api/show HTTP/1.1\r\nHost: {}\r\nContent-Length: 100000\r\n\r\n{{",
            herd.addr
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if tls.write_all(b" ").await.is_err() {
            break;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(10), tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "TLS trickle never cut"
        );
        if !answer.is_empty() {
            break;
        }
    }
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );

    // Still serving after all that.
    let tls = tls_connect(&herd.addr, &ca, &[b"http/1.1"]).await;
    drop(tls);
    let again = Command::new("python3")
        .arg("-c")
        .arg(OPENAI)
        .arg(&base)
        .arg(&ca)
        .env("PYTHONPATH", &py)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn one_tls_setting_alone_is_a_startup_error_naming_the_other() {
    let ts = TestStore::new();
    let home = tempfile::tempdir().unwrap();
    for (set, missing) in [
        ("HERD_TLS_CERT", "HERD_TLS_KEY"),
        ("HERD_TLS_KEY", "HERD_TLS_CERT"),
    ] {
        let out = Command::new(HERD)
            .arg("serve")
            .env("HOME", home.path())
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", ts.root())
            .env_remove("HERD_TLS_CERT")
            .env_remove("HERD_TLS_KEY")
            .env(set, "/nonexistent/x.pem")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{set} alone started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{set} is set but {missing} is not")),
            "{err}"
        );
    }
    // Both set, but the files are not PEM: the error names the file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let out = Command::new(HERD)
        .arg("serve")
        .env("HOME", home.path())
        .env("OLLAMA_HOST", "127.0.0.1:0")
        .env("OLLAMA_MODELS", ts.root())
        .env("HERD_TLS_CERT", &bad)
        .env("HERD_TLS_KEY", &bad)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HERD_TLS_CERT") && err.contains("bad.pem"),
        "{err}"
    );
}
