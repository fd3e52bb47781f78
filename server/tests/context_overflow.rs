//! A prompt longer than the context, on the real `herd serve` with SmolLM2, refused in Ollama's
//! words: clients tell a context overflow from other failures by these texts (llama-server's
//! `exceed_context_size_error` body, which Ollama forwards as its error string, with
//! `truncate: false`; Ollama's own sentence with `shift: false`), from chat and generate,
//! streamed or not. With both on (the defaults), the prompt is truncated and answered.
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`.

mod herd_proc;
mod serve_support;

use herd_proc::HerdServe;
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const NO_SHIFT: &str = "the prompt is longer than the context length currently available to the \
                        model; shorten the prompt, adjust the context length in settings, or use \
                        a model with a longer context length";

/// `herd serve` on the real runner with SmolLM2 as `smol`.
fn smol_server() -> Option<(TestStore, HerdServe)> {
    let (runner, model) = (native_runner()?, test_model(SMOL)?);
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let runner = runner.display().to_string();
    let herd = HerdServe::start(ts.root(), &[("HERD_RUNNER", runner.as_str())]);
    Some((ts, herd))
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> (u16, String) {
    let r = http.post(url).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_longer_than_the_context_is_refused_in_ollamas_words() {
    let Some((_ts, herd)) = smol_server() else {
        return;
    };
    let http = reqwest::Client::new();
    let long = "word ".repeat(400);
    let chat = |ctl: Value, num_ctx: u64| {
        let mut b = json!({"model": "smol", "stream": false,
            "messages": [{"role": "user", "content": long}],
            "options": {"num_ctx": num_ctx, "num_predict": 1, "temperature": 0}});
        b.as_object_mut()
            .unwrap()
            .extend(ctl.as_object().unwrap().clone());
        b
    };

    // The prompt's exact length, from a context it fits in.
    let (s, t) = post(&http, herd.url("/api/chat"), chat(json!({}), 1024)).await;
    assert_eq!(s, 200, "{t}");
    let n = serde_json::from_str::<Value>(&t).unwrap()["prompt_eval_count"]
        .as_u64()
        .unwrap();
    assert!(n > 256, "the prompt must overflow 256 positions: {n}");

    let exceeds = json!({"error": {"code": 400,
        "message": format!("request ({n} tokens) exceeds the available context size (256 tokens), try increasing it"),
        "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": 256}})
    .to_string();
    for (ctl, want) in [
        (json!({"truncate": false}), exceeds.as_str()),
        (json!({"truncate": false, "shift": false}), exceeds.as_str()),
        (json!({"shift": false}), NO_SHIFT),
        (json!({"shift": false, "stream": true}), NO_SHIFT),
        (json!({"truncate": false, "stream": true}), exceeds.as_str()),
    ] {
        let (s, t) = post(&http, herd.url("/api/chat"), chat(ctl.clone(), 256)).await;
        assert_eq!(s, 400, "{ctl}: {t}");
        let v: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(v["error"], want, "{ctl}");
        // The same from /api/generate with the prompt as is.
        let mut g = json!({"model": "smol", "prompt": long, "stream": false,
            "options": {"num_ctx": 256, "num_predict": 1}});
        g.as_object_mut()
            .unwrap()
            .extend(ctl.as_object().unwrap().clone());
        let (s, t) = post(&http, herd.url("/api/generate"), g).await;
        assert_eq!(s, 400, "generate {ctl}: {t}");
        let e = serde_json::from_str::<Value>(&t).unwrap()["error"].clone();
        let e = e.as_str().unwrap();
        if want == NO_SHIFT {
            assert_eq!(e, NO_SHIFT);
        } else {
            assert!(e.contains("exceed_context_size_error"), "{e}");
            assert!(e.contains("(256 tokens)"), "{e}");
        }
    }

    // Both on (Ollama's defaults): the prompt is cut to the context and answered.
    let (s, t) = post(&http, herd.url("/api/chat"), chat(json!({}), 256)).await;
    assert_eq!(s, 200, "{t}");
    let kept = serde_json::from_str::<Value>(&t).unwrap()["prompt_eval_count"]
        .as_u64()
        .unwrap();
    assert!(kept < 256, "{t}");
    // A prompt that fits is answered with shift off.
    let (s, t) = post(
        &http,
        herd.url("/api/chat"),
        chat(json!({"shift": false}), 1024),
    )
    .await;
    assert_eq!(s, 200, "{t}");
}

/// Ollama measures truncation, embedding inputs and the generation budget against the
/// `num_ctx` asked for, though llama.cpp rounds the slot up to 256 positions: a long prompt in
/// `num_ctx` 128 keeps BOS + `num_keep` 4 and the newest tail, 128 - (128 - 5) / 2 = 67 tokens,
/// while a prompt that may not be truncated is refused only past the slot, as llama-server
/// refuses it; an embedding input holds at most `num_ctx` - 2 tokens (Ollama reserves a BOS and
/// an EOS position for every model), and nothing fits `num_ctx` 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncation_and_embedding_inputs_follow_the_context_asked_for() {
    let Some((_ts, herd)) = smol_server() else {
        return;
    };
    let http = reqwest::Client::new();
    let gen = |prompt: String, ctl: Value| {
        let mut b = json!({"model": "smol", "prompt": prompt, "raw": true, "stream": false,
            "options": {"num_ctx": 128, "num_predict": 1, "temperature": 0}});
        b.as_object_mut()
            .unwrap()
            .extend(ctl.as_object().unwrap().clone());
        b
    };
    let count = |t: &str| {
        serde_json::from_str::<Value>(t).unwrap()["prompt_eval_count"]
            .as_u64()
            .unwrap()
    };

    // SmolLM2 adds no BOS: num_keep 4, then the tail: 128 - (128 - 4) / 2 = 66.
    let (s, t) = post(
        &http,
        herd.url("/api/generate"),
        gen("word ".repeat(300), json!({})),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(count(&t), 66, "{t}");
    // 200 tokens do not fit num_ctx 128 but fit the 256-position slot: not refused.
    let (s, t) = post(
        &http,
        herd.url("/api/generate"),
        gen("word ".repeat(200), json!({"truncate": false})),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert!((129..255).contains(&count(&t)), "evaluated whole: {t}");
    // Shift off refuses what it would have to truncate.
    let (s, t) = post(
        &http,
        herd.url("/api/generate"),
        gen("word ".repeat(200), json!({"shift": false})),
    )
    .await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("currently available to the model"), "{t}");

    // Embedding inputs: at most num_ctx - 2 tokens.
    let embed = |input: String, truncate: bool, num_ctx: u64| {
        json!({"model": "smol", "input": input, "truncate": truncate,
            "options": {"num_ctx": num_ctx}})
    };
    let (s, t) = post(
        &http,
        herd.url("/api/embed"),
        embed("why is the sky blue? ".repeat(4), false, 8),
    )
    .await;
    assert_eq!(s, 400, "{t}");
    assert!(
        t.contains("the input length exceeds the context length"),
        "{t}"
    );
    let (s, t) = post(
        &http,
        herd.url("/api/embed"),
        embed("why is the sky blue? ".repeat(4), true, 8),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(count(&t), 6, "{t}");
    // Below the smallest context a runner loads with (4): measured against the 3 asked for,
    // one token is left, the same input as the text of that one token.
    let vector = |t: &str| serde_json::from_str::<Value>(t).unwrap()["embeddings"][0].clone();
    let (s, t) = post(
        &http,
        herd.url("/api/embed"),
        embed("why is the sky blue?".into(), true, 3),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(count(&t), 1, "{t}");
    let (s, one) = post(&http, herd.url("/api/embed"), embed("why".into(), true, 64)).await;
    assert_eq!(s, 200, "{one}");
    assert_eq!(vector(&t), vector(&one));
    for truncate in [true, false] {
        let (s, t) = post(
            &http,
            herd.url("/api/embed"),
            embed("why".into(), truncate, 2),
        )
        .await;
        assert_eq!(s, 400, "{t}");
        assert!(
            t.contains("input after truncation exceeds maximum context length"),
            "{t}"
        );
    }
    let (s, t) = post(
        &http,
        herd.url("/api/embed"),
        embed("why is the sky blue?".into(), false, 64),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert!(count(&t) < 64, "{t}");
}
