//! The `herd` subcommands. `serve` runs the server in this process; the others are thin HTTP
//! clients of a running server at `OLLAMA_HOST`, printing what Ollama's CLI prints.

pub mod answer;
pub mod archive;
pub mod client;
pub mod create;
pub mod doctor;
pub mod editor;
pub mod files;
pub mod format;
pub mod history;
pub mod lineedit;
pub mod oneshot;
pub mod pull;
pub mod repl;
pub mod repl_text;
pub mod run;
pub mod serve;
pub mod show;
pub mod spinner;
pub mod version;
pub mod wrap;

use std::time::SystemTime;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::config::{Cli, Command, CopyArgs, ListArgs, RemoveArgs, StopArgs};
use client::Client;

/// Runs one parsed command line to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let Some(command) = cli.command else {
        // clap prints help when neither a subcommand nor `--version` is given.
        return version::run(&cli.host).await;
    };
    match command {
        Command::Serve(config) => serve::run(*config).await,
        Command::List(args) => list(args).await,
        Command::Ps(args) => ps(args).await,
        Command::Show(args) => show::run(args).await,
        Command::Stop(args) => stop(args).await,
        Command::Cp(args) => copy(args).await,
        Command::Rm(args) => remove(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Pull(args) => pull::run(args, pull::Direction::Pull).await,
        Command::Push(args) => pull::run(args, pull::Direction::Push).await,
        Command::Create(a) => {
            let base = a.client.host.connect_url();
            create::run(&base, &a, a.file.as_deref()).await
        }
        Command::Eval(args) => crate::eval::run(args).await,
        Command::Doctor(args) => doctor::run(*args).await,
        Command::Archive(args) => archive::run(*args).await,
        Command::Worker(args) => crate::worker::run(*args).await,
    }
}

#[derive(Deserialize)]
struct ListResponse {
    models: Vec<ListedModel>,
}

#[derive(Deserialize)]
struct ListedModel {
    name: String,
    digest: String,
    size: u64,
    modified_at: String,
    /// Set for a stub of a model on another server (`crate::remote`): no local size.
    #[serde(default)]
    remote_model: String,
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    list_models(&client, args.prefix.as_deref()).await
}

/// `herd list [PREFIX]`, also the REPL's `/list`.
pub(super) async fn list_models(client: &Client, prefix: Option<&str>) -> anyhow::Result<()> {
    let resp: ListResponse = client.json(Method::GET, "/api/tags", None::<&()>).await?;
    print!("{}", list_table(&resp.models, prefix, SystemTime::now()));
    Ok(())
}

/// `NAME ID SIZE MODIFIED`, optionally only names starting with `prefix` (case-insensitive).
fn list_table(models: &[ListedModel], prefix: Option<&str>, now: SystemTime) -> String {
    let prefix = prefix.map(str::to_lowercase);
    let mut rows = Vec::new();
    for m in models {
        if prefix
            .as_deref()
            .is_some_and(|p| !m.name.to_lowercase().starts_with(p))
        {
            continue;
        }
        let modified = format::parse_time(&m.modified_at)
            .map_or_else(|| "Never".to_string(), |t| format::human_time(t, now));
        // A remote stub's size is the stub's, not the model's: Ollama shows none.
        let size = if m.remote_model.is_empty() {
            format::human_bytes(m.size)
        } else {
            "-".to_owned()
        };
        rows.push(vec![
            m.name.clone(),
            m.digest.chars().take(12).collect(),
            size,
            modified,
        ]);
    }
    format::header_table(&["NAME", "ID", "SIZE", "MODIFIED"], &rows)
}

#[derive(Deserialize)]
struct PsResponse {
    models: Vec<RunningModel>,
}

#[derive(Deserialize)]
struct RunningModel {
    name: String,
    digest: String,
    size: u64,
    size_vram: u64,
    context_length: u64,
    expires_at: String,
}

async fn ps(args: ListArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let resp: PsResponse = client.json(Method::GET, "/api/ps", None::<&()>).await?;
    print!(
        "{}",
        ps_table(&resp.models, args.prefix.as_deref(), SystemTime::now())
    );
    Ok(())
}

/// `NAME ID SIZE PROCESSOR CONTEXT UNTIL`, as Ollama's `ps` prints it.
fn ps_table(models: &[RunningModel], prefix: Option<&str>, now: SystemTime) -> String {
    let mut rows = Vec::new();
    for m in models {
        if prefix.is_some_and(|p| !m.name.starts_with(p)) {
            continue;
        }
        // Go's zero time is in the past, so it shows as stopping, as in Ollama.
        let until = time::OffsetDateTime::parse(
            &m.expires_at,
            &time::format_description::well_known::Rfc3339,
        )
        .map_or_else(
            |_| "Never".to_string(),
            |t| {
                let t: SystemTime = t.into();
                if t < now {
                    "Stopping...".to_string()
                } else {
                    format::human_time(t, now)
                }
            },
        );
        rows.push(vec![
            m.name.clone(),
            m.digest.chars().take(12).collect(),
            format::human_bytes(m.size),
            processor(m.size, m.size_vram),
            m.context_length.to_string(),
            until,
        ]);
    }
    format::header_table(
        &["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"],
        &rows,
    )
}

/// Where a loaded model lives: `100% GPU`, `100% CPU`, or the split.
fn processor(size: u64, vram: u64) -> String {
    if vram == 0 {
        "100% CPU".into()
    } else if vram == size {
        "100% GPU".into()
    } else if vram > size || size == 0 {
        "Unknown".into()
    } else {
        let cpu = ((size - vram) as f64 / size as f64 * 100.0).round() as u64;
        format!("{cpu}%/{}% CPU/GPU", 100 - cpu)
    }
}

async fn copy(args: CopyArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let body = json!({ "source": args.source, "destination": args.destination });
    client.send(Method::POST, "/api/copy", Some(&body)).await?;
    println!("copied '{}' to '{}'", args.source, args.destination);
    Ok(())
}

/// Unloads `model` now, as Ollama's `loadOrUnloadModel` with a zero keep-alive: the model is
/// described first (an unknown one fails there, "model '…' not found"); one that lives on
/// another server (a remote stub) is left alone, since unloading it is not this server's
/// business; any other gets a generate with an empty prompt and `keep_alive` "0s" (Go's
/// marshalling of a zero Duration). A model the server cannot describe but may still run (a
/// description error other than not found) is unloaded all the same, as `herd run` runs it.
async fn unload(client: &Client, model: &str) -> anyhow::Result<()> {
    let info = client
        .json::<_, serde_json::Value>(Method::POST, "/api/show", Some(&json!({ "model": model })))
        .await;
    match info {
        Err(e) if e.to_string().contains("not found") => return Err(e),
        Ok(info) if info["remote_host"].as_str().is_some_and(|h| !h.is_empty()) => return Ok(()),
        _ => {}
    }
    client
        .send(
            Method::POST,
            "/api/generate",
            Some(&json!({ "model": model, "keep_alive": "0s" })),
        )
        .await
        .map(drop)
}

async fn stop(args: StopArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    unload(&client, &args.model).await.map_err(|e| {
        if e.to_string().contains("not found") {
            anyhow::anyhow!("couldn't find model \"{}\" to stop", args.model)
        } else {
            e
        }
    })
}

async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    for model in &args.models {
        // Unload first so no runner keeps the deleted blobs open (as Ollama does).
        if let Err(e) = unload(&client, model).await {
            if !e.to_string().to_lowercase().contains("not found") {
                eprintln!("Warning: unable to stop model '{model}'");
            }
        }
        client
            .send(
                Method::DELETE,
                "/api/delete",
                Some(&json!({ "model": model })),
            )
            .await?;
        println!("deleted '{model}'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each line without its trailing spaces.
    fn trimmed(s: &str) -> String {
        s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
    }

    #[test]
    fn ps_output() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let models = vec![
            RunningModel {
                name: "smollm2:135m".into(),
                digest: "0123456789abcdef".into(),
                size: 200_000_000,
                size_vram: 50_000_000,
                context_length: 4096,
                expires_at: "2023-11-14T22:17:20Z".into(),
            },
            RunningModel {
                name: "gemma3:270m".into(),
                digest: "fedcba9876543210".into(),
                size: 300_000_000,
                size_vram: 300_000_000,
                context_length: 32768,
                expires_at: "2318-01-01T00:00:00Z".into(),
            },
        ];
        // The padding tablewriter leaves is checked in `format`; here the columns.
        assert!(ps_table(&models, None, now)
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("now    "));
        assert_eq!(
            trimmed(&ps_table(&models, None, now)),
            "NAME            ID              SIZE      PROCESSOR          CONTEXT    UNTIL\n\
             smollm2:135m    0123456789ab    200 MB    75%/25% CPU/GPU    4096       4 minutes from now\n\
             gemma3:270m     fedcba987654    300 MB    100% GPU           32768      Forever\n"
        );
        assert_eq!(processor(10, 0), "100% CPU");
        assert_eq!(processor(10, 20), "Unknown");
        let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert!(ps_table(&models[..1], None, later).contains("Stopping..."));
    }

    #[test]
    fn list_output() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_007_200);
        let models = vec![
            ListedModel {
                name: "gemma3:270m".into(),
                digest: "e7d4b4c9a1f2000000000000000000000000000000000000000000000000000a".into(),
                size: 291_554_930,
                modified_at: "2023-11-14T22:13:20Z".into(),
                remote_model: String::new(),
            },
            ListedModel {
                name: "smollm2:135m".into(),
                digest: "0123456789abcdef".into(),
                size: 1_500,
                modified_at: "garbage".into(),
                remote_model: String::new(),
            },
            ListedModel {
                name: "gpt-oss:20b-cloud".into(),
                digest: "aaaabbbbccccdddd".into(),
                size: 384,
                modified_at: "garbage".into(),
                remote_model: "gpt-oss:20b".into(),
            },
        ];
        assert_eq!(
            trimmed(&list_table(&models[..2], None, now)),
            "NAME            ID              SIZE      MODIFIED\n\
             gemma3:270m     e7d4b4c9a1f2    291 MB    2 hours ago\n\
             smollm2:135m    0123456789ab    1.5 KB    Never\n"
        );
        // A remote stub has no local size to show.
        assert_eq!(
            trimmed(&list_table(&models[2..], None, now)),
            "NAME                 ID              SIZE    MODIFIED\n\
             gpt-oss:20b-cloud    aaaabbbbcccc    -       Never\n"
        );
        assert_eq!(
            trimmed(&list_table(&models, Some("SMOL"), now)),
            "NAME            ID              SIZE      MODIFIED\n\
             smollm2:135m    0123456789ab    1.5 KB    Never\n"
        );
    }
}
