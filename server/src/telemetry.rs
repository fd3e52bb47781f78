//! Process-wide tracing setup: one subscriber writing to stderr, text by default or JSON lines
//! (`HERD_LOG_FORMAT=json`), at the level `OLLAMA_DEBUG` selects. Installed once by `main`;
//! library code only emits events.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

use crate::config::{LogArgs, LogFormat, LogLevel};

pub fn level_filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    }
}

/// Install the global subscriber. Dependencies (hyper, reqwest, …) are held at WARN unless
/// tracing at TRACE, so DEBUG shows herd's own decisions rather than connection chatter.
pub fn init(args: &LogArgs) {
    let level = level_filter(args.level);
    let deps = if args.level == LogLevel::Trace {
        level
    } else {
        LevelFilter::WARN.min(level)
    };
    let filter = EnvFilter::builder()
        .with_default_directive(deps.into())
        .parse_lossy(format!(
            "server={level},herd={level},runner_protocol={level}"
        ));
    // Colour only on a terminal: redirected logs (files, journald, tests) stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests, embedding) keeps the first subscriber: try_init's error is expected.
    let _ = match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
