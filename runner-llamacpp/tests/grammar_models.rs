//! Output constraints with the real models (one thread): schema-valid JSON, `format: "json"`,
//! the single-pass think+format mechanism and its transparency, and the mask's cost.
//! The runner's stderr goes to a file here, so the per-request mask timing lines it prints
//! ("grammar mask: tokens=… p50_us=… p99_us=…") can be read back and reported.

mod common;

use common::*;
use hyper::StatusCode;
use runner_protocol::{DoneReason, ErrorBody, ErrorKind};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// (p50, p99, engine p50, engine p99) in µs of every request's mask timing line so far.
fn mask_lines(r: &Logged) -> Vec<(f64, f64, f64, f64)> {
    r.text()
        .lines()
        .filter(|l| l.contains("grammar mask:"))
        .map(|l| {
            let field = |k: &str| -> f64 {
                let s = &l[l.find(k).unwrap() + k.len()..];
                s.split_whitespace().next().unwrap().parse().unwrap()
            };
            (
                field(" p50_us="),
                field(" p99_us="),
                field("engine_p50_us="),
                field("engine_p99_us="),
            )
        })
        .collect()
}

/// A runner on `model` with a 1024-token context, stderr to a file.
async fn logged(model: &Path) -> Logged {
    Logged::ready(model, &["--ctx-size", "1024"]).await
}

fn smollm() -> PathBuf {
    gemma().with_file_name("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn chatml(user: &str) -> String {
    format!("<|im_start|>system\nYou answer in JSON.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

/// Nested: objects, arrays, enums, required, numbers (bounded so a tiny model cannot run on).
fn nested_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "kind": {"type": "string", "enum": ["person", "place", "thing"]},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": 0, "maximum": 10},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
            "location": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 20},
                    "country": {"type": "string", "enum": ["FR", "DE", "US", "JP", "other"]}
                },
                "required": ["city", "country"],
                "additionalProperties": false
            }
        },
        "required": ["name", "kind", "age", "location"],
        "additionalProperties": false
    })
}

const PROMPTS: [&str; 20] = [
    "Describe Marie Curie.",
    "Describe the Eiffel Tower.",
    "Tell me about a hammer.",
    "Who is Albert Einstein?",
    "Describe Tokyo.",
    "Describe your best friend.",
    "What is a bicycle?",
    "Describe Berlin in winter.",
    "Tell me about a famous chef.",
    "Describe the Statue of Liberty.",
    "Describe a cat named Tom.",
    "Who was Napoleon?",
    "Describe Mount Fuji.",
    "Give me a profile of a teacher.",
    "Describe an old lighthouse.",
    "Describe a violin.",
    "Who is a typical astronaut?",
    "Describe New York City.",
    "Describe a sunflower.",
    "Describe a retired pilot from Lyon.",
];

fn constrained(prompt: &str, n: i32, seed: i64, constraint: Value) -> Value {
    json!({
        "prompt": prompt,
        "num_predict": n,
        "sampling": {"temperature": 0.7, "seed": seed, "top_k": 40, "top_p": 0.95},
        "constraint": constraint,
    })
}

#[tokio::test]
async fn nested_schema_outputs_validate_20_of_20() {
    let _g = serial().await;
    let r = logged(&smollm()).await;
    let schema = nested_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let c = json!({"type": "json_schema", "schema": schema});
    let mut valid = 0;
    let (mut free_tps, mut constrained_tps) = (Vec::new(), Vec::new());
    for (i, p) in PROMPTS.iter().enumerate() {
        let out = complete(
            r.socket(),
            constrained(&chatml(p), 400, i as i64, c.clone()),
        )
        .await;
        let v: Value = serde_json::from_str(out.text.trim())
            .unwrap_or_else(|e| panic!("prompt {i}: not JSON ({e}): {:?}", out.text));
        assert!(validator.is_valid(&v), "prompt {i}: invalid: {v}");
        assert_eq!(out.reason, DoneReason::Stop, "prompt {i} ended by EOS");
        valid += 1;
        let t = &out.timings;
        constrained_tps.push(t.eval_count as f64 / (t.eval_duration_ns as f64 / 1e9));
        if i < 5 {
            let mut free = greedy(&chatml(p), t.eval_count as i32);
            free["sampling"] = json!({"temperature": 0.7, "seed": i, "top_k": 40, "top_p": 0.95});
            let f = complete(r.socket(), free).await.timings;
            free_tps.push(f.eval_count as f64 / (f.eval_duration_ns as f64 / 1e9));
        }
    }
    assert_eq!(valid, 20);
    // The last request's line is written when its mask is dropped, just after its Done chunk.
    let mut masks = mask_lines(&r);
    for _ in 0..100 {
        if masks.len() >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        masks = mask_lines(&r);
    }
    assert_eq!(masks.len(), 20, "one timing line per constrained request");
    let median = |f: fn(&(f64, f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = masks.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let worst = |f: fn(&(f64, f64, f64, f64)) -> f64| masks.iter().map(f).fold(0.0, f64::max);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    eprintln!(
        "SmolLM2 schema: 20/20 valid; per-token mask p50 {:.1} µs (llguidance {:.1}), worst request p99 {:.1} µs (llguidance {:.1}); decode tok/s constrained {:.1} vs free {:.1}",
        median(|m| m.0),
        median(|m| m.2),
        worst(|m| m.1),
        worst(|m| m.3),
        mean(&constrained_tps),
        mean(&free_tps)
    );
}

#[tokio::test]
async fn format_json_always_parses_to_an_object() {
    let _g = serial().await;
    for model in [gemma(), smollm()] {
        let r = logged(&model).await;
        for (i, p) in PROMPTS.iter().take(6).enumerate() {
            let prompt = if model == gemma() {
                format!("{p} Answer in JSON: ")
            } else {
                chatml(p)
            };
            let mut req = constrained(&prompt, 400, i as i64, json!({"type": "json"}));
            if model == gemma() {
                // The base model loops inside long strings; the penalty keeps it finishing.
                req["sampling"]["repeat_penalty"] = json!(1.3);
            }
            let out = complete(r.socket(), req).await;
            assert_eq!(
                out.reason,
                DoneReason::Stop,
                "{model:?} prompt {i}: {:?}",
                out.text
            );
            let v: Value = serde_json::from_str(out.text.trim())
                .unwrap_or_else(|e| panic!("{model:?} prompt {i}: not JSON ({e}): {:?}", out.text));
            assert!(v.is_object(), "format json is an object: {v}");
        }
    }
}

/// Greedy request with a constraint (or none).
fn greedy_with(prompt: &str, n: i32, constraint: Option<Value>) -> Value {
    let mut v = greedy(prompt, n);
    if let Some(c) = constraint {
        v["constraint"] = c;
    }
    v
}

const GEMMA_PROMPT: &str = "The capital of France is Paris. The capital of Germany is";

#[tokio::test]
async fn single_pass_free_text_then_closing_string_then_schema() {
    let _g = serial().await;
    let r = logged(&gemma()).await;
    let schema = json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 16}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": false
    });
    let c = json!({"type": "json_schema", "schema": schema, "thinking_close": ["."]});
    let free = complete(r.socket(), greedy_with(GEMMA_PROMPT, 40, None)).await;
    let out = complete(r.socket(), greedy_with(GEMMA_PROMPT, 120, Some(c))).await;
    eprintln!("free: {:?}\nsingle-pass: {:?}", free.text, out.text);
    let close = out.text.find('.').expect("gemma emits the closing string");
    let (think, rest) = (&out.text[..close], &out.text[close + 1..]);
    assert!(
        !think.trim().is_empty(),
        "free text before the closing string"
    );
    let v: Value = serde_json::from_str(rest.trim())
        .unwrap_or_else(|e| panic!("not JSON after the close ({e}): {rest:?}"));
    assert!(
        jsonschema::validator_for(&schema).unwrap().is_valid(&v),
        "{v}"
    );
    assert_eq!(out.reason, DoneReason::Stop);
    // Transparency: greedy text before the closing string is byte-identical without the format.
    let free_close = free
        .text
        .find('.')
        .expect("unconstrained text has a '.' too");
    assert_eq!(&free.text[..free_close], think);
    // One prefill: the constrained request evaluated the same prompt as the free one (the
    // second run reuses the cached prefix, so compare the whole prompt length).
    assert_eq!(
        out.timings.prompt_eval_count + out.timings.cached_tokens,
        free.timings.prompt_eval_count + free.timings.cached_tokens
    );
}

#[tokio::test]
async fn a_response_that_never_closes_its_thinking_is_unchanged() {
    let _g = serial().await;
    let r = logged(&gemma()).await;
    let c = json!({"type": "json_schema", "schema": {"type": "integer"}, "thinking_close": ["\u{1F9E9}never"]});
    let free = complete(r.socket(), greedy_with(GEMMA_PROMPT, 24, None)).await;
    let out = complete(r.socket(), greedy_with(GEMMA_PROMPT, 24, Some(c))).await;
    assert_eq!(out.text, free.text);
    assert_eq!(out.reason, free.reason);
    assert!(!out.text.is_empty());
}

#[tokio::test]
async fn schema_applies_from_the_first_token_without_closing_strings() {
    let _g = serial().await;
    let r = logged(&gemma()).await;
    let c = json!({"type": "json_schema", "schema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"], "additionalProperties": false}});
    let out = complete(r.socket(), greedy_with(GEMMA_PROMPT, 60, Some(c))).await;
    let v: Value =
        serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("{e}: {:?}", out.text));
    assert!(v["n"].is_u64(), "{v}");
    let log = r.text();
    let ready: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("grammar engine ready"))
        .collect();
    eprintln!("{ready:?}");
    assert_eq!(
        ready.len(),
        1,
        "the vocabulary trie is built once per process"
    );
}

#[tokio::test]
async fn unsupported_schema_feature_is_a_bad_request_naming_it() {
    let _g = serial().await;
    let r = logged(&gemma()).await;
    let c = json!({"type": "json_schema", "schema": {"type": "object", "if": {"type": "object"}, "then": {}}});
    let (st, body) = call(
        r.socket(),
        "POST",
        "/completion",
        Some(greedy_with("x", 4, Some(c))),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let e: ErrorBody = serde_json::from_slice(&body).unwrap();
    assert_eq!(e.error.kind, ErrorKind::BadRequest);
    assert!(e.error.message.contains("if"), "{}", e.error.message);
}

#[tokio::test]
async fn control_token_closes_compile_on_a_real_vocabulary_and_leave_free_text_alone() {
    let _g = serial().await;
    let r = logged(&gemma()).await;
    let free = complete(r.socket(), greedy_with(GEMMA_PROMPT, 16, None)).await;
    // One control token, and a harmony-shaped close (control token, text, control token); gemma
    // never emits either here, so the response is its free text.
    for close in ["<start_of_turn>", "<start_of_turn>final<end_of_turn>"] {
        let c = json!({"type": "json_schema", "schema": {"type": "integer"}, "thinking_close": [close]});
        let started = Instant::now();
        let out = complete(r.socket(), greedy_with(GEMMA_PROMPT, 16, Some(c))).await;
        eprintln!("close {close:?}: {:?} in {:?}", out.text, started.elapsed());
        assert_eq!(out.text, free.text, "close {close:?}");
    }
}

/// `--mask-after-launch` (a GPU A/B: masks wait for the next step's launch) changes when masks
/// are computed, never which: four schema requests at once, sampled and greedy, give the same
/// bytes with and without it, and they still validate.
#[tokio::test]
async fn masks_after_launch_give_the_same_bytes() {
    let _g = serial().await;
    let schema = nested_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let c = json!({"type": "json_schema", "schema": schema});
    let reqs: Vec<Value> = PROMPTS[..4]
        .iter()
        .enumerate()
        .map(|(i, p)| match i {
            0 => greedy_with(&chatml(p), 400, Some(c.clone())),
            _ => constrained(&chatml(p), 400, i as i64, c.clone()),
        })
        .collect();
    let run = |flags: &'static [&'static str]| {
        let reqs = reqs.clone();
        async move {
            let mut args = vec!["--ctx-size", "1024", "--parallel", "4"];
            args.extend_from_slice(flags);
            let r = Logged::ready(&smollm(), &args).await;
            let handles: Vec<_> = reqs
                .into_iter()
                .map(|req| {
                    let socket = r.socket().to_path_buf();
                    tokio::spawn(async move { complete(&socket, req).await.text })
                })
                .collect();
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            (out, r.lines())
        }
    };
    let (want, _) = run(&[]).await;
    let (got, lines) = run(&["--mask-after-launch"]).await;
    assert!(
        lines.contains(&"grammar masks wait for the next step's launch (on)".to_string()),
        "{lines:?}"
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "request {i}");
        let v: Value = serde_json::from_str(g.trim())
            .unwrap_or_else(|e| panic!("request {i}: not JSON ({e}): {g:?}"));
        assert!(validator.is_valid(&v), "request {i}: invalid: {v}");
    }
}
