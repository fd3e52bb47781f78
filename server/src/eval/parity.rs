//! `herd eval parity`: does herd's runner compute what llama.cpp's own llama-server computes
//! from the same weights? For each fixed prompt, the first generated step's top-k log-probs are
//! read from both — herd through `/api/generate` (`raw`, `logprobs`, `top_logprobs`), llama-server
//! through its `/completion` (`n_probs`, `post_sampling_probs: false`, which llama-server computes
//! as a softmax of the raw logits before any sampler, as herd's runner does) — and compared: the
//! argmax (the top-1 token of each) and the largest |Δlogprob| over the tokens both top-k lists
//! share, raw and net of the softmax normalizer (see [`Verdict`]). Greedy settings and no penalties on both sides, so neither distorts the distribution or
//! the chosen token; llama-server's prompt cache off, so each prompt is evaluated from scratch.
//!
//! Both servers must already run the same GGUF with the same threads, batch and context (the
//! README shows the llama-server command line; `scripts/llama-server` builds it from the pinned
//! tree). Tokens are matched by their bytes. A prompt whose token counts differ between the two
//! is reported (`tokens` shows both), since then the two did not see the same input.

use anyhow::{bail, Context};
use reqwest::Method;
use serde::Serialize;
use serde_json::{json, Value};

use super::ParityArgs;
use crate::cli::client::Client;

/// The built-in prompts: short, plain text (no special tokens), varied enough that the
/// distributions differ in shape (a near-certain continuation, an open one, code, numbers).
pub const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    ",
    "1, 2, 3, 5, 8, 13,",
    "The quick brown fox",
    "Water boils at a temperature of",
    "Q: What is the largest planet in the solar system?\nA:",
    "In 1969, the first person to walk on the Moon was",
];

/// One token of a top-k list: its bytes (the match key) and log-probability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub token: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// One prompt's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub prompt: String,
    pub tokens_herd: u64,
    pub tokens_llama: u64,
    pub top_herd: String,
    pub top_llama: String,
    pub argmax_agrees: bool,
    /// Tokens in both top-k lists.
    pub shared: usize,
    pub max_abs_delta: f64,
    pub max_abs_delta_net: f64,
}

/// How two top-k lists compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub argmax_agrees: bool,
    pub shared: usize,
    /// Largest |Δlogprob| over the shared tokens.
    pub max_abs_delta: f64,
    /// The same net of one constant per prompt (the first shared token's Δ): what differs in
    /// the logits themselves, not in the softmax normalizer. llama-server sums the normalizer
    /// in `float` over the whole vocabulary, where terms below half an ulp of the running sum
    /// vanish; herd's runner sums in f64. On a 262k vocabulary (gemma3) that alone shifts every
    /// log-prob of a prompt by the same few 1e-4, which this figure removes.
    pub max_abs_delta_net: f64,
}

/// Compares two top-k lists (each sorted best first): argmax agreement, and the largest
/// |Δlogprob| over the shared tokens, raw and net of the normalizer (0 when none are shared).
pub fn compare(herd: &[Candidate], llama: &[Candidate]) -> Verdict {
    let argmax_agrees = match (herd.first(), llama.first()) {
        (Some(a), Some(b)) => a.bytes == b.bytes,
        _ => false,
    };
    let deltas: Vec<f64> = herd
        .iter()
        .filter_map(|a| {
            let b = llama.iter().find(|b| b.bytes == a.bytes)?;
            Some(a.logprob - b.logprob)
        })
        .collect();
    let shift = deltas.first().copied().unwrap_or(0.0);
    Verdict {
        argmax_agrees,
        shared: deltas.len(),
        max_abs_delta: deltas.iter().map(|d| d.abs()).fold(0.0, f64::max),
        max_abs_delta_net: deltas.iter().map(|d| (d - shift).abs()).fold(0.0, f64::max),
    }
}

/// A top-k entry as either server writes it: `token`, `logprob` and (when present) `bytes`.
fn candidate(v: &Value) -> anyhow::Result<Candidate> {
    let token = v["token"].as_str().unwrap_or_default().to_owned();
    let bytes = match v["bytes"].as_array() {
        Some(b) => b
            .iter()
            .map(|x| x.as_u64().and_then(|n| u8::try_from(n).ok()))
            .collect::<Option<Vec<u8>>>()
            .context("a token's bytes are not bytes")?,
        None => token.as_bytes().to_vec(),
    };
    let logprob = v["logprob"]
        .as_f64()
        .context("a top-k entry has no logprob")?;
    Ok(Candidate {
        token,
        bytes,
        logprob,
    })
}

fn candidates(list: &Value) -> anyhow::Result<Vec<Candidate>> {
    list.as_array()
        .context("no top-k list in the response")?
        .iter()
        .map(candidate)
        .collect()
}

/// The prompts: `--prompts FILE` (one per line; a line may be a JSON string to hold newlines),
/// else the built-in set.
fn prompts(args: &ParityArgs) -> anyhow::Result<Vec<String>> {
    let Some(path) = &args.prompts else {
        return Ok(PROMPTS.iter().map(|p| p.to_string()).collect());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if line.trim_start().starts_with('"') {
            let p: String = serde_json::from_str(line)
                .with_context(|| format!("{} line {}: not a JSON string", path.display(), i + 1))?;
            out.push(p);
        } else {
            out.push(line.to_owned());
        }
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

async fn herd_step(
    client: &Client,
    model: &str,
    prompt: &str,
    args: &ParityArgs,
) -> anyhow::Result<(Vec<Candidate>, u64)> {
    let mut options = json!({"temperature": 0, "num_predict": 1, "repeat_penalty": 1.0,
                             "presence_penalty": 0, "frequency_penalty": 0, "seed": 0});
    if let Some(t) = args.threads {
        options["num_thread"] = json!(t);
    }
    let body = json!({"model": model, "prompt": prompt, "raw": true, "stream": false,
                      "logprobs": true, "top_logprobs": args.top_k, "options": options});
    let resp: Value = client
        .json(Method::POST, "/api/generate", Some(&body))
        .await?;
    let first = &resp["logprobs"][0];
    if first.is_null() {
        bail!("herd returned no logprobs for {prompt:?}");
    }
    Ok((
        candidates(&first["top_logprobs"])?,
        resp["prompt_eval_count"].as_u64().unwrap_or(0),
    ))
}

async fn llama_step(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    top_k: u32,
) -> anyhow::Result<(Vec<Candidate>, u64)> {
    let body = json!({"prompt": prompt, "n_predict": 1, "n_probs": top_k, "temperature": 0,
                      "post_sampling_probs": false, "cache_prompt": false, "seed": 0,
                      "repeat_penalty": 1.0, "presence_penalty": 0, "frequency_penalty": 0,
                      "stream": false});
    let resp = http
        .post(format!("{base}/completion"))
        .json(&body)
        .send()
        .await
        .with_context(|| format!("could not reach llama-server at {base}"))?;
    let status = resp.status();
    let v: Value = resp.json().await.context("decoding llama-server's reply")?;
    if !status.is_success() {
        bail!("llama-server answered {status}: {v}");
    }
    let first = &v["completion_probabilities"][0];
    if first.is_null() {
        bail!("llama-server returned no completion_probabilities for {prompt:?}");
    }
    let tokens = v["tokens_evaluated"]
        .as_u64()
        .or_else(|| v["timings"]["prompt_n"].as_u64())
        .unwrap_or(0);
    Ok((candidates(&first["top_logprobs"])?, tokens))
}

pub async fn run(args: ParityArgs) -> anyhow::Result<()> {
    if !(1..=20).contains(&args.top_k) {
        bail!("--top-k must be between 1 and 20 (the API's top_logprobs range)");
    }
    let client = Client::new(&args.client.host)?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => super::run::only_model(&client).await?,
    };
    let base = args.llama_server.trim_end_matches('/').to_owned();
    let http = reqwest::Client::new();
    let props: Value = match http.get(format!("{base}/props")).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(e) => bail!("could not reach llama-server at {base}: {e}"),
    };
    let version: Value = client
        .json(Method::GET, "/api/version", None::<&()>)
        .await?;
    let mut rows = Vec::new();
    for prompt in prompts(&args)? {
        let (herd, tokens_herd) = herd_step(&client, &model, &prompt, &args).await?;
        let (llama, tokens_llama) = llama_step(&http, &base, &prompt, args.top_k).await?;
        let v = compare(&herd, &llama);
        rows.push(Row {
            prompt,
            tokens_herd,
            tokens_llama,
            top_herd: herd.first().map(|c| c.token.clone()).unwrap_or_default(),
            top_llama: llama.first().map(|c| c.token.clone()).unwrap_or_default(),
            argmax_agrees: v.argmax_agrees,
            shared: v.shared,
            max_abs_delta: v.max_abs_delta,
            max_abs_delta_net: v.max_abs_delta_net,
        });
    }
    let agree = rows.iter().filter(|r| r.argmax_agrees).count();
    let max = rows.iter().map(|r| r.max_abs_delta).fold(0.0, f64::max);
    let net = rows.iter().map(|r| r.max_abs_delta_net).fold(0.0, f64::max);
    if args.json {
        let record = json!({
            "model": model,
            "top_k": args.top_k,
            "herd": {"host": client.base(), "version": version},
            "llama_server": {"url": base, "model_path": props["model_path"],
                             "build_info": props["build_info"]},
            "prompts": rows,
            "argmax_agreement": agree as f64 / rows.len() as f64,
            "max_abs_delta": max,
            "max_abs_delta_net": net,
        });
        println!("{}", serde_json::to_string_pretty(&record)?);
        return Ok(());
    }
    print!("{}", table(&rows));
    println!(
        "argmax agreement {agree}/{} ({:.1} %), max |Δlogprob| {max:.3e} over shared top-{} tokens \
         ({net:.3e} net of the softmax normalizer)",
        rows.len(),
        100.0 * agree as f64 / rows.len() as f64,
        args.top_k
    );
    Ok(())
}

/// The per-prompt table (prompts cut to 32 characters, tokens shown as JSON strings).
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<34} {:>9} {:<16} {:<16} {:>6} {:>11} {:>11}\n",
        "prompt", "tokens", "herd top-1", "llama top-1", "shared", "max |Δ|", "net |Δ|"
    );
    for r in rows {
        let mut p = json!(r.prompt).to_string();
        if p.chars().count() > 32 {
            p = p.chars().take(31).collect::<String>() + "…";
        }
        let tokens = if r.tokens_herd == r.tokens_llama {
            r.tokens_herd.to_string()
        } else {
            format!("{}≠{}", r.tokens_herd, r.tokens_llama)
        };
        let mark = if r.argmax_agrees { "" } else { " ✗" };
        out.push_str(&format!(
            "{p:<34} {tokens:>9} {:<16} {:<16} {:>6} {:>11.3e} {:>11.3e}{mark}\n",
            json!(r.top_herd).to_string(),
            json!(r.top_llama).to_string(),
            r.shared,
            r.max_abs_delta,
            r.max_abs_delta_net
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(token: &str, logprob: f64) -> Candidate {
        Candidate {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob,
        }
    }

    #[test]
    fn compares_argmax_and_shared_tokens() {
        type Case = (Vec<Candidate>, Vec<Candidate>, (bool, usize, f64, f64));
        let cases: Vec<Case> = vec![
            (
                vec![c(" Paris", -0.1), c(" a", -2.0)],
                vec![c(" Paris", -0.1), c(" a", -2.0)],
                (true, 2, 0.0, 0.0),
            ),
            // A normalizer shift: every log-prob off by the same amount.
            (
                vec![c(" Paris", -0.1004), c(" a", -2.0004)],
                vec![c(" Paris", -0.1), c(" a", -2.0)],
                (true, 2, 0.0004, 0.0),
            ),
            // Order of the tail differs, one token only on one side.
            (
                vec![c(" Paris", -0.10), c(" a", -2.0), c(" the", -2.5)],
                vec![c(" Paris", -0.11), c(" the", -2.4), c(" in", -3.0)],
                (true, 2, 0.1, 0.11),
            ),
            // Different argmax.
            (
                vec![c(" a", -0.5), c(" Paris", -0.9)],
                vec![c(" Paris", -0.5), c(" a", -0.9)],
                (false, 2, 0.4, 0.8),
            ),
            (vec![], vec![c("x", -1.0)], (false, 0, 0.0, 0.0)),
        ];
        for (herd, llama, (agree, shared, max, net)) in cases {
            let got = compare(&herd, &llama);
            assert_eq!(
                (got.argmax_agrees, got.shared),
                (agree, shared),
                "{herd:?} {llama:?}"
            );
            assert!((got.max_abs_delta - max).abs() < 1e-9, "{got:?} vs {max}");
            assert!(
                (got.max_abs_delta_net - net).abs() < 1e-9,
                "{got:?} vs {net}"
            );
        }
    }

    #[test]
    fn candidates_are_keyed_by_bytes_when_given() {
        let v = json!([{"token": "\u{fffd}", "bytes": [0xe2, 0x80], "logprob": -1.5},
                       {"id": 7, "token": "ok", "logprob": -2.0}]);
        let got = candidates(&v).unwrap();
        assert_eq!(got[0].bytes, vec![0xe2, 0x80]);
        assert_eq!(got[1].bytes, b"ok".to_vec());
        assert!(candidates(&json!([{"token": "x"}])).is_err());
    }

    #[test]
    fn table_marks_disagreement_and_token_mismatch() {
        let rows = [Row {
            prompt: "a very long prompt that will not fit in the column".into(),
            tokens_herd: 5,
            tokens_llama: 6,
            top_herd: " a".into(),
            top_llama: " b".into(),
            argmax_agrees: false,
            shared: 19,
            max_abs_delta: 2.5e-6,
            max_abs_delta_net: 1.0e-7,
        }];
        let t = table(&rows);
        assert!(t.contains("5≠6"), "{t}");
        assert!(t.contains('✗'), "{t}");
        assert!(t.contains("2.500e-6"), "{t}");
    }
}
