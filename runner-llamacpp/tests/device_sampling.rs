//! Device sampling (`--device-sampling on`) against whole-row host sampling (`off`), with
//! gemma-3-270m on one thread. On CPU llama.cpp runs the backend top-k in the CPU graph, so the
//! candidate path is exercised without a GPU. The runner runs with OLLAMA_DEBUG, which makes it
//! log per request whether it samples from the device's candidates or from whole rows: the tests
//! check that the path they mean to exercise is the one taken.

mod common;

use common::*;
use hyper::StatusCode;
use runner_protocol::CompletionChunk;
use serde_json::{json, Value};
use std::time::Duration;

const DEVICE: &str = "sampling from the device's top 256";

/// A runner (one thread, 512-token context) with `--device-sampling mode`, stderr to a file.
async fn logged(mode: &str, extra: &[&str]) -> Logged {
    let mut flags = vec!["--ctx-size", "512", "--device-sampling", mode];
    flags.extend_from_slice(extra);
    Logged::ready(&gemma(), &flags).await
}

fn with(mut req: Value, key: &str, v: Value) -> Value {
    req["sampling"][key] = v;
    req
}

async fn run_all(socket: &std::path::Path, reqs: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for r in reqs {
        out.push(complete(socket, r.clone()).await.text);
    }
    out
}

#[tokio::test]
async fn device_candidates_give_the_bytes_of_whole_rows() {
    let _g = serial().await;
    let france = "The capital of France is";
    let story = "Once upon a time, in a small village,";
    let reqs = vec![
        sampled(france, 32, 42),
        sampled(france, 32, 43),
        sampled(story, 32, 7),
        with(sampled(story, 32, 7), "repeat_penalty", json!(1.1)),
        with(
            with(sampled(story, 32, 9), "repeat_penalty", json!(1.3)),
            "frequency_penalty",
            json!(0.4),
        ),
        greedy(france, 24),
        with(greedy(story, 24), "repeat_penalty", json!(1.3)),
    ];
    let off = logged("off", &[]).await;
    let want = run_all(off.socket(), &reqs).await;
    assert!(off
        .lines()
        .contains(&"device sampling off (--device-sampling)".to_string()));
    assert!(!off.lines().iter().any(|l| l.contains("sampling from")));
    drop(off);

    let on = logged("on", &[]).await;
    let got = run_all(on.socket(), &reqs).await;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(!w.is_empty(), "request {i} produced nothing");
        assert_eq!(g, w, "request {i}: {}", reqs[i]);
    }
    // Seeds matter (the draws are really random), so equal bytes are not a greedy accident.
    assert_ne!(want[0], want[1]);
    assert_ne!(want[2], want[3], "the repeat penalty changes the draw");
    let lines = on.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("device sampling on, top 256")),
        "{lines:?}"
    );
    let device = lines.iter().filter(|l| l.ends_with(DEVICE)).count();
    assert_eq!(device, reqs.len(), "{lines:?}");
}

/// Requests that need whole rows (log-probabilities, a format, top_k 0) and an embedding call
/// share the runner with device-sampled requests; all give their solo bytes, and the whole-row
/// ones give the bytes of a runner without device sampling.
#[tokio::test]
async fn whole_row_requests_work_beside_device_sampled_ones() {
    let _g = serial().await;
    let flags = ["--parallel", "4", "--no-repack"];
    let story = "Once upon a time, in a small village,";
    let mut lp = greedy("The chemical symbol for gold is", 12);
    lp["logprobs"] = json!(true);
    lp["top_logprobs"] = json!(3);
    let mut format = sampled("A person as JSON: ", 24, 5);
    format["constraint"] = json!({"type": "json"});
    let reqs = vec![
        sampled(story, 40, 11),
        lp,
        format,
        with(sampled("1, 2, 3, 4,", 16, 3), "top_k", json!(0)),
        greedy("The capital of Germany is", 40),
    ];

    let off = logged("off", &flags).await;
    let whole = run_all(off.socket(), &reqs).await;
    drop(off);

    let on = logged("on", &flags).await;
    let solo = run_all(on.socket(), &reqs).await;
    assert_eq!(solo, whole, "solo, device sampling on vs off");

    // All at once, with an embedding call in the middle (it detaches every chain and
    // reattaches them while requests are in flight).
    let handles: Vec<_> = reqs
        .iter()
        .map(|req| {
            let (socket, req) = (on.socket().to_path_buf(), req.clone());
            tokio::spawn(async move { complete(&socket, req).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, body) = call(
        on.socket(),
        "POST",
        "/embed",
        Some(json!({"inputs": ["hello world"]})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let mut together = Vec::new();
    for h in handles {
        together.push(h.await.unwrap());
    }
    for (i, c) in together.iter().enumerate() {
        assert_eq!(c.text, solo[i], "request {i} together vs solo");
    }
    // Every token of the logprobs request carries its log-probabilities.
    for chunk in &together[1].chunks {
        if let CompletionChunk::Token { logprobs, .. } = chunk {
            assert!(!logprobs.is_empty() && logprobs.iter().all(|l| l.top_logprobs.len() == 3));
        }
    }
    let lines = on.lines();
    for why in ["(Logprobs)", "(Mask)", "(NoTopK)"] {
        let n = lines
            .iter()
            .filter(|l| l.contains("whole rows") && l.ends_with(why))
            .count();
        assert_eq!(n, 2, "{why} once solo, once together: {lines:?}");
    }
    assert_eq!(lines.iter().filter(|l| l.ends_with(DEVICE)).count(), 4);
}

/// A drafting runner never samples on the device, `on` included: a verify step has several
/// outputs of one sequence, which llama.cpp's device samplers refuse (`llama_decode` failed
/// with -1 on every drafted step on an H200 before). The drafts are really taken and the
/// bytes are those of the runner without device sampling.
#[tokio::test]
async fn drafting_turns_device_sampling_off() {
    let _g = serial().await;
    let copy = format!(
        "Repeat this list exactly: {0}\nThe list again: {0}\nAnd once more:",
        "apple, pear, plum, cherry, grape, lemon, melon, peach, mango, kiwi"
    );
    let req = greedy(&copy, 48);
    let off = logged("off", &[]).await;
    let want = complete(off.socket(), req.clone()).await;
    drop(off);
    let on = logged("on", &["--draft-ngram", "8", "--draft-cost", "0"]).await;
    let got = complete(on.socket(), req).await;
    assert_eq!(got.text, want.text);
    assert!(got.timings.drafted > 0, "{:?}", got.timings);
    let lines = on.lines();
    assert!(
        lines.contains(
            &"device sampling off (drafting verifies several tokens of a sequence in one step)"
                .to_string()
        ),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.ends_with(DEVICE)), "{lines:?}");
}
