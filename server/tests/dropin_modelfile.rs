//! Modelfile commands are acted on or refused, never stored and ignored (issue 14, item 5):
//! `REQUIRES` newer than the Ollama release herd implements refuses the model at inference with
//! the registry's wording; an unknown `RENDERER` or `PARSER` is refused at create; a known
//! `PARSER` selects that parser. The production router with the real
//! runner on SmolLM2.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

fn smol() -> Option<Harness> {
    smol_harness(&[])
}

async fn create(h: &Harness, body: Value) -> Reply {
    let mut body = body;
    body["stream"] = json!(false);
    h.post("/api/create", body).await
}

async fn chat(h: &Harness, model: &str) -> Reply {
    h.post(
        "/api/chat",
        json!({"model": model, "stream": false, "messages": [{"role": "user", "content": "hi"}],
               "options": {"num_predict": 2, "num_thread": 1}}),
    )
    .await
}

#[tokio::test]
async fn requires_renderer_and_parser_are_acted_on_or_refused() {
    let Some(h) = smol() else { return };
    // REQUIRES: an older release is fine, a newer one is refused at use.
    let r = create(
        &h,
        json!({"model": "old-enough", "from": "smol", "requires": "0.14.0"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(chat(&h, "old-enough").await.status, StatusCode::OK);
    let r = create(
        &h,
        json!({"model": "too-new", "from": "smol", "requires": "99.0.0"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = chat(&h, "too-new").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("requires a newer version of Ollama") && msg.contains("99.0.0"),
        "{msg}"
    );
    let r = h
        .post("/api/embed", json!({"model": "too-new", "input": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());

    // RENDERER: a name herd has no renderer for is refused (it would fail every chat).
    let r = create(
        &h,
        json!({"model": "r", "from": "smol", "renderer": "made-up"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(
        r.text()
            .contains("renderer \\\"made-up\\\" is not supported"),
        "{}",
        r.text()
    );
    // PARSER: unknown refused, known kept and shown.
    let r = create(
        &h,
        json!({"model": "p", "from": "smol", "parser": "made-up"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let r = create(&h, json!({"model": "p", "from": "smol", "parser": "qwen3"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let show = h.post("/api/show", json!({"model": "p"})).await.json();
    assert!(
        show["modelfile"].as_str().unwrap().contains("PARSER qwen3"),
        "{}",
        show["modelfile"]
    );
    assert_eq!(chat(&h, "p").await.status, StatusCode::OK);
}

/// A pulled model whose config names a renderer and a parser (qwen3-coder's, as ollama.com
/// ships it): the renderer writes the prompt instead of the TEMPLATE, the parser's support sets
/// the capabilities, and the real runner answers a prompt the renderer wrote.
#[tokio::test]
async fn a_renderer_and_parser_model_prompts_and_serves_through_them() {
    let Some(h) = smol() else { return };
    let r = create(
        &h,
        json!({"model": "coder", "from": "smol", "renderer": "qwen3-coder", "parser": "qwen3-coder"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let show = h.post("/api/show", json!({"model": "coder"})).await.json();
    let caps: Vec<&str> = show["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // SmolLM2's own template speaks neither tools nor thinking; qwen3-coder's parser has tools.
    assert!(
        caps.contains(&"completion") && caps.contains(&"tools"),
        "{caps:?}"
    );
    assert!(!caps.contains(&"thinking"), "{caps:?}");
    let modelfile = show["modelfile"].as_str().unwrap();
    assert!(
        modelfile.contains("RENDERER qwen3-coder") && modelfile.contains("PARSER qwen3-coder"),
        "{modelfile}"
    );

    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]);
    let r = h
        .post(
            "/api/chat",
            json!({"model": "coder", "messages": messages, "tools": [tool], "_debug_render_only": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let prompt = r.json()["_debug_info"]["rendered_template"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.starts_with("<|im_start|>system\nBe brief.\n\n# Tools\n\n")
            && prompt.contains("<function>\n<name>get_weather</name>\n<parameters>\n<parameter>\n<name>city</name>\n<type>string</type>\n</parameter>")
            && prompt.ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"),
        "{prompt}"
    );
    // The same chat through /api/generate's messages flow renders with the renderer too.
    let r = h
        .post(
            "/api/generate",
            json!({"model": "coder", "prompt": "hi", "system": "S", "_debug_render_only": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        r.json()["_debug_info"]["rendered_template"],
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    // A real answer to the rendered prompt.
    let r = chat(&h, "coder").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["message"]["role"], "assistant");
    assert!(
        r.json()["eval_count"].as_u64().unwrap() >= 1,
        "{}",
        r.text()
    );
}
