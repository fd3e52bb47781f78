//! `herd run MODEL [PROMPT]` (Ollama's `RunHandler` flow): check the model with `/api/show`
//! (a missing one is pulled first, with `herd pull`'s progress display), then either answer one prompt (arguments, with piped stdin in front) or, when stdin is a
//! terminal and no prompt was given, preload the model with an empty generate and run the REPL
//! (`super::repl`).

use std::io::{IsTerminal, Read, Write};

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::client::Client;
use super::history::History;
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
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) model: String,
    pub(super) messages: Vec<Value>,
    pub(super) system: Option<String>,
    pub(super) options: Map<String, Value>,
    pub(super) format: String,
    pub(super) think: Option<Value>,
    pub(super) keep_alive: Option<String>,
    pub(super) verbose: bool,
    pub(super) hide_thinking: bool,
    /// Wrap answers at the terminal's width (`--nowordwrap`, `/set [no]wordwrap`).
    pub(super) word_wrap: bool,
    /// The model takes images (or audio): files named in a prompt are sent (`super::files`).
    pub(super) multimodal: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let info = ensure_model(&client, &args.model, args.insecure).await?;
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
        word_wrap: !args.nowordwrap,
        multimodal: info.as_ref().is_some_and(multimodal),
    };
    let caps = |c: &str| {
        info.as_ref()
            .and_then(|i| i["capabilities"].as_array())
            .is_some_and(|a| a.iter().any(|x| x == c))
    };
    // An embedding model prints the embedding of the prompt (Ollama's `generateEmbedding`).
    if caps("embedding") {
        return embed(&s, &prompt, &args).await;
    }
    if caps("image") {
        return Err(anyhow!(
            "image generation models are not currently supported"
        ));
    }
    // A REPL only between a user and a terminal: a prompt, piped stdin or a redirected
    // stdout make one answer, and an empty one only loads the model (Ollama's RunHandler).
    let interactive = stdin_tty && args.prompt.is_empty() && std::io::stdout().is_terminal();
    if interactive {
        s.preload().await?;
        show_saved_messages(info.as_ref());
        let history = History::load(crate::config::history_file(), !args.nohistory);
        return super::repl::repl(&mut s, history).await;
    }
    if prompt.is_empty() {
        return s.preload().await;
    }
    s.chat(&prompt).await
}

/// Whether `ollama run` would look for files in prompts: the model sees images or hears audio
/// (its capabilities, or a projector or vision keys from older servers).
fn multimodal(info: &Value) -> bool {
    let caps = info["capabilities"].as_array();
    caps.is_some_and(|a| a.iter().any(|c| c == "vision" || c == "audio"))
        || info["projector_info"]
            .as_object()
            .is_some_and(|o| !o.is_empty())
        || info["model_info"]
            .as_object()
            .is_some_and(|o| o.keys().any(|k| k.contains(".vision.")))
}

/// `herd run EMBEDDING-MODEL TEXT`: the first embedding as a JSON array on stdout.
async fn embed(s: &Session, prompt: &str, args: &RunArgs) -> anyhow::Result<()> {
    if prompt.is_empty() {
        return Err(anyhow!(
            "embedding models require input text. Usage: herd run {} \"your text here\"",
            s.model
        ));
    }
    let mut body = json!({"model": s.model, "input": prompt});
    if let Some(k) = s.keep_alive_json() {
        body["keep_alive"] = k;
    }
    if let Some(t) = args.truncate {
        body["truncate"] = Value::Bool(t);
    }
    if args.dimensions > 0 {
        body["dimensions"] = json!(args.dimensions);
    }
    let resp: Value = s
        .client
        .json(Method::POST, "/api/embed", Some(&body))
        .await?;
    let first = resp["embeddings"]
        .get(0)
        .ok_or_else(|| anyhow!("no embeddings returned"))?;
    println!("{first}");
    Ok(())
}

/// Ollama's pre-flight `/api/show`: a model the server does not have is pulled first, with
/// the pull's progress display, then shown again (its `RunHandler`); the pull's error is the
/// run's. Any other failure to describe the model does not stop the run (no description then).
async fn ensure_model(
    client: &Client,
    model: &str,
    insecure: bool,
) -> anyhow::Result<Option<Value>> {
    match show_model(client, model).await {
        Err(ShowError::NotFound) => {
            super::pull::transfer(client, model, insecure, super::pull::Direction::Pull).await?;
            match show_model(client, model).await {
                Err(ShowError::NotFound | ShowError::Fatal(_)) => {
                    Err(anyhow!("model '{model}' not found"))
                }
                Err(ShowError::Other(_)) => Ok(None),
                Ok(info) => Ok(Some(info)),
            }
        }
        Err(ShowError::Fatal(e)) => Err(e),
        Err(ShowError::Other(e)) => {
            tracing::debug!(error = %e, "show failed; running anyway");
            Ok(None)
        }
        Ok(info) => Ok(Some(info)),
    }
}

/// A model saved with `/save` (its MESSAGE layers) opens with its conversation on screen, as
/// `ollama run` shows it; the server itself puts the messages in front of every chat.
fn show_saved_messages(info: Option<&Value>) {
    let Some(messages) = info.and_then(|i| i["messages"].as_array()) else {
        return;
    };
    for m in messages {
        let content = m["content"].as_str().unwrap_or_default();
        match m["role"].as_str() {
            Some("user") => println!(">>> {content}"),
            Some("assistant") => println!("{content}\n"),
            _ => {}
        }
    }
}

/// `/load`: the model must exist (no pull), as in Ollama's REPL.
pub(super) async fn check_model(client: &Client, model: &str) -> anyhow::Result<()> {
    match show_model(client, model).await {
        Err(ShowError::NotFound) => Err(anyhow!("model '{model}' not found")),
        Err(ShowError::Fatal(e)) => Err(e),
        _ => Ok(()),
    }
}

enum ShowError {
    NotFound,
    Fatal(anyhow::Error),
    Other(anyhow::Error),
}

async fn show_model(client: &Client, model: &str) -> Result<Value, ShowError> {
    match client
        .json::<_, Value>(Method::POST, "/api/show", Some(&json!({"model": model})))
        .await
    {
        Err(e) if e.to_string().contains("not found") => Err(ShowError::NotFound),
        Err(e) if e.to_string().contains("connect") => Err(ShowError::Fatal(e)),
        Err(e) => Err(ShowError::Other(e)),
        Ok(info) => Ok(info),
    }
}

/// `--think` / `/set think LEVEL`: a bool or one of Ollama's levels.
pub(super) fn think_value(s: &str) -> anyhow::Result<Value> {
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
    pub(super) async fn preload(&self) -> anyhow::Result<()> {
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

    /// One streamed turn; the reply joins the history only when it completed. Ctrl-C stops
    /// the answer (the request is dropped, so the server cancels it) and, as in Ollama's `chat`,
    /// is no error: the user's message stays, the partial reply does not join the history.
    pub(super) async fn chat(&mut self, text: &str) -> anyhow::Result<()> {
        let mut message = json!({"role": "user", "content": text});
        if self.multimodal {
            let (text, images) = super::files::extract(text, &mut |n| eprintln!("{n}"))?;
            message = json!({"role": "user", "content": text});
            if !images.is_empty() {
                message["images"] = json!(images);
            }
        }
        self.messages.push(message);
        let outcome = tokio::select! {
            r = self.stream_turn() => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(outcome) = outcome else {
            println!();
            return Ok(());
        };
        match outcome {
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
        let width = if self.word_wrap {
            super::wrap::stdout_width()
        } else {
            0
        };
        let mut wrap = super::wrap::Wrapper::default();
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
                    write!(out, "{}", wrap.push(&c.message.content, width))?;
                    reply.push_str(&c.message.content);
                }
                out.flush()?;
                if c.done {
                    // Two newlines after every answer, whatever it ends with (Ollama's `chat`
                    // and `generate`): output redirected to a file is the same bytes.
                    write!(out, "\n\n")?;
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
    fn think_flag_values() {
        assert_eq!(think_value("true").unwrap(), json!(true));
        assert_eq!(think_value("high").unwrap(), json!("high"));
        assert!(think_value("extreme").is_err());
    }
}
