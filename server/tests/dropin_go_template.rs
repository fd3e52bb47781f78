//! `OLLAMA_GO_TEMPLATE` (Ollama's envconfig.GoTemplate): which template renders a model that
//! has both a TEMPLATE layer and a GGUF `tokenizer.chat_template`. Unset, the TEMPLATE renders
//! unless the GGUF template offers more; true, the TEMPLATE always renders; false, the GGUF
//! template renders, and the TEMPLATE's capabilities (here: tools) go with it; then Ollama's
//! integration checks of that mode (generate renders as chat; a `context` renders ahead). The real
//! `herd serve` binary and runner on SmolLM2, whose GGUF carries a ChatML Jinja template
//! without tools.

mod quantize_support;

use quantize_support::{native_runner, test_model, Serve};
use serde_json::{json, Value};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// A TEMPLATE with tools, so that its capabilities differ from the GGUF template's.
const GO: &str = "{{ if .Tools }}tools {{ end }}GO: {{ .Prompt }}";

/// `herd serve` with `env`, and two models from SmolLM2: `plain` (no TEMPLATE layer) and
/// `go` (the TEMPLATE above).
fn serve(env: &[(&str, &str)]) -> Serve {
    let runner = native_runner().expect("runner");
    let gguf = test_model(SMOL).expect("SmolLM2");
    let serve = Serve::start(&runner, env);
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("plain", format!("FROM {}\n", gguf.display())),
        (
            "go",
            format!("FROM {}\nTEMPLATE \"\"\"{GO}\"\"\"\n", gguf.display()),
        ),
    ];
    for (name, modelfile) in files {
        std::fs::write(dir.path().join("Modelfile"), modelfile).unwrap();
        let (ok, _, err) = serve.herd(&["create", name, "-f", "Modelfile"], dir.path());
        assert!(ok, "{err}");
    }
    serve
}

async fn json_post(serve: &Serve, path: &str, body: Value) -> Value {
    let (status, text) = serve.post(path, body).await;
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

async fn rendered(serve: &Serve, model: &str) -> String {
    let body = json!({"model": model, "prompt": "hello", "_debug_render_only": true});
    let r = json_post(serve, "/api/generate", body).await;
    r["_debug_info"]["rendered_template"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn show(serve: &Serve, model: &str) -> (String, Vec<String>) {
    let r = json_post(serve, "/api/show", json!({"model": model})).await;
    let caps = r["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    (r["template"].as_str().unwrap().to_owned(), caps)
}

/// Ollama's integration checks of a GGUF-template model (generate_jinja_test.go): /api/generate
/// renders a prompt as /api/chat renders the same user message, and a `context` from an
/// earlier reply renders as its text ahead of the new prompt.
async fn generate_renders_as_chat_and_after_its_context(serve: &Serve) {
    let prompt = "Reply with one short sentence about blue skies.";
    let gen = json_post(
        serve,
        "/api/generate",
        json!({"model": "go", "prompt": prompt, "_debug_render_only": true}),
    )
    .await;
    let chat = json_post(
        serve,
        "/api/chat",
        json!({"model": "go", "messages": [{"role": "user", "content": prompt}],
               "_debug_render_only": true}),
    )
    .await;
    assert_eq!(gen["_debug_info"], chat["_debug_info"]);
    let first = json_post(
        serve,
        "/api/generate",
        json!({"model": "go", "prompt": "Say hello.", "stream": false,
               "options": {"num_predict": 1, "temperature": 0, "num_thread": 1}}),
    )
    .await;
    let context = first["context"].clone();
    assert!(!context.as_array().unwrap().is_empty(), "{first}");
    let next = json!({"model": "go", "prompt": "Say goodbye.", "_debug_render_only": true});
    let without = json_post(serve, "/api/generate", next.clone()).await;
    let mut next = next;
    next["context"] = context;
    let with = json_post(serve, "/api/generate", next).await;
    let (with, without) = (
        with["_debug_info"]["rendered_template"].as_str().unwrap(),
        without["_debug_info"]["rendered_template"]
            .as_str()
            .unwrap(),
    );
    assert_ne!(with, without);
    assert!(with.ends_with(without), "{with:?} / {without:?}");
    assert!(with.starts_with("<|im_start|>system"), "{with:?}");
}

/// A greedy chat reply: the same text from both models means the same prompt rendered.
async fn chat(serve: &Serve, model: &str) -> String {
    let body = json!({"model": model, "stream": false,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "options": {"temperature": 0, "seed": 1, "num_predict": 8, "num_thread": 1}});
    let r = json_post(serve, "/api/chat", body).await;
    r["message"]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn ollama_go_template_picks_the_template_that_renders() {
    for (env, go_renders) in [(None, true), (Some("1"), true), (Some("0"), false)] {
        let vars: Vec<(&str, &str)> = env.map(|v| ("OLLAMA_GO_TEMPLATE", v)).into_iter().collect();
        let serve = serve(&vars);
        let (plain_template, plain_caps) = show(&serve, "plain").await;
        assert!(plain_template.contains("<|im_start|>"), "{plain_template}");
        assert!(!plain_caps.contains(&"tools".to_owned()), "{plain_caps:?}");
        let (template, caps) = show(&serve, "go").await;
        let render = rendered(&serve, "go").await;
        if go_renders {
            assert_eq!(render, "GO: hello", "{env:?}");
            assert_eq!(template, GO, "{env:?}");
            assert!(caps.contains(&"tools".to_owned()), "{env:?} {caps:?}");
        } else {
            // The GGUF's ChatML template renders, exactly as for the model without a TEMPLATE.
            assert_eq!(render, rendered(&serve, "plain").await, "{env:?}");
            assert!(
                render.contains("<|im_start|>user\nhello<|im_end|>"),
                "{render}"
            );
            assert_eq!(template, plain_template, "{env:?}");
            assert_eq!(caps, plain_caps, "{env:?}");
            // The TEMPLATE's tools went with it: a request with tools is refused, as Ollama
            // refuses a model without the capability.
            let (status, text) = serve
                .post(
                    "/api/chat",
                    json!({"model": "go", "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"type": "function", "function": {"name": "f",
                               "parameters": {"type": "object", "properties": {}}}}]}),
                )
                .await;
            assert_eq!(status, 400, "{text}");
            assert!(text.contains("does not support tools"), "{text}");
            // And the whole path to tokens: the same prompt gives the same greedy reply.
            assert_eq!(chat(&serve, "go").await, chat(&serve, "plain").await);
            generate_renders_as_chat_and_after_its_context(&serve).await;
        }
    }
}
