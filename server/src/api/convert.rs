//! Conversions between the native API's types and the runner protocol, for the code that
//! implements `Inference`: options → sampling, load options and the completion request;
//! `format` → grammar constraint; runner timings → `Metrics`; runner logprobs → API logprobs.
//! Pure and table-tested, so the glue only wires calls together.

use std::time::Duration;

use runner_protocol::{
    CompletionRequest, Constraint, DoneReason, LoadOptions, Sampling, Timings,
    TokenLogprob as RunnerLogprob,
};

use super::options::Options;
use super::request::Format;
use super::types::{Logprob, Metrics, TokenLogprob};

fn clamp_i32(v: i64) -> i32 {
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

impl Options {
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: clamp_i32(self.top_k),
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            repeat_last_n: clamp_i32(self.repeat_last_n),
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
        }
    }

    /// Writes the runner-shaping options into `load` (its `model` and the engine-wide fields
    /// are the caller's). `num_ctx` 0 leaves the scheduler's choice in place; a positive
    /// `num_batch` is the batch and the micro-batch alike (Ollama's `-b N -ub N`), unset or not
    /// positive it keeps the load's (`engine::batch` replaces it per kind of model); `num_gpu`
    /// -1 means "as many layers as fit"; `use_mmap` unset keeps mmap on.
    pub fn apply_to_load(&self, load: &mut LoadOptions) {
        let r = &self.runner;
        if r.num_ctx > 0 {
            load.ctx_size = u32::try_from(r.num_ctx).unwrap_or(u32::MAX);
        }
        if let Some(b) = r.num_batch.filter(|&b| b > 0) {
            let batch = u32::try_from(b).unwrap_or(u32::MAX);
            load.batch = batch;
            load.ubatch = batch;
        }
        load.gpu_layers = clamp_i32(r.num_gpu);
        load.main_gpu = r.main_gpu.and_then(|g| u32::try_from(g).ok());
        load.threads = u32::try_from(r.num_thread).unwrap_or(0);
        load.mmap = r.use_mmap.unwrap_or(true);
        // `draft_num_predict` ≤ 0 turns the draft model off; the runner takes at most 64.
        if r.draft_num_predict <= 0 {
            load.draft_model = None;
        }
        load.draft_max = match load.draft_model {
            Some(_) => u32::try_from(r.draft_num_predict.clamp(1, 64)).unwrap_or(1),
            None => 0,
        };
    }

    /// Bounds what one request may make a runner allocate or spawn (issue 22 item 6), applied
    /// once the effective context is known: a batch larger than the context only allocates
    /// buffers that can never fill (llama.cpp sizes its compute graph by it), and more threads
    /// than `cpus` only contend. `ctx_size` 0 (the scheduler's choice) leaves the batch alone.
    pub fn clamp_load(load: &mut LoadOptions, cpus: u32) {
        if load.ctx_size > 0 {
            load.batch = load.batch.min(load.ctx_size);
            load.ubatch = load.ubatch.min(load.batch);
        }
        load.threads = load.threads.min(cpus.max(1));
    }

    /// A completion request for `prompt` carrying these options (the caller sets `prompt`,
    /// `shift`, `truncate`, logprobs and the constraint as the request demands).
    pub fn completion_request(&self) -> CompletionRequest {
        CompletionRequest {
            sampling: self.sampling(),
            num_predict: clamp_i32(self.num_predict),
            num_keep: clamp_i32(self.num_keep),
            stop: self.stop.clone(),
            ..CompletionRequest::default()
        }
    }
}

/// The grammar for a `format`; `thinking_close` are the strings that end the model's thinking
/// when the response starts inside it (empty: the constraint applies from the first token).
pub fn constraint(format: &Format, thinking_close: Vec<String>) -> Option<Constraint> {
    match format {
        Format::None => None,
        Format::Json => Some(Constraint::Json { thinking_close }),
        Format::Schema(schema) => Some(Constraint::JsonSchema {
            schema: schema.clone(),
            thinking_close,
        }),
    }
}

pub fn done_reason(r: DoneReason) -> &'static str {
    match r {
        DoneReason::Stop => "stop",
        DoneReason::Length => "length",
    }
}

/// The final chunk's metrics: runner timings plus the server-measured load and total times.
/// `prompt_eval_count` is the whole prompt, cached tokens included (Ollama since 0.30); the
/// cached part rides along for the layers that report it separately.
pub fn metrics(t: &Timings, load: Duration, total: Duration) -> Metrics {
    Metrics {
        total_duration: total.as_nanos() as u64,
        load_duration: load.as_nanos() as u64,
        prompt_eval_count: u64::from(t.prompt_eval_count) + u64::from(t.cached_tokens),
        prompt_cached: u64::from(t.cached_tokens),
        prompt_eval_duration: t.prompt_eval_duration_ns,
        eval_count: u64::from(t.eval_count),
        eval_duration: t.eval_duration_ns,
        prompt_announced: 0,
    }
}

pub fn logprobs(lps: &[RunnerLogprob]) -> Vec<Logprob> {
    lps.iter()
        .map(|lp| Logprob {
            token: token_logprob(&lp.bytes, &lp.token, lp.logprob),
            top_logprobs: lp
                .top_logprobs
                .iter()
                .map(|t| token_logprob(&t.bytes, &t.token, t.logprob))
                .collect(),
        })
        .collect()
}

/// One token's entry as Ollama reports it: the text llama-server sends for the token's raw
/// bytes (a multi-byte character cut off at the end dropped, by its `validate_utf8`, and
/// other invalid bytes as U+FFFD, by its JSON writer), and `bytes` that text's own bytes
/// (Ollama's `stringToByteInts`), so the two always agree. `raw` empty: `text` as given.
fn token_logprob(raw: &[u8], text: &str, logprob: f32) -> TokenLogprob {
    let token = if raw.is_empty() {
        text.to_owned()
    } else {
        String::from_utf8_lossy(&raw[..complete_utf8_prefix(raw)]).into_owned()
    };
    TokenLogprob {
        bytes: token.as_bytes().to_vec(),
        token,
        logprob: f64::from(logprob),
    }
}

/// llama-server's `validate_utf8`: the length of `b` without a multi-byte character whose lead
/// byte is among the last four and whose continuation bytes are not all there.
fn complete_utf8_prefix(b: &[u8]) -> usize {
    let len = b.len();
    for i in 1..=len.min(4) {
        let c = b[len - i];
        let needs = match c {
            _ if c & 0xE0 == 0xC0 => 2,
            _ if c & 0xF0 == 0xE0 => 3,
            _ if c & 0xF8 == 0xF0 => 4,
            _ => continue,
        };
        if i < needs {
            return len - i;
        }
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_protocol::TopLogprob;
    use serde_json::json;

    #[test]
    fn logprob_tokens_and_bytes_agree_as_in_ollama() {
        // (raw token bytes, text Ollama reports)
        let cases: [(&[u8], &str); 6] = [
            (b"hi", "hi"),
            ("\u{1F600}".as_bytes(), "\u{1F600}"),
            // The first two bytes of a four-byte emoji: cut off, nothing left.
            (&[240, 159], ""),
            // A lone continuation byte is not a cut-off lead: invalid, U+FFFD.
            (&[140], "\u{FFFD}"),
            // Text, then a character cut off after its lead byte.
            (&[b'a', 0xE2], "a"),
            // A complete two-byte character.
            ("é".as_bytes(), "é"),
        ];
        for (raw, want) in cases {
            let t = token_logprob(raw, "ignored", -0.5);
            assert_eq!(t.token, want, "{raw:?}");
            assert_eq!(t.bytes, want.as_bytes(), "{raw:?}");
        }
        // A runner that sends no bytes: its text as given.
        let t = token_logprob(&[], "x", 0.0);
        assert_eq!((t.token.as_str(), t.bytes.as_slice()), ("x", &b"x"[..]));
    }

    #[test]
    fn options_to_runner() {
        let mut o = Options::defaults(0);
        o.apply(
            &serde_json::from_value(json!({
                "temperature": 0.1, "top_k": 5, "seed": 42, "num_predict": 128, "stop": ["\n"],
                "num_ctx": 2048, "num_batch": 256, "num_gpu": 0, "main_gpu": 1, "use_mmap": false,
                "num_thread": 4
            }))
            .unwrap(),
        )
        .unwrap();
        let req = o.completion_request();
        assert_eq!(req.sampling.temperature, 0.1);
        assert_eq!((req.sampling.top_k, req.sampling.seed), (5, 42));
        assert_eq!((req.num_predict, req.num_keep), (128, 4));
        assert_eq!(req.stop, vec!["\n"]);
        assert_eq!(Options::defaults(0).sampling(), Sampling::default());

        let mut load = LoadOptions::default();
        o.apply_to_load(&mut load);
        assert_eq!((load.ctx_size, load.batch, load.ubatch), (2048, 256, 256));
        assert_eq!(
            (load.gpu_layers, load.main_gpu, load.threads, load.mmap),
            (0, Some(1), 4, false)
        );

        // Defaults leave the scheduler's context choice and mmap alone.
        let mut load = LoadOptions::default();
        Options::defaults(0).apply_to_load(&mut load);
        assert_eq!(load, LoadOptions::default());
    }

    #[test]
    fn draft_num_predict_to_load_table() {
        // (model has a DRAFT layer, draft_num_predict) → (draft model kept, draft_max)
        let cases = [
            (true, None, true, 4),
            (true, Some(8), true, 8),
            (true, Some(1000), true, 64),
            (true, Some(0), false, 0),
            (true, Some(-3), false, 0),
            (false, Some(8), false, 0),
        ];
        for (has, n, kept, max) in cases {
            let mut o = Options::defaults(0);
            if let Some(n) = n {
                o.apply(&serde_json::from_value(json!({ "draft_num_predict": n })).unwrap())
                    .unwrap();
            }
            let mut load = LoadOptions {
                draft_model: has.then(|| "/m/blobs/sha256-d".into()),
                ..LoadOptions::default()
            };
            o.apply_to_load(&mut load);
            assert_eq!(
                (load.draft_model.is_some(), load.draft_max),
                (kept, max),
                "{has} {n:?}"
            );
        }
    }

    #[test]
    fn load_clamps_table() {
        // (ctx_size, batch, ubatch, threads, cpus) → (batch, ubatch, threads)
        let cases = [
            ((2048, 1_000_000_000, 512, 0, 16), (2048, 512, 0)),
            ((2048, 512, 512, 4, 16), (512, 512, 4)),
            ((256, 512, 512, 256, 16), (256, 256, 16)),
            ((4096, 4096, 512, 100_000, 2), (4096, 512, 2)),
            ((0, 1_000_000_000, 512, 8, 0), (1_000_000_000, 512, 1)),
        ];
        for ((ctx, batch, ubatch, threads, cpus), want) in cases {
            let mut load = LoadOptions {
                ctx_size: ctx,
                batch,
                ubatch,
                threads,
                ..LoadOptions::default()
            };
            Options::clamp_load(&mut load, cpus);
            assert_eq!(
                (load.batch, load.ubatch, load.threads),
                want,
                "{ctx} {batch} {threads}"
            );
        }
    }

    #[test]
    fn format_to_constraint() {
        assert_eq!(constraint(&Format::None, vec![]), None);
        assert_eq!(
            constraint(&Format::Json, vec!["</think>".into()]),
            Some(Constraint::Json {
                thinking_close: vec!["</think>".into()]
            })
        );
        let schema = json!({"type": "object"});
        assert_eq!(
            constraint(&Format::Schema(schema.clone()), vec![]),
            Some(Constraint::JsonSchema {
                schema,
                thinking_close: vec![]
            })
        );
    }

    #[test]
    fn timings_and_logprobs() {
        let t = Timings {
            prompt_eval_count: 10,
            prompt_eval_duration_ns: 2_000,
            eval_count: 5,
            eval_duration_ns: 9_000,
            cached_tokens: 3,
            ..Timings::default()
        };
        let m = metrics(&t, Duration::from_millis(1), Duration::from_millis(20));
        // The whole prompt: 10 evaluated + 3 from the cache (Ollama since 0.30).
        assert_eq!(m.prompt_cached, 3);
        assert_eq!(
            serde_json::to_value(m).unwrap(),
            json!({"total_duration": 20_000_000, "load_duration": 1_000_000, "prompt_eval_count": 13,
                   "prompt_eval_duration": 2000, "eval_count": 5, "eval_duration": 9000})
        );
        assert_eq!(
            (
                done_reason(DoneReason::Stop),
                done_reason(DoneReason::Length)
            ),
            ("stop", "length")
        );
        let lp = logprobs(&[RunnerLogprob {
            token: "a".into(),
            logprob: -0.5,
            bytes: vec![97],
            top_logprobs: vec![TopLogprob {
                token: "b".into(),
                logprob: -1.0,
                bytes: vec![98],
            }],
        }]);
        assert_eq!(
            serde_json::to_value(&lp).unwrap(),
            json!([{"token": "a", "logprob": -0.5, "bytes": [97],
                    "top_logprobs": [{"token": "b", "logprob": -1.0, "bytes": [98]}]}])
        );
    }
}
