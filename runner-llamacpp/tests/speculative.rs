//! Speculative decoding through the real runner on SmolLM2 (one thread): the n-gram drafter, a
//! draft model (SmolLM2 drafting for itself) and grammar fast-forward draft tokens that one
//! batched step verifies, and the output is the same bytes as without drafting — greedy, seeded sampling, logprobs, stop strings, num_predict and
//! concurrent streams alike — while the final chunk counts drafted and accepted tokens. The
//! n-gram drafts are taken whole (`--draft-cost 0`): how much the pace drafts depends on
//! measured step times, which a loaded test machine makes unrepeatable.

mod common;

use common::*;
use runner_protocol::{DoneReason, ErrorKind, Health};
use serde_json::{json, Value};
use std::path::PathBuf;

fn smollm() -> PathBuf {
    gemma().with_file_name("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// A copy task: the answer repeats the prompt's text, so the n-gram drafter finds it.
const PASSAGE: &str = "The old lighthouse stood on the northern cliff for two hundred years. \
    Every night its keeper climbed one hundred and twelve steps to light the lamp, and every \
    morning he wrote the weather, the ships he had seen and the state of the sea in a thick \
    leather book. When the keeper grew old his daughter took over the work, and she kept the \
    book in the same careful hand until the lamp was replaced by an electric light.";

/// Requests whose output must not change with drafting: (name, request).
fn requests() -> Vec<(&'static str, Value)> {
    let copy = chatml(&format!("Repeat this text exactly:\n{PASSAGE}"));
    let mut seeded = greedy(&copy, 80);
    seeded["sampling"] = json!({"temperature": 0.8, "seed": 7, "top_k": 40, "top_p": 0.9});
    let mut lp = greedy(&copy, 40);
    lp["logprobs"] = json!(true);
    lp["top_logprobs"] = json!(3);
    let mut stop = greedy(&copy, 120);
    stop["stop"] = json!(["keeper grew"]);
    vec![
        ("copy greedy", greedy(&copy, 96)),
        (
            "free greedy",
            greedy(&chatml("Write a short poem about rain."), 48),
        ),
        ("copy seeded", seeded),
        ("copy logprobs", lp),
        ("copy stop", stop),
        ("copy num_predict 1", greedy(&copy, 1)),
    ]
}

/// `requests()` on a runner without drafting (which then drafts nothing).
async fn undrafted() -> Vec<Completion> {
    let r = Runner::spawn(&smollm(), &["--ctx-size", "1024"]);
    r.wait_ready().await;
    let mut base = Vec::new();
    for (name, req) in requests() {
        let c = complete(&r.socket, req).await;
        assert_eq!(c.timings.drafted, 0, "{name}: drafting is off by default");
        base.push(c);
    }
    base
}

/// `requests()` on `r` (which drafts), each the same chunks, reason and count as its undrafted
/// run in `base`; returns them by name.
async fn same_as_undrafted(r: &Runner, base: &[Completion]) -> Vec<(&'static str, Completion)> {
    let mut out = Vec::new();
    for ((name, req), want) in requests().into_iter().zip(base) {
        let got = complete(&r.socket, req).await;
        assert_eq!(got.text, want.text, "{name}: text differs with drafting");
        assert_eq!(
            output_chunks(&got),
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
        out.push((name, got));
    }
    out
}

#[tokio::test]
async fn ngram_drafting_leaves_every_output_byte_identical_and_accepts_drafts() {
    let _g = serial().await;
    let base = undrafted().await;
    let r = Runner::spawn(
        &smollm(),
        &[
            "--ctx-size",
            "1024",
            "--draft-ngram",
            "6",
            "--draft-cost",
            "0",
        ],
    );
    r.wait_ready().await;
    for (name, got) in same_as_undrafted(&r, &base).await {
        if name.starts_with("copy") && name != "copy num_predict 1" {
            assert!(
                got.timings.accepted * 2 > got.timings.eval_count,
                "{name}: the copy task accepts most drafts: {:?}",
                got.timings
            );
        }
    }
    assert_eq!(base[4].reason, DoneReason::Stop, "the stop string ends it");
    assert!(!base[4].text.contains("keeper grew"));
    assert!(
        base[0].text.contains("one hundred and twelve steps"),
        "{}",
        base[0].text
    );
}

#[tokio::test]
async fn draft_model_drafting_leaves_every_output_byte_identical() {
    let _g = serial().await;
    let base = undrafted().await;
    let me = smollm();
    let me = me.to_str().unwrap();
    let r = Runner::spawn(
        &smollm(),
        &[
            "--ctx-size",
            "1024",
            "--draft-model",
            me,
            "--draft-max",
            "4",
        ],
    );
    r.wait_ready().await;
    for (name, got) in same_as_undrafted(&r, &base).await {
        // The model drafting for itself greedily guesses its own greedy choices (where it is
        // sure enough to draft at all).
        if name.ends_with("greedy") {
            let t = &got.timings;
            assert!(
                t.drafted > 0 && t.accepted * 10 >= t.drafted * 9,
                "{name}: a self-draft is accepted: {t:?}"
            );
        }
    }
    // Concurrent streams with a draft model each equal their solo run.
    drop(r);
    let r = Runner::spawn(
        &smollm(),
        &[
            "--ctx-size",
            "1024",
            "--parallel",
            "3",
            "--draft-model",
            me,
            "--draft-max",
            "3",
        ],
    );
    r.wait_ready().await;
    // (Solo on this runner: its KV's size, unlike the batch beside a request, may move
    // rounding.)
    let reqs: Vec<Value> = requests().into_iter().take(3).map(|(_, r)| r).collect();
    for (i, c) in concurrent_equal_solo(&r.socket, &reqs)
        .await
        .iter()
        .enumerate()
    {
        assert!(c.timings.drafted > 0, "request {i} drafted");
    }
}

#[tokio::test]
async fn a_draft_model_with_another_tokenizer_fails_the_load() {
    let g = gemma();
    let r = Runner::spawn(
        &smollm(),
        &["--ctx-size", "256", "--draft-model", g.to_str().unwrap()],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match r.health().await {
            Health::Failed { kind, message } => {
                assert_eq!(kind, ErrorKind::ModelLoad);
                assert!(message.contains("draft model"), "{message}");
                assert!(message.contains("tokenizer"), "{message}");
                break;
            }
            Health::Ready => panic!("a gemma3 draft for SmolLM2 loaded"),
            h => assert!(std::time::Instant::now() < deadline, "still {h:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn concurrent_drafting_streams_equal_their_solo_runs() {
    let _g = serial().await;
    let r = Runner::spawn(&smollm(), CONCURRENT_DRAFTING);
    r.wait_ready().await;
    let reqs: Vec<Value> = requests().into_iter().take(3).map(|(_, r)| r).collect();
    let mut accepted = 0;
    for _round in 0..2 {
        for c in concurrent_equal_solo(&r.socket, &reqs).await {
            accepted += c.timings.accepted;
        }
    }
    // Drafts of a step are cut to the shortest among its decoding slots (one llama.cpp pass),
    // yet concurrent copies still draft.
    eprintln!("accepted under concurrency: {accepted}");
    assert!(accepted > 0);
}

/// A schema whose output is mostly forced keys.
pub fn keys_schema(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("property_number_{i}"),
                json!({"type": "integer", "minimum": 0, "maximum": 9}),
            )
        })
        .collect();
    let required: Vec<String> = props.keys().cloned().collect();
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

#[tokio::test]
async fn grammar_fast_forward_gives_the_token_by_token_bytes() {
    let _g = serial().await;
    let req = |seed: i64| {
        json!({
            "prompt": chatml("Fill in the form with small numbers, as JSON."),
            "num_predict": 400,
            "sampling": {"temperature": 0.7, "seed": seed, "top_k": 40, "top_p": 0.95},
            "constraint": {"type": "json_schema", "schema": keys_schema(12)},
        })
    };
    // Forced runs end inside: a stop string in a forced key, a num_predict limit; and with
    // log-probabilities every forced row is sampled (drafted with rows).
    let edges = || {
        let mut stop = req(3);
        stop["stop"] = json!(["number_4"]);
        let mut short = req(4);
        short["num_predict"] = json!(23);
        let mut lp = req(5);
        lp["logprobs"] = json!(true);
        lp["top_logprobs"] = json!(2);
        lp["num_predict"] = json!(60);
        [stop, short, lp]
    };
    let mut off = Vec::new();
    let mut off_edges = Vec::new();
    {
        let r = Runner::spawn(&smollm(), &["--ctx-size", "1024", "--no-grammar-ff"]);
        r.wait_ready().await;
        for seed in [1, 2] {
            off.push(complete(&r.socket, req(seed)).await);
        }
        for e in edges() {
            off_edges.push(complete(&r.socket, e).await);
        }
    }
    let r = Runner::spawn(&smollm(), &["--ctx-size", "1024"]);
    r.wait_ready().await;
    for (e, want) in edges().into_iter().zip(&off_edges) {
        let got = complete(&r.socket, e.clone()).await;
        assert_eq!(got.text, want.text, "{e}");
        assert_eq!(got.reason, want.reason, "{e}");
        assert_eq!(output_chunks(&got), output_chunks(want), "{e}");
        assert!(got.timings.accepted > 0, "{e}: {:?}", got.timings);
    }
    assert_eq!(off_edges[0].reason, DoneReason::Stop);
    assert!(!off_edges[0].text.contains("number_4"));
    assert_eq!(off_edges[1].timings.eval_count, 23);
    for (seed, want) in [1, 2].into_iter().zip(&off) {
        let got = complete(&r.socket, req(seed)).await;
        assert_eq!(got.text, want.text, "seed {seed}");
        assert_eq!(got.timings.eval_count, want.timings.eval_count);
        assert_eq!(want.timings.drafted, 0);
        let v: Value = serde_json::from_str(&got.text).expect("JSON");
        assert_eq!(v.as_object().unwrap().len(), 12, "{v}");
        // Much of the output is forced keys, drafted and (being forced) accepted.
        assert!(
            got.timings.accepted * 3 > got.timings.eval_count,
            "{:?}",
            got.timings
        );
        eprintln!(
            "seed {seed}: {} tokens, drafted {} accepted {}; tok/s ff {:.1} vs off {:.1}",
            got.timings.eval_count,
            got.timings.drafted,
            got.timings.accepted,
            got.timings.eval_count as f64 / (got.timings.eval_duration_ns as f64 / 1e9),
            want.timings.eval_count as f64 / (want.timings.eval_duration_ns as f64 / 1e9)
        );
    }
}

/// A ~400-token passage to copy: numbered facts with varied words, so the n-gram drafter must
/// find the right place, not just any repeat.
fn long_passage() -> String {
    let things = [
        "apples", "lamps", "keys", "maps", "coins", "books", "ropes", "bells",
    ];
    let places = [
        "the red box",
        "the attic",
        "the harbour",
        "the north tower",
        "a drawer",
    ];
    (0..24)
        .map(|i| {
            format!(
                "Fact {}: {} holds {} {}.",
                i + 1,
                places[i % places.len()],
                (i * 7 + 3) % 50,
                things[(i * 3) % things.len()]
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tps(t: &runner_protocol::Timings) -> f64 {
    t.eval_count as f64 / (t.eval_duration_ns as f64 / 1e9)
}

/// scripts/bench speculative: output tokens/s with grammar fast-forward on vs off (a schema of 20
/// required properties with short values) and with the n-gram drafter on vs off (copying a
/// ~400-token passage), SmolLM2 on one thread, one run each side.
#[tokio::test]
#[ignore]
async fn speculative_bench() {
    let _g = serial().await;
    let form = |seed: i64| {
        json!({
            "prompt": chatml("Fill in the form with small numbers, as JSON."),
            "num_predict": 600,
            "sampling": {"temperature": 0.7, "seed": seed, "top_k": 40, "top_p": 0.95},
            "constraint": {"type": "json_schema", "schema": keys_schema(20)},
        })
    };
    // The answer is started for the model, so even a small one goes on copying.
    let copy = greedy(
        &format!(
            "{}Fact 1:",
            chatml(&format!("Repeat this text exactly:\n{}", long_passage()))
        ),
        400,
    );
    let model = match std::env::var("HERD_BENCH_MODEL").as_deref() {
        Ok("gemma") => gemma(),
        _ => smollm(),
    };
    let run = |flags: &'static [&'static str], reqs: Vec<Value>| {
        let model = model.clone();
        async move {
            let mut args = vec!["--ctx-size", "2048"];
            args.extend_from_slice(flags);
            let r = Runner::spawn(&model, &args);
            r.wait_ready().await;
            let mut out = Vec::new();
            for req in reqs {
                out.push(complete(&r.socket, req).await);
            }
            out
        }
    };
    let forms: Vec<Value> = (1..=3).map(form).collect();
    let off = run(&["--no-grammar-ff"], forms.clone()).await;
    let on = run(&[], forms).await;
    let sum = |v: &[Completion]| {
        let n: u32 = v.iter().map(|c| c.timings.eval_count).sum();
        let ns: u64 = v.iter().map(|c| c.timings.eval_duration_ns).sum();
        n as f64 / (ns as f64 / 1e9)
    };
    for (a, b) in on.iter().zip(&off) {
        assert_eq!(a.text, b.text, "fast-forward changed the output");
    }
    let drafted: u32 = on.iter().map(|c| c.timings.drafted).sum();
    let accepted: u32 = on.iter().map(|c| c.timings.accepted).sum();
    eprintln!(
        "grammar ff (20 properties): {:.1} tok/s on vs {:.1} off = {:.2}x; drafted {drafted} accepted {accepted}",
        sum(&on),
        sum(&off),
        sum(&on) / sum(&off)
    );
    let off = run(&[], vec![copy.clone()]).await;
    let on = run(&["--draft-ngram", "8"], vec![copy]).await;
    assert_eq!(
        on[0].text, off[0].text,
        "n-gram drafting changed the output"
    );
    eprintln!(
        "n-gram copy ({} prompt tokens, {} out): {:.1} tok/s on vs {:.1} off = {:.2}x; drafted {} accepted {}",
        on[0].timings.prompt_eval_count,
        on[0].timings.eval_count,
        tps(&on[0].timings),
        tps(&off[0].timings),
        tps(&on[0].timings) / tps(&off[0].timings),
        on[0].timings.drafted,
        on[0].timings.accepted
    );
}
