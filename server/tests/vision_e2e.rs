//! Images through the projector on the GGUF engine (issue 17), end to end through the real
//! `herd serve` binary and runner: gemma3-270m with a generated tiny gemma3 projector
//! (`vision_support`). An image costs exactly the projector's tokens in prompt_eval_count, a
//! repeated image is served from the slot's prefix cache, /v1 data URIs work, a text-only
//! model answers Ollama's 400, and bad images are 400s that leave the server serving.

mod quantize_support;
mod vision_support;

use base64::Engine as _;
use quantize_support::{native_runner, test_model, Serve};
use serde_json::{json, Value};
use vision_support::{png, tiny_gemma3_mmproj, IMAGE_TOKENS};

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn opts() -> Value {
    // Sampling options only: /v1 requests must land on the same runner (load options equal).
    json!({"temperature": 0, "num_predict": 3})
}

async fn post(serve: &Serve, path: &str, body: Value) -> (u16, Value) {
    let (st, body) = serve.post(path, body).await;
    (
        st,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn setup() -> Option<(Serve, tempfile::TempDir)> {
    let runner = native_runner()?;
    let gemma = test_model(GEMMA)?;
    let serve = Serve::start(&runner, &[("OLLAMA_DEBUG", "1")]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("mmproj.gguf"), tiny_gemma3_mmproj(3)).unwrap();
    for (name, modelfile) in [
        (
            "vis",
            format!("FROM {}\nFROM ./mmproj.gguf\n", gemma.display()),
        ),
        ("plain", format!("FROM {}\n", gemma.display())),
    ] {
        std::fs::write(p.join(format!("{name}.Modelfile")), modelfile).unwrap();
        let (ok, _, err) = serve.herd(&["create", name, "-f", &format!("{name}.Modelfile")], p);
        assert!(ok, "{name}: {err}");
    }
    Some((serve, dir))
}

#[tokio::test]
async fn images_reach_the_projector_and_cost_its_tokens() {
    let Some((serve, _dir)) = setup() else { return };
    let img = b64(&png(64, 48, 1));

    let (st, show) = post(&serve, "/api/show", json!({"model": "vis"})).await;
    assert_eq!(st, 200, "{show}");
    let caps = show["capabilities"].as_array().unwrap();
    assert!(caps.contains(&json!("vision")), "{caps:?}");
    // /api/tags lists what /api/show computes.
    let tags: Value = reqwest::get(format!("{}/api/tags", serve.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vis:latest")
        .unwrap_or_else(|| panic!("vis in /api/tags: {tags}"));
    assert_eq!(&listed["capabilities"], &show["capabilities"], "{tags}");
    assert_eq!(
        show["projector_info"]["clip.projector_type"], "gemma3",
        "{show}"
    );

    let (st, with) = post(
        &serve,
        "/api/chat",
        json!({"model": "vis", "stream": false, "options": opts(),
               "messages": [{"role": "user", "content": "What is this?", "images": [img]}]}),
    )
    .await;
    assert_eq!(st, 200, "{with}");

    // Second turn repeating the conversation: the whole first turn, image included, comes from
    // the slot's prefix cache, so the image is not encoded again. (The native API reports the
    // whole prompt in prompt_eval_count, cached part included, as Ollama 0.30 does; the
    // runner's debug line says how much of it came from the cache.)
    let answer = with["message"]["content"].as_str().unwrap().to_owned();
    let with_n = with["prompt_eval_count"].as_u64().unwrap();
    let (st, turn2) = post(
        &serve,
        "/api/chat",
        json!({"model": "vis", "stream": false, "options": opts(),
               "messages": [{"role": "user", "content": "What is this?", "images": [img]},
                            {"role": "assistant", "content": answer},
                            {"role": "user", "content": "And now?"}]}),
    )
    .await;
    assert_eq!(st, 200, "{turn2}");
    let n2 = turn2["prompt_eval_count"].as_u64().unwrap();
    let cached: Vec<(u64, u64)> = serve
        .log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| {
            const TAG: &str = "runner-llamacpp: slot ";
            let rest = &l[l.find(TAG)? + TAG.len()..];
            let rest = &rest[rest.find(": ")? + 2..];
            let total: u64 = rest.split(' ').next()?.parse().ok()?;
            let from = rest.split(", ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((total, from))
        })
        .collect();
    assert_eq!(cached.len(), 2, "{cached:?}");
    assert_eq!(cached[0], (with_n, 0), "the first turn is evaluated whole");
    assert_eq!(cached[1].0, n2);
    assert!(
        cached[1].1 >= with_n,
        "the second turn re-evaluated part of the first ({with_n} tokens, image included): {cached:?}"
    );

    // The same first turn with the image's wrapping tokens typed as text instead, on the same
    // GGUF without the projector (its own runner, so nothing is cached): the difference is the
    // projector's image tokens, exactly.
    let (st, text) = post(
        &serve,
        "/api/chat",
        json!({"model": "plain", "stream": false, "options": opts(),
               "messages": [{"role": "user",
                             "content": "<start_of_image><end_of_image>What is this?"}]}),
    )
    .await;
    assert_eq!(st, 200, "{text}");
    let text_n = text["prompt_eval_count"].as_u64().unwrap();
    assert_eq!(
        with_n,
        text_n + IMAGE_TOKENS as u64,
        "image turn {with_n}, text turn {text_n}"
    );

    // /v1 with a data URI (both accepted prefixes).
    for prefix in ["data:image/png;base64,", "data:;base64,"] {
        let (st, v1) = post(
            &serve,
            "/v1/chat/completions",
            json!({"model": "vis", "max_tokens": 2, "temperature": 0,
                   "messages": [{"role": "user", "content": [
                       {"type": "text", "text": "Describe"},
                       {"type": "image_url", "image_url": {"url": format!("{prefix}{img}")}}]}]}),
        )
        .await;
        assert_eq!(st, 200, "{prefix}: {v1}");
        assert!(v1["usage"]["prompt_tokens"].as_u64().unwrap() > IMAGE_TOKENS as u64);
    }
    openai_client_sends_a_data_uri(&serve, &img);
    // Anthropic base64 image blocks.
    let (st, msg) = post(
        &serve,
        "/v1/messages",
        json!({"model": "vis", "max_tokens": 2, "temperature": 0,
               "messages": [{"role": "user", "content": [
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": img}},
                   {"type": "text", "text": "Describe"}]}]}),
    )
    .await;
    assert_eq!(st, 200, "{msg}");
    assert!(
        msg["usage"]["input_tokens"].as_u64().unwrap() > IMAGE_TOKENS as u64,
        "{msg}"
    );
    // `herd run` sends an image named by path in the prompt, as `ollama run` does for a
    // model that sees (a copy that stops after 2 tokens: the random model never would).
    let (st, made) = post(
        &serve,
        "/api/create",
        json!({"model": "vis2", "from": "vis", "parameters": {"num_predict": 2}, "stream": false}),
    )
    .await;
    assert_eq!(st, 200, "{made}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cat photo.png");
    std::fs::write(&path, png(64, 48, 1)).unwrap();
    let escaped = path.display().to_string().replace(' ', "\\ ");
    let (ok, _, err) = serve.herd(
        &["run", "vis2", &format!("describe {escaped}"), "--verbose"],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("Added image '{}'", path.display())),
        "{err}"
    );
    let evaluated: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("prompt eval count:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(evaluated > IMAGE_TOKENS as u64, "the image was sent: {err}");
    let (st, url) = post(
        &serve,
        "/v1/chat/completions",
        json!({"model": "vis", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://example.com/x.png"}}]}]}),
    )
    .await;
    assert_eq!(st, 400, "{url}");

    // A text-only model: Ollama's 400.
    let (st, plain) = post(
        &serve,
        "/api/generate",
        json!({"model": "plain", "prompt": "hi", "images": [img], "stream": false}),
    )
    .await;
    assert_eq!(st, 400, "{plain}");
    assert_eq!(
        plain["error"],
        "this model is missing data required for image input"
    );
}

/// The official openai-python client (installed by `scripts/test-clients` into the cache, keyed
/// by tests/clients/requirements.txt) sends a data-URI image to /v1/chat/completions.
fn openai_client_sends_a_data_uri(serve: &Serve, img: &str) {
    use sha2::Digest;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let req = std::fs::read(root.join("tests/clients/requirements.txt")).unwrap();
    let key = &hex::encode(sha2::Sha256::digest(&req))[..16];
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let cache = std::env::var_os("HERD_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/herd"));
    let py = cache.join("pyclients").join(key);
    if !py.join(".complete").exists() {
        // The same install (and cache layout) as scripts/test-clients, which may not have run
        // yet in this `cargo test`.
        let tmp = py.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        let ok = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .arg("--target")
            .arg(&tmp)
            .arg("-r")
            .arg(root.join("tests/clients/requirements.txt"))
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            std::fs::write(tmp.join(".complete"), b"").unwrap();
            let _ = std::fs::remove_dir_all(&py);
            std::fs::rename(&tmp, &py).unwrap();
        }
    }
    if !py.join(".complete").exists() {
        quantize_support::prereq::missing(format!(
            "the official Python clients at {} (scripts/test-clients installs them)",
            py.display()
        ));
        return;
    }
    let script = r#"
import os, sys, openai
ai = openai.OpenAI(base_url=os.environ["URL"] + "/v1", api_key="herd", max_retries=0)
r = ai.chat.completions.create(model="vis", max_tokens=2, temperature=0, messages=[
    {"role": "user", "content": [
        {"type": "text", "text": "Describe"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + os.environ["IMG"]}}]}])
print(r.usage.prompt_tokens)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .env("PYTHONPATH", &py)
        .env("URL", &serve.base)
        .env("IMG", img)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "openai client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n > IMAGE_TOKENS as u64, "prompt_tokens {n}");
}

/// A PNG claiming `w`×`h` (signature and an IHDR with a valid CRC) whose pixel data is a
/// tiny zlib stream of zeros: the shape of a decompression bomb, a few bytes on the wire.
fn png_header(w: u32, h: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = 0xffff_ffffu32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let body: Vec<u8> = kind.iter().chain(data).copied().collect();
        out.extend(&body);
        out.extend(crc32(&body).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]); // 8-bit RGB
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[tokio::test]
async fn bad_images_are_400_and_the_server_keeps_serving() {
    let Some((serve, _dir)) = setup() else { return };
    let good = png(32, 32, 2);
    let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;".to_vec();
    let svg = br#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>"#.to_vec();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "truncated png",
            b64(&good[..good.len() / 2]),
            "corrupt or truncated",
        ),
        (
            "corrupt jpeg",
            b64(b"\xff\xd8\xff\xe0garbage garbage"),
            "corrupt or truncated",
        ),
        ("zero size", b64(&png_header(0, 0)), "corrupt or truncated"),
        (
            "20000x20000 bomb",
            b64(&png_header(20000, 20000)),
            "larger than",
        ),
        ("gif", b64(&gif), "not supported"),
        ("svg", b64(&svg), "unknown image format"),
        ("truncated base64", b64(&good)[..41].to_owned(), "base64"),
    ];
    for (what, data, want) in cases {
        let (st, r) = post(
            &serve,
            "/api/generate",
            json!({"model": "vis", "prompt": "hi", "images": [data], "stream": false}),
        )
        .await;
        assert_eq!(st, 400, "{what}: {r}");
        let msg = r["error"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{what}: {msg}");
    }
    // The bomb was refused from its header: the server's peak RSS stays far below the 1.2 GB
    // its pixels would take.
    let status = std::fs::read_to_string(format!("/proc/{}/status", serve.pid())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    eprintln!(
        "herd serve peak RSS after the bad images: {} MiB",
        hwm_kb / 1024
    );
    assert!(hwm_kb < 300 * 1024, "peak RSS {hwm_kb} kB");
    let (st, ok) = post(
        &serve,
        "/api/generate",
        json!({"model": "vis", "prompt": "hi", "images": [b64(&good)], "stream": false,
               "options": opts()}),
    )
    .await;
    assert_eq!(st, 200, "{ok}");
    let (st, budget) = post(
        &serve,
        "/api/generate",
        json!({"model": "vis", "prompt": "hi", "images": [b64(&good)], "stream": false,
               "options": {"image_max_tokens": 280}}),
    )
    .await;
    assert_eq!(st, 400, "{budget}");
    assert!(budget["error"]
        .as_str()
        .unwrap()
        .contains("image_max_tokens"));
}

/// Bench (scripts/bench vision): per cold image, the projector's tokens and the image's share
/// of prompt evaluation (prompt_eval_duration with the image − the same turn with its
/// wrapping tokens as text, on the model without the projector). One run; CPU.
#[tokio::test]
#[ignore]
async fn bench_image_encode() {
    let Some((serve, _dir)) = setup() else { return };
    let n: usize = std::env::var("HERD_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let chat = |model: &str, content: &str, images: Vec<String>| {
        json!({"model": model, "stream": false, "options": {"temperature": 0, "num_predict": 1},
               "messages": [{"role": "user", "content": content, "images": images}]})
    };
    // Warm both runners.
    post(&serve, "/api/chat", chat("plain", "hi", vec![])).await;
    post(&serve, "/api/chat", chat("vis", "hi", vec![])).await;
    let mut ms = Vec::new();
    for i in 0..n {
        // A new image each time (nothing cached), a different text so the text turn is cold too.
        let img = b64(&png(640, 480, 100 + i as u64));
        let q = format!("Question {i}: what is this?");
        let (_, with) = post(&serve, "/api/chat", chat("vis", &q, vec![img])).await;
        let text = format!("<start_of_image><end_of_image>{q}");
        let (_, without) = post(&serve, "/api/chat", chat("plain", &text, vec![])).await;
        let d = |v: &Value| v["prompt_eval_duration"].as_u64().unwrap_or(0) as f64 / 1e6;
        let tokens = with["prompt_eval_count"].as_u64().unwrap_or(0)
            - without["prompt_eval_count"].as_u64().unwrap_or(0);
        assert_eq!(tokens, IMAGE_TOKENS as u64);
        ms.push(d(&with) - d(&without));
    }
    ms.sort_by(f64::total_cmp);
    // The runner's own split of each image's time (its debug line).
    for l in serve.log.lock().unwrap().iter() {
        if let Some(at) = l.find("image of ") {
            println!(
                "\nvision: runner {}",
                l[at..].split(" stream=").next().unwrap_or("")
            );
        }
    }
    println!(
        "\nvision: tiny gemma3 projector, 640x480 PNG, {IMAGE_TOKENS} tokens per image (fixed \
         resolution; budgets: vision_budget): image prompt time p50 {:.1} ms, max {:.1} ms over {n}",
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}
