//! The `herd` subcommands. `serve` runs the server in this process; the others are thin HTTP
//! clients of a running server at `OLLAMA_HOST`, printing what Ollama's CLI prints.

pub mod client;
pub mod format;
pub mod ps;
pub mod run;
pub mod serve;
pub mod show;

use std::time::SystemTime;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::config::{Cli, Command, CopyArgs, ListArgs, RemoveArgs};
use client::Client;

/// Runs one parsed command line to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(config) => serve::run(*config).await,
        Command::List(args) => list(args).await,
        Command::Show(args) => show::run(args).await,
        Command::Cp(args) => copy(args).await,
        Command::Rm(args) => remove(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Ps(args) => ps::ps(args).await,
        Command::Stop(args) => ps::stop(args).await,
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
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let resp: ListResponse = client.json(Method::GET, "/api/tags", None::<&()>).await?;
    print!(
        "{}",
        list_table(&resp.models, args.prefix.as_deref(), SystemTime::now())
    );
    Ok(())
}

/// `NAME ID SIZE MODIFIED`, optionally only names starting with `prefix` (case-insensitive).
fn list_table(models: &[ListedModel], prefix: Option<&str>, now: SystemTime) -> String {
    let prefix = prefix.map(str::to_lowercase);
    let mut rows = vec![vec![
        "NAME".to_string(),
        "ID".to_string(),
        "SIZE".to_string(),
        "MODIFIED".to_string(),
    ]];
    for m in models {
        if prefix
            .as_deref()
            .is_some_and(|p| !m.name.to_lowercase().starts_with(p))
        {
            continue;
        }
        let modified = time::OffsetDateTime::parse(
            &m.modified_at,
            &time::format_description::well_known::Rfc3339,
        )
        .map_or_else(
            |_| "Never".to_string(),
            |t| format::human_time(t.into(), now),
        );
        rows.push(vec![
            m.name.clone(),
            m.digest.chars().take(12).collect(),
            format::human_bytes(m.size),
            modified,
        ]);
    }
    format::table(&rows)
}

async fn copy(args: CopyArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let body = json!({ "source": args.source, "destination": args.destination });
    client.send(Method::POST, "/api/copy", Some(&body)).await?;
    println!("copied '{}' to '{}'", args.source, args.destination);
    Ok(())
}

async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    for model in &args.models {
        // Ollama unloads the model first (generate with keep_alive 0); that needs the scheduler,
        // which is not wired yet, so deletion goes straight to the store.
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

    #[test]
    fn list_output() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_007_200);
        let models = vec![
            ListedModel {
                name: "gemma3:270m".into(),
                digest: "e7d4b4c9a1f2000000000000000000000000000000000000000000000000000a".into(),
                size: 291_554_930,
                modified_at: "2023-11-14T22:13:20Z".into(),
            },
            ListedModel {
                name: "smollm2:135m".into(),
                digest: "0123456789abcdef".into(),
                size: 1_500,
                modified_at: "garbage".into(),
            },
        ];
        assert_eq!(
            list_table(&models, None, now),
            "NAME            ID              SIZE      MODIFIED\n\
             gemma3:270m     e7d4b4c9a1f2    291 MB    2 hours ago\n\
             smollm2:135m    0123456789ab    1.5 KB    Never\n"
        );
        assert_eq!(
            list_table(&models, Some("SMOL"), now),
            "NAME            ID              SIZE      MODIFIED\n\
             smollm2:135m    0123456789ab    1.5 KB    Never\n"
        );
    }
}
