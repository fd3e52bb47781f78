//! runner-mlx's n-gram drafting (`--draft-ngram K`) through the real binary on the SmolLM2 MLX
//! checkpoint: every output byte, chunk and count is what the runner streams without drafting
//! (greedy, seeded, log-probabilities, stop strings, limits, concurrent streams, and a JSON
//! schema with `--draft-under-grammar`), and a copy task accepts most drafts. Drafts are taken
//! whole (`--draft-cost 0`): how much the pace drafts depends on measured step times, which a
//! loaded test machine makes unrepeatable (the pace has its own tests in runner-core).

#[path = "../../runner-llamacpp/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use serde_json::{json, Value};
use support::model_dir;

/// A copy task: the answer repeats the prompt's text, so the n-gram drafter finds it.
const PASSAGE: &str = "The old lighthouse stood on the northern cliff for two hundred years. \
    Every night its keeper climbed one hundred and twelve steps to light the lamp, and every \
    morning he wrote the weather, the ships he had seen and the state of the sea in a thick \
    leather book.";

/// Requests whose output must not change with drafting: (name, request).
fn requests() -> Vec<(&'static str, Value)> {
    // The answer is started for the model, so even a small one goes on copying.
    let copy = format!(
        "{}The old lighthouse",
        chatml(&format!("Repeat this text exactly:\n{PASSAGE}"))
    );
    let mut seeded = greedy(&copy, 48);
    seeded["sampling"] = json!({"temperature": 0.8, "seed": 7, "top_k": 40, "top_p": 0.9});
    let mut lp = greedy(&copy, 24);
    lp["logprobs"] = json!(true);
    lp["top_logprobs"] = json!(3);
    let mut stop = greedy(&copy, 80);
    stop["stop"] = json!(["twelve steps"]);
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"},
        "steps": {"type": "integer"}}, "required": ["name", "steps"]});
    let mut constrained = greedy(
        &chatml(&format!(
            "{PASSAGE}\nGive the keeper's name and the steps as JSON."
        )),
        40,
    );
    constrained["constraint"] = json!({"type": "json_schema", "schema": schema});
    vec![
        ("copy greedy", greedy(&copy, 64)),
        (
            "free greedy",
            greedy(&chatml("Write a short poem about rain."), 24),
        ),
        ("copy seeded", seeded),
        ("copy logprobs", lp),
        ("copy stop", stop),
        ("copy num_predict 1", greedy(&copy, 1)),
        ("schema", constrained),
    ]
}

async fn run_all(extra: &[&str]) -> Vec<Completion> {
    let mut args = vec!["--ctx-size", "1024"];
    args.extend_from_slice(extra);
    let r = Runner::spawn(&model_dir(), &args);
    r.wait_ready().await;
    let mut out = Vec::new();
    for (_, req) in requests() {
        out.push(complete(&r.socket, req).await);
    }
    out
}

#[tokio::test]
async fn ngram_drafting_leaves_every_output_byte_identical_and_accepts_copies() {
    let _g = serial().await;
    let base = run_all(&[]).await;
    let on = run_all(&[
        "--draft-ngram",
        "6",
        "--draft-under-grammar",
        "--draft-cost",
        "0",
    ])
    .await;
    for (((name, _), want), got) in requests().into_iter().zip(&base).zip(&on) {
        assert_eq!(
            want.timings.drafted, 0,
            "{name}: drafting is off by default"
        );
        assert_eq!(got.text, want.text, "{name}: text differs with drafting");
        assert_eq!(
            output_chunks(got),
            output_chunks(want),
            "{name}: chunks differ"
        );
        assert_eq!(got.reason, want.reason, "{name}");
        assert_eq!(got.timings.eval_count, want.timings.eval_count, "{name}");
        assert!(got.timings.accepted <= got.timings.drafted, "{name}");
        eprintln!(
            "{name}: {} tokens, drafted {} accepted {}",
            got.timings.eval_count, got.timings.drafted, got.timings.accepted
        );
    }
    assert!(
        base[0].text.starts_with(" stood on the northern cliff"),
        "the copy task copies: {:?}",
        base[0].text
    );
    let copy = &on[0].timings;
    assert!(
        copy.accepted * 2 > copy.eval_count,
        "the copy task accepts most drafts: {copy:?}"
    );
    assert!(
        !base[4].text.contains("twelve steps"),
        "the stop string ends it"
    );
    let schema: Value = serde_json::from_str(&base[6].text).expect("JSON");
    assert!(schema["steps"].is_i64(), "{schema}");
    // Without --draft-under-grammar a constrained request does not draft.
    let r = Runner::spawn(&model_dir(), &["--ctx-size", "1024", "--draft-ngram", "6"]);
    r.wait_ready().await;
    let c = complete(&r.socket, requests()[6].1.clone()).await;
    assert_eq!(c.timings.drafted, 0);
    assert_eq!(c.text, base[6].text);
}

#[tokio::test]
async fn concurrent_drafting_streams_equal_their_solo_runs() {
    let _g = serial().await;
    let r = Runner::spawn(&model_dir(), CONCURRENT_DRAFTING);
    r.wait_ready().await;
    let reqs: Vec<Value> = requests().into_iter().take(3).map(|(_, r)| r).collect();
    let runs = concurrent_equal_solo(&r.socket, &reqs).await;
    let accepted: u32 = runs.iter().map(|c| c.timings.accepted).sum();
    assert!(accepted > 0, "concurrent copies draft");
}
