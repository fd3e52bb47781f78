//! issue 18's end-to-end path through the real `herd` binary and the real runner-mlx:
//! `herd create smol-mlx --experimental` of scripts/make-mlx-test-model's SmolLM2 checkpoint,
//! then `/api/chat`, `/v1/chat/completions` (stream and not), `format` with a JSON schema
//! (valid 10/10), and kill -9 of runner-mlx mid-stream ending the stream with an error line,
//! the next request reloading. Also a tiny random-weight gemma3 text checkpoint written here
//! (runner-mlx's tests/support/tiny_model.rs), created the same way, whose greedy
//! `/api/generate` text must be the f64 reference's greedy continuation (its prompt is longer
//! than the sliding window), and the same checkpoint created without `--experimental`
//! (converted to GGUF, served by runner-llamacpp) must answer the same. Needs `cargo build -p server --bin herd -p runner-mlx --bin
//! runner-mlx` (or HERD_MLX_RUNNER naming a runner-mlx) and the checkpoint.

mod herd_proc;
mod mlx_support;
#[path = "../../runner-mlx/tests/support/tiny_model.rs"]
mod tiny_model;

use std::path::PathBuf;

use futures_util::StreamExt;
use herd_proc::{HerdServe, HERD};
use serde_json::{json, Value};

fn runner_mlx() -> PathBuf {
    if let Some(p) = std::env::var_os("HERD_MLX_RUNNER") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("runner-mlx");
    assert!(
        p.exists(),
        "{} not found: run `cargo build -p runner-mlx --bin runner-mlx`",
        p.display()
    );
    p
}

/// Pids of the server's runner-mlx children.
fn runners(herd: &HerdServe) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let ppid: u32 = rest
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == herd.pid() && comm.contains("runner-mlx") && !rest.starts_with('Z') {
            out.push(pid);
        }
    }
    out
}

/// `herd create NAME --experimental` of the checkpoint directory `dir`.
fn create(herd: &HerdServe, name: &str, dir: &std::path::Path) {
    create_as(herd, name, dir, true)
}

/// `herd create NAME` of `dir` (its Modelfile beside it), `--experimental` (MLX) or not (GGUF).
fn create_as(herd: &HerdServe, name: &str, dir: &std::path::Path, experimental: bool) {
    let mf = dir.with_extension("Modelfile");
    std::fs::write(&mf, format!("FROM {}\n", dir.display())).unwrap();
    let mut args = vec!["create", name];
    if experimental {
        args.push("--experimental");
    }
    let out = std::process::Command::new(HERD)
        .args(args)
        .arg("-f")
        .arg(&mf)
        .env("OLLAMA_HOST", &herd.addr)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "herd create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn chat(http: &reqwest::Client, herd: &HerdServe, body: Value) -> Value {
    let r = http
        .post(herd.url("/api/chat"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}\n{}", herd.log_text());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smol_mlx_serves_chat_openai_schema_and_recovers_from_a_killed_runner() {
    let ckpt = mlx_support::smollm2_mlx();
    let work = tempfile::tempdir().unwrap();
    let models = work.path().join("models");
    let runner = runner_mlx();
    let herd = HerdServe::start(&models, &[("HERD_MLX_RUNNER", runner.to_str().unwrap())]);
    create(&herd, "smol-mlx", &ckpt);
    // `herd show` and `herd list` report the format's facts.
    let cli = |args: &[&str]| {
        let o = std::process::Command::new(HERD)
            .args(args)
            .env("OLLAMA_HOST", &herd.addr)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let shown = cli(&["show", "smol-mlx"]);
    for want in [
        "architecture",
        "llama",
        "134.52M",
        "int4",
        "completion",
        "8192",
    ] {
        assert!(shown.contains(want), "herd show lacks {want:?}:\n{shown}");
    }
    assert!(cli(&["list"]).contains("smol-mlx:latest"));

    let http = reqwest::Client::new();
    let ask = json!([{"role": "user", "content": "What is the capital of France?"}]);

    let v = chat(
        &http,
        &herd,
        json!({"model": "smol-mlx", "messages": ask, "stream": false,
        "options": {"temperature": 0, "num_predict": 24}}),
    )
    .await;
    let content = v["message"]["content"].as_str().unwrap();
    assert!(!content.trim().is_empty(), "{v}");
    assert!(v["eval_count"].as_u64().unwrap() > 0, "{v}");

    // OpenAI, not streamed then streamed: the same greedy text.
    let body = json!({"model": "smol-mlx", "messages": ask, "temperature": 0, "max_tokens": 24});
    let r: Value = http
        .post(herd.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let plain = r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(plain, content, "{r}");
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let text = http
        .post(herd.url("/v1/chat/completions"))
        .json(&sbody)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut streamed = String::new();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("data: ")).collect();
    assert_eq!(lines.last().copied(), Some("data: [DONE]"), "{text}");
    for l in &lines[..lines.len() - 1] {
        let c: Value = serde_json::from_str(&l[6..]).unwrap();
        streamed.push_str(
            c["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default(),
        );
    }
    assert_eq!(streamed, plain);

    // A JSON schema: 10 of 10 sampled answers parse and match it.
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"]});
    for seed in 0..10 {
        let v = chat(
            &http,
            &herd,
            json!({"model": "smol-mlx", "stream": false, "format": schema,
            "messages": [{"role": "user", "content": "Name a city and its population as JSON."}],
            "options": {"temperature": 0.8, "seed": seed, "num_predict": 96}}),
        )
        .await;
        let text = v["message"]["content"].as_str().unwrap();
        let j: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(
            j["city"].is_string() && j["population"].is_i64(),
            "seed {seed}: {j}"
        );
    }

    // kill -9 of the runner mid-stream: the stream ends with an error line; the next request
    // loads a fresh runner.
    let r = http
        .post(herd.url("/api/chat"))
        .json(&json!({"model": "smol-mlx", "messages": ask, "options": {"num_predict": 400, "temperature": 0.7}}))
        .send()
        .await
        .unwrap();
    let mut body = r.bytes_stream();
    let mut seen = String::new();
    let mut killed = false;
    while let Some(chunk) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        if !killed && seen.lines().count() >= 2 {
            let pids = runners(&herd);
            assert_eq!(pids.len(), 1, "{pids:?}");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pids[0] as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            killed = true;
        }
    }
    let last: Value = serde_json::from_str(seen.lines().last().unwrap()).unwrap();
    assert!(
        last["error"].is_string(),
        "the stream ends with an error line: {last}"
    );
    let v = chat(
        &http,
        &herd,
        json!({"model": "smol-mlx", "messages": ask, "stream": false,
        "options": {"temperature": 0, "num_predict": 24}}),
    )
    .await;
    assert_eq!(
        v["message"]["content"], content,
        "the reloaded runner answers as before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_gemma3_text_checkpoint_generates_the_reference_greedy_text() {
    use tiny_model::*;
    let gemma = Gemma {
        // llama.cpp's gemma3: every 6th layer global, local base 10000, scale 1/sqrt(head_dim).
        window: 4,
        global_every: 6,
        local_theta: 10000.0,
        rope_factor: 2.0,
        query_pre_attn_scalar: 32.0,
        attn_softcap: None,
        final_softcap: None,
    };
    let c = Cfg {
        qwen3: false,
        gemma: Some(gemma),
        hidden: 64,
        heads: 4,
        kv: 2,
        head_dim: 32,
        ff: 128,
        layers: 6,
        vocab: ASCII_VOCAB,
        theta: 1_000_000.0,
        eps: 1e-6,
        quant: None,
    };
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("tiny-gemma3");
    std::fs::create_dir_all(&dir).unwrap();
    let mut t = weights(&c);
    let file = file_tensors(&c, &mut t);
    write_checkpoint(&dir, &c, &file, &ascii_tokenizer());

    let prompt = "The quick brown fox";
    let ids = ascii_ids(prompt);
    let stop = [ASCII_EOS as i32];
    let greedy = |c: &Cfg| reference_greedy(c, &t, &ids, 12, &stop);
    let want = greedy(&c);
    let text: String = want
        .iter()
        .map(|&id| ascii_piece(id as usize).expect("the reference emits no <bos>"))
        .collect();
    assert!(!text.is_empty());
    // The window decides the text: without it the greedy tokens differ.
    let wide = Cfg {
        gemma: Some(Gemma {
            window: 64,
            ..gemma
        }),
        ..c
    };
    assert_ne!(
        greedy(&wide),
        want,
        "the sliding window changes the greedy text"
    );

    let herd = HerdServe::start(
        &work.path().join("models"),
        &[("HERD_MLX_RUNNER", runner_mlx().to_str().unwrap())],
    );
    create(&herd, "tiny-gemma3", &dir);
    let generate = |model: &str| {
        let body = json!({"model": model, "prompt": prompt, "raw": true, "stream": false,
            "options": {"temperature": 0, "num_predict": 12}});
        let (http, url) = (reqwest::Client::new(), herd.url("/api/generate"));
        async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap();
            (status, v)
        }
    };
    let (status, v) = generate("tiny-gemma3").await;
    assert_eq!(status, 200, "{v}\n{}", herd.log_text());
    assert_eq!(v["response"], text, "runner-mlx: {v}");
    assert_eq!(v["prompt_eval_count"], ids.len(), "{v}");

    // The same checkpoint converted to GGUF (F16 weights: the values are on the f16 grid) on
    // llama.cpp's gemma3 graph.
    create_as(&herd, "tiny-gemma3-gguf", &dir, false);
    let (status, v) = generate("tiny-gemma3-gguf").await;
    assert_eq!(status, 200, "{v}\n{}", herd.log_text());
    assert_eq!(v["response"], text, "runner-llamacpp: {v}");
}

/// `HERD_DRAFT_NGRAM` reaches runner-mlx (and `OLLAMA_MLX_DRAFT_UNDER_GRAMMAR` its switch for
/// constrained requests): a greedy copy and a JSON-schema answer through `/api/generate` are
/// what a server without drafting answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngram_drafting_reaches_runner_mlx_and_leaves_the_answers_unchanged() {
    let ckpt = mlx_support::smollm2_mlx();
    let runner = runner_mlx();
    let passage = "The old lighthouse stood on the northern cliff for two hundred years. Every \
                   night its keeper climbed one hundred and twelve steps to light the lamp.";
    let copy = format!(
        "<|im_start|>user\nRepeat this text exactly:\n{passage}<|im_end|>\n\
         <|im_start|>assistant\nThe old lighthouse"
    );
    let schema = json!({"type": "object", "properties": {"steps": {"type": "integer"}},
                        "required": ["steps"]});
    let bodies = [
        json!({"model": "smol-mlx", "raw": true, "prompt": copy, "stream": false,
               "options": {"temperature": 0, "num_predict": 32}}),
        json!({"model": "smol-mlx", "prompt": format!("{passage} How many steps?"),
               "format": schema, "stream": false,
               "options": {"temperature": 0, "num_predict": 24}}),
    ];
    let mut answers = Vec::new();
    let mut flags = Vec::new();
    for drafting in [false, true] {
        let work = tempfile::tempdir().unwrap();
        let mut env = vec![("HERD_MLX_RUNNER", runner.to_str().unwrap())];
        if drafting {
            env.extend([
                ("HERD_DRAFT_NGRAM", "8"),
                ("OLLAMA_MLX_DRAFT_UNDER_GRAMMAR", "1"),
            ]);
        }
        let herd = HerdServe::start(&work.path().join("models"), &env);
        create(&herd, "smol-mlx", &ckpt);
        let http = reqwest::Client::new();
        let mut got = Vec::new();
        for body in &bodies {
            let r = http
                .post(herd.url("/api/generate"))
                .json(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            got.push((v["response"].clone(), v["eval_count"].clone()));
        }
        answers.push(got);
        let pids = runners(&herd);
        assert_eq!(pids.len(), 1, "one runner-mlx");
        let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", pids[0])).unwrap();
        let args: Vec<&str> = cmdline.split('\0').collect();
        flags.push((
            args.windows(2).any(|w| w == ["--draft-ngram", "8"]),
            args.contains(&"--draft-under-grammar"),
        ));
    }
    assert_eq!(flags, [(false, false), (true, true)]);
    assert_eq!(answers[0], answers[1], "drafting changed an answer");
    let copied = answers[0][0].0.as_str().unwrap();
    assert!(
        copied.starts_with(" stood on the northern cliff"),
        "{copied}"
    );
    let v: Value = serde_json::from_str(answers[0][1].0.as_str().unwrap()).unwrap();
    assert!(v["steps"].is_i64(), "{v}");
}
