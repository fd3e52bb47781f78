//! The scheduler's runner choice on the real `herd serve`: a safetensors model is served by
//! `HERD_MLX_RUNNER` (here a recording wrapper around tests/fake-runner in echo mode), started
//! with the runner-llamacpp flags and `--model DIR`, where DIR is a private directory holding the
//! json layers by name and every tensor blob as `tensors/NNNNN.safetensors` (symlinks into the
//! blob store); the prompt is the model's Jinja chat template from tokenizer_config.json.
//! Needs `cargo build -p fake-runner --bin fake-runner` and `cargo build -p server --bin herd`.

mod herd_proc;
mod mlx_support;

use std::path::PathBuf;

use herd_proc::HerdServe;
use serde_json::{json, Value};

fn fake_runner() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("fake-runner");
    assert!(
        p.exists(),
        "{} not found: run `cargo build -p fake-runner` first",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_safetensors_model_runs_on_the_mlx_runner_with_a_prepared_dir() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("mlx");
    let wrapper = work.path().join("runner-mlx");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {log}.args\nm=''; prev=''\nfor a in \"$@\"; do [ \"$prev\" = --model ] && m=\"$a\"; prev=\"$a\"; done\n(cd \"$m\" && find . | sort) > {log}.files\nfor f in \"$m\"/tensors/* \"$m\"/config.json; do readlink \"$f\"; done > {log}.links\nexec {fake} \"$@\" --echo\n",
            log = log.display(),
            fake = fake_runner().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let models = work.path().join("models");
    let src = work.path().join("ckpt");
    mlx_support::write_tiny_llama(&src);
    let herd = HerdServe::start(
        &models,
        &[
            ("HERD_RUNNER", "/nonexistent/runner-llamacpp"),
            ("HERD_MLX_RUNNER", wrapper.to_str().unwrap()),
        ],
    );
    let http = reqwest::Client::new();
    let paths = server::cli::create::files_for_model(&src).unwrap();
    let mut files = serde_json::Map::new();
    for (p, key) in paths.iter().zip(server::cli::create::file_keys(&paths)) {
        let bytes = std::fs::read(p).unwrap();
        let digest = server::store::Digest::of_bytes(&bytes).to_string();
        let r = http
            .post(herd.url(&format!("/api/blobs/{digest}")))
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        files.insert(key, json!(digest));
    }
    let r = http
        .post(herd.url("/api/create"))
        .json(&json!({"model": "tiny-mlx", "files": files, "experimental": true, "stream": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let r = http
        .post(herd.url("/api/chat"))
        .json(&json!({"model": "tiny-mlx", "stream": false, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}\n{}", herd.log_text());
    // The echo is the prompt the server rendered with tokenizer_config.json's template.
    let content = v["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("<|im_start|>user\nhi"), "{content:?}");

    let args = std::fs::read_to_string(log.with_extension("args")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    let i = args.iter().position(|a| *a == "--model").expect("--model");
    let dir = PathBuf::from(args[i + 1]);
    assert!(
        args.contains(&"--socket") && args.contains(&"--ctx-size"),
        "{args:?}"
    );
    assert!(
        !dir.starts_with(&models),
        "DIR is private, not in the store: {}",
        dir.display()
    );
    let listing = std::fs::read_to_string(log.with_extension("files")).unwrap();
    let n = mlx_support::tiny_llama_tensors().len();
    let mut want = vec![".".to_owned(), "./config.json".into(), "./tensors".into()];
    want.extend((0..n).map(|i| format!("./tensors/{i:05}.safetensors")));
    want.extend(["./tokenizer.json".into(), "./tokenizer_config.json".into()]);
    want.sort();
    assert_eq!(listing.lines().collect::<Vec<_>>(), want);
    // Every entry is a link to a blob of the store.
    let links = std::fs::read_to_string(log.with_extension("links")).unwrap();
    assert_eq!(links.lines().count(), n + 1);
    for l in links.lines() {
        assert!(PathBuf::from(l).starts_with(models.join("blobs")), "{l}");
        assert!(l.contains("sha256-"), "{l}");
    }

    let ps: Value = http
        .get(herd.url("/api/ps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ps["models"][0]["name"], "tiny-mlx:latest", "{ps}");
    assert_eq!(ps["models"][0]["details"]["format"], "safetensors", "{ps}");
}
