//! The quantization format of each quantized weight (a `X.weight` of U32 words with `X.scales`):
//! MLX's mode (`affine`, `nvfp4`, `mxfp4`, `mxfp8`), bits and group size, from what the
//! checkpoint declares, checked against the weight's shapes. Pure; table-tested.
//!
//! Where the format comes from, first match wins:
//! 1. the weight's file `__metadata__` (Ollama's tensor blobs): `X.weight.quant_type` or
//!    `quant_type` (`int4`, `int8`, `nvfp4`, `mxfp4`, `mxfp8`), with `X.weight.group_size` or
//!    `group_size` (absent: the type's default, x/quant's table: 64, 64, 16, 32, 32);
//! 2. config.json's `quantization` (mlx-lm; or `quantization_config`): the module's override
//!    object, else the global `bits`/`group_size`/`mode` (`mode` absent: affine, MLX's default);
//! 3. nothing: affine with bits and group left to the shim, which infers them from the width
//!    the architecture fixes (what MLX checkpoints without metadata always were) — unless the
//!    scales are U8, which only the fp modes use: then the format is undeterminable (nvfp4 vs
//!    mxfp4 are both 4-bit with U8 scales) and the weight is refused by name.
//!
//! Invariants a returned [`Format`] guarantees (bits > 0): the packed width times 32 / bits is
//! a whole number of groups, one scale column per group; fp modes have U8 scales, no biases,
//! MLX's fixed bits/group, and only nvfp4 a global scale (a scalar or one per row); affine has
//! float scales and biases of the scales' shape.

use std::collections::BTreeMap;

use serde_json::Value;

use super::TensorInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Affine,
    Nvfp4,
    Mxfp4,
    Mxfp8,
}

impl Mode {
    /// MLX's name of the mode (`quantize`'s `mode` argument).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Affine => "affine",
            Mode::Nvfp4 => "nvfp4",
            Mode::Mxfp4 => "mxfp4",
            Mode::Mxfp8 => "mxfp8",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "affine" => Mode::Affine,
            "nvfp4" => Mode::Nvfp4,
            "mxfp4" => Mode::Mxfp4,
            "mxfp8" => Mode::Mxfp8,
            _ => return None,
        })
    }

    /// The (bits, group size) MLX fixes for an fp mode; None for affine.
    pub fn fixed(self) -> Option<(u32, u32)> {
        match self {
            Mode::Affine => None,
            Mode::Nvfp4 => Some((4, 16)),
            Mode::Mxfp4 => Some((4, 32)),
            Mode::Mxfp8 => Some((8, 32)),
        }
    }
}

/// Ollama's `quant_type` → (mode, bits, default group size).
pub fn ollama_type(t: &str) -> Option<(Mode, u32, u32)> {
    Some(match t.to_ascii_lowercase().as_str() {
        "int4" => (Mode::Affine, 4, 64),
        "int8" => (Mode::Affine, 8, 64),
        "nvfp4" => (Mode::Nvfp4, 4, 16),
        "mxfp4" => (Mode::Mxfp4, 4, 32),
        "mxfp8" => (Mode::Mxfp8, 8, 32),
        _ => return None,
    })
}

/// One quantized weight's format; `bits` 0 (affine only): undeclared, left to the shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// The module: `X` of `X.weight`.
    pub prefix: String,
    pub mode: Mode,
    pub bits: u32,
    pub group: u32,
}

/// A quantized weight's tensors (companions under MLX's names) and its file's metadata.
pub struct Parts<'a> {
    pub weight: &'a TensorInfo,
    pub scales: &'a TensorInfo,
    pub biases: Option<&'a TensorInfo>,
    pub global: Option<&'a TensorInfo>,
    pub metadata: &'a BTreeMap<String, String>,
}

fn declared(prefix: &str, p: &Parts, config: &Value) -> Result<Option<(Mode, u32, u32)>, String> {
    let bad = |m: String| format!("quantized tensor {prefix}.weight: {m}");
    let meta = |k: &str| {
        p.metadata
            .get(&format!("{prefix}.weight.{k}"))
            .or_else(|| p.metadata.get(k))
    };
    if let Some(t) = meta("quant_type") {
        let (mode, bits, default_group) =
            ollama_type(t).ok_or_else(|| bad(format!("unknown quant_type {t:?}")))?;
        let group = match meta("group_size") {
            None => default_group,
            Some(g) => g
                .parse()
                .map_err(|_| bad(format!("group_size {g:?} is not a number")))?,
        };
        return Ok(Some((mode, bits, group)));
    }
    let q = match (
        config.get("quantization"),
        config.get("quantization_config"),
    ) {
        (Some(q), _) if q.is_object() => q,
        (_, Some(q)) if q.is_object() => q,
        _ => return Ok(None),
    };
    let o = match q.get(prefix) {
        Some(o) if o.is_object() => o,
        _ if q.get("bits").is_some() => q,
        _ => return Ok(None),
    };
    let num = |k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let mode = match o.get("mode").and_then(Value::as_str) {
        None => Mode::Affine,
        Some(m) => Mode::parse(m)
            .ok_or_else(|| bad(format!("config.json quantization mode {m:?} is unknown")))?,
    };
    match (mode.fixed(), num("bits"), num("group_size")) {
        (Some((b, g)), bits, group) => {
            if bits.is_some_and(|v| v != b) || group.is_some_and(|v| v != g) {
                return Err(bad(format!(
                    "config.json says {} with bits {bits:?} and group_size {group:?}, but {} is {b}-bit in groups of {g}",
                    mode.name(),
                    mode.name()
                )));
            }
            Ok(Some((mode, b, g)))
        }
        (None, Some(b), Some(g)) => Ok(Some((mode, b, g))),
        (None, _, _) => Err(bad(
            "config.json's quantization lacks bits or group_size".into()
        )),
    }
}

fn is_float(dtype: &str) -> bool {
    matches!(dtype, "F16" | "BF16" | "F32")
}

/// The format of the quantized weight `prefix`.weight, checked against its tensors.
pub fn resolve(prefix: &str, p: &Parts, config: &Value) -> Result<Format, String> {
    let bad = |m: String| format!("quantized tensor {prefix}.weight: {m}");
    let (w, s) = (p.weight, p.scales);
    if w.dtype != "U32" || w.shape.len() != 2 {
        return Err(bad(format!(
            "expected 2-D U32 words, found {} {:?}",
            w.dtype, w.shape
        )));
    }
    if s.shape.len() != 2 || s.shape[0] != w.shape[0] || s.shape[1] == 0 {
        return Err(bad(format!(
            "its scales {:?} do not have one row per weight row {:?}",
            s.shape, w.shape
        )));
    }
    let Some((mode, bits, group)) = declared(prefix, p, config)? else {
        if !is_float(&s.dtype) {
            return Err(bad(format!(
                "cannot determine its quantization format: {} scales mean nvfp4, mxfp4 or mxfp8, and neither a quant_type in its file's metadata nor config.json's quantization mode says which",
                s.dtype
            )));
        }
        check_affine(p).map_err(bad)?;
        return Ok(Format {
            prefix: prefix.into(),
            mode: Mode::Affine,
            bits: 0,
            group: 0,
        });
    };
    if let Some((b, g)) = mode.fixed() {
        if (bits, group) != (b, g) {
            return Err(bad(format!(
                "{} is {b}-bit in groups of {g}, not {bits}-bit in groups of {group}",
                mode.name()
            )));
        }
        if s.dtype != "U8" {
            return Err(bad(format!(
                "{} scales must be U8, not {}",
                mode.name(),
                s.dtype
            )));
        }
        if p.biases.is_some() {
            return Err(bad(format!("{} has no biases", mode.name())));
        }
        if let Some(g) = p.global {
            let rows = g.shape.iter().product::<u64>();
            if mode != Mode::Nvfp4 {
                return Err(bad(format!("{} has no global scale", mode.name())));
            }
            if !is_float(&g.dtype) || !(rows == 1 || g.shape == [w.shape[0]]) {
                return Err(bad(format!(
                    "its global scale must be a float scalar or one per row, not {} {:?}",
                    g.dtype, g.shape
                )));
            }
        }
    } else {
        if !is_float(&s.dtype) {
            return Err(bad(format!(
                "affine scales must be F16, BF16 or F32, not {}",
                s.dtype
            )));
        }
        check_affine(p).map_err(bad)?;
        if bits == 0 || bits > 8 || group == 0 {
            return Err(bad(format!(
                "{bits}-bit groups of {group} are not a format"
            )));
        }
    }
    let width = w.shape[1] * 32;
    let values = width / u64::from(bits);
    if width % u64::from(bits) != 0 || values != s.shape[1] * u64::from(group) {
        return Err(bad(format!(
            "{} is {bits}-bit in groups of {group}: {} words per row hold {values} values, {} groups, but its scales {:?} have {} columns",
            mode.name(),
            w.shape[1],
            values / u64::from(group),
            s.shape,
            s.shape[1]
        )));
    }
    Ok(Format {
        prefix: prefix.into(),
        mode,
        bits,
        group,
    })
}

/// Affine's companions: biases of the scales' shape, no global scale.
fn check_affine(p: &Parts) -> Result<(), String> {
    if p.global.is_some() {
        return Err("only nvfp4 has a global scale".into());
    }
    match p.biases {
        Some(b) if b.shape == p.scales.shape => Ok(()),
        Some(b) => Err(format!(
            "its biases {:?} and scales {:?} differ in shape",
            b.shape, p.scales.shape
        )),
        None => Err("affine quantization needs biases (X.biases / X.weight.bias)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(dtype: &str, shape: &[u64]) -> TensorInfo {
        TensorInfo {
            name: String::new(),
            dtype: dtype.into(),
            shape: shape.to_vec(),
        }
    }

    fn meta(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    type Got = Result<(Mode, u32, u32), String>;

    /// The format of a [64 rows, 256 inputs] weight stored as `words` U32 words per row with
    /// `scales` (dtype, columns), optional biases / global scale, metadata and config.
    fn fmt(
        words: u64,
        scales: (&str, u64),
        biases: bool,
        global: Option<&[u64]>,
        m: &[(&str, &str)],
        config: Value,
    ) -> Got {
        let (w, s) = (t("U32", &[64, words]), t(scales.0, &[64, scales.1]));
        let (b, g) = (t(scales.0, &[64, scales.1]), global.map(|g| t("F32", g)));
        let md = meta(m);
        let p = Parts {
            weight: &w,
            scales: &s,
            biases: biases.then_some(&b),
            global: g.as_ref(),
            metadata: &md,
        };
        resolve("m.q", &p, &config).map(|f| (f.mode, f.bits, f.group))
    }

    #[test]
    fn formats_come_from_metadata_then_config_then_shapes() {
        let none = json!({});
        let mx = |mode: &str| json!({"quantization": {"bits": 4, "group_size": 32, "mode": mode}});
        let ok = |r: Got| r.unwrap();
        // Ollama's blob metadata: the type, its default group, a per-tensor key first.
        assert_eq!(
            ok(fmt(
                32,
                ("U8", 16),
                false,
                Some(&[]),
                &[("quant_type", "nvfp4")],
                none.clone()
            )),
            (Mode::Nvfp4, 4, 16)
        );
        assert_eq!(
            ok(fmt(
                32,
                ("U8", 8),
                false,
                None,
                &[("quant_type", "MXFP4"), ("group_size", "32")],
                none.clone()
            )),
            (Mode::Mxfp4, 4, 32)
        );
        assert_eq!(
            ok(fmt(
                64,
                ("U8", 8),
                false,
                None,
                &[("quant_type", "int4"), ("m.q.weight.quant_type", "mxfp8")],
                none.clone()
            )),
            (Mode::Mxfp8, 8, 32)
        );
        assert_eq!(
            ok(fmt(
                64,
                ("BF16", 4),
                true,
                None,
                &[("quant_type", "int8")],
                none.clone()
            )),
            (Mode::Affine, 8, 64)
        );
        // The metadata wins over config.json.
        assert_eq!(
            ok(fmt(
                32,
                ("U8", 16),
                false,
                None,
                &[("quant_type", "nvfp4")],
                mx("mxfp4")
            )),
            (Mode::Nvfp4, 4, 16)
        );
        // mlx-lm's config: global mode, a module override, mode absent = affine.
        assert_eq!(
            ok(fmt(32, ("U8", 8), false, None, &[], mx("mxfp4"))),
            (Mode::Mxfp4, 4, 32)
        );
        let over = json!({"quantization": {"bits": 4, "group_size": 32, "mode": "mxfp4",
            "m.q": {"bits": 8, "group_size": 32, "mode": "mxfp8"}}});
        assert_eq!(
            ok(fmt(64, ("U8", 8), false, None, &[], over)),
            (Mode::Mxfp8, 8, 32)
        );
        let affine = json!({"quantization_config": {"bits": 4, "group_size": 64}});
        assert_eq!(
            ok(fmt(32, ("F16", 4), true, None, &[], affine)),
            (Mode::Affine, 4, 64)
        );
        // Nothing declared: affine, bits left to the shim.
        assert_eq!(
            ok(fmt(32, ("F16", 4), true, None, &[], none.clone())),
            (Mode::Affine, 0, 0)
        );
    }

    #[test]
    fn formats_that_disagree_with_their_tensors_are_refused_by_name() {
        let none = json!({});
        let nv = [("quant_type", "nvfp4")];
        let cases: Vec<(Got, &str)> = vec![
            (
                fmt(32, ("U8", 8), false, None, &[], none.clone()),
                "cannot determine",
            ),
            (
                fmt(32, ("U8", 8), false, None, &nv, none.clone()),
                "scales [64, 8] have 8 columns",
            ),
            (
                fmt(32, ("F16", 16), false, None, &nv, none.clone()),
                "scales must be U8",
            ),
            (
                fmt(32, ("U8", 16), true, None, &nv, none.clone()),
                "has no biases",
            ),
            (
                fmt(32, ("U8", 16), false, Some(&[2]), &nv, none.clone()),
                "one per row",
            ),
            (
                fmt(
                    32,
                    ("U8", 8),
                    false,
                    Some(&[]),
                    &[("quant_type", "mxfp4")],
                    none.clone(),
                ),
                "no global scale",
            ),
            (
                fmt(
                    32,
                    ("U8", 16),
                    false,
                    None,
                    &[("quant_type", "nvfp4"), ("group_size", "32")],
                    none.clone(),
                ),
                "groups of 16",
            ),
            (
                fmt(
                    32,
                    ("U8", 16),
                    false,
                    None,
                    &[("quant_type", "q4_K")],
                    none.clone(),
                ),
                "unknown quant_type",
            ),
            (
                fmt(
                    32,
                    ("U8", 16),
                    false,
                    None,
                    &[("quant_type", "nvfp4"), ("group_size", "x")],
                    none.clone(),
                ),
                "not a number",
            ),
            (
                fmt(
                    32,
                    ("F16", 4),
                    false,
                    None,
                    &[("quant_type", "int4")],
                    none.clone(),
                ),
                "needs biases",
            ),
            (
                fmt(
                    32,
                    ("U8", 4),
                    true,
                    None,
                    &[("quant_type", "int4")],
                    none.clone(),
                ),
                "affine scales",
            ),
            (
                fmt(
                    32,
                    ("U8", 8),
                    false,
                    None,
                    &[],
                    json!({"quantization": {"bits": 8, "group_size": 32, "mode": "mxfp4"}}),
                ),
                "config.json says mxfp4",
            ),
            (
                fmt(
                    32,
                    ("U8", 8),
                    false,
                    None,
                    &[],
                    json!({"quantization": {"bits": 4, "group_size": 32, "mode": "fp4"}}),
                ),
                "mode \"fp4\" is unknown",
            ),
            (
                fmt(
                    32,
                    ("F16", 8),
                    true,
                    None,
                    &[],
                    json!({"quantization": {"bits": 4}}),
                ),
                "lacks bits or group_size",
            ),
        ];
        for (r, want) in cases {
            let e = r.unwrap_err();
            assert!(
                e.contains("m.q.weight") && e.contains(want),
                "{e:?} should mention {want:?}"
            );
        }
        // A weight that is not 2-D U32 words.
        let (w, s) = (t("F16", &[64, 256]), t("U8", &[64, 16]));
        let md = BTreeMap::new();
        let p = Parts {
            weight: &w,
            scales: &s,
            biases: None,
            global: None,
            metadata: &md,
        };
        assert!(resolve("m.q", &p, &none).unwrap_err().contains("U32 words"));
    }

    #[test]
    fn ollama_types_and_modes() {
        assert_eq!(ollama_type("int4"), Some((Mode::Affine, 4, 64)));
        assert_eq!(ollama_type("INT8"), Some((Mode::Affine, 8, 64)));
        assert_eq!(ollama_type("nvfp4"), Some((Mode::Nvfp4, 4, 16)));
        assert_eq!(ollama_type("mxfp4"), Some((Mode::Mxfp4, 4, 32)));
        assert_eq!(ollama_type("mxfp8"), Some((Mode::Mxfp8, 8, 32)));
        assert_eq!(ollama_type("fp4"), None);
        for m in [Mode::Affine, Mode::Nvfp4, Mode::Mxfp4, Mode::Mxfp8] {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Mode::Affine.fixed(), None);
    }
}
