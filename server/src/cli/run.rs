//! `herd run MODEL [PROMPT]` (Ollama's `RunHandler` flow): check the model with `/api/show`
//! (a missing one is pulled first, with `herd pull`'s progress display), then either answer one
//! prompt (arguments, with piped stdin in front) through `/api/generate` (`super::oneshot`) or,
//! when stdin and stdout are a terminal and no prompt was given, preload the model with an empty
//! generate and run the REPL (`super::repl`), which chats.

use std::io::{IsTerminal, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::answer::{stats, ChunkMessage, Display, Metrics};
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
    #[serde(flatten)]
    metrics: Metrics,
}

/// One conversation with its settings; the REPL's `/set` commands change them.
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) model: String,
    pub(super) messages: Vec<Value>,
    /// The model's saved conversation (its MESSAGE layers, from `/api/show`): the server puts
    /// it in front of every chat; `/save` keeps it in front of this session's.
    pub(super) loaded_messages: Vec<Value>,
    pub(super) system: Option<String>,
    pub(super) options: Map<String, Value>,
    /// `--format` / `/set format json`: `"json"` or a JSON schema, sent as given.
    pub(super) format: Option<Value>,
    pub(super) think: Option<Value>,
    /// `--think` or `/set [no]think` chose `think`; otherwise it follows the model's
    /// capabilities (Ollama's `inferThinkingOption`), also across `/load`.
    pub(super) think_explicit: bool,
    /// `--keepalive`, as Ollama's client sends it ([`keep_alive_flag`]).
    pub(super) keep_alive: Option<Value>,
    pub(super) verbose: bool,
    pub(super) hide_thinking: bool,
    /// Wrap answers at the terminal's width (`--nowordwrap`, `/set [no]wordwrap`).
    pub(super) word_wrap: bool,
    /// The model takes images (or audio): files named in a prompt are sent (`super::files`).
    pub(super) multimodal: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Flags are checked before the server is asked anything, as in Ollama's RunHandler.
    let think_flag = args.think.as_deref().map(think_value).transpose()?;
    let keep_alive = match args.keepalive.as_deref() {
        None | Some("") => None,
        Some(flag) => Some(keep_alive_flag(flag)?),
    };
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
        loaded_messages: Vec::new(),
        system: None,
        options: Map::new(),
        format: format_value(&args.format)?,
        think: None,
        think_explicit: false,
        keep_alive,
        verbose: args.verbose,
        hide_thinking: args.hidethinking,
        word_wrap: !args.nowordwrap,
        multimodal: false,
    };
    s.set_model_info(info.as_ref());
    let caps = |c: &str| {
        info.as_ref()
            .and_then(|i| i["capabilities"].as_array())
            .is_some_and(|a| a.iter().any(|x| x == c))
    };
    // Ollama's `inferThinkingOption`: without `--think`, a model that can think is asked to
    // (so its thinking arrives apart from the answer); `--think=false` is sent as given.
    s.think_explicit = think_flag.is_some();
    s.think = think_flag;
    s.infer_think(info.as_ref());
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
        let editor = super::editor::command([
            args.editor.as_deref(),
            args.visual.as_deref(),
            args.env_editor.as_deref(),
        ]);
        return super::repl::repl(&mut s, history, editor).await;
    }
    // One answer (an empty prompt only loads the model): `/api/generate`, as Ollama's
    // `generate`; only the REPL chats.
    s.generate(&prompt).await
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

/// `/load`: the model must exist (no pull), as in Ollama's REPL; its description when the
/// server gave one.
pub(super) async fn check_model(client: &Client, model: &str) -> anyhow::Result<Option<Value>> {
    match show_model(client, model).await {
        Err(ShowError::NotFound) => Err(anyhow!("model '{model}' not found")),
        Err(ShowError::Fatal(e)) => Err(e),
        Err(ShowError::Other(_)) => Ok(None),
        Ok(info) => Ok(Some(info)),
    }
}

/// `--format`: `json` is the string "json"; anything else must be JSON (a schema), sent as that
/// value, as Ollama's CLI passes the flag through as raw JSON.
fn format_value(flag: &str) -> anyhow::Result<Option<Value>> {
    match flag {
        "" => Ok(None),
        "json" => Ok(Some(json!("json"))),
        schema => serde_json::from_str(schema)
            .map(Some)
            .map_err(|e| anyhow!("invalid --format {schema:?}: {e}")),
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

/// `--keepalive`: Go's `time.ParseDuration` (`5m`, `1h30m`, `300ms`, `1.5h`, `-1s`; a bare
/// number other than `0` is an error, as is any other unit), its error text being the run's,
/// as in Ollama's RunHandler. Sent as Ollama's `api.Duration` marshals it: a negative duration
/// (keep loaded forever) as the number -1, any other as Go's `Duration.String()` ("1h30m0s").
pub(super) fn keep_alive_flag(flag: &str) -> anyhow::Result<Value> {
    let ns = crate::config::go_parse_duration(flag).map_err(|e| anyhow!(e))?;
    Ok(match u64::try_from(ns) {
        Ok(ns) => Value::String(super::answer::go_duration(ns)),
        Err(_) => json!(-1),
    })
}

/// `--think` / `/set think LEVEL`: a bool or one of Ollama's levels.
pub(super) fn think_value(s: &str) -> anyhow::Result<Value> {
    match s {
        "" | "true" => Ok(Value::Bool(true)),
        "false" => Ok(Value::Bool(false)),
        "low" | "medium" | "high" | "max" => Ok(Value::String(s.into())),
        _ => Err(anyhow!(
            "invalid value for --think: {s:?} (must be true, false, high, medium, low, or max)"
        )),
    }
}

impl Session {
    /// What the session takes from the model's `/api/show`: whether prompts may name files,
    /// and its saved conversation.
    pub(super) fn set_model_info(&mut self, info: Option<&Value>) {
        self.multimodal = info.is_some_and(multimodal);
        self.loaded_messages = info
            .and_then(|i| i["messages"].as_array())
            .cloned()
            .unwrap_or_default();
    }

    /// Ollama's `inferThinkingOption`: unless the user chose, a model whose capabilities include
    /// `thinking` is asked to think (`true`), any other gets no `think` at all.
    pub(super) fn infer_think(&mut self, info: Option<&Value>) {
        if self.think_explicit {
            return;
        }
        let thinks = info
            .and_then(|i| i["capabilities"].as_array())
            .is_some_and(|a| a.iter().any(|c| c == "thinking"));
        self.think = thinks.then_some(Value::Bool(true));
    }

    pub(super) fn keep_alive_json(&self) -> Option<Value> {
        self.keep_alive.clone()
    }

    /// Ollama preloads with an empty generate so the first answer does not wait for the load.
    /// The request carries `think`, so that thinking asked of a model that cannot think fails
    /// here, before the REPL opens, as Ollama's `loadOrUnloadModel` does.
    pub(super) async fn preload(&self) -> anyhow::Result<()> {
        let mut body = json!({"model": self.model});
        if let Some(k) = self.keep_alive_json() {
            body["keep_alive"] = k;
        }
        if let Some(t) = &self.think {
            body["think"] = t.clone();
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
        if let Some(f) = &self.format {
            body["format"] = f.clone();
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
        let shown = AtomicBool::new(false);
        let outcome = tokio::select! {
            r = self.stream_turn(&shown) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(outcome) = outcome else {
            // Before any answer the spinner's clear left the cursor at the start of an empty
            // line, as in Ollama; after some, the next prompt goes below it.
            if shown.load(Ordering::SeqCst) {
                println!();
            }
            return Ok(());
        };
        // A failed turn leaves the user's message in the history, as Ollama's REPL does (it
        // appends the message before asking, and keeps it when it goes on after an error).
        let reply = outcome?;
        self.messages
            .push(json!({"role": "assistant", "content": reply}));
        Ok(())
    }

    /// One streamed chat answer; `shown` is set once any of it is on screen.
    async fn stream_turn(&self, shown: &AtomicBool) -> anyhow::Result<String> {
        // Dropped (cleared) on every way out, Ctrl-C included.
        let mut spinner = super::spinner::Spinner::start();
        let resp = self
            .client
            .post_stream("/api/chat", &self.request())
            .await?;
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut reply = String::new();
        let mut out = std::io::stdout();
        let width = if self.word_wrap {
            super::wrap::stdout_width()
        } else {
            0
        };
        let plain = !out.is_terminal();
        let mut display = Display::new(plain, self.hide_thinking, width);
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
                // Ollama keeps spinning through hidden thinking, until the answer shows.
                if !c.message.content.is_empty() || !self.hide_thinking {
                    spinner.stop();
                }
                let text = display.chunk(&c.message);
                if !text.is_empty() {
                    shown.store(true, Ordering::SeqCst);
                }
                write!(out, "{text}")?;
                reply.push_str(&c.message.content);
                out.flush()?;
                if c.done {
                    // Two newlines after every answer, whatever it ends with (Ollama's `chat`
                    // and `generate`): output redirected to a file is the same bytes.
                    write!(out, "\n\n")?;
                    if self.verbose {
                        eprint!("{}", stats(&c.metrics));
                    }
                }
            }
        }
        Ok(reply)
    }
}

/// A session with nothing set, for tests (oneshot.rs's too).
#[cfg(test)]
pub(super) fn test_session(model: &str) -> Session {
    Session {
        client: Client::new(&Default::default()).unwrap(),
        model: model.into(),
        messages: Vec::new(),
        loaded_messages: Vec::new(),
        system: None,
        options: Map::new(),
        format: None,
        think: None,
        think_explicit: false,
        keep_alive: None,
        verbose: false,
        hide_thinking: false,
        word_wrap: false,
        multimodal: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        test_session("saved:latest")
    }

    #[test]
    fn format_flag_is_json_or_a_schema() {
        assert_eq!(format_value("").unwrap(), None);
        assert_eq!(format_value("json").unwrap(), Some(json!("json")));
        let schema = r#"{"type":"object","properties":{"age":{"type":"integer"}}}"#;
        let want: Value = serde_json::from_str(schema).unwrap();
        assert_eq!(format_value(schema).unwrap(), Some(want.clone()));
        assert!(format_value("yaml").is_err());
        // The request carries the schema as an object, not a string.
        let mut s = session();
        s.format = Some(want.clone());
        assert_eq!(s.request()["format"], want);
    }

    #[test]
    fn save_keeps_the_loaded_conversation() {
        let mut s = session();
        s.set_model_info(Some(&json!({
            "capabilities": ["completion"],
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "one"}
            ]
        })));
        s.messages = vec![
            json!({"role": "user", "content": "second"}),
            json!({"role": "assistant", "content": "two"}),
        ];
        s.system = Some("be brief".into());
        s.options.insert("num_predict".into(), json!(8));
        assert_eq!(
            super::super::repl::save_request(&s, "again"),
            json!({
                "model": "again",
                "from": "saved:latest",
                "stream": false,
                "messages": [
                    {"role": "user", "content": "first"},
                    {"role": "assistant", "content": "one"},
                    {"role": "user", "content": "second"},
                    {"role": "assistant", "content": "two"}
                ],
                "system": "be brief",
                "parameters": {"num_predict": 8}
            })
        );
        // A model without a saved conversation, a session without settings: just the base.
        let mut s = session();
        s.set_model_info(None);
        assert_eq!(
            super::super::repl::save_request(&s, "x"),
            json!({"model": "x", "from": "saved:latest", "stream": false})
        );
    }

    #[test]
    fn thinking_is_inferred_unless_chosen() {
        let thinker = json!({"capabilities": ["completion", "thinking"]});
        let plain = json!({"capabilities": ["completion"]});
        let mut s = session();
        s.infer_think(Some(&thinker));
        assert_eq!(s.think, Some(json!(true)));
        // `/load` of a model that cannot think drops it again.
        s.infer_think(Some(&plain));
        assert_eq!(s.think, None);
        s.infer_think(None);
        assert_eq!(s.think, None);
        // A choice (`--think=false`, `/set nothink`) stays whatever the model.
        s.think = Some(json!(false));
        s.think_explicit = true;
        s.infer_think(Some(&thinker));
        assert_eq!(s.think, Some(json!(false)));
    }

    #[test]
    fn keepalive_flag_values() {
        let ok = [
            ("5m", json!("5m0s")),
            ("1h30m", json!("1h30m0s")),
            ("1.5h", json!("1h30m0s")),
            ("90m", json!("1h30m0s")),
            ("300ms", json!("300ms")),
            ("2h45m30.5s", json!("2h45m30.5s")),
            ("1us", json!("1µs")),
            ("0", json!("0s")),
            ("0s", json!("0s")),
            ("+10s", json!("10s")),
            // Negative: keep the model loaded forever, sent as -1.
            ("-1s", json!(-1)),
            ("-5m", json!(-1)),
        ];
        for (flag, want) in ok {
            assert_eq!(keep_alive_flag(flag).unwrap(), want, "{flag}");
        }
        // Go's errors, word for word: no bare seconds, no days, no spaces.
        let bad = [
            ("300", "time: missing unit in duration \"300\""),
            ("-1", "time: missing unit in duration \"-1\""),
            ("1d", "time: unknown unit \"d\" in duration \"1d\""),
            ("forever", "time: invalid duration \"forever\""),
            ("5 m", "time: unknown unit \" m\" in duration \"5 m\""),
            ("-", "time: invalid duration \"-\""),
        ];
        for (flag, want) in bad {
            assert_eq!(
                keep_alive_flag(flag).unwrap_err().to_string(),
                want,
                "{flag}"
            );
        }
    }

    #[test]
    fn think_flag_values() {
        assert_eq!(think_value("true").unwrap(), json!(true));
        assert_eq!(think_value("high").unwrap(), json!("high"));
        // `--think=` is `--think` (Ollama's "" case).
        assert_eq!(think_value("").unwrap(), json!(true));
        assert_eq!(
            think_value("extreme").unwrap_err().to_string(),
            "invalid value for --think: \"extreme\" (must be true, false, high, medium, low, or max)"
        );
    }
}
