//! `herd run MODEL [PROMPT]` (Ollama's `RunHandler` flow): check the model with `/api/show`,
//! then either answer one prompt (arguments, with piped stdin in front) or, when stdin is a
//! terminal and no prompt was given, preload the model with an empty generate and run the REPL:
//! streamed `/api/chat` turns, Ollama's slash commands, `"""` multi-line input and the history
//! file `~/.ollama/history` (unless `OLLAMA_NOHISTORY`). Line editing is the terminal's own.

use std::io::{IsTerminal, Read, Write};

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::client::Client;
use crate::config::RunArgs;

#[derive(Debug, Default, Deserialize)]
struct Chunk {
    #[serde(default)]
    message: ChunkMessage,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    total_duration: u64,
    #[serde(default)]
    load_duration: u64,
    #[serde(default)]
    prompt_eval_count: u64,
    #[serde(default)]
    prompt_eval_duration: u64,
    #[serde(default)]
    eval_count: u64,
    #[serde(default)]
    eval_duration: u64,
}

#[derive(Debug, Default, Deserialize)]
struct ChunkMessage {
    #[serde(default)]
    content: String,
    #[serde(default)]
    thinking: String,
}

/// One conversation with its settings; the REPL's `/set` commands change them.
struct Session {
    client: Client,
    model: String,
    messages: Vec<Value>,
    system: Option<String>,
    options: Map<String, Value>,
    format: String,
    think: Option<Value>,
    keep_alive: Option<String>,
    verbose: bool,
    hide_thinking: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    check_model(&client, &args.model).await?;
    let mut prompt = args.prompt.join(" ");
    let stdin_tty = std::io::stdin().is_terminal();
    if !stdin_tty {
        let mut piped = String::new();
        std::io::stdin()
            .read_to_string(&mut piped)
            .context("reading stdin")?;
        prompt = [piped, prompt]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
    }
    let mut s = Session {
        client,
        model: args.model.clone(),
        messages: Vec::new(),
        system: None,
        options: Map::new(),
        format: args.format.clone(),
        think: args.think.as_deref().map(think_value).transpose()?,
        keep_alive: args.keepalive.clone(),
        verbose: args.verbose,
        hide_thinking: args.hidethinking,
    };
    if stdin_tty && args.prompt.is_empty() {
        s.preload().await?;
        let history = (!args.nohistory).then(crate::config::history_file);
        return repl(&mut s, history).await;
    }
    s.chat(&prompt).await
}

/// Ollama's pre-flight `/api/show`: only "no such model" stops the run (Ollama would pull
/// then); a model `/api/show` cannot describe may still run.
async fn check_model(client: &Client, model: &str) -> anyhow::Result<()> {
    match client
        .send(Method::POST, "/api/show", Some(&json!({"model": model})))
        .await
    {
        Err(e) if e.to_string().contains("not found") || e.to_string().contains("connect") => {
            Err(e)
        }
        Err(e) => {
            tracing::debug!(error = %e, "show failed; running anyway");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// `--think` / `/set think LEVEL`: a bool or one of Ollama's levels.
fn think_value(s: &str) -> anyhow::Result<Value> {
    match s {
        "true" => Ok(Value::Bool(true)),
        "false" => Ok(Value::Bool(false)),
        "low" | "medium" | "high" | "max" => Ok(Value::String(s.into())),
        _ => Err(anyhow!(
            "invalid value for --think: {s:?} (must be true, false, high, medium, low or max)"
        )),
    }
}

impl Session {
    fn keep_alive_json(&self) -> Option<Value> {
        self.keep_alive.as_ref().map(|k| Value::String(k.clone()))
    }

    /// Ollama preloads with an empty generate so the first answer does not wait for the load.
    async fn preload(&self) -> anyhow::Result<()> {
        let mut body = json!({"model": self.model});
        if let Some(k) = self.keep_alive_json() {
            body["keep_alive"] = k;
        }
        self.client
            .send(Method::POST, "/api/generate", Some(&body))
            .await?;
        Ok(())
    }

    fn request(&self) -> Value {
        let mut messages = Vec::new();
        if let Some(sys) = &self.system {
            messages.push(json!({"role": "system", "content": sys}));
        }
        messages.extend(self.messages.iter().cloned());
        let mut body = json!({"model": self.model, "messages": messages, "stream": true});
        if !self.options.is_empty() {
            body["options"] = Value::Object(self.options.clone());
        }
        if !self.format.is_empty() {
            body["format"] = Value::String(self.format.clone());
        }
        if let Some(t) = &self.think {
            body["think"] = t.clone();
        }
        if let Some(k) = self.keep_alive_json() {
            body["keep_alive"] = k;
        }
        body
    }

    /// One streamed turn; the reply joins the history only when it completed.
    async fn chat(&mut self, text: &str) -> anyhow::Result<()> {
        self.messages.push(json!({"role": "user", "content": text}));
        match self.stream_turn().await {
            Ok(reply) => {
                self.messages
                    .push(json!({"role": "assistant", "content": reply}));
                Ok(())
            }
            Err(e) => {
                self.messages.pop();
                Err(e)
            }
        }
    }

    async fn stream_turn(&self) -> anyhow::Result<String> {
        let resp = self
            .client
            .post_stream("/api/chat", &self.request())
            .await?;
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut reply = String::new();
        let mut thinking = false;
        let mut out = std::io::stdout();
        while let Some(bytes) = body.next().await {
            buf.extend_from_slice(&bytes.context("reading the response")?);
            while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let c: Chunk = serde_json::from_slice(&line).context("decoding a response line")?;
                if let Some(e) = c.error {
                    println!();
                    return Err(anyhow!(e));
                }
                if !c.message.thinking.is_empty() && !self.hide_thinking {
                    if !thinking {
                        thinking = true;
                        writeln!(out, "Thinking...")?;
                    }
                    write!(out, "{}", c.message.thinking)?;
                }
                if !c.message.content.is_empty() {
                    if thinking {
                        thinking = false;
                        write!(out, "\n...done thinking.\n\n")?;
                    }
                    write!(out, "{}", c.message.content)?;
                    reply.push_str(&c.message.content);
                }
                out.flush()?;
                if c.done {
                    writeln!(out)?;
                    if !reply.ends_with('\n') {
                        writeln!(out)?;
                    }
                    if self.verbose {
                        eprint!("{}", stats(&c));
                    }
                }
            }
        }
        Ok(reply)
    }
}

/// Go's `time.Duration.String()` for the `--verbose` report.
pub fn go_duration(ns: u64) -> String {
    fn trim(v: f64, unit: &str) -> String {
        let s = format!("{v:.9}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s}{unit}")
    }
    match ns {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => trim(n as f64 / 1e3, "µs"),
        n if n < 1_000_000_000 => trim(n as f64 / 1e6, "ms"),
        n => {
            let secs = n / 1_000_000_000;
            let frac = n % 1_000_000_000;
            let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
            let sec = trim(s as f64 + frac as f64 / 1e9, "s");
            match (h, m) {
                (0, 0) => sec,
                (0, m) => format!("{m}m{sec}"),
                (h, m) => format!("{h}h{m}m{sec}"),
            }
        }
    }
}

fn stats(c: &Chunk) -> String {
    let rate = |count: u64, ns: u64| {
        if ns == 0 {
            0.0
        } else {
            count as f64 / (ns as f64 / 1e9)
        }
    };
    format!(
        "total duration:       {}\nload duration:        {}\nprompt eval count:    {} token(s)\n\
         prompt eval duration: {}\nprompt eval rate:     {:.2} tokens/s\neval count:           {} token(s)\n\
         eval duration:        {}\neval rate:            {:.2} tokens/s\n",
        go_duration(c.total_duration),
        go_duration(c.load_duration),
        c.prompt_eval_count,
        go_duration(c.prompt_eval_duration),
        rate(c.prompt_eval_count, c.prompt_eval_duration),
        c.eval_count,
        go_duration(c.eval_duration),
        rate(c.eval_count, c.eval_duration),
    )
}

const HELP: &str = "Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.
";

const SET_HELP: &str = "Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set history           Enable history
  /set nohistory         Disable history
  /set wordwrap          Enable wordwrap
  /set nowordwrap        Disable wordwrap
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
  /set think             Enable thinking
  /set nothink           Disable thinking
";

/// Reads stdin lines on a plain thread (blocking reads never stall the runtime).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send(line.trim_end_matches(['\n', '\r']).to_owned())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    rx
}

fn prompt_marker(text: &str) {
    print!("{text}");
    let _ = std::io::stdout().flush();
}

async fn repl(s: &mut Session, history: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let mut lines = stdin_lines();
    loop {
        prompt_marker(">>> ");
        let Some(first) = lines.recv().await else {
            println!();
            return Ok(());
        };
        let input = match first.trim_start().strip_prefix("\"\"\"") {
            Some(rest) => read_multiline(rest, &mut lines).await,
            None => first,
        };
        if input.trim().is_empty() {
            continue;
        }
        if let Some(path) = &history {
            record(path, &input);
        }
        if input.starts_with('/') {
            match command(s, input.trim()).await {
                Ok(true) => continue,
                Ok(false) => return Ok(()),
                Err(e) => {
                    println!("error: {e:#}");
                    continue;
                }
            }
        }
        if let Err(e) = s.chat(&input).await {
            println!("Error: {e:#}");
        }
    }
}

/// `"""` input: everything up to a line ending in `"""`.
async fn read_multiline(first: &str, lines: &mut mpsc::UnboundedReceiver<String>) -> String {
    if let Some(done) = first.strip_suffix("\"\"\"") {
        return done.to_owned();
    }
    let mut text = first.to_owned();
    loop {
        prompt_marker("... ");
        let Some(line) = lines.recv().await else {
            return text;
        };
        text.push('\n');
        match line.strip_suffix("\"\"\"") {
            Some(end) => {
                text.push_str(end);
                return text.trim_start_matches('\n').to_owned();
            }
            None => text.push_str(&line),
        }
    }
}

fn record(path: &std::path::Path, input: &str) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{}", input.replace('\n', " "));
    }
}

/// A `/set parameter` value as Ollama types it: integer, float, bool, else a string.
pub fn parameter_value(raw: &str) -> Value {
    if let Ok(i) = raw.parse::<i64>() {
        return json!(i);
    }
    if let Ok(f) = raw.parse::<f64>() {
        return json!(f);
    }
    match raw {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(raw.to_owned()),
    }
}

/// Runs one slash command; `Ok(false)` ends the session.
async fn command(s: &mut Session, line: &str) -> anyhow::Result<bool> {
    let mut words = line.split_whitespace();
    let cmd = words.next().unwrap_or_default();
    let rest: Vec<&str> = words.collect();
    match (cmd, rest.as_slice()) {
        ("/bye" | "/exit", _) => return Ok(false),
        ("/?" | "/help", ["shortcuts"]) => {
            println!("Available keyboard shortcuts:\n  Ctrl + d   Exit (on an empty line)\n  Ctrl + c   Interrupt\n");
        }
        ("/?" | "/help", _) => println!("{HELP}"),
        ("/clear", _) => {
            s.messages.clear();
            println!("Cleared session context");
        }
        ("/set", []) => println!("{SET_HELP}"),
        ("/set", ["parameter", key, values @ ..]) if !values.is_empty() => {
            let v = if *key == "stop" {
                Value::Array(values.iter().map(|v| json!(v)).collect())
            } else {
                parameter_value(&values.join(" "))
            };
            s.options.insert((*key).to_owned(), v);
            println!("Set parameter '{key}' to '{}'", values.join(", "));
        }
        ("/set", ["system", ..]) => {
            let text = line.splitn(3, ' ').nth(2).unwrap_or("").trim();
            s.system = (!text.is_empty()).then(|| text.trim_matches('"').to_owned());
            println!("Set system message.");
        }
        ("/set", ["format", "json"]) => {
            s.format = "json".into();
            println!("Set format to 'json' mode.");
        }
        ("/set", ["noformat"]) => {
            s.format.clear();
            println!("Disabled format.");
        }
        ("/set", ["verbose"]) => {
            s.verbose = true;
            println!("Set 'verbose' mode.");
        }
        ("/set", ["quiet"]) => {
            s.verbose = false;
            println!("Set 'quiet' mode.");
        }
        ("/set", ["think", level @ ..]) => {
            s.think = Some(think_value(level.first().copied().unwrap_or("true"))?);
            println!("Set 'think' mode.");
        }
        ("/set", ["nothink"]) => {
            s.think = Some(Value::Bool(false));
            println!("Set 'nothink' mode.");
        }
        ("/set", [flag @ ("history" | "nohistory" | "wordwrap" | "nowordwrap")]) => {
            println!("Set '{flag}' mode.");
        }
        ("/show", [what]) => show(s, what).await?,
        ("/load", [model]) => {
            println!("Loading model '{model}'");
            check_model(&s.client, model).await?;
            s.model = (*model).to_owned();
            s.messages.clear();
            s.preload().await?;
        }
        ("/save", _) => {
            println!("error: saving a session needs model creation, which this server does not offer yet");
        }
        _ => println!("Unknown command '{cmd}'. Type /? for help"),
    }
    Ok(true)
}

async fn show(s: &Session, what: &str) -> anyhow::Result<()> {
    // The session's own system message wins over the model's, as in Ollama.
    if let ("system", Some(own)) = (what, &s.system) {
        println!("{own}");
        return Ok(());
    }
    let info: Value = s
        .client
        .json(Method::POST, "/api/show", Some(&json!({"model": s.model})))
        .await?;
    let text = |k: &str| info[k].as_str().unwrap_or("").to_owned();
    match what {
        "info" => {
            let d = &info["details"];
            println!("  Model");
            for (label, v) in [
                ("architecture", d["family"].clone()),
                ("parameters", d["parameter_size"].clone()),
                ("quantization", d["quantization_level"].clone()),
            ] {
                println!("    {label:<16}{}", v.as_str().unwrap_or(""));
            }
            if let Some(caps) = info["capabilities"].as_array() {
                println!("\n  Capabilities");
                for c in caps {
                    println!("    {}", c.as_str().unwrap_or(""));
                }
            }
            println!();
        }
        "license" | "modelfile" | "parameters" | "system" | "template" => {
            let t = text(what);
            let missing = match what {
                "license" => "No license was specified for this model.",
                "parameters" => "No parameters were specified for this model.",
                "system" => "No system message was specified for this model.",
                "template" => "No prompt template was specified for this model.",
                _ => "",
            };
            println!("{}", if t.is_empty() { missing } else { t.as_str() });
        }
        _ => println!("Unknown command '/show {what}'. Type /? for help"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_strings() {
        let cases = [
            (0, "0s"),
            (999, "999ns"),
            (1_500, "1.5µs"),
            (12_345_000, "12.345ms"),
            (1_000_000_000, "1s"),
            (1_234_567_891, "1.234567891s"),
            (61_500_000_000, "1m1.5s"),
            (3_723_000_000_000, "1h2m3s"),
        ];
        for (ns, want) in cases {
            assert_eq!(go_duration(ns), want, "{ns}");
        }
    }

    #[test]
    fn parameter_values_are_typed() {
        assert_eq!(parameter_value("42"), json!(42));
        assert_eq!(parameter_value("0.5"), json!(0.5));
        assert_eq!(parameter_value("true"), json!(true));
        assert_eq!(parameter_value("hello"), json!("hello"));
    }

    #[test]
    fn think_flag_values() {
        assert_eq!(think_value("true").unwrap(), json!(true));
        assert_eq!(think_value("high").unwrap(), json!("high"));
        assert!(think_value("extreme").is_err());
    }
}
