//! The fake runner's command line: the real runner's flags (accepted; `--socket`, `--model`,
//! `--ctx-size`, `--parallel`, `--embedding` and `--main-gpu` are used, the rest ignored) plus
//! scripted behaviour flags. GPUs beyond `--vram`'s one come from the environment (`gpus.rs`).
//!
//! Behaviour flags (all optional):
//!
//! | flag                 | effect                                                                  |
//! |----------------------|-------------------------------------------------------------------------|
//! | `--tokens TEXT`      | completion output, split into word chunks (`"Hello, world"` → `Hello,` ` world`) |
//! | `--tokens-json JSON` | completion output as exact chunks: a JSON array of strings              |
//! | `--rule JSON`        | `{"when": S, "tokens": [..]}`: a prompt containing S gets these chunks instead (first matching rule wins; repeatable) |
//! | `--request-log PATH` | append each completion request, and how it ended, to PATH as JSON lines (see `main.rs`) |
//! | `--echo`             | completion output is the prompt itself (text, or token ids detokenized) |
//! | `--token-delay-ms N` | pause before each token (default 0)                                     |
//! | `--crash-after N`    | exit abruptly (status 101, no final chunk) after N tokens in total      |
//! | `--wedge-after N`    | after N tokens in total the engine hangs: that stream and every later completion get nothing more, `/health` still answers (a wedged GPU call) |
//! | `--break-after N`    | after N tokens in total, cut that stream mid-line and hang the engine as `--wedge-after` does (an engine thread that died) |
//! | `--slow-load SECS`   | report `loading` with progress rising in 10 steps over SECS (float ok)  |
//! | `--hang-load`        | report `loading` with progress 0 forever                                |
//! | `--fail-load KIND`   | after loading, report `failed` with this `ErrorKind` (e.g. `OutOfMemory`) |
//! | `--oom-while PATH`   | after loading, report `failed` with `OutOfMemory` if PATH exists (another runner `--hold`s it) |
//! | `--hold PATH`        | create PATH once ready and remove it on exit: the memory this runner holds, for `--oom-while` |
//! | `--exit-at-load N`   | after loading, print an error line to stderr and exit with status N     |
//! | `--ignore-sigterm`   | keep running on SIGTERM (default: remove the socket and exit 0)         |
//! | `--n-embd N`         | embedding width (default 16)                                            |
//! | `--memory BYTES`     | `/info` memory_bytes (default: the model file's size + 1 MiB)           |
//! | `--vram BYTES`       | of that, on a fake GPU `FAKE0` (`/info` devices and memory_device_bytes; default 0); with `HERD_RUNNER_FAKE_GPUS`, on `--main-gpu` or split over those (`gpus.rs`) |
//!
//! The same flags may also come from the model file: if the file named by `--model` starts with
//! the line `#fake-runner`, every following non-empty line is one more argument (so a value may
//! contain spaces). They are applied after the command line. This lets a test give each fake
//! "model" its own behaviour while the server passes only the real runner's flags.

use runner_protocol::ErrorKind;
use std::path::PathBuf;
use std::time::Duration;

/// First line of a model file that carries extra fake-runner arguments.
pub const MODEL_SCRIPT_HEADER: &str = "#fake-runner";

#[derive(Debug, Clone)]
pub struct Script {
    pub socket: PathBuf,
    pub model: PathBuf,
    pub ctx_size: u32,
    pub parallel: u32,
    pub embedding: bool,
    pub tokens: Vec<String>,
    pub echo: bool,
    pub token_delay: Duration,
    pub crash_after: Option<u32>,
    pub wedge_after: Option<u32>,
    pub break_after: Option<u32>,
    pub slow_load: Duration,
    pub hang_load: bool,
    pub fail_load: Option<ErrorKind>,
    pub oom_while: Option<PathBuf>,
    pub hold: Option<PathBuf>,
    pub exit_at_load: Option<i32>,
    pub ignore_sigterm: bool,
    pub n_embd: u32,
    pub memory: Option<u64>,
    pub vram: u64,
    /// The real runner's `--main-gpu`: where `--vram` goes among scripted GPUs.
    pub main_gpu: Option<u32>,
    /// Free bytes of each scripted GPU (`HERD_RUNNER_FAKE_GPUS`, set by `main`).
    pub gpus: Option<Vec<u64>>,
    pub rules: Vec<Rule>,
    pub request_log: Option<PathBuf>,
}

/// Scripted output for prompts that contain `when`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub when: String,
    pub tokens: Vec<String>,
}

impl Script {
    /// The chunks a completion of `prompt` emits (before `num_predict` and stop strings).
    pub fn reply_for(&self, prompt: &str) -> &[String] {
        self.rules
            .iter()
            .find(|r| prompt.contains(&r.when))
            .map_or(&self.tokens, |r| &r.tokens)
    }
}

impl Default for Script {
    fn default() -> Self {
        Self {
            socket: PathBuf::new(),
            model: PathBuf::new(),
            ctx_size: 4096,
            parallel: 1,
            embedding: false,
            tokens: split_tokens("Hello from the fake runner."),
            echo: false,
            token_delay: Duration::ZERO,
            crash_after: None,
            wedge_after: None,
            break_after: None,
            slow_load: Duration::ZERO,
            hang_load: false,
            fail_load: None,
            oom_while: None,
            hold: None,
            exit_at_load: None,
            ignore_sigterm: false,
            n_embd: 16,
            memory: None,
            vram: 0,
            main_gpu: None,
            gpus: None,
            rules: Vec::new(),
            request_log: None,
        }
    }
}

impl Script {
    /// Parses the command line, then the model file's script lines if it has them.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut s = Script::default();
        s.apply(args)?;
        if s.socket.as_os_str().is_empty() {
            return Err("--socket is required".into());
        }
        if let Ok(text) = std::fs::read(&s.model) {
            let text = String::from_utf8_lossy(&text);
            let mut lines = text.lines();
            if lines.next().map(str::trim_end) == Some(MODEL_SCRIPT_HEADER) {
                let extra: Vec<String> = lines
                    .map(str::trim_end)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect();
                s.apply(extra)?;
            }
        }
        Ok(s)
    }

    fn apply(&mut self, args: impl IntoIterator<Item = String>) -> Result<(), String> {
        let mut it = args.into_iter().peekable();
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
            match flag.as_str() {
                "--socket" => self.socket = value(&flag)?.into(),
                "--model" => self.model = value(&flag)?.into(),
                "--ctx-size" => self.ctx_size = num(&flag, &value(&flag)?)?,
                "--parallel" => self.parallel = num::<u32>(&flag, &value(&flag)?)?.max(1),
                "--embedding" => self.embedding = true,
                "--main-gpu" => self.main_gpu = Some(num(&flag, &value(&flag)?)?),
                "--tokens" => self.tokens = split_tokens(&value(&flag)?),
                "--echo" => self.echo = true,
                "--token-delay-ms" => {
                    self.token_delay = Duration::from_millis(num(&flag, &value(&flag)?)?)
                }
                "--crash-after" => self.crash_after = Some(num(&flag, &value(&flag)?)?),
                "--wedge-after" => self.wedge_after = Some(num(&flag, &value(&flag)?)?),
                "--break-after" => self.break_after = Some(num(&flag, &value(&flag)?)?),
                "--slow-load" => {
                    self.slow_load = Duration::from_secs_f64(num(&flag, &value(&flag)?)?)
                }
                "--hang-load" => self.hang_load = true,
                "--fail-load" => {
                    let v = value(&flag)?;
                    let kind = serde_json::from_value(serde_json::Value::String(v.clone()))
                        .map_err(|_| format!("--fail-load: unknown error kind {v:?}"))?;
                    self.fail_load = Some(kind);
                }
                "--oom-while" => self.oom_while = Some(value(&flag)?.into()),
                "--hold" => self.hold = Some(value(&flag)?.into()),
                "--exit-at-load" => self.exit_at_load = Some(num(&flag, &value(&flag)?)?),
                "--ignore-sigterm" => self.ignore_sigterm = true,
                "--n-embd" => self.n_embd = num(&flag, &value(&flag)?)?,
                "--memory" => self.memory = Some(num(&flag, &value(&flag)?)?),
                "--vram" => self.vram = num(&flag, &value(&flag)?)?,
                "--tokens-json" => self.tokens = chunks(&flag, &value(&flag)?)?,
                "--rule" => self.rules.push(rule(&value(&flag)?)?),
                "--request-log" => self.request_log = Some(value(&flag)?.into()),
                other if other.starts_with("--") => {
                    // A real-runner flag we do not model: skip it and its value, if any.
                    if it.peek().is_some_and(|v| !v.starts_with("--")) {
                        it.next();
                    }
                }
                other => return Err(format!("unexpected argument {other:?}")),
            }
        }
        Ok(())
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: not a number: {v:?}"))
}

/// A JSON array of strings.
fn chunks(flag: &str, v: &str) -> Result<Vec<String>, String> {
    serde_json::from_str(v).map_err(|e| format!("{flag}: not a JSON array of strings: {e}"))
}

fn rule(v: &str) -> Result<Rule, String> {
    let j: serde_json::Value =
        serde_json::from_str(v).map_err(|e| format!("--rule: not JSON: {e}"))?;
    let when = j["when"]
        .as_str()
        .ok_or("--rule: \"when\" must be a string")?
        .to_owned();
    let tokens = chunks("--rule", &j["tokens"].to_string())?;
    Ok(Rule { when, tokens })
}

/// Splits text into word chunks, each carrying the whitespace that precedes it.
pub fn split_tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut prev_ws = false;
    for c in text.chars() {
        if c.is_whitespace() && !prev_ws && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_ws = c.is_whitespace();
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tokens_keep_their_leading_space() {
        assert_eq!(split_tokens("Hello, world"), ["Hello,", " world"]);
        assert_eq!(split_tokens(" a  b"), [" a", "  b"]);
        assert!(split_tokens("").is_empty());
    }

    #[test]
    fn real_runner_flags_are_accepted_and_script_flags_parsed() {
        let s = Script::parse(args(&[
            "--model",
            "/nonexistent",
            "--ctx-size",
            "128",
            "--parallel",
            "2",
            "--batch",
            "512",
            "--gpu-layers",
            "-1",
            "--no-mmap",
            "--flash-attn",
            "auto",
            "--crash-after",
            "3",
            "--fail-load",
            "OutOfMemory",
            "--socket",
            "/tmp/x.sock",
        ]))
        .unwrap();
        assert_eq!(s.ctx_size, 128);
        assert_eq!(s.parallel, 2);
        assert_eq!(s.crash_after, Some(3));
        assert_eq!(s.fail_load, Some(ErrorKind::OutOfMemory));
        assert_eq!(s.main_gpu, None);
        let s = Script::parse(args(&["--socket", "s", "--main-gpu", "1"])).unwrap();
        assert_eq!(s.main_gpu, Some(1));
        assert!(Script::parse(args(&["--model", "m"])).is_err());
        assert!(Script::parse(args(&["--socket", "s", "--fail-load", "Nope"])).is_err());
    }

    #[test]
    fn json_chunks_and_rules_pick_the_reply() {
        let s = Script::parse(args(&[
            "--socket",
            "s",
            "--tokens-json",
            r#"["<think>", "a\nb", "</think>"]"#,
            "--rule",
            r#"{"when": "</think>", "tokens": ["{", "}"]}"#,
            "--rule",
            r#"{"when": "x", "tokens": ["never"]}"#,
            "--request-log",
            "/tmp/log",
        ]))
        .unwrap();
        assert_eq!(s.reply_for("plain"), ["<think>", "a\nb", "</think>"]);
        assert_eq!(s.reply_for("x <think>t</think>"), ["{", "}"]);
        assert_eq!(s.reply_for("x"), ["never"]);
        assert_eq!(s.request_log, Some(PathBuf::from("/tmp/log")));
        assert!(Script::parse(args(&["--socket", "s", "--tokens-json", "[1]"])).is_err());
        assert!(Script::parse(args(&["--socket", "s", "--rule", r#"{"tokens": []}"#])).is_err());
    }

    #[test]
    fn model_file_script_lines_are_arguments() {
        let dir = std::env::temp_dir().join(format!("fake-runner-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("m.gguf");
        std::fs::write(&model, "#fake-runner\n--tokens\nA b c\n\n--hang-load\n").unwrap();
        let s =
            Script::parse(args(&["--socket", "s", "--model", model.to_str().unwrap()])).unwrap();
        assert_eq!(s.tokens, ["A", " b", " c"]);
        assert!(s.hang_load);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
