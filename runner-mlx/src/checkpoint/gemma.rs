//! gemma3 text's part of config.json: the attention scale (`query_pre_attn_scalar`), the
//! sliding window and which layers slide (`layer_types`, or the older
//! `sliding_window_pattern`), the local RoPE base and the global layers' linear rope scaling,
//! soft-capping. Absent keys take HF Gemma3TextConfig's defaults; anything the shim cannot run
//! (another activation, another rope scaling, a layer pattern that does not repeat) is an error.

use super::{int, positive};
use serde_json::Value;

/// gemma3 text's fields of the shape (HF Gemma3TextConfig's defaults for absent keys); the
/// `Default` is what every other architecture passes (no window, no scaling, no capping).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fields {
    pub attn_scale: f32,
    pub sliding_window: i32,
    pub global_every: i32,
    pub rope_local_theta: f32,
    pub rope_scale: f32,
    pub attn_softcap: f32,
    pub final_softcap: f32,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            attn_scale: 0.0,
            sliding_window: 0,
            global_every: 0,
            rope_local_theta: 0.0,
            rope_scale: 1.0,
            attn_softcap: 0.0,
            final_softcap: 0.0,
        }
    }
}

pub fn fields(c: &Value, n_layer: i32) -> Result<Fields, String> {
    let act = c
        .get("hidden_activation")
        .or_else(|| c.get("hidden_act"))
        .and_then(Value::as_str)
        .unwrap_or("gelu_pytorch_tanh");
    if act != "gelu_pytorch_tanh" {
        return Err(format!(
            "config.json: hidden_activation {act:?} is not supported for gemma3 (gelu_pytorch_tanh)"
        ));
    }
    if c.get("use_bidirectional_attention")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return Err("config.json: bidirectional attention (an embedding model) is not supported by runner-mlx yet".into());
    }
    let window = match c.get("sliding_window") {
        None => 4096,
        Some(Value::Null) => 0,
        Some(_) => int(c, "sliding_window")?,
    };
    let global_every = match c.get("layer_types").filter(|v| !v.is_null()) {
        Some(v) => layer_pattern(v, n_layer)?,
        None => match c.get("sliding_window_pattern") {
            Some(_) => int(c, "sliding_window_pattern")?,
            None => 6,
        },
    };
    let rope_scale = match c.get("rope_scaling").filter(|v| !v.is_null()) {
        None => 1.0,
        Some(r) => {
            let kind = r
                .get("rope_type")
                .or_else(|| r.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match kind {
                "default" => 1.0,
                "linear" => {
                    let f = r.get("factor").and_then(Value::as_f64);
                    1.0 / f.filter(|&f| f > 0.0 && f.is_finite()).ok_or(
                        "config.json: rope_scaling.factor must be a positive number",
                    )?
                }
                other => {
                    return Err(format!(
                        "config.json: rope_scaling type {other:?} is not supported by runner-mlx yet (linear)"
                    ))
                }
            }
        }
    };
    Ok(Fields {
        attn_scale: positive(c, "query_pre_attn_scalar", 256.0)?.powf(-0.5) as f32,
        sliding_window: window,
        global_every,
        rope_local_theta: positive(c, "rope_local_base_freq", 10000.0)? as f32,
        rope_scale: rope_scale as f32,
        attn_softcap: positive(c, "attn_logit_softcapping", 0.0)? as f32,
        final_softcap: positive(c, "final_logit_softcapping", 0.0)? as f32,
    })
}

/// `layer_types` as the shim's period: layer i is `full_attention` exactly when
/// (i + 1) % period == 0 (0: every layer is `sliding_attention`).
fn layer_pattern(v: &Value, n_layer: i32) -> Result<i32, String> {
    let bad = |m: &str| format!("config.json: layer_types {m}");
    let types: Vec<&str> = v
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect())
        .ok_or_else(|| bad("must be a list of strings"))?;
    if types.len() != n_layer as usize {
        return Err(bad("must name every layer (num_hidden_layers entries)"));
    }
    let full: Vec<bool> = types
        .iter()
        .map(|t| match *t {
            "full_attention" => Ok(true),
            "sliding_attention" => Ok(false),
            o => Err(bad(&format!("has the unknown type {o:?}"))),
        })
        .collect::<Result<_, _>>()?;
    let period = full.iter().position(|&f| f).map_or(0, |i| i + 1);
    if full
        .iter()
        .enumerate()
        .any(|(i, &f)| f != (period > 0 && (i + 1) % period == 0))
    {
        return Err(bad(
            "must repeat one pattern (sliding layers, then a full one) for runner-mlx",
        ));
    }
    Ok(period as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layer_types_become_a_period() {
        let s = "sliding_attention";
        let f = "full_attention";
        let cases: Vec<(Value, i32, Result<i32, &str>)> = vec![
            (json!([s, s, f, s, s, f]), 6, Ok(3)),
            (json!([s, s, s, s, s, f, s]), 7, Ok(6)),
            (json!([s, s]), 2, Ok(0)),
            (json!([f, f]), 2, Ok(1)),
            (json!([s, f, s, s]), 4, Err("one pattern")),
            (json!([s, f]), 3, Err("every layer")),
            (json!([s, "chunked_attention"]), 2, Err("unknown type")),
            (json!("sliding"), 1, Err("list of strings")),
        ];
        for (v, n, want) in cases {
            match (layer_pattern(&v, n), want) {
                (Ok(p), Ok(w)) => assert_eq!(p, w, "{v}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{e:?} should mention {w:?}"),
                (got, want) => panic!("{v}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn gemma3_fields_take_hf_defaults_and_refuse_what_cannot_run() {
        let tuple = |f: Fields| {
            (
                f.attn_scale,
                f.sliding_window,
                f.global_every,
                f.rope_local_theta,
                f.rope_scale,
                f.attn_softcap,
                f.final_softcap,
            )
        };
        let (scale, window, every, local, rope, cap, fcap) = tuple(fields(&json!({}), 6).unwrap());
        assert_eq!(
            (scale, window, every, local),
            (1.0 / 16.0, 4096, 6, 10000.0)
        );
        assert_eq!((rope, cap, fcap), (1.0, 0.0, 0.0));
        let c = json!({"query_pre_attn_scalar": 64, "sliding_window": 512,
            "sliding_window_pattern": 2, "rope_local_base_freq": 1000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0});
        assert_eq!(
            tuple(fields(&c, 4).unwrap()),
            (0.125, 512, 2, 1000.0, 0.125, 50.0, 30.0)
        );
        let no_window = fields(&json!({"sliding_window": null}), 2).unwrap();
        assert_eq!(no_window.sliding_window, 0);
        let bad: Vec<(Value, &str)> = vec![
            (json!({"hidden_activation": "relu"}), "hidden_activation"),
            (
                json!({"rope_scaling": {"rope_type": "yarn", "factor": 4}}),
                "yarn",
            ),
            (json!({"rope_scaling": {"type": "linear"}}), "factor"),
            (json!({"sliding_window": 0}), "sliding_window"),
            (
                json!({"query_pre_attn_scalar": -1}),
                "query_pre_attn_scalar",
            ),
            (
                json!({"use_bidirectional_attention": true}),
                "bidirectional",
            ),
            (json!({"layer_types": ["full_attention"]}), "every layer"),
        ];
        for (c, want) in bad {
            let e = fields(&c, 2).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }
}
