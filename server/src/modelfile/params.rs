//! Turning Modelfile `PARAMETER` lines into the typed JSON map a create request carries, the way
//! Ollama's `api.FormatParams` and `Modelfile.CreateRequest` do: each known option has one type
//! (from `api.Options`/`api.Runner`), `stop` accumulates, deprecated options are dropped with a
//! warning, anything else is an error with Ollama's wording. Pure functions, table-tested.

use serde_json::{Map, Value as Json};

use super::{Command, Modelfile};

/// The JSON type an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    Int,
    Float,
    Bool,
    Str,
    /// Repeatable; every line adds one element.
    StrList,
}

/// Options Ollama still parses but ignores; a Modelfile using them gets a warning.
pub const DEPRECATED_PARAMETERS: [&str; 9] = [
    "penalize_newline",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mlock",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
];

/// The type of a known option (Ollama's `Options` + `Runner` JSON tags), `None` if unknown.
pub fn param_kind(name: &str) -> Option<ParamKind> {
    use ParamKind::*;
    Some(match name {
        "num_ctx" | "num_batch" | "num_gpu" | "main_gpu" | "num_thread" | "draft_num_predict"
        | "num_keep" | "seed" | "num_predict" | "top_k" | "repeat_last_n" => Int,
        "top_p" | "min_p" | "typical_p" | "temperature" | "repeat_penalty" | "presence_penalty"
        | "frequency_penalty" => Float,
        "use_mmap" => Bool,
        "stop" => StrList,
        _ => return None,
    })
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A float as Go's JSON encoder writes it after a float64 round trip: integral values without a
/// fraction (`1`, not `1.0`), everything else in shortest form.
pub(crate) fn go_float_json(f: f64) -> Json {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        Json::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
    }
}

/// Types one `PARAMETER name value` (Ollama's `FormatParams` messages). A `stop` value comes back
/// as a one-element array.
pub fn format_param(name: &str, value: &str) -> Result<Json, String> {
    let kind = param_kind(name).ok_or_else(|| format!("unknown parameter '{name}'"))?;
    Ok(match kind {
        ParamKind::Int => Json::from(
            value
                .parse::<i64>()
                .map_err(|_| format!("invalid int value [{value}]"))?,
        ),
        ParamKind::Float => {
            let f = value
                .parse::<f32>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| format!("invalid float value [{value}]"))?;
            // Shortest f32 digits, then as f64: `0.7` stays `0.7`, not 0.699999988079071.
            go_float_json(f.to_string().parse::<f64>().unwrap_or(f64::from(f)))
        }
        ParamKind::Bool => {
            Json::Bool(parse_go_bool(value).ok_or_else(|| format!("invalid bool value [{value}]"))?)
        }
        ParamKind::Str => Json::String(value.to_owned()),
        ParamKind::StrList => Json::Array(vec![Json::String(value.to_owned())]),
    })
}

/// The typed parameters of a Modelfile plus the warnings to print.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamsOut {
    pub params: Map<String, Json>,
    pub warnings: Vec<String>,
}

/// All `PARAMETER` lines of `mf`, typed. Repeated `stop` lines accumulate; any other repeated
/// option keeps its last value (as Ollama).
pub fn parameters(mf: &Modelfile) -> Result<ParamsOut, String> {
    let mut out = ParamsOut::default();
    for c in &mf.commands {
        let Command::Parameter { name, value } = c else {
            continue;
        };
        if DEPRECATED_PARAMETERS.contains(&name.as_str()) {
            out.warnings
                .push(format!("warning: parameter {name} is deprecated"));
            continue;
        }
        let v = format_param(name, value)?;
        match (out.params.get_mut(name), v) {
            (Some(Json::Array(have)), Json::Array(more)) => have.extend(more),
            (_, v) => {
                out.params.insert(name.clone(), v);
            }
        }
    }
    Ok(out)
}

/// Checks a `REQUIRES` version the way Ollama does (Go `semver.IsValid` after adding a `v`) and
/// returns it without the leading `v`.
pub fn validate_requires(v: &str) -> Result<String, String> {
    let bare = v.strip_prefix('v').unwrap_or(v);
    if is_semver(bare) {
        Ok(bare.to_owned())
    } else {
        Err("requires must be a valid semver (e.g. 0.14.0)".to_owned())
    }
}

/// Whether a model that `REQUIRES` version `required` runs on a server implementing `have`
/// (both valid semver, `v` optional): semver precedence on MAJOR.MINOR.PATCH (missing parts are
/// 0); a prerelease of the same triple is older than the release. Unparsable → true (the
/// requirement was validated at create; a foreign store's odd value is not a reason to refuse).
pub fn satisfies(have: &str, required: &str) -> bool {
    fn key(v: &str) -> Option<([u64; 3], bool)> {
        let v = v.strip_prefix('v').unwrap_or(v);
        let v = v.split('+').next()?;
        let (core, pre) = match v.split_once('-') {
            Some((c, _)) => (c, true),
            None => (v, false),
        };
        let mut n = [0u64; 3];
        for (i, p) in core.split('.').enumerate() {
            *n.get_mut(i)? = p.parse().ok()?;
        }
        Some((n, !pre))
    }
    match (key(have), key(required)) {
        (Some(h), Some(r)) => h >= r,
        _ => true,
    }
}

/// `MAJOR[.MINOR[.PATCH[-pre][+build]]]`, numbers without leading zeros (Go's x/mod/semver,
/// which allows the short forms but a prerelease or build only after a full triple).
fn is_semver(s: &str) -> bool {
    let num = |p: &str| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (p == "0" || !p.starts_with('0'))
    };
    let ident =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let (core, build) = match s.split_once('+') {
        Some((c, b)) => (c, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match core.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (core, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() > 3 || !parts.iter().all(|p| num(p)) {
        return false;
    }
    if (pre.is_some() || build.is_some()) && parts.len() != 3 {
        return false;
    }
    if let Some(pre) = pre {
        let ok = pre
            .split('.')
            .all(|p| ident(p) && (!p.bytes().all(|b| b.is_ascii_digit()) || num(p)));
        if !ok {
            return false;
        }
    }
    build.is_none_or(|b| b.split('.').all(ident))
}
