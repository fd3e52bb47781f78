//! `herd run MODEL PROMPT` (or with stdin piped, or stdout redirected): one answer through
//! `/api/generate`, as Ollama's `generate` in `cmd/cmd.go` does it — not `/api/chat`, which only
//! the REPL uses. The request carries the prompt (with image/audio files named in it taken out
//! for a multimodal model), `options` (always, empty), and `format`, `keep_alive`, `think` when
//! set. The answer is shown as it streams (thinking block, tool calls, content), followed by two
//! newlines when there was a prompt, then the `--verbose` statistics on stderr when the answer
//! completed. Ctrl-C cancels the request and ends the run quietly (exit 0), as in Ollama.

use std::io::{IsTerminal, Write};

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::answer::{stats, ChunkMessage, Display, Metrics, ToolCall};
use super::run::Session;

/// One line of a streamed `/api/generate` answer.
#[derive(Debug, Default, Deserialize)]
struct GenerateChunk {
    #[serde(default)]
    response: String,
    #[serde(default)]
    thinking: String,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    metrics: Metrics,
}

impl Session {
    /// The `/api/generate` body for `prompt` (already stripped of its files) and `images`.
    /// `options` is always present, as Ollama's `GenerateRequest` has no `omitempty` on it.
    pub(super) fn generate_request(&self, prompt: &str, images: &[String]) -> Value {
        let mut body = json!({
            "model": self.model,
            "prompt": prompt,
            "options": Value::Object(self.options.clone()),
        });
        if let Some(sys) = &self.system {
            body["system"] = json!(sys);
        }
        if let Some(f) = &self.format {
            body["format"] = f.clone();
        }
        if let Some(k) = self.keep_alive_json() {
            body["keep_alive"] = k;
        }
        if !images.is_empty() {
            body["images"] = json!(images);
        }
        if let Some(t) = &self.think {
            body["think"] = t.clone();
        }
        body
    }

    /// Answers `prompt` once. An empty prompt only loads the model (the server answers at once
    /// with `done`), printing nothing but the `--verbose` statistics.
    pub(super) async fn generate(&self, prompt: &str) -> anyhow::Result<()> {
        let (prompt, images) = if self.multimodal {
            super::files::extract(prompt, &mut |n| eprintln!("{n}"))?
        } else {
            (prompt.to_owned(), Vec::new())
        };
        let body = self.generate_request(&prompt, &images);
        let outcome = tokio::select! {
            r = self.stream_generate(&body) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        };
        // Ctrl-C: the request is dropped (the server cancels it) and the run ends without
        // another byte, successfully, as Ollama's `generate` returns nil on context.Canceled.
        let Some(done) = outcome else {
            return Ok(());
        };
        let done = done?;
        let mut out = std::io::stdout();
        if !prompt.is_empty() {
            // Two newlines after the answer, whatever it ends with (redirected output is the
            // same bytes).
            write!(out, "\n\n")?;
            out.flush()?;
        }
        if let (Some(metrics), true) = (done, self.verbose) {
            eprint!("{}", stats(&metrics));
        }
        Ok(())
    }

    /// Streams one answer to stdout; the final chunk's counters when the stream reached `done`.
    /// An `error` line ends it with that error, right after what was shown (no newline: the
    /// error goes to stderr, as Ollama's client returns it).
    async fn stream_generate(&self, body: &Value) -> anyhow::Result<Option<Metrics>> {
        // Dropped (cleared) on every way out, Ctrl-C included.
        let mut spinner = super::spinner::Spinner::start();
        let resp = self.client.post_stream("/api/generate", body).await?;
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut out = std::io::stdout();
        let width = if self.word_wrap {
            super::wrap::stdout_width()
        } else {
            0
        };
        let mut display = Display::new(!out.is_terminal(), self.hide_thinking, width);
        let mut last = None;
        while let Some(bytes) = stream.next().await {
            buf.extend_from_slice(&bytes.context("reading the response")?);
            while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let c: GenerateChunk =
                    serde_json::from_slice(&line).context("decoding a response line")?;
                if let Some(e) = c.error {
                    return Err(anyhow!(e));
                }
                // Ollama keeps spinning through hidden thinking, until the answer shows.
                if !c.response.is_empty() || !self.hide_thinking {
                    spinner.stop();
                }
                write!(
                    out,
                    "{}",
                    show_chunk(&mut display, c.thinking, c.response, c.tool_calls)
                )?;
                out.flush()?;
                last = c.done.then_some(c.metrics);
            }
        }
        Ok(last)
    }
}

/// What one generate chunk shows. Ollama's `generate` writes the content before the tool calls
/// (its `chat` the other way round), so the display takes them in two steps; the thinking
/// block still closes before either.
fn show_chunk(
    display: &mut Display,
    thinking: String,
    content: String,
    tool_calls: Vec<ToolCall>,
) -> String {
    let closes = !tool_calls.is_empty();
    let mut shown = display.chunk(&ChunkMessage {
        thinking,
        content,
        tool_calls: Vec::new(),
    });
    if closes {
        shown.push_str(&display.chunk(&ChunkMessage {
            tool_calls,
            ..ChunkMessage::default()
        }));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        crate::cli::run::test_session("m")
    }

    #[test]
    fn generate_request_fields() {
        let s = session();
        // Nothing set: the prompt and an empty options object, as Ollama's client sends it.
        assert_eq!(
            s.generate_request("hi", &[]),
            json!({"model": "m", "prompt": "hi", "options": {}})
        );
        let mut s = session();
        s.format = Some(json!("json"));
        s.think = Some(json!("high"));
        s.keep_alive = Some(json!("1h30m0s"));
        s.options.insert("seed".into(), json!(42));
        assert_eq!(
            s.generate_request("what is this?", &["aW1n".into()]),
            json!({
                "model": "m",
                "prompt": "what is this?",
                "options": {"seed": 42},
                "format": "json",
                "keep_alive": "1h30m0s",
                "images": ["aW1n"],
                "think": "high"
            })
        );
    }

    #[test]
    fn content_comes_before_tool_calls() {
        let call: ToolCall = serde_json::from_value(json!({
            "function": {"name": "now", "arguments": {}}
        }))
        .unwrap();
        let mut d = Display::new(true, false, 0);
        assert_eq!(
            show_chunk(&mut d, "Hmm.".into(), String::new(), Vec::new()),
            "Thinking...\nHmm."
        );
        assert_eq!(
            show_chunk(&mut d, String::new(), "Sure.".into(), vec![call]),
            "\n...done thinking.\n\nSure.  Model called a non-existent function 'now()' with arguments: {}"
        );
    }
}
