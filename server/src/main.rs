//! The `herd` binary: parse the command line once, install logging, and hand over to the
//! library (`server::cli::run`) on a multi-threaded tokio runtime.

use std::process::ExitCode;

use clap::Parser;
use server::config::Cli;

fn main() -> ExitCode {
    // Usage errors exit 1, as `ollama` (cobra) does; help and version still exit 0.
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    server::telemetry::init(&cli.log);
    // Runners inherit OLLAMA_DEBUG (the supervisor's allow-list): give them the level this
    // process resolved from `--debug` or the environment, in one spelling. Set before the
    // runtime starts its threads.
    std::env::set_var("OLLAMA_DEBUG", cli.log.level.ollama_debug());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
