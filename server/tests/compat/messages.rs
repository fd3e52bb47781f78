//! `/v1/responses` and Anthropic `/v1/messages` through the app and the fake runner.

use super::*;

/// `(event name, data)` of a named-event SSE body.
fn named_events(body: &str) -> Vec<(String, Value)> {
    assert!(body.ends_with("\n\n"), "{body:?}");
    body.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (ev, data) = f.split_once('\n').unwrap();
            let name = ev.strip_prefix("event: ").unwrap().to_owned();
            (
                name,
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn responses_non_streamed_and_streamed() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/responses",
            json!({"model": "echo", "instructions": "I", "input": "hi"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "echo");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["content"][0]["text"], "[system]I[user]hi");
    assert_eq!(v["usage"]["output_tokens"].as_u64().unwrap(), 1);

    let r = env
        .post(
            "/v1/responses",
            json!({"model": "fake", "input": [{"role": "user", "content": "hi"}], "stream": true}),
        )
        .await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let evs = named_events(&r.text());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (i, (name, data)) in evs.iter().enumerate() {
        assert_eq!(data["type"], json!(name));
        assert_eq!(data["sequence_number"], json!(i));
    }
    assert_eq!(evs[6].1["text"], "Hello, world");
    assert_eq!(
        evs[9].1["response"]["output"][0]["content"][0]["text"],
        "Hello, world"
    );
    assert_eq!(evs[9].1["response"]["usage"]["output_tokens"], 2);
    let r = env
        .post("/v1/responses", json!({"model": "nope", "input": "hi"}))
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    env.done().await;
}

/// An Anthropic error body without its random `request_id` (checked to be there).
fn anthropic_error(r: &Reply) -> Value {
    let mut v = r.json();
    let id = v.as_object_mut().unwrap().remove("request_id").unwrap();
    assert!(id.as_str().unwrap().starts_with("req_"), "{id}");
    v
}

#[tokio::test]
async fn anthropic_messages() {
    let env = Env::new();
    let r = env
        .post(
            "/v1/messages",
            json!({"model": "echo", "max_tokens": 64, "system": "S",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut v = r.json();
    let id = v["id"].take();
    assert!(id.as_str().unwrap().starts_with("msg_"));
    let usage = v["usage"].take();
    assert_eq!(
        v,
        json!({"id": null, "type": "message", "role": "assistant", "model": "echo",
               "content": [{"type": "text", "text": "[system]S[user]hi"}],
               "stop_reason": "end_turn", "stop_sequence": null, "usage": null})
    );
    assert_eq!(usage["output_tokens"], 1);

    let r = env
        .post("/v1/messages", json!({"model": "fake", "max_tokens": 1, "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status, 200);
    let evs = named_events(&r.text());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        evs[2].1["delta"],
        json!({"type": "text_delta", "text": "Hello,"})
    );
    assert_eq!(evs[4].1["delta"]["stop_reason"], "max_tokens");
    assert_eq!(evs[4].1["usage"]["output_tokens"], 1);

    let r = env
        .post("/v1/messages", json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(
        (r.status.as_u16(), anthropic_error(&r)),
        (
            404,
            json!({"type": "error", "error": {"type": "not_found_error", "message": "model 'nope' not found"}})
        )
    );
    let r = env
        .post(
            "/v1/messages",
            json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), anthropic_error(&r)),
        (
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens is required and must be positive"}})
        )
    );
    // A model that cannot think: `thinking` is dropped, not refused.
    let r = env
        .post("/v1/messages", json!({"model": "fake", "max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 1024},
                                      "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    env.done().await;
}

#[tokio::test]
async fn responses_accept_zstd_bodies() {
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};
    let env = Env::new();
    let body = json!({"model": "echo", "input": "zipped"}).to_string();
    let mut req = request(
        axum::http::Method::POST,
        "/v1/responses",
        compress_to_vec(body.as_bytes(), CompressionLevel::Fastest),
    );
    req.headers_mut()
        .insert("content-encoding", "zstd".parse().unwrap());
    let r = send(&env.app, req).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["output"][0]["content"][0]["text"], "[user]zipped");
    env.done().await;
}
