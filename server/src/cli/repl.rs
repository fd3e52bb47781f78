//! The `herd run` REPL (Ollama's `cmd/interactive.go`): streamed `/api/chat` turns, Ollama's
//! slash commands, `"""` multi-line input and the history file `~/.ollama/history` (unless
//! `OLLAMA_NOHISTORY` / `--nohistory`).

use reqwest::Method;
use serde_json::{json, Value};

use super::history::History;
use super::lineedit::{Line, LineEditor};
use super::run::{check_model, think_value, Session};

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

/// What the lines being read belong to: Ollama's `"""` states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Multiline {
    None,
    Prompt,
    System,
}

/// The REPL proper: reads lines with the line editor (`>>> `, `... ` inside a `"""` block) and
/// runs them as Ollama's `generateInteractive` does.
pub(super) async fn repl(s: &mut Session, history: History) -> anyhow::Result<()> {
    let mut ed = LineEditor::new(history)?;
    let mut sb = String::new();
    let mut multiline = Multiline::None;
    loop {
        let prompt = if multiline == Multiline::None {
            ">>> "
        } else {
            "... "
        };
        let line = match ed.read(prompt)? {
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
            println!("Error: {e:#}");
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

/// Runs one slash command; `Ok(false)` ends the session.
async fn command(s: &mut Session, ed: &mut LineEditor, line: &str) -> anyhow::Result<bool> {
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
                Err(e) => println!("Couldn't set parameter: {e:?}\n"),
            }
        }
        ("/set", ["parameter", ..]) => {
            eprintln!("Usage:\n  /set parameter NAME VALUE   (e.g. num_predict 64, temperature 0.2, stop A B)\n");
        }
        ("/set", ["system"]) => println!("{SET_HELP}"),
        ("/set", ["system", words @ ..]) => {
            // Ollama joins the words with single spaces; `"""x"""` on one line is the text x.
            let text = words.join(" ");
            let text = text
                .strip_prefix("\"\"\"")
                .and_then(|t| t.strip_suffix("\"\"\""))
                .unwrap_or(&text);
            set_system(s, text);
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
        // As in Ollama, these two print nothing.
        ("/set", ["history", ..]) => ed.set_history_enabled(true),
        ("/set", ["nohistory", ..]) => ed.set_history_enabled(false),
        ("/set", [flag @ ("wordwrap" | "nowordwrap")]) => {
            s.word_wrap = *flag == "wordwrap";
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
        ("/save", [name]) => {
            save(s, name).await?;
            println!("Created new model '{name}'");
        }
        ("/save", _) => println!("Usage:\n  /save <modelname>"),
        _ => println!("Unknown command '{cmd}'. Type /? for help"),
    }
    Ok(true)
}

/// `/save NAME`: a new model from the current one with the session's messages, system message
/// and parameters (Ollama's `/api/create` with `from`).
async fn save(s: &Session, name: &str) -> anyhow::Result<()> {
    let mut body = json!({"model": name, "from": s.model, "stream": false});
    if !s.messages.is_empty() {
        body["messages"] = Value::Array(s.messages.clone());
    }
    if let Some(sys) = &s.system {
        body["system"] = json!(sys);
    }
    if !s.options.is_empty() {
        body["parameters"] = Value::Object(s.options.clone());
    }
    s.client
        .send(Method::POST, "/api/create", Some(&body))
        .await?;
    Ok(())
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
            // The same summary as `herd show` (Ollama's `showInfo`), on stderr as Ollama's REPL.
            let parsed: super::show::ShowInfo = serde_json::from_value(info.clone())?;
            eprint!("{}", super::show::summary(&parsed, false));
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

/// A line that starts with a file's path (`/home/me/cat.png what is this?`) is a message for a
/// model that takes images, not a command (Ollama's REPL).
fn names_a_file(s: &Session, line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or_default();
    s.multimodal
        && super::files::file_names(line)
            .iter()
            .any(|f| f.starts_with(first))
}
