//! Model options (`options` in requests, the `params` layer of a model): Ollama's `Options` /
//! `Runner` structs, its defaults, and `FromMap` semantics — unknown keys ignored with a
//! warning, `null` skipped, integers accept any JSON number and truncate toward zero, a wrongly
//! typed value fails the request with 500 `option "x" must be of type …`. Precedence is
//! request > Modelfile (params layer) > environment (`OLLAMA_CONTEXT_LENGTH`).

use serde::Serialize;
use serde_json::{Map, Value};

use super::show::go_quote;
use crate::error::{Error, Result};

/// Options that decide how a runner is loaded; a change means a reload (Ollama's `Runner`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunnerOptions {
    /// 0 = chosen by the scheduler from memory (the VRAM tier).
    pub num_ctx: i64,
    /// `None` = not set by the model or the request: Ollama's automatic batch for a generation
    /// model (512 to 2048 by context and memory) or its embedding default
    /// (`engine::batch`), which is why unset is kept apart.
    pub num_batch: Option<i64>,
    /// -1 = as many layers as fit.
    pub num_gpu: i64,
    pub main_gpu: Option<i64>,
    pub use_mmap: Option<bool>,
    /// 0 = runtime decides.
    pub num_thread: i64,
    pub draft_num_predict: i64,
}

/// Ollama's `Options` (sampling and prediction) plus the runner part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Options {
    #[serde(flatten)]
    pub runner: RunnerOptions,
    pub num_keep: i64,
    pub seed: i64,
    /// -1 = unlimited.
    pub num_predict: i64,
    pub top_k: i64,
    pub top_p: f32,
    pub min_p: f32,
    pub typical_p: f32,
    pub repeat_last_n: i64,
    pub temperature: f32,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub stop: Vec<String>,
    /// Per-image token budget bounds for dynamic-resolution projectors (`crate::images::
    /// budget`); `None` = each image picks its own. Positive when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_min_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_max_tokens: Option<u32>,
}

impl Options {
    /// `api.DefaultOptions()`; `context_length` is `OLLAMA_CONTEXT_LENGTH` (0 = automatic).
    pub fn defaults(context_length: u32) -> Options {
        Options {
            runner: RunnerOptions {
                num_ctx: i64::from(context_length),
                num_batch: None,
                num_gpu: -1,
                main_gpu: None,
                use_mmap: None,
                num_thread: 0,
                draft_num_predict: 4,
            },
            num_keep: 4,
            seed: -1,
            num_predict: -1,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.0,
            typical_p: 1.0,
            repeat_last_n: 64,
            temperature: 0.8,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            stop: Vec::new(),
            image_min_tokens: None,
            image_max_tokens: None,
        }
    }

    /// Defaults, then the model's params layer, then the request's `options`.
    pub fn resolve(
        context_length: u32,
        model_params: &Map<String, Value>,
        request: Option<&Map<String, Value>>,
    ) -> Result<Options> {
        let mut opts = Options::defaults(context_length);
        opts.apply(model_params)?;
        if let Some(req) = request {
            opts.apply(req)?;
        }
        Ok(opts)
    }

    /// Ollama's `FromMap` over one map, in its key order. Returns the keys that were ignored
    /// because no option has that name (already logged as warnings).
    pub fn apply(&mut self, map: &Map<String, Value>) -> Result<Vec<String>> {
        let mut ignored = Vec::new();
        for (key, val) in map {
            if val.is_null() {
                continue;
            }
            let r = &mut self.runner;
            match key.as_str() {
                "num_ctx" => r.num_ctx = int(key, val)?,
                "num_batch" => r.num_batch = Some(int(key, val)?),
                "num_gpu" => r.num_gpu = int(key, val)?,
                "main_gpu" => r.main_gpu = Some(int(key, val)?),
                "use_mmap" => r.use_mmap = Some(boolean(key, val)?),
                "num_thread" => r.num_thread = int(key, val)?,
                "draft_num_predict" => r.draft_num_predict = int(key, val)?,
                "num_keep" => self.num_keep = int(key, val)?,
                "seed" => self.seed = int(key, val)?,
                "num_predict" => self.num_predict = int(key, val)?,
                "top_k" => self.top_k = int(key, val)?,
                "top_p" => self.top_p = float(key, val)?,
                "min_p" => self.min_p = float(key, val)?,
                "typical_p" => self.typical_p = float(key, val)?,
                "repeat_last_n" => self.repeat_last_n = int(key, val)?,
                "temperature" => self.temperature = float(key, val)?,
                "repeat_penalty" => self.repeat_penalty = float(key, val)?,
                "presence_penalty" => self.presence_penalty = float(key, val)?,
                "frequency_penalty" => self.frequency_penalty = float(key, val)?,
                "stop" => self.stop = strings(key, val)?,
                // Image budgets are acted on where images are sized (crate::images), or
                // refused there for a projector whose image size is fixed.
                "image_min_tokens" => self.image_min_tokens = Some(tokens(key, val)?),
                "image_max_tokens" => self.image_max_tokens = Some(tokens(key, val)?),
                _ => {
                    tracing::warn!(option = %key, "invalid option provided");
                    ignored.push(key.clone());
                }
            }
        }
        Ok(ignored)
    }
}

fn type_error(key: &str, kind: &str) -> Error {
    // 500, as Ollama answers a wrongly typed option.
    Error::Internal(format!("option {} must be of type {kind}", go_quote(key)))
}

/// Any JSON number, truncated toward zero (Go's `int64(float64)`), saturating at the i64 range.
fn int(key: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Number(n) => Ok(n
            .as_i64()
            .unwrap_or_else(|| n.as_f64().map_or(0, |f| f.trunc() as i64))),
        _ => Err(type_error(key, "integer")),
    }
}

/// A token count option: an integer (as [`int`]) that must be positive (400 otherwise).
fn tokens(key: &str, v: &Value) -> Result<u32> {
    let n = int(key, v)?;
    u32::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
        Error::BadRequest(format!(
            "option {} must be a positive number of tokens (got {n})",
            go_quote(key)
        ))
    })
}

fn float(key: &str, v: &Value) -> Result<f32> {
    v.as_f64()
        .map(|f| f as f32)
        .ok_or_else(|| type_error(key, "float32"))
}

fn boolean(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| type_error(key, "boolean"))
}

fn strings(key: &str, v: &Value) -> Result<Vec<String>> {
    let Value::Array(items) = v else {
        return Err(type_error(key, "array"));
    };
    items
        .iter()
        .map(|i| {
            i.as_str().map(str::to_owned).ok_or_else(|| {
                Error::Internal(format!(
                    "option {} must be of an array of strings",
                    go_quote(key)
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_match_ollama() {
        let d = Options::defaults(0);
        assert_eq!(
            (
                d.temperature,
                d.top_k,
                d.top_p,
                d.repeat_penalty,
                d.num_keep,
                d.seed
            ),
            (0.8, 40, 0.9, 1.0, 4, -1)
        );
        assert_eq!((d.num_predict, d.typical_p, d.repeat_last_n), (-1, 1.0, 64));
        assert_eq!(d.runner.num_ctx, 0);
        assert_eq!(d.runner.num_gpu, -1);
        assert_eq!(Options::defaults(8192).runner.num_ctx, 8192);
    }

    #[test]
    fn from_map_rules() {
        let mut o = Options::defaults(0);
        let ignored = o
            .apply(&map(json!({
                "num_ctx": 2048.9,
                "top_k": -3.7,
                "temperature": 1,
                "use_mmap": false,
                "main_gpu": 1,
                "stop": ["a", "b"],
                "seed": null,
                "mirostat": 2,
                "bogus": "x"
            })))
            .unwrap();
        assert_eq!(o.runner.num_ctx, 2048);
        assert_eq!(o.top_k, -3);
        assert_eq!(o.temperature, 1.0);
        assert_eq!(o.runner.use_mmap, Some(false));
        assert_eq!(o.runner.main_gpu, Some(1));
        assert_eq!(o.stop, vec!["a", "b"]);
        assert_eq!(o.seed, -1, "null is skipped");
        assert_eq!(ignored, vec!["mirostat", "bogus"]);
    }

    #[test]
    fn wrong_types_are_500_with_ollamas_text() {
        let cases = [
            (
                json!({"num_ctx": "4096"}),
                "option \"num_ctx\" must be of type integer",
            ),
            (
                json!({"temperature": "hot"}),
                "option \"temperature\" must be of type float32",
            ),
            (
                json!({"use_mmap": 1}),
                "option \"use_mmap\" must be of type boolean",
            ),
            (
                json!({"stop": "x"}),
                "option \"stop\" must be of type array",
            ),
            (
                json!({"stop": ["x", 1]}),
                "option \"stop\" must be of an array of strings",
            ),
            (
                json!({"main_gpu": true}),
                "option \"main_gpu\" must be of type integer",
            ),
        ];
        for (m, want) in cases {
            let err = Options::defaults(0).apply(&map(m.clone())).unwrap_err();
            assert_eq!(err.to_string(), want, "{m}");
            assert_eq!(err.status(), 500, "{m}");
        }
    }

    #[test]
    fn image_budgets_are_positive_token_counts() {
        let mut o = Options::defaults(0);
        o.apply(&map(
            json!({"image_min_tokens": 70.9, "image_max_tokens": 560}),
        ))
        .unwrap();
        assert_eq!(
            (o.image_min_tokens, o.image_max_tokens),
            (Some(70), Some(560))
        );
        for bad in [
            json!({"image_max_tokens": 0}),
            json!({"image_min_tokens": -70}),
        ] {
            let err = Options::defaults(0).apply(&map(bad.clone())).unwrap_err();
            assert_eq!(err.status(), 400, "{bad}");
            assert!(err.to_string().contains("positive"), "{err}");
        }
        let err = Options::defaults(0)
            .apply(&map(json!({"image_max_tokens": "560"})))
            .unwrap_err();
        assert_eq!(err.status(), 500, "a wrong type is Ollama's type error");
    }

    #[test]
    fn precedence_request_over_modelfile_over_env() {
        let params = map(json!({"num_ctx": 8192, "temperature": 0.2, "stop": ["<|im_end|>"]}));
        let req = map(json!({"num_ctx": 1024}));
        let o = Options::resolve(4096, &params, Some(&req)).unwrap();
        assert_eq!(o.runner.num_ctx, 1024);
        assert_eq!(o.temperature, 0.2);
        assert_eq!(o.stop, vec!["<|im_end|>"]);
        let o = Options::resolve(4096, &params, None).unwrap();
        assert_eq!(o.runner.num_ctx, 8192);
        let o = Options::resolve(4096, &Map::new(), None).unwrap();
        assert_eq!(o.runner.num_ctx, 4096);
    }
}
