//! Logging settings shared by every subcommand: `OLLAMA_DEBUG` (Ollama's level grammar) and
//! `HERD_LOG_FORMAT`. `telemetry` turns them into the tracing subscriber.

use super::parse::{clean, go_parse_bool};
use clap::{Args, ValueEnum};

/// Logging, shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log verbosity: 0/false = INFO, 1/true = DEBUG, 2 = TRACE.
    #[arg(
        long = "debug",
        env = "OLLAMA_DEBUG",
        global = true,
        value_parser = parse_log_level,
        num_args = 0..=1, require_equals = true,
        default_missing_value = "1",
        default_value = "0"
    )]
    pub level: LogLevel,
    /// Log line format.
    #[arg(long, env = "HERD_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// `OLLAMA_DEBUG` as runners read it: 0, 1 (debug) or 2 (trace).
    pub fn ollama_debug(self) -> &'static str {
        match self {
            LogLevel::Error | LogLevel::Warn | LogLevel::Info => "0",
            LogLevel::Debug => "1",
            LogLevel::Trace => "2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Ollama's `LogLevel()`: a true Go bool is DEBUG; otherwise an integer n maps to slog level
/// -4n (2 = TRACE, -1 = WARN, -2 = ERROR); anything else is INFO.
pub fn parse_log_level(raw: &str) -> Result<LogLevel, String> {
    let s = clean(raw);
    if go_parse_bool(s) == Some(true) {
        return Ok(LogLevel::Debug);
    }
    Ok(match s.parse::<i64>().unwrap_or(0) {
        0 => LogLevel::Info,
        1 => LogLevel::Debug,
        n if n >= 2 => LogLevel::Trace,
        -1 => LogLevel::Warn,
        _ => LogLevel::Error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels() {
        let cases = [
            ("", LogLevel::Info),
            ("0", LogLevel::Info),
            ("false", LogLevel::Info),
            ("1", LogLevel::Debug),
            ("true", LogLevel::Debug),
            ("2", LogLevel::Trace),
            ("3", LogLevel::Trace),
            ("-1", LogLevel::Warn),
            ("-2", LogLevel::Error),
            ("verbose", LogLevel::Info),
            (" '2' ", LogLevel::Trace),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_log_level(raw), Ok(want), "{raw:?}");
        }
    }
}
