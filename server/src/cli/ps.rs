//! `herd ps` (the loaded models as Ollama's table: NAME ID SIZE PROCESSOR CONTEXT UNTIL) and
//! `herd stop MODEL` (an empty generate with `keep_alive: 0`, after checking it is loaded).

use std::time::SystemTime;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::client::Client;
use super::format;
use crate::config::{PsArgs, StopArgs};

#[derive(Debug, Deserialize)]
pub struct PsResponse {
    pub models: Vec<Running>,
}

#[derive(Debug, Deserialize)]
pub struct Running {
    pub name: String,
    pub digest: String,
    pub size: u64,
    pub size_vram: u64,
    pub expires_at: String,
    #[serde(default)]
    pub context_length: u64,
}

/// Ollama's PROCESSOR column: all on CPU, all on GPU, or the split.
pub fn processor(size: u64, size_vram: u64) -> String {
    if size_vram == 0 {
        "100% CPU".into()
    } else if size_vram >= size {
        "100% GPU".into()
    } else {
        let gpu = (size_vram as f64 / size as f64 * 100.0).round() as u64;
        format!("{}%/{gpu}% CPU/GPU", 100 - gpu)
    }
}

/// Ollama's UNTIL column: relative expiry, "Stopping..." once past it.
fn until(expires_at: &str, now: SystemTime) -> String {
    let Ok(t) =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
    else {
        return "Never".into();
    };
    let t: SystemTime = t.into();
    if t <= now {
        "Stopping...".into()
    } else {
        format::human_time(t, now)
    }
}

pub fn table(models: &[Running], now: SystemTime) -> String {
    let mut rows = vec![["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
        .map(String::from)
        .to_vec()];
    for m in models {
        rows.push(vec![
            m.name.clone(),
            m.digest.chars().take(12).collect(),
            format::human_bytes(m.size),
            processor(m.size, m.size_vram),
            m.context_length.to_string(),
            until(&m.expires_at, now),
        ]);
    }
    format::table(&rows)
}

pub async fn ps(args: PsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let resp: PsResponse = client.json(Method::GET, "/api/ps", None::<&()>).await?;
    print!("{}", table(&resp.models, SystemTime::now()));
    Ok(())
}

pub async fn stop(args: StopArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.host)?;
    let resp: PsResponse = client.json(Method::GET, "/api/ps", None::<&()>).await?;
    let wanted = args.model.to_lowercase();
    let loaded = resp.models.iter().any(|m| {
        let n = m.name.to_lowercase();
        n == wanted || n == format!("{wanted}:latest")
    });
    if !loaded {
        anyhow::bail!("couldn't find model \"{}\" to stop", args.model);
    }
    client
        .send(
            Method::POST,
            "/api/generate",
            Some(&json!({"model": args.model, "keep_alive": 0})),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn processor_column() {
        assert_eq!(processor(100, 0), "100% CPU");
        assert_eq!(processor(100, 100), "100% GPU");
        assert_eq!(processor(100, 75), "25%/75% CPU/GPU");
    }

    #[test]
    fn ps_table() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let models = vec![
            Running {
                name: "smollm2:latest".into(),
                digest: "0123456789abcdef0123".into(),
                size: 291_554_930,
                size_vram: 0,
                expires_at: "2023-11-14T22:17:20Z".into(),
                context_length: 4096,
            },
            Running {
                name: "gemma3:270m".into(),
                digest: "fedcba9876543210".into(),
                size: 1_500_000,
                size_vram: 0,
                expires_at: "2318-02-22T16:00:00Z".into(),
                context_length: 2048,
            },
            Running {
                name: "old:latest".into(),
                digest: "aa".into(),
                size: 10,
                size_vram: 0,
                expires_at: "2023-11-14T22:00:00Z".into(),
                context_length: 8,
            },
        ];
        assert_eq!(
            table(&models, now),
            "NAME              ID              SIZE      PROCESSOR    CONTEXT    UNTIL\n\
             smollm2:latest    0123456789ab    291 MB    100% CPU     4096       4 minutes from now\n\
             gemma3:270m       fedcba987654    1.5 MB    100% CPU     2048       Forever\n\
             old:latest        aa              10 B      100% CPU     8          Stopping...\n"
        );
    }
}
