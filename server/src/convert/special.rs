//! Special-token metadata shared by both vocab kinds, as gguf-py's `SpecialVocab` derives it: BPE
//! merges from tokenizer.json, special token ids (tokenizer_config.json's `*_token` looked up in
//! tokenizer.json's `added_tokens`, then config.json's `*_token_id`), `add_bos`/`add_eos` from the
//! post-processor and tokenizer_config.json, and the chat template.

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::gguf::Value;

/// The token types the reference looks up, in its order (it may append `eot`/`eom`).
const TYPES: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

#[derive(Debug, Default)]
pub struct SpecialVocab {
    pub merges: Vec<String>,
    /// (type, id) in the order they were set.
    pub ids: Vec<(String, u32)>,
    /// (type, add) in the order they were set.
    pub add: Vec<(String, bool)>,
    pub chat_template: Option<String>,
    pub lowercase: Option<bool>,
    pub strip_accents: Option<bool>,
}

pub struct Inputs<'a> {
    pub tokenizer: Option<&'a Json>,
    pub tokenizer_config: Option<&'a Json>,
    pub config: &'a Json,
    /// Alternative chat template files (chat_template.jinja, chat_template.json).
    pub chat_template_jinja: Option<String>,
    pub chat_template_json: Option<&'a Json>,
    pub load_merges: bool,
    pub n_vocab: Option<u64>,
}

impl SpecialVocab {
    pub fn load(inp: &Inputs) -> Result<SpecialVocab> {
        let mut sv = SpecialVocab::default();
        let mut types: Vec<String> = TYPES.iter().map(|s| s.to_string()).collect();
        let mut tc = inp.tokenizer_config.and_then(Json::as_object).cloned();
        let mut added: &[Json] = &[];
        if let Some(tok) = inp.tokenizer {
            if inp.load_merges {
                sv.merges = merges(tok)?;
            }
            if let Some(n) = tok.get("normalizer") {
                sv.parse_normalizer(n);
            }
            added = tok
                .get("added_tokens")
                .and_then(Json::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            sv.post_processor(tok, &mut tc, &mut types);
        }
        if let Some(tc) = &tc {
            let alt = match &inp.chat_template_jinja {
                Some(t) => Some(Json::String(t.clone())),
                None => inp
                    .chat_template_json
                    .and_then(|j| j.get("chat_template"))
                    .cloned(),
            };
            match tc.get("chat_template").cloned().or(alt) {
                Some(Json::String(s)) => sv.chat_template = Some(s),
                Some(Json::Array(_)) => {
                    return Err(Error::BadRequest(
                        "tokenizer_config.json: named chat template lists are not supported".into(),
                    ))
                }
                _ => {}
            }
            for typ in &types {
                if let Some(Json::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                    if !sv.add.iter().any(|(t, _)| t == typ) {
                        sv.add.push((typ.clone(), *b));
                    }
                }
                let content = match tc.get(&format!("{typ}_token")) {
                    Some(Json::String(s)) => s.clone(),
                    Some(Json::Object(o)) => match o.get("content") {
                        Some(Json::String(s)) => s.clone(),
                        _ => continue,
                    },
                    _ => continue,
                };
                let id = added
                    .iter()
                    .find(|a| a.get("content").and_then(Json::as_str) == Some(content.as_str()))
                    .and_then(|a| a.get("id"));
                sv.set(typ, id, inp.n_vocab)?;
            }
        }
        let text = inp.config.get("text_config");
        for typ in &types {
            let key = format!("{typ}_token_id");
            let id = inp
                .config
                .get(&key)
                .filter(|v| !v.is_null())
                .or_else(|| text.and_then(|t| t.get(&key)));
            sv.set(typ, id, inp.n_vocab)?;
        }
        Ok(sv)
    }

    fn set(&mut self, typ: &str, id: Option<&Json>, n_vocab: Option<u64>) -> Result<()> {
        // Only integers count (a list of eos ids is ignored, as in the reference).
        let Some(id) = id.and_then(|v| {
            if v.is_i64() || v.is_u64() {
                v.as_i64()
            } else {
                None
            }
        }) else {
            return Ok(());
        };
        if id < 0 {
            return Err(Error::BadRequest(format!(
                "invalid value for special token type {typ}: {id}"
            )));
        }
        let id = id as u64;
        if n_vocab.is_some_and(|n| id >= n) || self.ids.iter().any(|(t, _)| t == typ) {
            return Ok(());
        }
        let id = u32::try_from(id)
            .map_err(|_| Error::BadRequest(format!("special token {typ} id {id} is too large")))?;
        self.ids.push((typ.to_owned(), id));
        Ok(())
    }

    fn parse_normalizer(&mut self, n: &Json) {
        match n.get("type").and_then(Json::as_str) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(b) = n.get("lowercase").and_then(Json::as_bool) {
                    self.lowercase = Some(b);
                }
                if let Some(b) = n.get("strip_accents").and_then(Json::as_bool) {
                    self.strip_accents = Some(b);
                }
            }
            Some("Sequence") => {
                for inner in n
                    .get("normalizers")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                {
                    self.parse_normalizer(inner);
                }
            }
            _ => {}
        }
    }

    fn add_default(&mut self, typ: &str, v: bool) {
        if !self.add.iter().any(|(t, _)| t == typ) {
            self.add.push((typ.to_owned(), v));
        }
    }

    fn add_force(&mut self, typ: &str, v: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some(slot) => slot.1 = v,
            None => self.add.push((typ.to_owned(), v)),
        }
    }

    /// The post-processor's say on adding BOS/EOS (the reference's "crude" reading of simple
    /// templates: a leading special token is BOS, a trailing one EOS).
    fn post_processor(
        &mut self,
        tok: &Json,
        tc: &mut Option<serde_json::Map<String, Json>>,
        types: &mut Vec<String>,
    ) {
        let Some(pp) = tok.get("post_processor").filter(|p| p.is_object()) else {
            return;
        };
        let list: Vec<&Json> = match pp.get("processors").and_then(Json::as_array) {
            Some(a) => a.iter().collect(),
            None => vec![pp],
        };
        let tc_str = |tc: &Option<serde_json::Map<String, Json>>, k: &str| {
            tc.as_ref()
                .and_then(|m| m.get(k))
                .and_then(Json::as_str)
                .map(str::to_owned)
        };
        let mut bos = tc_str(tc, "bos_token").or_else(|| tc_str(tc, "cls_token"));
        let mut eos = tc_str(tc, "eos_token").or_else(|| tc_str(tc, "sep_token"));
        for p in list {
            match p.get("type").and_then(Json::as_str) {
                Some("ByteLevel") => {
                    self.add_default("bos", false);
                    self.add_default("eos", false);
                }
                Some("RobertaProcessing") => {
                    self.add_force("bos", true);
                    self.add_force("eos", true);
                    self.add_force("sep", true);
                }
                Some("TemplateProcessing") => {
                    let single = p
                        .get("single")
                        .and_then(Json::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if single.len() <= 1 {
                        continue;
                    }
                    let special = |j: &Json| {
                        j.get("SpecialToken")
                            .and_then(|s| s.get("id"))
                            .and_then(Json::as_str)
                            .map(str::to_owned)
                    };
                    if let Some(first) = special(&single[0]) {
                        if tc.is_none() {
                            bos = Some(first.clone());
                        } else if bos.is_none() {
                            if let Some(m) = tc.as_mut() {
                                m.insert("bos_token".into(), Json::String(first.clone()));
                            }
                            bos = Some(first.clone());
                        }
                        self.add_force("bos", bos.as_deref() == Some(first.as_str()));
                    }
                    if let Some(last) = special(&single[single.len() - 1]) {
                        if tc.is_none() {
                            eos = Some(last.clone());
                        } else if eos.as_deref() != Some(last.as_str()) {
                            if let (Some(m), Some(old)) = (tc.as_mut(), eos.clone()) {
                                let extra = if !types.iter().any(|t| t == "eot") {
                                    Some("eot")
                                } else if !types.iter().any(|t| t == "eom") {
                                    Some("eom")
                                } else {
                                    None
                                };
                                if let Some(extra) = extra {
                                    types.push(extra.to_owned());
                                    m.insert(format!("{extra}_token"), Json::String(old));
                                }
                                m.insert("eos_token".into(), Json::String(last.clone()));
                            }
                            eos = Some(last.clone());
                        }
                        self.add_force("eos", true);
                    }
                }
                _ => {}
            }
        }
    }

    /// The `tokenizer.ggml.*` keys, in the reference's order.
    pub fn kvs(&self) -> Vec<(String, Value)> {
        let mut out: Vec<(String, Value)> = Vec::new();
        if !self.merges.is_empty() {
            out.push(("tokenizer.ggml.merges".into(), self.merges.clone().into()));
        }
        for (typ, id) in &self.ids {
            // gguf-py has no writer for a cls id, so the reference drops it.
            let key = match typ.as_str() {
                "sep" => "seperator",
                "pad" => "padding",
                "unk" => "unknown",
                "cls" => continue,
                t => t,
            };
            out.push((format!("tokenizer.ggml.{key}_token_id"), Value::U32(*id)));
        }
        for (typ, add) in &self.add {
            let key = match typ.as_str() {
                "sep" => "add_sep_token",
                "bos" => "add_bos_token",
                "eos" => "add_eos_token",
                _ => continue,
            };
            out.push((format!("tokenizer.ggml.{key}"), Value::Bool(*add)));
        }
        if let Some(t) = &self.chat_template {
            out.push(("tokenizer.chat_template".into(), Value::String(t.clone())));
        }
        if let Some(b) = self.lowercase {
            out.push(("tokenizer.ggml.normalizer.lowercase".into(), Value::Bool(b)));
        }
        if let Some(b) = self.strip_accents {
            out.push((
                "tokenizer.ggml.normalizer.strip_accents".into(),
                Value::Bool(b),
            ));
        }
        out
    }
}

/// tokenizer.json's merges: "a b" strings, or (since transformers 4.45) [a, b] pairs, whose
/// spaces the reference encodes as U+0120 + 256 shifted characters.
fn merges(tok: &Json) -> Result<Vec<String>> {
    let Some(list) = tok
        .get("model")
        .and_then(|m| m.get("merges"))
        .and_then(Json::as_array)
    else {
        return Ok(Vec::new());
    };
    let shift = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c == ' ' {
                    char::from_u32(' ' as u32 + 256).unwrap_or(c)
                } else {
                    c
                }
            })
            .collect()
    };
    list.iter()
        .map(|m| match m {
            Json::String(s) => Some(s.clone()),
            Json::Array(p) if p.len() == 2 => Some(format!(
                "{} {}",
                shift(p[0].as_str()?),
                shift(p[1].as_str()?)
            )),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::BadRequest("tokenizer.json: unknown merges format".into()))
}
