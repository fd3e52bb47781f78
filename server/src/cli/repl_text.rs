//! What the `herd run` REPL prints besides answers, as Ollama's `cmd/interactive.go` prints it:
//! the help screens (on stderr, as Ollama writes them), `/show parameters`, and the parse of a
//! slash command line into its command word and arguments. Pure text, so it is table-tested.

use serde_json::{Map, Value};

use crate::api::show::go_float;

/// `/?` and `/help`; a model that takes files adds the line saying how to name one.
pub(super) fn help(multimodal: bool) -> String {
    let mut out = String::from(
        "Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.
",
    );
    if multimodal {
        out.push_str(
            "Use /path/to/file to include .jpg, .png, .webp images, or .wav audio files.\n",
        );
    }
    out.push('\n');
    out
}

pub(super) const SET_HELP: &str = "Available Commands:
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

pub(super) const SHOW_HELP: &str = "Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template

";

/// `/set parameter` without a name and value: the common parameters (Ollama lists the same).
pub(super) const PARAMETERS_HELP: &str = "Available Parameters:
  /set parameter seed <int>             Random number seed
  /set parameter num_predict <int>      Max number of tokens to predict
  /set parameter top_k <int>            Pick from top k num of tokens
  /set parameter top_p <float>          Pick token based on sum of probabilities
  /set parameter min_p <float>          Pick token based on top token probability * min_p
  /set parameter num_ctx <int>          Set the context size
  /set parameter temperature <float>    Set creativity level
  /set parameter repeat_penalty <float> How strongly to penalize repetitions
  /set parameter repeat_last_n <int>    Set how far back to look for repetitions
  /set parameter num_gpu <int>          The number of layers to send to the GPU
  /set parameter stop <string> <string> ...   Set the stop parameters

";

/// The keys herd's line editor (rustyline, emacs mode) takes: Ollama's list.
pub(super) const SHORTCUTS_HELP: &str = "Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
   Alt + b            Move back (left) one word
   Alt + f            Move forward (right) one word
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor

  Ctrl + l            Clear the screen
  Ctrl + g            Open default editor to compose a prompt
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit herd (/bye)

";

/// `/? TOPIC`: the topic's screen; an unknown topic prints nothing, as in Ollama.
pub(super) fn help_topic(topic: &str) -> &'static str {
    match topic {
        "set" | "/set" => SET_HELP,
        "show" | "/show" => SHOW_HELP,
        "shortcut" | "shortcuts" => SHORTCUTS_HELP,
        _ => "",
    }
}

/// `/show parameters`: the model's PARAMETER lines, then (when the session set any) the
/// session's own, name padded to 30 columns and the value as Go's `%v` prints it.
pub(super) fn parameters(model: &str, session: &Map<String, Value>) -> String {
    let mut out = String::from("Model defined parameters:\n");
    if model.is_empty() {
        out.push_str("  No additional parameters were specified for this model.\n");
    } else {
        for line in model.split('\n') {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push('\n');
    if !session.is_empty() {
        out.push_str("User defined parameters:\n");
        for (k, v) in session {
            out.push_str(&format!("  {k:<30} {}\n", go_value(v)));
        }
        out.push('\n');
    }
    out
}

/// Go's `%v` of a decoded JSON value: strings bare, numbers as `%g`, lists in brackets.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| go_float(n.as_f64().unwrap_or(0.0)), |i| i.to_string()),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", items.join(" "))
        }
        other => other.to_string(),
    }
}

/// `/set think [LEVEL]`'s confirmation.
pub(super) fn think_set(level: Option<&str>) -> String {
    match level {
        Some(l) => format!("Set 'think' mode to '{l}'."),
        None => "Set 'think' mode.".into(),
    }
}

/// The warning `/set think` and `/set nothink` print for a model whose capabilities lack
/// `thinking` (Ollama's `ensureThinkingSupport`); `None` when it thinks.
pub(super) fn thinking_warning(model: &str, capabilities: &[Value]) -> Option<String> {
    (!capabilities.iter().any(|c| c == "thinking"))
        .then(|| format!("warning: model {model:?} does not support thinking output"))
}

/// What the REPL does after a chat turn failed with `error` (Ollama's `generateInteractive` and
/// `chat`, cmd/interactive.go and cmd/cmd.go, which match on the error's text).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ChatFailure {
    /// Print this line and read the next prompt.
    Continue(String),
    /// End the session with the error (`Error: …` on stderr, exit status 1).
    Exit,
}

pub(super) fn chat_failure(error: &str) -> ChatFailure {
    if error.contains("does not support thinking") || error.contains("invalid think value") {
        // The thinking setting is wrong, and `/set` can change it.
        ChatFailure::Continue(format!("error: {error}"))
    } else if error.contains("upstream error") {
        ChatFailure::Continue(
            "An error occurred while processing your message. Please try again.".into(),
        )
    } else {
        ChatFailure::Exit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_failures_end_the_session_unless_about_thinking() {
        let think = r#"400 Bad Request: invalid think value: "x" (must be "high", "medium", "low", "max", true, or false)"#;
        for (error, want) in [
            (think, ChatFailure::Continue(format!("error: {think}"))),
            (
                "400 Bad Request: \"tiny\" does not support thinking",
                ChatFailure::Continue(
                    "error: 400 Bad Request: \"tiny\" does not support thinking".into(),
                ),
            ),
            (
                "upstream error: bad gateway",
                ChatFailure::Continue(
                    "An error occurred while processing your message. Please try again.".into(),
                ),
            ),
            (
                "500 Internal Server Error: model runner has unexpectedly stopped",
                ChatFailure::Exit,
            ),
            ("could not connect to herd server", ChatFailure::Exit),
            ("boom", ChatFailure::Exit),
        ] {
            assert_eq!(chat_failure(error), want, "{error}");
        }
    }

    #[test]
    fn show_parameters_layout() {
        // Ollama's REPL: each model line indented by two, a blank line, then the session's.
        assert_eq!(
            parameters("", &Map::new()),
            "Model defined parameters:\n  No additional parameters were specified for this model.\n\n"
        );
        let mut session = Map::new();
        session.insert("num_predict".into(), json!(64));
        session.insert("stop".into(), json!(["<a>", "b"]));
        session.insert("temperature".into(), json!(0.2));
        assert_eq!(
            parameters("stop \"<|im_end|>\"\ntemperature 0.7", &session),
            "Model defined parameters:\n  stop \"<|im_end|>\"\n  temperature 0.7\n\n\
             User defined parameters:\n\
             \x20 num_predict                    64\n\
             \x20 stop                           [<a> b]\n\
             \x20 temperature                    0.2\n\n"
        );
    }

    #[test]
    fn help_screens() {
        assert!(help(false).ends_with("multi-line message.\n\n"));
        assert!(help(true).ends_with("or .wav audio files.\n\n"));
        let cases = [
            ("set", SET_HELP),
            ("/set", SET_HELP),
            ("show", SHOW_HELP),
            ("/show", SHOW_HELP),
            ("shortcut", SHORTCUTS_HELP),
            ("shortcuts", SHORTCUTS_HELP),
            ("nonsense", ""),
        ];
        for (topic, want) in cases {
            assert_eq!(help_topic(topic), want, "{topic}");
        }
    }

    #[test]
    fn think_messages() {
        assert_eq!(think_set(None), "Set 'think' mode.");
        assert_eq!(think_set(Some("high")), "Set 'think' mode to 'high'.");
        assert_eq!(
            thinking_warning("m", &[json!("completion"), json!("thinking")]),
            None
        );
        assert_eq!(
            thinking_warning("m", &[json!("completion")]).as_deref(),
            Some("warning: model \"m\" does not support thinking output")
        );
        assert!(thinking_warning("m", &[]).is_some());
    }
}
