//! `herd show MODEL [--license|--modelfile|--parameters|--template|--system] [-v]`: one field
//! verbatim, or Ollama's sectioned summary (Model, Capabilities, Parameters, Metadata and
//! Tensors with `-v`, System, License), each a tablewriter table whose cells wrap at 30 columns,
//! or 100 in System and License (`super::format`).

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::client::Client;
use super::format::{table_width, COL_WIDTH, LONG_COL_WIDTH};
use crate::api::show::go_float;
use crate::config::ShowArgs;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShowInfo {
    pub license: String,
    pub modelfile: String,
    pub parameters: String,
    pub template: String,
    pub system: String,
    pub details: Details,
    pub model_info: Option<Map<String, Value>>,
    pub projector_info: Option<Map<String, Value>>,
    pub remote_model: String,
    pub remote_host: String,
    pub tensors: Vec<Tensor>,
    pub capabilities: Vec<String>,
    pub requires: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Details {
    pub family: String,
    pub parameter_size: String,
    pub quantization_level: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Tensor {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub shape: Vec<u64>,
}

pub async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let flags = [
        (args.license, "license"),
        (args.modelfile, "modelfile"),
        (args.parameters, "parameters"),
        (args.system, "system"),
        (args.template, "template"),
    ];
    let chosen: Vec<&str> = flags
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
    if chosen.len() > 1 {
        anyhow::bail!(
            "only one of '--license', '--modelfile', '--parameters', '--system', or '--template' can be specified"
        );
    }
    let client = Client::new(&args.client.host)?;
    let body = json!({ "model": args.model, "verbose": args.verbose });
    let info: ShowInfo = client.json(Method::POST, "/api/show", Some(&body)).await?;
    if info.capabilities.iter().any(|c| c == "image") {
        anyhow::bail!("image generation models are not currently supported");
    }
    match chosen.first() {
        Some(&"license") => println!("{}", info.license),
        Some(&"modelfile") => println!("{}", info.modelfile),
        Some(&"parameters") => println!("{}", info.parameters),
        Some(&"system") => print!("{}", info.system),
        Some(&"template") => print!("{}", info.template),
        _ => print!("{}", summary(&info, args.verbose)),
    }
    Ok(())
}

/// Ollama's `showInfo` layout.
pub fn summary(info: &ShowInfo, verbose: bool) -> String {
    let mut out = String::new();
    let mut section = |header: &str, rows: Vec<Vec<String>>| {
        // Ollama widens the wrap limit for the free-text sections; all others keep
        // tablewriter's 30 columns (long metadata strings wrap there).
        let width = match header {
            "Template" | "System" | "License" => LONG_COL_WIDTH,
            _ => COL_WIDTH,
        };
        out.push_str(&format!("  {header}\n"));
        out.push_str(&table_width(&rows, width));
        out.push('\n');
    };
    let row = |cells: &[&str]| -> Vec<String> {
        std::iter::once(String::new())
            .chain(cells.iter().map(|c| (*c).to_owned()))
            .collect()
    };

    let mut model = Vec::new();
    if !info.remote_host.is_empty() {
        model.push(row(&["Remote model", &info.remote_model]));
        model.push(row(&["Remote URL", &info.remote_host]));
    }
    match &info.model_info {
        Some(mi) => {
            let arch = mi
                .get("general.architecture")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !arch.is_empty() {
                model.push(row(&["architecture", arch]));
            }
            let params = if !info.details.parameter_size.is_empty() {
                info.details.parameter_size.clone()
            } else {
                mi.get("general.parameter_count")
                    .and_then(Value::as_u64)
                    .map(crate::gguf::human_number)
                    .unwrap_or_default()
            };
            if !params.is_empty() {
                model.push(row(&["parameters", &params]));
            }
            for (key, label) in [
                ("context_length", "context length"),
                ("embedding_length", "embedding length"),
            ] {
                if let Some(n) = mi.get(&format!("{arch}.{key}")).and_then(Value::as_f64) {
                    model.push(row(&[label, &go_float_f(n)]));
                }
            }
        }
        None => {
            model.push(row(&["architecture", &info.details.family]));
            model.push(row(&["parameters", &info.details.parameter_size]));
        }
    }
    model.push(row(&["quantization", &info.details.quantization_level]));
    if !info.requires.is_empty() {
        model.push(row(&["requires", &info.requires]));
    }
    section("Model", model);

    if !info.capabilities.is_empty() {
        section(
            "Capabilities",
            info.capabilities.iter().map(|c| row(&[c])).collect(),
        );
    }
    if let Some(pi) = &info.projector_info {
        section("Projector", projector_rows(pi));
    }
    if !info.parameters.is_empty() {
        let rows = info
            .parameters
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| row(&l.split_whitespace().collect::<Vec<_>>()))
            .collect();
        section("Parameters", rows);
    }
    if verbose {
        if let Some(mi) = &info.model_info {
            let mut keys: Vec<&String> = mi.keys().collect();
            keys.sort();
            let rows = keys
                .into_iter()
                .map(|k| row(&[k, &metadata_value(&mi[k])]))
                .collect();
            section("Metadata", rows);
        }
        if !info.tensors.is_empty() {
            let rows = info
                .tensors
                .iter()
                .map(|t| {
                    let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
                    row(&[&t.name, &t.kind, &format!("[{}]", shape.join(" "))])
                })
                .collect();
            section("Tensors", rows);
        }
    }
    if !info.system.is_empty() {
        section(
            "System",
            head(&info.system, 2).iter().map(|l| row(&[l])).collect(),
        );
    }
    if !info.license.is_empty() {
        section(
            "License",
            head(&info.license, 2).iter().map(|l| row(&[l])).collect(),
        );
    }
    out
}

/// The Projector section: the projector's architecture, size, and its vision (or audio)
/// encoder's embedding length and projection dimensions.
fn projector_rows(pi: &Map<String, Value>) -> Vec<Vec<String>> {
    let row = |label: &str, value: String| vec![String::new(), label.to_owned(), value];
    let arch = pi
        .get("general.architecture")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut rows = Vec::new();
    if !arch.is_empty() {
        rows.push(row("architecture", arch.to_owned()));
    }
    if let Some(n) = pi.get("general.parameter_count").and_then(Value::as_f64) {
        rows.push(row("parameters", crate::gguf::human_number(n as u64)));
    }
    let value = |suffix: &str| {
        ["vision", "audio"]
            .iter()
            .find_map(|m| pi.get(&format!("{arch}.{m}.{suffix}"))?.as_f64())
    };
    if let Some(n) = value("embedding_length") {
        rows.push(row("embedding length", go_float_f(n)));
    }
    if let Some(n) = value("projection_dim") {
        rows.push(row("dimensions", go_float_f(n)));
    }
    rows
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`: plain decimal, shortest digits.
fn go_float_f(f: f64) -> String {
    format!("{f}")
}

/// The first `n` non-blank lines, then `...` if there were more.
fn head(s: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let mut out: Vec<String> = lines.iter().take(n).map(|l| (*l).to_owned()).collect();
    if lines.len() > n {
        out.push("...".into());
    }
    out
}

/// A metadata cell: scalars as Go prints them, arrays cut to about ten columns.
fn metadata_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => {
            let shown: Vec<String> = items.iter().map(metadata_value).collect();
            let mut width = 1;
            let mut keep = 0;
            for (i, s) in shown.iter().enumerate() {
                let w = s.chars().count() + if i > 0 { 2 } else { 0 };
                if width + w > 10 && i > 0 {
                    break;
                }
                width += w;
                keep += 1;
            }
            if keep < shown.len() {
                format!(
                    "[{} ...+{} more]",
                    shown[..keep].join(" "),
                    shown.len() - keep
                )
            } else {
                format!("[{}]", shown.join(" "))
            }
        }
        Value::Null => "<nil>".into(),
        Value::Object(_) => "map[string]interface {}".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_layout() {
        let info: ShowInfo = serde_json::from_value(json!({
            "parameters": "stop                           \"<|im_end|>\"\ntemperature                    0.2",
            "system": "line one\n\nline two\nline three",
            "details": {"family": "llama", "parameter_size": "134.52M", "quantization_level": "Q4_1"},
            "model_info": {
                "general.architecture": "llama",
                "llama.context_length": 8192,
                "llama.embedding_length": 576,
                "tokenizer.ggml.tokens": ["a", "b", "c", "d", "e"]
            },
            "capabilities": ["completion"]
        }))
        .unwrap();
        let trimmed: String = summary(&info, false)
            .lines()
            .map(|l| format!("{}\n", l.trim_end()))
            .collect();
        assert!(summary(&info, false).contains("    architecture        llama      \n"));
        assert_eq!(
            trimmed,
            "  Model\n\
             \x20   architecture        llama\n\
             \x20   parameters          134.52M\n\
             \x20   context length      8192\n\
             \x20   embedding length    576\n\
             \x20   quantization        Q4_1\n\n\
             \x20 Capabilities\n\
             \x20   completion\n\n\
             \x20 Parameters\n\
             \x20   stop           \"<|im_end|>\"\n\
             \x20   temperature    0.2\n\n\
             \x20 System\n\
             \x20   line one\n\
             \x20   line two\n\
             \x20   ...\n\n"
        );
        // A remote stub names its model and server first; a projector gets its own section.
        let remote: ShowInfo = serde_json::from_value(json!({
            "remote_model": "gpt-oss:20b",
            "remote_host": "https://ollama.com:443",
            "details": {"family": "gptoss", "parameter_size": "20.9B", "quantization_level": "MXFP4"},
            "projector_info": {
                "general.architecture": "clip",
                "general.parameter_count": 428_000_000u64,
                "clip.vision.embedding_length": 1024,
                "clip.vision.projection_dim": 768
            }
        }))
        .unwrap();
        let trimmed: String = summary(&remote, false)
            .lines()
            .map(|l| format!("{}\n", l.trim_end()))
            .collect();
        assert_eq!(
            trimmed,
            "  Model\n\
             \x20   Remote model    gpt-oss:20b\n\
             \x20   Remote URL      https://ollama.com:443\n\
             \x20   architecture    gptoss\n\
             \x20   parameters      20.9B\n\
             \x20   quantization    MXFP4\n\n\
             \x20 Projector\n\
             \x20   architecture        clip\n\
             \x20   parameters          428M\n\
             \x20   embedding length    1024\n\
             \x20   dimensions          768\n\n"
        );
        // Ollama's own projector case (cmd_test.go TestShowInfo "projector"), byte for byte.
        let projector: ShowInfo = serde_json::from_value(json!({
            "details": {"family": "test", "parameter_size": "7B", "quantization_level": "FP16"},
            "projector_info": {
                "general.architecture": "clip",
                "general.parameter_count": 133_700_000.0,
                "clip.vision.embedding_length": 0.0,
                "clip.vision.projection_dim": 0.0
            }
        }))
        .unwrap();
        assert_eq!(
            summary(&projector, false),
            "  Model\n    architecture    test    \n    parameters      7B      \n    quantization    FP16    \n\n\
             \x20 Projector\n    architecture        clip       \n    parameters          133.70M    \n\
             \x20   embedding length    0          \n    dimensions          0          \n\n"
        );
        // Long lines wrap: System and License at 100 columns, where the column is then 100
        // wide, a continuation line indented two more (tablewriter's filler in the empty first
        // column); metadata strings at 30.
        let words = |n: usize| vec!["abcd"; n].join(" ");
        let long: ShowInfo = serde_json::from_value(json!({
            "details": {"family": "llama", "parameter_size": "1B", "quantization_level": "Q8_0"},
            "license": format!("{}\nsecond line", words(25)),
            "model_info": {
                "general.architecture": "llama",
                "general.description": "a model with a description that is long"
            }
        }))
        .unwrap();
        let shown = summary(&long, true);
        let license = &shown[shown.find("  License\n").unwrap()..];
        assert_eq!(
            license,
            format!(
                "  License\n    {} {}\n      {}{}\n    second line{}\n\n",
                words(20),
                " ".repeat(4),
                words(5),
                " ".repeat(100 - 24 + 4),
                " ".repeat(100 - 11 + 4),
            )
        );
        let metadata = format!(
            "    general.architecture    llama{}\n    general.description     a model with a description{}\n      {}that is long{}\n",
            " ".repeat(30 - 5 + 4),
            " ".repeat(30 - 26 + 4),
            " ".repeat(20 + 4),
            " ".repeat(30 - 12 + 4),
        );
        assert!(shown.contains(&metadata), "{shown}");

        let verbose = summary(&info, true);
        assert!(verbose.contains("  Metadata\n"));
        assert!(verbose.contains("tokenizer.ggml.tokens     [a b c ...+2 more]"));
    }
}
