//! What reaches a model's template through the translation layers and the template choice:
//! content parts as Ollama's messages, the GGUF chat template preferred over a TEMPLATE layer
//! that offers less (or as OLLAMA_GO_TEMPLATE says), and image-generation models refused before
//! anything loads.

use super::*;

/// An OpenAI message's parts are one native message each, as in Ollama: the renderer joins
/// the same-role turns again, each image's marker after the text before it.
#[tokio::test]
async fn content_parts_reach_the_template_as_ollamas_messages() {
    let env = Env::new();
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "echo", "_debug_render_only": true, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is"},
                {"type": "image_url", "image_url": {"url": png}},
                {"type": "text", "text": "this?"}]}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let rendered = v["_debug_info"]["rendered_template"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(rendered, "[user]what is\n\n[img-0]\n\nthis?", "{v}");

    // An image-generation model (capability `image`) is refused before anything loads.
    scripted(
        &env._store,
        "painter",
        "#fake-runner\n--tokens\nx\n",
        "{{ .Prompt }}",
        &["image"],
        ago(5),
    );
    let r = env
        .post(
            "/api/generate",
            json!({"model": "painter", "prompt": "a cat"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"],
        "image generation models are not currently supported"
    );
    assert!(
        env.engine.scheduler().ps().await.is_empty(),
        "nothing loaded"
    );
    env.done().await;
}

/// Ollama's `PreferChatTemplate`: a TEMPLATE layer without tools over a GGUF whose chat
/// template has them renders with the GGUF template, whose capabilities and text /api/show
/// reports (Ollama's "uses preferred GGUF chat_template over Go TEMPLATE"); when the GGUF
/// template offers nothing more, the TEMPLATE layer renders.
#[tokio::test]
async fn a_gguf_template_that_offers_more_renders_instead_of_the_template_layer() {
    let env = Env::with(false);
    let (jinja, go) = two_template_models(&env);
    let r = env.post("/api/generate", render("pref")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["_debug_info"]["rendered_template"],
        "hello",
        "{}",
        r.text()
    );
    let show = env.post("/api/show", json!({"model": "pref"})).await.json();
    assert_eq!(show["template"], jinja, "{show}");
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("tools")),
        "{show}"
    );
    let r = env.post("/api/generate", render("plain")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["_debug_info"]["rendered_template"],
        "go-template: hello"
    );
    let show = env
        .post("/api/show", json!({"model": "plain"}))
        .await
        .json();
    assert_eq!(show["template"], go, "{show}");
    env.done().await;
}

const PREF_JINJA: &str = "{% if tools %}{{ tools }}{% endif %}{{ messages[0]['content'] }}";
const PREF_GO: &str = "{{ range .Messages }}go-template: {{ .Content }}{{ end }}";

/// `pref`: a tool-less TEMPLATE over a GGUF template with tools (preferred when
/// OLLAMA_GO_TEMPLATE is unset); `plain`: the same TEMPLATE over one offering nothing more.
fn two_template_models(env: &Env) -> (&'static str, &'static str) {
    for (name, chat) in [
        ("pref", PREF_JINJA),
        ("plain", "{{ messages[0]['content'] }}"),
    ] {
        let gguf = server::gguf::GgufBuilder::tiny_llama()
            .kv("tokenizer.chat_template", chat)
            .build()
            .unwrap();
        env._store.model(
            name,
            "latest",
            &gguf,
            &[(MT_TEMPLATE, PREF_GO.as_bytes())],
            ago(5),
        );
    }
    (PREF_JINJA, PREF_GO)
}

fn render(model: &str) -> Value {
    json!({"model": model, "prompt": "hello", "_debug_render_only": true})
}

/// OLLAMA_GO_TEMPLATE set overrides the preference either way: true keeps the TEMPLATE layer
/// (and its capabilities) even where the GGUF template offers more; false renders the GGUF
/// template even where it offers nothing more. /api/tags reports the same capabilities.
#[tokio::test]
async fn ollama_go_template_overrides_the_preference() {
    use server::prompt::prefer::GoTemplate;
    for (mode, pref_go, plain_go) in [
        (GoTemplate::On, true, true),
        (GoTemplate::Off, false, false),
    ] {
        let defaults = server::api::InferenceDefaults {
            go_template: mode,
            ..Default::default()
        };
        let env = Env::with_defaults(false, defaults);
        let (_, go) = two_template_models(&env);
        for (model, go_renders) in [("pref", pref_go), ("plain", plain_go)] {
            let r = env.post("/api/generate", render(model)).await.json();
            let want = if go_renders {
                "go-template: hello"
            } else {
                "hello"
            };
            assert_eq!(
                r["_debug_info"]["rendered_template"], want,
                "{mode:?} {model}"
            );
            let show = env.post("/api/show", json!({"model": model})).await.json();
            let tools = show["capabilities"]
                .as_array()
                .unwrap()
                .contains(&json!("tools"));
            if go_renders {
                assert_eq!(show["template"], go, "{mode:?} {model}");
                assert!(!tools, "{mode:?} {model}: {show}");
            } else {
                assert_ne!(show["template"], go, "{mode:?} {model}");
                assert_eq!(tools, model == "pref", "{mode:?} {model}: {show}");
            }
            let tags = env.get("/api/tags").await.json();
            let listed = tags["models"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == format!("{model}:latest"))
                .unwrap()
                .clone();
            assert_eq!(
                listed["capabilities"], show["capabilities"],
                "{mode:?} {model}"
            );
        }
        env.done().await;
    }
}
