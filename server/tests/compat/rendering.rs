//! What reaches a model's template through the translation layers and the template choice:
//! content parts as Ollama's messages, the GGUF chat template preferred over a TEMPLATE layer
//! that offers less, and image-generation models refused before anything loads.

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
    let jinja = "{% if tools %}{{ tools }}{% endif %}{{ messages[0]['content'] }}";
    let go = "{{ range .Messages }}go-template: {{ .Content }}{{ end }}";
    for (name, chat) in [("pref", jinja), ("plain", "{{ messages[0]['content'] }}")] {
        let gguf = server::gguf::GgufBuilder::tiny_llama()
            .kv("tokenizer.chat_template", chat)
            .build()
            .unwrap();
        env._store.model(
            name,
            "latest",
            &gguf,
            &[(MT_TEMPLATE, go.as_bytes())],
            ago(5),
        );
    }
    let render =
        |model: &str| json!({"model": model, "prompt": "hello", "_debug_render_only": true});
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
