//! Golden conversion test: for each supported architecture a tiny random-weight Hugging Face
//! checkpoint is generated, converted by herd (`server::convert`) and by the pinned llama.cpp
//! tree's own `convert_hf_to_gguf.py --outtype f16` (set up by scripts/fetch-convert-reference),
//! and the two GGUFs are compared:
//! - tensors: the same names in the same order, shapes, ggml types and data bytes;
//! - metadata: every key/value identical, except the `general.*` naming keys the reference derives
//!   from the directory and model card (name, basename, size label, …), which the runner ignores;
//! - both files load in runner-llamacpp and give the same greedy tokens with the same logprobs.
//!
//! The checkpoints use different input dtypes (bf16, f32, f16) so every widening and the
//! f32 → f16 rounding are covered; the Qwen3 one is sharded over three files with an index. Needs the reference (scripts/fetch-convert-reference, which
//! this test runs; cached), the test models (scripts/fetch-test-models) and a built runner-llamacpp
//! (`cargo build --workspace --bins`, as scripts/test does); it fails, not skips, without them.

mod convert_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use convert_support::{checkpoint_shards, Arch};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value as Json};
use server::convert::safetensors::Dtype;
use server::convert::{convert, Source};
use server::gguf::{self, GgufFile, ReadOptions};

/// The reference setup directory (venv/ and llama.cpp/).
fn reference() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-convert-reference");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/fetch-convert-reference");
    assert!(
        out.status.success(),
        "scripts/fetch-convert-reference failed"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn run_reference(reference: &Path, model: &Path, out: &Path) {
    let started = Instant::now();
    let status = Command::new(reference.join("venv/bin/python"))
        .arg(reference.join("llama.cpp/convert_hf_to_gguf.py"))
        .arg(model)
        .args(["--outtype", "f16", "--outfile"])
        .arg(out)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("TOKENIZERS_PARALLELISM", "false")
        .env("OMP_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run convert_hf_to_gguf.py");
    assert!(
        status.status.success(),
        "reference converter failed:\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
    eprintln!("reference conversion: {:?}", started.elapsed());
}

/// Keys the reference derives from the directory name / model card; the runner reads none.
fn naming_key(k: &str) -> bool {
    k.starts_with("general.")
        && !matches!(
            k,
            "general.architecture"
                | "general.type"
                | "general.file_type"
                | "general.quantization_version"
        )
}

/// Compares the two files; returns how many key/values were compared.
fn compare(herd: &Path, reference: &Path) -> usize {
    let opts = ReadOptions { full_arrays: true };
    let (h, r): (GgufFile, GgufFile) = (
        gguf::read_path(herd, opts).unwrap(),
        gguf::read_path(reference, opts).unwrap(),
    );
    let names = |g: &GgufFile| {
        g.tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ggml_type))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&h),
        names(&r),
        "tensor names, order, shapes and types"
    );
    let (hb, rb) = (
        std::fs::File::open(herd).unwrap(),
        std::fs::File::open(reference).unwrap(),
    );
    for (ht, rt) in h.tensors.iter().zip(&r.tensors) {
        let read = |f: &std::fs::File, g: &GgufFile, t: &gguf::TensorInfo| {
            use std::os::unix::fs::FileExt;
            let mut buf = vec![0u8; t.n_bytes as usize];
            f.read_exact_at(&mut buf, g.data_offset + t.offset).unwrap();
            buf
        };
        let (x, y) = (read(&hb, &h, ht), read(&rb, &r, rt));
        if x != y {
            let i = x.iter().zip(&y).position(|(a, b)| a != b).unwrap();
            panic!(
                "tensor {} differs first at byte {i} of {}",
                ht.name,
                x.len()
            );
        }
    }
    let kv = |g: &GgufFile| {
        g.kvs
            .iter()
            .filter(|(k, _)| !naming_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (hk, rk) = (kv(&h), kv(&r));
    let only = |a: &std::collections::BTreeMap<String, gguf::Value>,
                b: &std::collections::BTreeMap<String, gguf::Value>| {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(
        only(&hk, &rk).is_empty() && only(&rk, &hk).is_empty(),
        "keys only in herd: {:?}; only in the reference: {:?}",
        only(&hk, &rk),
        only(&rk, &hk)
    );
    for (k, v) in &hk {
        let short = |v: &gguf::Value| {
            let s = format!("{v:?}");
            s.chars().take(300).collect::<String>()
        };
        assert!(
            v == &rk[k],
            "{k}: herd {} vs reference {}",
            short(v),
            short(&rk[k])
        );
    }
    hk.len()
}

/// Greedy completion chunks (text + logprobs) from runner-llamacpp for `model`.
async fn greedy(model: &Path, prompt: &str) -> Vec<Json> {
    let exe = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("runner-llamacpp");
    assert!(
        exe.exists(),
        "{} missing: build the workspace binaries first (scripts/test does)",
        exe.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("runner.sock");
    let mut child = Command::new(&exe)
        .arg("--model")
        .arg(model)
        .arg("--socket")
        .arg(&socket)
        .args(["--threads", "1", "--ctx-size", "256"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = async {
        loop {
            if socket.exists() {
                let (st, body) = call(&socket, "GET", "/health", None).await;
                let h: Json = serde_json::from_slice(&body).unwrap_or_default();
                if st == 200 && h["status"] == "ready" {
                    break;
                }
                assert!(h["status"] != "failed", "load failed: {h}");
            }
            assert!(Instant::now() < deadline, "runner did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let req = json!({"prompt": prompt, "num_predict": 12, "sampling": {"temperature": 0.0},
            "logprobs": true, "top_logprobs": 3});
        let (st, body) = call(&socket, "POST", "/completion", Some(req)).await;
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
        body.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<Json>(l).unwrap())
            // Timings differ run to run; tokens, reasons and counts must not.
            .map(|mut c| {
                if let Some(o) = c.as_object_mut() {
                    o.retain(|k, _| !k.contains("duration"));
                }
                c
            })
            .collect::<Vec<_>>()
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn call(socket: &Path, method: &str, path: &str, body: Option<Json>) -> (u16, Vec<u8>) {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let body = body
        .map(|b| serde_json::to_vec(&b).unwrap())
        .unwrap_or_default();
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "runner")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = s.send_request(req).await.unwrap();
    let st = resp.status().as_u16();
    (
        st,
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
}

async fn golden(arch: Arch, dtype: Dtype, shards: usize, prompt: &str) {
    let reference = reference();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    checkpoint_shards(&model, arch, dtype, 7, shards);
    let herd_out = dir.path().join("herd.gguf");
    let converted = convert(
        &Source::from_dir(&model).unwrap(),
        "tiny",
        &mut std::fs::File::create(&herd_out).unwrap(),
    )
    .unwrap();
    let ref_out = dir.path().join("reference.gguf");
    run_reference(&reference, &model, &ref_out);
    let keys = compare(&herd_out, &ref_out);
    assert_eq!(converted.bytes, std::fs::metadata(&herd_out).unwrap().len());
    let (a, b) = (
        greedy(&herd_out, prompt).await,
        greedy(&ref_out, prompt).await,
    );
    let tokens = a.iter().filter(|c| c.get("content").is_some()).count();
    assert!(tokens > 0, "no tokens generated: {a:?}");
    assert_eq!(a, b, "greedy output of the two files");
    eprintln!(
        "{arch:?}: {} tensors and {keys} key/values identical, {tokens} identical greedy tokens",
        converted.tensors
    );
}

/// One conversion at a time: the reference converter alone takes both cores of the CI machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn llama_smollm_bf16() {
    let _g = SERIAL.lock().await;
    golden(Arch::Llama, Dtype::BF16, 1, "The capital of France is").await;
}

#[tokio::test]
async fn qwen2_f32() {
    let _g = SERIAL.lock().await;
    golden(Arch::Qwen2, Dtype::F32, 1, "Once upon a time").await;
}

#[tokio::test]
async fn qwen3_bf16_three_shards() {
    let _g = SERIAL.lock().await;
    // Sharded with an index: the tensor order across files must match the reference's too.
    golden(Arch::Qwen3, Dtype::BF16, 3, "1 2 3 4").await;
}

#[tokio::test]
async fn gemma3_sentencepiece_f16() {
    let _g = SERIAL.lock().await;
    golden(Arch::Gemma3, Dtype::F16, 1, "the cat sat on the mat").await;
}
