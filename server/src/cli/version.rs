//! `herd -v` / `herd --version`: Ollama's `versionHandler` lines (ask the server at
//! `OLLAMA_HOST` for its version; warn when none answers or when it differs from this client),
//! then one line with this build's engine pins (`provenance::Provenance::pins_line`, the same
//! facts `/api/version` reports).

use serde::Deserialize;

use crate::config::OllamaHost;

#[derive(Deserialize)]
struct VersionResponse {
    version: String,
}

/// Ollama's lines for a server answer (`Some(version)`) or none, then herd's pins line.
pub fn lines(server: Option<&str>, client: &str, pins: &str) -> Vec<String> {
    let mut out = Vec::new();
    let server = match server {
        Some(v) => v,
        None => {
            out.push("Warning: could not connect to a running Ollama instance".to_owned());
            ""
        }
    };
    if !server.is_empty() {
        out.push(format!("ollama version is {server}"));
    }
    if server != client {
        out.push(format!("Warning: client version is {client}"));
    }
    out.push(pins.to_owned());
    out
}

pub async fn run(host: &OllamaHost) -> anyhow::Result<()> {
    let server = match super::client::Client::new(host) {
        Ok(c) => c
            .json::<(), VersionResponse>(reqwest::Method::GET, "/api/version", None)
            .await
            .ok()
            .map(|v| v.version),
        Err(_) => None,
    };
    let pins = crate::provenance::current().pins_line();
    let mut all = lines(server.as_deref(), crate::OLLAMA_COMPAT_VERSION, &pins);
    // herd's own line goes to stderr: stdout is exactly `ollama -v`'s, which scripts parse.
    if let Some(own) = all.pop() {
        for line in all {
            println!("{line}");
        }
        eprintln!("{own}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_lines() {
        let p = "herd 1 (git x) llama.cpp b1 (commit y)";
        let table: [(Option<&str>, Vec<&str>); 4] = [
            (Some("1.0"), vec!["ollama version is 1.0", p]),
            (
                Some("0.9"),
                vec!["ollama version is 0.9", "Warning: client version is 1.0", p],
            ),
            (
                None,
                vec![
                    "Warning: could not connect to a running Ollama instance",
                    "Warning: client version is 1.0",
                    p,
                ],
            ),
            (Some(""), vec!["Warning: client version is 1.0", p]),
        ];
        for (server, want) in table {
            assert_eq!(lines(server, "1.0", p), want, "{server:?}");
        }
    }
}
