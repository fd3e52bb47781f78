//! Facts derived from a parsed GGUF for the API and the scheduler: Ollama's `/api/show`
//! `model_info` and `details`, the human parameter size, the quantization name, the base
//! capabilities, and the hyper-parameters used to estimate KV-cache memory.
//!
//! Ollama-compat notes (read at ollama/ollama fb30760):
//! - `model_info` is a Go map, so its JSON keys come out sorted; we sort too. `general.name` and
//!   `tokenizer.chat_template` are dropped and `general.parameter_count` is always the sum of the
//!   tensors' element counts (Ollama overwrites whatever the file says).
//! - Without `verbose`, Ollama decodes arrays with a maximum kept size of 0, so every non-empty
//!   array prints `null` and an empty one `[]` (its "longer than 5 → []" branch never matches the
//!   decoded array type). With `verbose`, arrays print in full.

use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::reader::GgufFile;
use super::types::{file_type_name, GgmlType};
use super::value::Value;

/// The GGUF-derived part of Ollama's `details` object (`/api/tags`, `/api/show`, `/api/ps`);
/// `parent_model` and the optional lengths are filled in by the API layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Details {
    pub format: String,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

impl GgufFile {
    /// `general.architecture`, if present (the reader guarantees it is a string).
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(Value::as_str)
    }

    /// The value of `<arch>.<suffix>`.
    pub fn arch_value(&self, suffix: &str) -> Option<&Value> {
        let key = format!("{}.{suffix}", self.architecture()?);
        self.get(&key)
    }

    /// `<arch>.<suffix>` as a non-negative integer; `None` if absent, negative or not an integer.
    pub fn arch_u64(&self, suffix: &str) -> Option<u64> {
        self.arch_value(suffix)?.as_u64()
    }

    /// `<arch>.<suffix>` as a positive integer, or the largest element of a per-layer integer
    /// array (as Ollama's `UintOrMaxArrayValue`). Zero counts as absent so callers never divide
    /// by it.
    fn arch_count(&self, suffix: &str) -> Option<u64> {
        let v = self.arch_value(suffix)?;
        let n = match v {
            Value::Array(a) => a.to_u64s()?.into_iter().max()?,
            v => v.as_u64()?,
        };
        (n > 0).then_some(n)
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.get("tokenizer.chat_template").and_then(Value::as_str)
    }

    /// Training context length (`<arch>.context_length`).
    pub fn context_length(&self) -> Option<u64> {
        self.arch_count("context_length")
    }

    pub fn embedding_length(&self) -> Option<u64> {
        self.arch_count("embedding_length")
    }

    /// Layer count; never 0 and never above `reader::MAX_BLOCK_COUNT`.
    pub fn block_count(&self) -> Option<u64> {
        self.arch_count("block_count")
    }

    /// Attention heads (largest per-layer value when it is an array).
    pub fn head_count(&self) -> Option<u64> {
        self.arch_count("attention.head_count")
    }

    /// KV heads; defaults to `head_count` (no GQA) as llama.cpp does.
    pub fn head_count_kv(&self) -> Option<u64> {
        self.arch_count("attention.head_count_kv")
            .or_else(|| self.head_count())
    }

    /// Per-head key size; defaults to `embedding_length / head_count`.
    pub fn key_length(&self) -> Option<u64> {
        self.arch_count("attention.key_length")
            .or_else(|| self.embedding_length()?.checked_div(self.head_count()?))
    }

    /// Per-head value size; defaults to `embedding_length / head_count`.
    pub fn value_length(&self) -> Option<u64> {
        self.arch_count("attention.value_length")
            .or_else(|| self.embedding_length()?.checked_div(self.head_count()?))
    }

    /// `general.file_type` (llama_ftype), if present and an integer.
    pub fn file_type(&self) -> Option<u64> {
        self.get("general.file_type")?.as_u64()
    }

    /// The llama.cpp ftype name (`Q4_K_M`); when the file has no known `general.file_type`, the
    /// name of the tensor type holding the most elements (`Q4_K`); `unknown` with no tensors.
    pub fn quantization_level(&self) -> String {
        if let Some(name) = self.file_type().and_then(file_type_name) {
            return name.to_owned();
        }
        let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
        for t in &self.tensors {
            match by_type.iter_mut().find(|(ty, _)| *ty == t.ggml_type) {
                Some((_, n)) => *n += t.n_elements,
                None => by_type.push((t.ggml_type, t.n_elements)),
            }
        }
        by_type
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map_or_else(|| "unknown".to_owned(), |(ty, _)| ty.name().to_owned())
    }

    /// Ollama's `parameter_size`: `HumanNumber` of the tensor element total (e.g. `268.10M`).
    pub fn parameter_size(&self) -> String {
        human_number(self.parameter_count)
    }

    pub fn details(&self) -> Details {
        let family = self.architecture().unwrap_or("unknown").to_owned();
        Details {
            format: "gguf".to_owned(),
            families: vec![family.clone()],
            family,
            parameter_size: self.parameter_size(),
            quantization_level: self.quantization_level(),
        }
    }

    /// Capabilities the GGUF alone implies, in Ollama's order: `embedding` when the model has a
    /// `<arch>.pooling_type`, else `completion`; then `vision` and `audio` when the model has an
    /// encoder of that kind. Template-derived ones (tools, thinking, insert) are added elsewhere.
    pub fn capabilities(&self) -> Vec<&'static str> {
        let mut caps = Vec::new();
        if self.arch_value("pooling_type").is_some() {
            caps.push("embedding");
        } else {
            caps.push("completion");
        }
        if self.arch_value("vision.block_count").is_some() {
            caps.push("vision");
        }
        if self.arch_value("audio.block_count").is_some() {
            caps.push("audio");
        }
        caps
    }

    /// Ollama's `/api/show` `tensors`: `{name, type, shape}` in file order, `shape` in ggml order.
    /// Ollama returns it whether or not `verbose` is set.
    pub fn tensors_json(&self) -> Vec<Json> {
        self.tensors
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "type": t.ggml_type.name(), "shape": t.dims}))
            .collect()
    }

    /// Ollama's `/api/show` `model_info` (see the module notes). `verbose` prints arrays in full;
    /// the file must then have been read with `ReadOptions { full_arrays: true }`, otherwise long
    /// arrays still print `null`.
    pub fn model_info(&self, verbose: bool) -> Map<String, Json> {
        let mut entries: Vec<(&str, Json)> = self
            .kvs
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "general.name" | "tokenizer.chat_template"))
            .filter(|(k, _)| k != "general.parameter_count")
            .map(|(k, v)| {
                let json = match v {
                    Value::Array(a) if !verbose && a.len > 0 => Json::Null,
                    v => v.to_json(),
                };
                (k.as_str(), json)
            })
            .collect();
        entries.push(("general.parameter_count", self.parameter_count.into()));
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }
}

/// Ollama's `format.HumanNumber`: `B` with one decimal (none when whole), `M` with two decimals
/// (none when whole), `K` with none, else the plain integer. 1000 is the base throughout.
pub fn human_number(n: u64) -> String {
    const K: u64 = 1_000;
    const M: u64 = 1_000_000;
    const B: u64 = 1_000_000_000;
    let scaled = |unit: u64, decimals: usize, suffix: &str| {
        let x = n as f64 / unit as f64;
        if x == x.floor() {
            format!("{x:.0}{suffix}")
        } else {
            format!("{x:.decimals$}{suffix}")
        }
    };
    match n {
        n if n >= B => scaled(B, 1, "B"),
        n if n >= M => scaled(M, 2, "M"),
        n if n >= K => format!("{:.0}K", n as f64 / K as f64),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_number_matches_ollama_table() {
        // Ollama's format_test.go cases, plus the two test models.
        let cases = [
            (0, "0"),
            (999, "999"),
            (1000, "1K"),
            (1001, "1K"),
            (1_000_000, "1M"),
            (125_000_000, "125M"),
            (500_500_000, "500.50M"),
            (500_550_000, "500.55M"),
            (1_000_000_000, "1B"),
            (2_800_000_000, "2.8B"),
            (2_850_000_000, "2.9B"),
            (1_000_000_000_000, "1000B"),
            (268_098_176, "268.10M"),
            (8_030_261_248, "8.0B"),
            (134_515_008, "134.52M"),
        ];
        for (n, want) in cases {
            assert_eq!(human_number(n), want, "{n}");
        }
    }

    #[test]
    fn human_number_rounds_exact_ties_to_even_like_go() {
        // 1.25 and 0.125 are exact binary fractions: Go's strconv rounds such ties to even.
        assert_eq!(human_number(1_250_000_000), "1.2B");
        assert_eq!(human_number(1_350_000_000), "1.4B");
        assert_eq!(human_number(1_125_000), "1.12M");
    }
}
