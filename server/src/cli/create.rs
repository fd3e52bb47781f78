//! `herd create NAME [-f Modelfile] [-q QUANT] [--draft-quantize QUANT]`: parse the Modelfile, resolve its FROM / ADAPTER /
//! DRAFT paths relative to the Modelfile (`~` expanded), hash the files (streaming sha256), upload
//! the ones the server lacks (`HEAD`, then `POST /api/blobs/:digest`), then call `/api/create`
//! with the `files` map and print its progress (Ollama's `cmd.CreateHandler`).
//!
//! Deliberate difference: a directory holding GGUF files contributes only those; Ollama also
//! adds the directory's `*.json`, which its own GGUF import then refuses.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, bail, Context};

use crate::create::{CreateRequest, Message, Progress};
use crate::modelfile::{self, Command, Modelfile};
use crate::store::{Digest, ModelName};

/// One local file the request refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    pub path: PathBuf,
    pub digest: Digest,
    pub size: u64,
}

/// A create request ready to send, the files it needs on the server, and Modelfile warnings.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    pub request: CreateRequest,
    pub uploads: Vec<Upload>,
    pub warnings: Vec<String>,
}

/// Resolves a FROM/ADAPTER/DRAFT argument: absolute paths as given, `~` and `~user` via the
/// password database, anything else relative to the Modelfile's directory.
pub fn expand_path(p: &str, modelfile_dir: &Path) -> anyhow::Result<PathBuf> {
    if Path::new(p).is_absolute() {
        return Ok(PathBuf::from(p));
    }
    if let Some(rest) = p.strip_prefix('~') {
        let (user, tail) = match rest.split_once('/') {
            Some((u, t)) => (u, t),
            None => (rest, ""),
        };
        let who = if user.is_empty() {
            nix::unistd::User::from_uid(nix::unistd::getuid())
        } else {
            nix::unistd::User::from_name(user)
        };
        let home = who
            .ok()
            .flatten()
            .map(|u| u.dir)
            .ok_or_else(|| anyhow!("failed to find user '{user}'"))?;
        return Ok(home.join(tail));
    }
    Ok(modelfile_dir.join(p))
}

fn sorted_entries(dir: &Path, pred: impl Fn(&str) -> bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if pred(&name) && e.path().is_file() {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

fn subdirs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    Ok(out)
}

fn glob(pre: &'static str, suf: &'static str) -> impl Fn(&str) -> bool {
    move |n: &str| n.starts_with(pre) && n.ends_with(suf) && n.len() >= pre.len() + suf.len()
}

/// The files a model directory contributes (Ollama's `filesForModel` order of preference).
pub fn files_for_model(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = sorted_entries(dir, glob("model", ".safetensors"))?;
    if !files.is_empty() {
        for sub in subdirs(dir)? {
            files.extend(sorted_entries(&sub, glob("model", ".safetensors"))?);
        }
    } else {
        let groups: [(&'static str, &'static str); 5] = [
            ("consolidated", ".safetensors"),
            ("pytorch_model", ".bin"),
            ("consolidated", ".pth"),
            ("", ".gguf"),
            ("", ".bin"),
        ];
        for (pre, suf) in groups {
            files = sorted_entries(dir, glob(pre, suf))?;
            if !files.is_empty() {
                if suf == ".gguf" || (pre.is_empty() && suf == ".bin") {
                    return Ok(files);
                }
                break;
            }
        }
        if files.is_empty() {
            bail!("no Modelfile or safetensors files found");
        }
    }
    files.extend(sorted_entries(dir, glob("", ".json"))?);
    for sub in subdirs(dir)? {
        files.extend(sorted_entries(&sub, glob("", ".json"))?);
    }
    files.extend(sorted_entries(dir, |n| n == "chat_template.jinja")?);
    let mut tok = sorted_entries(dir, |n| n == "tokenizer.model")?;
    if tok.is_empty() {
        for sub in subdirs(dir)? {
            tok.extend(sorted_entries(&sub, |n| n == "tokenizer.model")?);
        }
    }
    files.extend(tok);
    Ok(files)
}

/// The files a FROM/ADAPTER/DRAFT path stands for; `Ok(None)` if nothing exists there. Symlinks
/// are resolved and must stay inside the directory.
fn files_at(path: &Path) -> anyhow::Result<Option<Vec<PathBuf>>> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if !meta.is_dir() {
        return Ok(Some(vec![std::fs::canonicalize(path)?]));
    }
    let root = std::fs::canonicalize(path)?;
    let mut out = Vec::new();
    for f in files_for_model(path)? {
        let real = std::fs::canonicalize(&f)?;
        if !real.starts_with(&root) {
            bail!("insecure path: {}", f.display());
        }
        out.push(real);
    }
    Ok(Some(out))
}

/// Ollama's `createRequestFileNames`: paths relative to the files' deepest common directory
/// (just the file name when there is one file), slash-separated.
pub fn file_keys(paths: &[PathBuf]) -> Vec<String> {
    let base = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut root: Option<PathBuf> = None;
    if paths.len() >= 2 {
        for p in paths {
            let dir = p.parent().unwrap_or(Path::new("/")).to_path_buf();
            root = Some(match root {
                None => dir,
                Some(r) => {
                    let mut r = r;
                    while !dir.starts_with(&r) {
                        r = r.parent().unwrap_or(Path::new("/")).to_path_buf();
                    }
                    r
                }
            });
        }
    }
    paths
        .iter()
        .map(|p| {
            let rel = root.as_ref().and_then(|r| p.strip_prefix(r).ok());
            match rel {
                Some(rel) if rel.components().all(|c| matches!(c, Component::Normal(_))) => rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/"),
                _ => base(p).unwrap_or_default(),
            }
        })
        .collect()
}

/// sha256 of a file, streamed in 1 MiB reads.
pub fn hash_file(path: &Path) -> std::io::Result<(Digest, u64)> {
    Digest::of_file(path)
}

fn hash_all(
    paths: &[PathBuf],
    uploads: &mut Vec<Upload>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for (p, key) in paths.iter().zip(file_keys(paths)) {
        let (digest, size) = hash_file(p).with_context(|| format!("reading {}", p.display()))?;
        map.insert(key, digest.to_string());
        if !uploads.iter().any(|u| u.digest == digest) {
            uploads.push(Upload {
                path: p.clone(),
                digest,
                size,
            });
        }
    }
    Ok(map)
}

/// Builds the create request for `mf` (Ollama's `Modelfile.CreateRequest`), hashing every local
/// file it names. A FROM that is not an existing path is a model name.
pub fn prepare(mf: &Modelfile, modelfile_dir: &Path) -> anyhow::Result<Prepared> {
    let mut out = Prepared::default();
    let params = modelfile::parameters(mf).map_err(|e| anyhow!(e))?;
    out.warnings = params.warnings;
    let r = &mut out.request;
    if !params.params.is_empty() {
        r.parameters = Some(params.params);
    }
    let (mut model_paths, mut adapter_paths, mut draft_paths) = (vec![], vec![], vec![]);
    let mut licenses = Vec::new();
    for c in &mf.commands {
        match c {
            Command::From(arg) => match files_at(&expand_path(arg, modelfile_dir)?)? {
                Some(files) => model_paths.extend(files),
                None => r.from = arg.clone(),
            },
            Command::Adapter(arg) | Command::Draft(arg) => {
                let path = expand_path(arg, modelfile_dir)?;
                let files = files_at(&path)?
                    .ok_or_else(|| anyhow!("{}: no such file or directory", path.display()))?;
                if matches!(c, Command::Adapter(_)) {
                    adapter_paths = files;
                } else {
                    draft_paths.extend(files);
                }
            }
            Command::Template(t) => r.template = t.clone(),
            Command::System(s) => r.system = s.clone(),
            Command::License(l) => licenses.push(serde_json::Value::String(l.clone())),
            Command::Renderer(s) => r.renderer = s.clone(),
            Command::Parser(s) => r.parser = s.clone(),
            Command::Requires(v) => {
                r.requires = modelfile::validate_requires(v).map_err(|e| anyhow!(e))?
            }
            Command::Message { role, content } => r.messages.push(Message {
                role: role.clone(),
                content: content.clone(),
                ..Message::default()
            }),
            Command::Parameter { .. } => {}
        }
    }
    if let Some(d) = draft_paths.iter().find(|d| model_paths.contains(d)) {
        bail!(
            "DRAFT must not reference the same local path as FROM: {}",
            d.display()
        );
    }
    if !licenses.is_empty() {
        r.license = Some(serde_json::Value::Array(licenses));
    }
    let uploads = &mut out.uploads;
    if !model_paths.is_empty() {
        out.request.files = Some(hash_all(&model_paths, uploads)?);
    }
    if !adapter_paths.is_empty() {
        out.request.adapters = Some(hash_all(&adapter_paths, uploads)?);
    }
    if !draft_paths.is_empty() {
        out.request.draft_files = Some(hash_all(&draft_paths, uploads)?);
    }
    Ok(out)
}

/// Reads `-f` (default `./Modelfile`; a missing default means `FROM .`) and prepares the request.
pub fn prepare_from_file(file: Option<&Path>) -> anyhow::Result<Prepared> {
    let (text, dir) = match file {
        Some(f) => {
            let bytes = std::fs::read(f)
                .map_err(|e| anyhow!("specified Modelfile wasn't found: {}: {e}", f.display()))?;
            (bytes, absolute_parent(f)?)
        }
        None => match std::fs::read("Modelfile") {
            Ok(bytes) => (bytes, std::env::current_dir()?),
            Err(_) => (b"FROM .\n".to_vec(), std::env::current_dir()?),
        },
    };
    let mf = modelfile::parse_bytes(&text)?;
    prepare(&mf, &dir)
}

fn absolute_parent(f: &Path) -> anyhow::Result<PathBuf> {
    let abs = if f.is_absolute() {
        f.to_path_buf()
    } else {
        std::env::current_dir()?.join(f)
    };
    Ok(abs.parent().unwrap_or(Path::new("/")).to_path_buf())
}

async fn error_of(resp: reqwest::Response) -> anyhow::Error {
    let status = resp.status();
    let body = resp.bytes().await.unwrap_or_default();
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(v) if v["error"].is_string() => anyhow!("{}", v["error"].as_str().unwrap_or_default()),
        _ => anyhow!("{status}: {}", String::from_utf8_lossy(&body).trim()),
    }
}

/// Uploads `u` unless the server already has it. Returns whether bytes were sent.
pub async fn upload(http: &reqwest::Client, base: &str, u: &Upload) -> anyhow::Result<bool> {
    let url = format!("{base}/api/blobs/{}", u.digest);
    if http.head(&url).send().await?.status().is_success() {
        return Ok(false);
    }
    let file = tokio::fs::File::open(&u.path)
        .await
        .with_context(|| format!("opening {}", u.path.display()))?;
    let body =
        reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let resp = http
        .post(&url)
        .header(reqwest::header::CONTENT_LENGTH, u.size)
        .body(body)
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(error_of(resp).await);
    }
    Ok(true)
}

/// POSTs the request and feeds each NDJSON progress line to `on_progress`; an `{"error":…}` line
/// or an error status becomes the returned error.
pub async fn send_create(
    http: &reqwest::Client,
    base: &str,
    req: &CreateRequest,
    on_progress: &mut dyn FnMut(&Progress),
) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let resp = http
        .post(format!("{base}/api/create"))
        .json(req)
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(error_of(resp).await);
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut handle = |line: &[u8]| -> anyhow::Result<()> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let v: serde_json::Value = serde_json::from_slice(line).context("bad progress line")?;
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            bail!("{e}");
        }
        on_progress(&serde_json::from_value(v)?);
        Ok(())
    };
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            handle(&line)?;
        }
    }
    handle(&pending)
}

/// The whole command: prepare, upload what is missing, create, printing progress to stderr as
/// Ollama's CLI does (one line per status instead of spinners).
pub async fn run(
    base: &str,
    args: &crate::config::CreateArgs,
    file: Option<&Path>,
) -> anyhow::Result<()> {
    let (name, quantize) = (args.model.as_str(), args.quantize.as_deref());
    ModelName::parse(name).map_err(|_| anyhow!("invalid model name: {name}"))?;
    eprintln!("gathering model components");
    let file = file.map(Path::to_path_buf);
    // Hashing reads every file once: keep it off the async workers.
    let prepared =
        tokio::task::spawn_blocking(move || prepare_from_file(file.as_deref())).await??;
    for w in &prepared.warnings {
        eprintln!("{w}");
    }
    let http = reqwest::Client::new();
    for u in &prepared.uploads {
        eprintln!("copying file {} 0%", u.digest);
        upload(&http, base, u).await?;
        eprintln!("copying file {} 100%", u.digest);
    }
    let mut req = prepared.request;
    req.model = name.to_owned();
    req.experimental = args.experimental;
    if let Some(q) = quantize.filter(|q| !q.is_empty()) {
        req.quantize = q.to_owned();
    }
    if let Some(q) = args.draft_quantize.as_deref().filter(|q| !q.is_empty()) {
        if req.draft_files.is_none() {
            bail!(crate::create::DRAFT_QUANTIZE_WITHOUT_DRAFT);
        }
        req.draft_quantize = q.to_owned();
    }
    let mut last = String::new();
    send_create(&http, base, &req, &mut |p| {
        if let Some(line) = progress_line(&last, p) {
            eprintln!("{line}");
        }
        last.clone_from(&p.status);
    })
    .await
}

/// What the CLI prints for a progress line after one with status `last`: each new status once,
/// and a counted status (quantizing) again with `100%` when it completes.
pub fn progress_line(last: &str, p: &Progress) -> Option<String> {
    let counted = p.total > 0;
    let pct = |c: u64| (c.min(p.total) as u128 * 100 / p.total.max(1) as u128) as u64;
    if p.status != last {
        Some(if counted {
            format!("{} {}%", p.status, pct(p.completed))
        } else {
            p.status.clone()
        })
    } else if counted && p.completed >= p.total {
        Some(format!("{} 100%", p.status))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_print_once_per_status() {
        let p = |status: &str, completed: u64, total: u64| Progress {
            status: status.into(),
            digest: String::new(),
            total,
            completed,
        };
        let q = "quantizing F16 model to Q8_0";
        let table = [
            (
                "",
                p("parsing GGUF", 0, 0),
                Some("parsing GGUF".to_string()),
            ),
            ("parsing GGUF", p(q, 0, 200), Some(format!("{q} 0%"))),
            (q, p(q, 100, 200), None),
            (q, p(q, 200, 200), Some(format!("{q} 100%"))),
            (
                q,
                p("verifying conversion", 0, 0),
                Some("verifying conversion".into()),
            ),
            ("success", p("success", 0, 0), None),
        ];
        for (last, progress, want) in table {
            assert_eq!(
                progress_line(last, &progress),
                want,
                "{last} -> {progress:?}"
            );
        }
    }
}
