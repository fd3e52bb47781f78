//! The `herd run` REPL (Ollama's `cmd/interactive.go`): streamed `/api/chat` turns, Ollama's
//! slash commands, `"""` multi-line input and the history file `~/.ollama/history` (unless
//! `OLLAMA_NOHISTORY` / `--nohistory`).

use reqwest::Method;
use serde_json::{json, Value};

use super::history::History;
use super::lineedit::{Line, LineEditor};
use super::repl_text as text;
use super::run::{check_model, Session};

/// What the lines being read belong to: Ollama's `"""` states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Multiline {
    None,
    Prompt,
    System,
}

/// The REPL proper: reads lines with the line editor (`>>> `, `... ` inside a `"""` block) and
/// runs them as Ollama's `generateInteractive` does.
pub(super) async fn repl(s: &mut Session, history: History, editor: String) -> anyhow::Result<()> {
    let mut ed = LineEditor::new(history)?;
    // The next line's starting text: what the editor left after Ctrl-G.
    let mut prefill = String::new();
    let mut sb = String::new();
    let mut multiline = Multiline::None;
    loop {
        let prompt = if multiline == Multiline::None {
            ">>> "
        } else {
            "... "
        };
        let line = match ed.read(prompt, &std::mem::take(&mut prefill))? {
            Line::Eof => {
                println!();
                return Ok(());
            }
            Line::Interrupted => {
                // Ollama: the line (and any open `"""` block) is dropped, the session goes on.
                println!("\nUse Ctrl + d or /bye to exit.");
                multiline = Multiline::None;
                sb.clear();
                continue;
            }
            Line::Edit(line) => {
                // Ollama: the pending `"""` text is dropped; an editor that fails or leaves
                // nothing but blanks changes nothing.
                sb.clear();
                // The editor has the terminal until it exits: off the async workers, as reads.
                match tokio::task::block_in_place(|| super::editor::edit(&editor, &line)) {
                    Ok(text) if !text.trim().is_empty() => prefill = text,
                    Ok(_) => {}
                    Err(e) => eprintln!("error: {e:#}"),
                }
                continue;
            }
            Line::Text(line) => line,
        };
        if multiline != Multiline::None {
            let (before, done) = match line.strip_suffix("\"\"\"") {
                Some(b) => (b, true),
                None => (line.as_str(), false),
            };
            sb.push_str(before);
            if !done {
                sb.push('\n');
                continue;
            }
            if multiline == Multiline::System {
                set_system(s, &std::mem::take(&mut sb));
            }
            multiline = Multiline::None;
        } else if let Some(rest) = line.strip_prefix("\"\"\"") {
            match rest.strip_suffix("\"\"\"") {
                Some(one) => sb.push_str(one),
                None => {
                    sb.push_str(rest);
                    sb.push('\n');
                    multiline = Multiline::Prompt;
                    continue;
                }
            }
        } else if let Some(text) = system_block(&line) {
            // `/set system """...` opens a multi-line system message.
            sb.push_str(text);
            sb.push('\n');
            multiline = Multiline::System;
            continue;
        } else if line.trim_start().starts_with('/') && !names_a_file(s, line.trim()) {
            match command(s, &mut ed, line.trim()).await {
                Ok(true) => continue,
                Ok(false) => return Ok(()),
                Err(e) => {
                    println!("error: {e:#}");
                    continue;
                }
            }
        } else {
            sb.push_str(&line);
        }
        if sb.trim().is_empty() {
            sb.clear();
            continue;
        }
        let text = std::mem::take(&mut sb);
        if let Err(e) = s.chat(&text).await {
            // Ollama ends the session on a failed turn, unless the thinking setting (which `/set`
            // can change) or an upstream hiccup caused it; the user's message stays either way.
            match text::chat_failure(&format!("{e:#}")) {
                text::ChatFailure::Continue(line) => println!("{line}"),
                text::ChatFailure::Exit => return Err(e),
            }
        }
    }
}

/// The text after `/set system """` when the block does not close on the same line.
fn system_block(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("/set")?.trim_start();
    let rest = rest.strip_prefix("system")?.trim_start();
    let text = rest.strip_prefix("\"\"\"")?;
    (!text.ends_with("\"\"\"")).then_some(text)
}

fn set_system(s: &mut Session, text: &str) {
    s.system = (!text.is_empty()).then(|| text.to_owned());
    println!("Set system message.");
}

/// Runs one slash command; `Ok(false)` ends the session. Words are split on whitespace and
/// dispatched on the first two, as Ollama's REPL does.
async fn command(s: &mut Session, ed: &mut LineEditor, line: &str) -> anyhow::Result<bool> {
    let args: Vec<&str> = line.split_whitespace().collect();
    let cmd = args.first().copied().unwrap_or_default();
    match cmd {
        "/bye" | "/exit" => return Ok(false),
        "/?" | "/help" => match args.get(1) {
            Some(topic) => eprint!("{}", text::help_topic(topic)),
            None => eprint!("{}", text::help(s.multimodal)),
        },
        "/clear" => {
            s.messages.clear();
            println!("Cleared session context");
        }
        "/list" => super::list_models(&s.client, args.get(1).copied()).await?,
        "/set" => set(s, ed, &args[1..]).await?,
        "/show" => match args.get(1) {
            Some(what) => show(s, what).await?,
            None => eprint!("{}", text::SHOW_HELP),
        },
        "/load" => match args.as_slice() {
            [_, model] => load(s, model).await?,
            _ => println!("Usage:\n  /load <modelname>"),
        },
        "/save" => match args.as_slice() {
            [_, name] => match save(s, name).await {
                Ok(()) => println!("Created new model '{name}'"),
                Err(e) if e.to_string().contains("invalid model name") => {
                    println!("error: The model name '{name}' is invalid")
                }
                Err(e) => return Err(e),
            },
            _ => println!("Usage:\n  /save <modelname>"),
        },
        _ => println!("Unknown command '{cmd}'. Type /? for help"),
    }
    Ok(true)
}

/// `/set ...` (`args` after `/set`).
async fn set(s: &mut Session, ed: &mut LineEditor, args: &[&str]) -> anyhow::Result<()> {
    let Some(&what) = args.first() else {
        eprint!("{}", text::SET_HELP);
        return Ok(());
    };
    match (what, &args[1..]) {
        ("parameter", [key, values @ ..]) if !values.is_empty() => {
            // Typed and checked as a Modelfile PARAMETER (Ollama's `FormatParams`): `stop`
            // takes every value, any other parameter its first.
            let v = if *key == "stop" {
                Ok(Value::Array(values.iter().map(|v| json!(v)).collect()))
            } else {
                crate::modelfile::format_param(key, values[0])
            };
            match v {
                Ok(v) => {
                    s.options.insert((*key).to_owned(), v);
                    println!("Set parameter '{key}' to '{}'", values.join(", "));
                }
                Err(e) => println!("Couldn't set parameter: {e:?}"),
            }
        }
        ("parameter", _) => eprint!("{}", text::PARAMETERS_HELP),
        ("system", []) => eprint!("{}", text::SET_HELP),
        ("system", words) => {
            // Ollama joins the words with single spaces; `"""x"""` on one line is the text x.
            let text = words.join(" ");
            let text = text
                .strip_prefix("\"\"\"")
                .and_then(|t| t.strip_suffix("\"\"\""))
                .unwrap_or(&text);
            set_system(s, text);
        }
        ("format", ["json", ..]) => {
            s.format = Some(json!("json"));
            println!("Set format to 'json' mode.");
        }
        ("format", _) => {
            println!("Invalid or missing format. For 'json' mode use '/set format json'")
        }
        ("noformat", _) => {
            s.format = None;
            println!("Disabled format.");
        }
        ("verbose", _) => {
            s.verbose = true;
            println!("Set 'verbose' mode.");
        }
        ("quiet", _) => {
            s.verbose = false;
            println!("Set 'quiet' mode.");
        }
        ("think", rest) => {
            // As in Ollama, a level is sent as it is written (even `true`) and only the server
            // judges it, at the next turn ("invalid think value", which the REPL survives).
            let level = rest.first().copied().filter(|l| !l.is_empty());
            s.think = Some(level.map_or(Value::Bool(true), |l| Value::String(l.into())));
            s.think_explicit = true;
            warn_if_not_thinking(s).await;
            println!("{}", text::think_set(level));
        }
        ("nothink", _) => {
            s.think = Some(Value::Bool(false));
            s.think_explicit = true;
            warn_if_not_thinking(s).await;
            println!("Set 'nothink' mode.");
        }
        // As in Ollama, these two print nothing.
        ("history", _) => ed.set_history_enabled(true),
        ("nohistory", _) => ed.set_history_enabled(false),
        ("wordwrap" | "nowordwrap", _) => {
            s.word_wrap = what == "wordwrap";
            println!("Set '{what}' mode.");
        }
        _ => println!("Unknown command '/set {what}'. Type /? for help"),
    }
    Ok(())
}

/// Ollama's `ensureThinkingSupport`: a model that does not report the `thinking` capability
/// gets a warning on stderr (the setting stays); a failed lookup warns of nothing.
async fn warn_if_not_thinking(s: &Session) {
    let info: Result<Value, _> = s
        .client
        .json(Method::POST, "/api/show", Some(&json!({"model": s.model})))
        .await;
    if let Ok(info) = info {
        let caps = info["capabilities"].as_array().cloned().unwrap_or_default();
        if let Some(w) = text::thinking_warning(&s.model, &caps) {
            eprintln!("{w}");
        }
    }
}

/// `/load MODEL`: the model must exist (no pull); an unknown one leaves the session as it was.
async fn load(s: &mut Session, model: &str) -> anyhow::Result<()> {
    println!("Loading model '{model}'");
    let info = match check_model(&s.client, model).await {
        Err(e) if e.to_string().contains("not found") => {
            println!("Couldn't find model '{model}'");
            return Ok(());
        }
        other => other?,
    };
    s.model = model.to_owned();
    s.messages.clear();
    s.set_model_info(info.as_ref());
    s.infer_think(info.as_ref());
    s.preload().await
}

/// `/save NAME`: a new model from the current one with the session's messages, system message
/// and parameters (Ollama's `/api/create` with `from`).
async fn save(s: &Session, name: &str) -> anyhow::Result<()> {
    s.client
        .send(Method::POST, "/api/create", Some(&save_request(s, name)))
        .await?;
    Ok(())
}

/// The `/save` request. The conversation is the loaded model's saved one (its MESSAGE layers)
/// followed by this session's, as Ollama sends it: the new model's messages replace the base's,
/// so a session continued from a saved one keeps its beginning. The base is the current model
/// itself (Ollama names its parent), so the saved model's SYSTEM and parameters carry over
/// unless the session sets its own.
pub(super) fn save_request(s: &Session, name: &str) -> Value {
    let mut body = json!({"model": name, "from": s.model, "stream": false});
    let messages: Vec<Value> = s
        .loaded_messages
        .iter()
        .chain(&s.messages)
        .cloned()
        .collect();
    if !messages.is_empty() {
        body["messages"] = Value::Array(messages);
    }
    if let Some(sys) = &s.system {
        body["system"] = json!(sys);
    }
    if !s.options.is_empty() {
        body["parameters"] = Value::Object(s.options.clone());
    }
    body
}

async fn show(s: &Session, what: &str) -> anyhow::Result<()> {
    // The session's own system message wins over the model's, as in Ollama (and the request
    // carries it, so `/show modelfile` shows it).
    if let ("system", Some(own)) = (what, &s.system) {
        println!("{own}\n");
        return Ok(());
    }
    let mut req = json!({"model": s.model});
    if let Some(sys) = &s.system {
        req["system"] = json!(sys);
    }
    let info: Value = s.client.json(Method::POST, "/api/show", Some(&req)).await?;
    let field = |k: &str| info[k].as_str().unwrap_or("").to_owned();
    match what {
        "info" => {
            // The same summary as `herd show` (Ollama's `showInfo`), on stderr as Ollama's REPL.
            let parsed: super::show::ShowInfo = serde_json::from_value(info.clone())?;
            eprint!("{}", super::show::summary(&parsed, false));
        }
        "parameters" => print!("{}", text::parameters(&field("parameters"), &s.options)),
        "system" => match field("system") {
            t if t.is_empty() => println!("No system message was specified for this model."),
            t => println!("{t}\n"),
        },
        "modelfile" => println!("{}", field("modelfile")),
        "license" | "template" => {
            let t = field(what);
            let missing = match what {
                "license" => "No license was specified for this model.",
                _ => "No prompt template was specified for this model.",
            };
            println!("{}", if t.is_empty() { missing } else { t.as_str() });
        }
        _ => println!("Unknown command '/show {what}'. Type /? for help"),
    }
    Ok(())
}

/// A line that starts with a file's path (`/home/me/cat.png what is this?`) is a message for a
/// model that takes images, not a command (Ollama's REPL).
fn names_a_file(s: &Session, line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or_default();
    s.multimodal
        && super::files::file_names(line)
            .iter()
            .any(|f| f.starts_with(first))
}
