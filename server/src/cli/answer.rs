//! How a streamed answer appears on screen in `herd run` (Ollama's `chat` display): the
//! thinking block between `Thinking...` and `...done thinking.` (grey on a terminal), tool calls
//! the model made (the CLI offers none, so each is reported as a call to a function that does not
//! exist), the content word-wrapped, and the `--verbose` statistics.

use serde::Deserialize;
use serde_json::Value;

use super::wrap::Wrapper;

/// Ollama's `readline` colours, used around thinking and tool calls on a terminal.
const GREY: &str = "\x1b[38;5;245m";
const BOLD: &str = "\x1b[1m";
const DEFAULT: &str = "\x1b[0m";

#[derive(Debug, Default, Deserialize)]
pub(super) struct ChunkMessage {
    #[serde(default)]
    pub(super) content: String,
    #[serde(default)]
    pub(super) thinking: String,
    #[serde(default)]
    pub(super) tool_calls: Vec<ToolCall>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ToolCall {
    #[serde(default)]
    function: ToolFunction,
}

#[derive(Debug, Default, Deserialize)]
struct ToolFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// The display state of one answer. `plain` (output is not a terminal) drops the colours.
pub(super) struct Display {
    pub(super) plain: bool,
    pub(super) hide_thinking: bool,
    /// Wrap width; 0 = no wrapping.
    pub(super) width: usize,
    wrap: Wrapper,
    /// A thinking block is open (its closing line not yet written).
    thinking: bool,
    /// The thinking text so far ends with a newline (then the block closes without another).
    thinking_ends_line: bool,
}

impl Display {
    pub(super) fn new(plain: bool, hide_thinking: bool, width: usize) -> Display {
        Display {
            plain,
            hide_thinking,
            width,
            wrap: Wrapper::default(),
            thinking: false,
            thinking_ends_line: false,
        }
    }

    /// What to write for one streamed message chunk.
    pub(super) fn chunk(&mut self, m: &ChunkMessage) -> String {
        let mut out = String::new();
        if !m.thinking.is_empty() && !self.hide_thinking {
            if !self.thinking {
                self.thinking = true;
                out.push_str(&self.styled("Thinking...\n", true));
            }
            self.thinking_ends_line = m.thinking.ends_with('\n');
            out.push_str(&self.wrap.push(&m.thinking, self.width));
        }
        if self.thinking && (!m.content.is_empty() || !m.tool_calls.is_empty()) {
            if !self.thinking_ends_line {
                out.push('\n');
            }
            out.push_str(&self.styled("...done thinking.\n\n", false));
            self.thinking = false;
            self.wrap = Wrapper::default();
        }
        if !m.tool_calls.is_empty() {
            out.push_str(&self.tool_calls(&m.tool_calls));
        }
        out.push_str(&self.wrap.push(&m.content, self.width));
        out
    }

    /// A thinking marker line: bold grey on a terminal; the opening one leaves grey on for the
    /// thinking text that follows.
    fn styled(&self, text: &str, opening: bool) -> String {
        if self.plain {
            return text.to_owned();
        }
        let after = if opening {
            format!("{DEFAULT}{GREY}")
        } else {
            DEFAULT.to_owned()
        };
        format!("{GREY}{BOLD}{text}{after}")
    }

    fn tool_calls(&self, calls: &[ToolCall]) -> String {
        // Ollama's layout: the explanation grey and bold, the name and arguments in the default
        // colour.
        let (explain, value) = if self.plain {
            (String::new(), "")
        } else {
            (format!("{GREY}{BOLD}"), DEFAULT)
        };
        let mut out = explain.clone();
        for (i, c) in calls.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let args = match &c.function.arguments {
                Value::Null => "null".to_owned(),
                a => a.to_string(),
            };
            out.push_str(&format!(
                "  Model called a non-existent function '{value}{}(){explain}' with arguments: {value}{args}{explain}",
                c.function.name
            ));
        }
        if !self.plain {
            out.push_str(DEFAULT);
        }
        out
    }
}

/// The final chunk's counters, for `--verbose`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Metrics {
    #[serde(default)]
    pub(super) total_duration: u64,
    #[serde(default)]
    pub(super) load_duration: u64,
    #[serde(default)]
    pub(super) prompt_eval_count: u64,
    #[serde(default)]
    pub(super) prompt_eval_duration: u64,
    #[serde(default)]
    pub(super) eval_count: u64,
    #[serde(default)]
    pub(super) eval_duration: u64,
}

/// `--verbose` statistics (Ollama's `Metrics.Summary`): a line only for a counter the server
/// reported (non-zero), each rate beside its duration.
pub(super) fn stats(m: &Metrics) -> String {
    let mut out = String::new();
    let mut line = |on: bool, text: String| {
        if on {
            out.push_str(&text);
            out.push('\n');
        }
    };
    let rate = |count: u64, ns: u64| count as f64 / (ns as f64 / 1e9);
    line(
        m.total_duration > 0,
        format!("total duration:       {}", go_duration(m.total_duration)),
    );
    line(
        m.load_duration > 0,
        format!("load duration:        {}", go_duration(m.load_duration)),
    );
    line(
        m.prompt_eval_count > 0,
        format!("prompt eval count:    {} token(s)", m.prompt_eval_count),
    );
    line(
        m.prompt_eval_duration > 0,
        format!(
            "prompt eval duration: {}\nprompt eval rate:     {:.2} tokens/s",
            go_duration(m.prompt_eval_duration),
            rate(m.prompt_eval_count, m.prompt_eval_duration)
        ),
    );
    line(
        m.eval_count > 0,
        format!("eval count:           {} token(s)", m.eval_count),
    );
    line(
        m.eval_duration > 0,
        format!(
            "eval duration:        {}\neval rate:            {:.2} tokens/s",
            go_duration(m.eval_duration),
            rate(m.eval_count, m.eval_duration)
        ),
    );
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn verbose_stats_skip_what_was_not_reported() {
        let all = Metrics {
            total_duration: 2_000_000_000,
            load_duration: 1_000_000,
            prompt_eval_count: 10,
            prompt_eval_duration: 500_000_000,
            eval_count: 4,
            eval_duration: 1_000_000_000,
        };
        assert_eq!(
            stats(&all),
            "total duration:       2s\nload duration:        1ms\n\
             prompt eval count:    10 token(s)\nprompt eval duration: 500ms\n\
             prompt eval rate:     20.00 tokens/s\neval count:           4 token(s)\n\
             eval duration:        1s\neval rate:            4.00 tokens/s\n"
        );
        // A model already loaded and a prompt answered from the cache: no load or prompt lines.
        let warm = Metrics {
            load_duration: 0,
            prompt_eval_count: 0,
            prompt_eval_duration: 0,
            ..all
        };
        assert_eq!(
            stats(&warm),
            "total duration:       2s\neval count:           4 token(s)\n\
             eval duration:        1s\neval rate:            4.00 tokens/s\n"
        );
        assert_eq!(stats(&Metrics::default()), "");
    }

    fn msg(thinking: &str, content: &str) -> ChunkMessage {
        ChunkMessage {
            thinking: thinking.into(),
            content: content.into(),
            ..ChunkMessage::default()
        }
    }

    #[test]
    fn thinking_block() {
        let mut d = Display::new(true, false, 0);
        let shown: String = [msg("Let me", ""), msg(" see.", ""), msg("", "Yes.")]
            .iter()
            .map(|m| d.chunk(m))
            .collect();
        assert_eq!(shown, "Thinking...\nLet me see.\n...done thinking.\n\nYes.");
        // Thinking that ends its line closes without a blank line of its own (Ollama adds the
        // newline only when missing).
        let mut d = Display::new(true, false, 0);
        let shown: String = [msg("Hmm.\n", ""), msg("", "Yes.")]
            .iter()
            .map(|m| d.chunk(m))
            .collect();
        assert_eq!(shown, "Thinking...\nHmm.\n...done thinking.\n\nYes.");
        // Hidden thinking shows only the answer.
        let mut d = Display::new(true, true, 0);
        assert_eq!(d.chunk(&msg("Hmm.", "")), "");
        assert_eq!(d.chunk(&msg("", "Yes.")), "Yes.");
        // On a terminal the markers are bold grey and the thinking grey.
        let mut d = Display::new(false, false, 0);
        assert_eq!(
            d.chunk(&msg("Hmm.", "")),
            "\x1b[38;5;245m\x1b[1mThinking...\n\x1b[0m\x1b[38;5;245mHmm."
        );
        assert_eq!(
            d.chunk(&msg("", "Yes.")),
            "\n\x1b[38;5;245m\x1b[1m...done thinking.\n\n\x1b[0mYes."
        );
    }

    #[test]
    fn tool_calls_are_reported() {
        let call = |name: &str, args: Value| ToolCall {
            function: ToolFunction {
                name: name.into(),
                arguments: args,
            },
        };
        let mut d = Display::new(true, false, 0);
        let m = ChunkMessage {
            thinking: String::new(),
            content: String::new(),
            tool_calls: vec![
                call("get_weather", json!({"city": "Paris"})),
                call("now", json!({})),
            ],
        };
        assert_eq!(
            d.chunk(&m),
            "  Model called a non-existent function 'get_weather()' with arguments: {\"city\":\"Paris\"}\n\
             \x20 Model called a non-existent function 'now()' with arguments: {}"
        );
        // A tool call closes an open thinking block.
        let mut d = Display::new(true, false, 0);
        d.chunk(&msg("Hmm.", ""));
        let m = ChunkMessage {
            tool_calls: vec![call("now", json!({}))],
            ..ChunkMessage::default()
        };
        assert!(d
            .chunk(&m)
            .starts_with("\n...done thinking.\n\n  Model called"));
    }
}
