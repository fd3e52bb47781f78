//! Issue 22 items 0 and 7 through the real `herd serve` binary and runner (SmolLM2): each
//! hostile template, sent as the `template` of /api/generate and as the TEMPLATE of an
//! /api/create, answers a 4xx error (or Go's own printf marker) quickly, and the server keeps
//! serving: /api/version and a normal generate still answer. Before the bounds, the printf width
//! aborted the process (allocation failure), the nesting overflowed its stack, the define chain
//! ran for ~49 s then aborted, and the nested range rendered for ~150 s.

mod quantize_support;

use std::time::{Duration, Instant};

use quantize_support::{native_runner, test_model, Serve};
use serde_json::json;

fn define_chain() -> String {
    let mut src = String::from(r#"{{define "t0"}}xxxxxxxxxxxxxxxx{{end}}"#);
    for i in 1..=34 {
        let p = i - 1;
        src.push_str(&format!(
            r#"{{{{define "t{i}"}}}}{{{{template "t{p}" .}}}}{{{{template "t{p}" .}}}}{{{{end}}}}"#
        ));
    }
    src.push_str(r#"{{template "t34" .}}{{ .Prompt }}"#);
    src
}

/// (name, template) pairs that must be refused with a 400.
fn refused() -> Vec<(&'static str, String)> {
    vec![
        (
            "printf widths past the output cap",
            r#"{{ printf "%9999999d%9999999d" 1 2 }}"#.into(),
        ),
        (
            "100k nested if",
            format!(
                "{}x{}",
                "{{if 1}}".repeat(100_000),
                "{{end}}".repeat(100_000)
            ),
        ),
        (
            "100k parentheses",
            format!("{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000)),
        ),
        ("34-level define chain", define_chain()),
        (
            "1e5 x 1e5 range",
            "{{range 100000}}{{range 100000}}{{end}}{{end}}{{ .Prompt }}".into(),
        ),
    ]
}

async fn alive(serve: &Serve) {
    let r = reqwest::get(format!("{}/api/version", serve.base))
        .await
        .expect("herd serve still answers /api/version");
    assert_eq!(r.status(), 200);
    let (st, body) = serve
        .post(
            "/api/generate",
            json!({"model": "smol", "prompt": "hi", "stream": false,
                   "options": {"num_predict": 1, "num_thread": 1}}),
        )
        .await;
    assert_eq!(st, 200, "normal generate after the attack: {body}");
}

#[tokio::test]
async fn hostile_templates_are_refused_and_the_server_survives() {
    let runner = native_runner().expect("runner");
    let gguf = test_model("SmolLM2-135M-Instruct.Q4_1.gguf").expect("SmolLM2");
    let serve = Serve::start(&runner, &[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Modelfile"),
        format!("FROM {}\n", gguf.display()),
    )
    .unwrap();
    let (ok, _, err) = serve.herd(&["create", "smol", "-f", "Modelfile"], dir.path());
    assert!(ok, "{err}");
    alive(&serve).await;

    // Go's fmt bounds: a literal width past 1e6 prints %!(NOVERB), a `*` width %!(BADWIDTH).
    for t in [
        r#"{{ printf "%0100000000000d" 1 }}"#,
        r#"{{ printf "%*d" 100000000000 1 }}"#,
    ] {
        let (st, body) = serve
            .post(
                "/api/generate",
                json!({"model": "smol", "prompt": "hi", "template": t, "stream": false,
                       "options": {"num_predict": 1, "num_thread": 1}}),
            )
            .await;
        assert_eq!(st, 200, "{t}: {body}");
        alive(&serve).await;
    }

    for (name, t) in refused() {
        let t0 = Instant::now();
        let (st, body) = serve
            .post(
                "/api/generate",
                json!({"model": "smol", "prompt": "hi", "template": t, "stream": false,
                       "options": {"num_predict": 1, "num_thread": 1}}),
            )
            .await;
        let took = t0.elapsed();
        assert_eq!(st, 400, "{name} via generate: {body}");
        assert!(
            body.contains("\"error\"") && body.contains("template"),
            "{name}: {body}"
        );
        // Debug build on a shared 2-core box; a release build answers in milliseconds.
        assert!(took < Duration::from_secs(5), "{name} took {took:?}");
        eprintln!("{name}: generate answered {st} in {took:?}");
        alive(&serve).await;

        let t0 = Instant::now();
        let (st, body) = serve
            .post(
                "/api/create",
                json!({"model": "evil", "from": "smol", "template": t, "stream": false}),
            )
            .await;
        assert_eq!(st, 400, "{name} via create: {body}");
        assert!(body.contains("template error"), "{name}: {body}");
        eprintln!("{name}: create answered {st} in {:?}", t0.elapsed());
        alive(&serve).await;
    }
    let r = reqwest::get(format!("{}/api/tags", serve.base))
        .await
        .unwrap();
    let tags = r.text().await.unwrap();
    assert!(
        !tags.contains("evil"),
        "a refused create stored a model: {tags}"
    );
}
