//! `runner-llamacpp quantize --input IN --output OUT --type TYPE [--threads N]`: rewrites a GGUF
//! to another llama.cpp file type with the pinned llama.cpp (`llama_model_quantize`), for
//! `herd create --quantize`.
//!
//! Contract with the server (server/src/create/quantize.rs):
//! - stdout is NDJSON: `{"completed":i,"total":N}` after each finished tensor (llama.cpp logs one
//!   `[ i/ N] name …` line as it starts tensor i; we turn that into "i-1 done"), then one
//!   `{"done":true,"type":…,"tensors":N,"size":bytes,"seconds":…}`; on failure one
//!   `{"error":"…"}` and a non-zero exit;
//! - the result is written to `OUT.partial` and renamed to `OUT` only when complete, so `OUT`
//!   never holds a partial file; on failure `OUT.partial` is removed;
//! - when stdin is a pipe, its EOF means the parent is gone: the partial file is removed and the
//!   process exits (the server keeps the pipe open for the run's whole life).

use crate::ffi;
use clap::Parser;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "runner-llamacpp quantize",
    about = "Quantize a GGUF model with llama.cpp"
)]
pub struct QuantizeArgs {
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    /// F32, F16, BF16, Q8_0, Q4_K_S, Q4_K_M (Q4_K = Q4_K_M); case-insensitive.
    #[arg(long = "type")]
    pub ty: String,
    /// Worker threads; 0 = one per available CPU.
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
}

/// The accepted type names (canonical spelling) and their llama.cpp file types, as Ollama's
/// `ParseFileType` accepts them.
pub fn parse_type(s: &str) -> Result<(&'static str, u32), String> {
    Ok(match s.to_ascii_uppercase().as_str() {
        "F32" => ("F32", ffi::ftype::F32),
        "F16" => ("F16", ffi::ftype::F16),
        "BF16" => ("BF16", ffi::ftype::BF16),
        "Q8_0" => ("Q8_0", ffi::ftype::Q8_0),
        "Q4_K_S" => ("Q4_K_S", ffi::ftype::Q4_K_S),
        "Q4_K_M" | "Q4_K" => ("Q4_K_M", ffi::ftype::Q4_K_M),
        _ => {
            return Err(format!(
                "unsupported quantization type {s} - supported types are F32, F16, BF16, Q8_0, Q4_K_S, Q4_K_M"
            ))
        }
    })
}

/// `[ i/ N] …` (llama.cpp's per-tensor log line) → `(i, N)`.
pub fn tensor_progress(text: &str) -> Option<(u64, u64)> {
    let rest = text.strip_prefix('[')?;
    let (inner, _) = rest.split_once(']')?;
    let (i, n) = inner.split_once('/')?;
    let (i, n) = (i.trim().parse().ok()?, n.trim().parse().ok()?);
    (i >= 1 && i <= n).then_some((i, n))
}

/// llama.cpp's failure reason from its error log (`…: failed to quantize: REASON`).
pub fn failure_reason(errors: &[String]) -> String {
    let reason = errors
        .iter()
        .rev()
        .find_map(|e| e.split_once("failed to quantize: ").map(|(_, r)| r))
        .map(str::trim)
        .filter(|r| !r.is_empty());
    match reason {
        Some(r) => r.to_owned(),
        None if errors.is_empty() => "llama.cpp could not quantize the model".to_owned(),
        None => errors.join(" ").trim().to_owned(),
    }
}

/// `OUT.partial`: where the result is written before the rename.
pub fn partial_path(output: &Path) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Parses `argv` (starting with `quantize`), runs, and returns the exit code.
pub fn main(argv: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    let args = match QuantizeArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            emit(json!({ "error": e.to_string().lines().next().unwrap_or("bad arguments") }));
            return 2;
        }
    };
    match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("runner-llamacpp quantize: {e}");
            emit(json!({ "error": e }));
            1
        }
    }
}

fn check_input(input: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(input)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| format!("cannot read {}: {e}", input.display()))?;
    if &magic != b"GGUF" {
        return Err(format!("{} is not a GGUF file", input.display()));
    }
    Ok(())
}

/// Removes `OUT.partial` if anything stops the run before the rename.
struct PartialGuard(Option<PathBuf>);

impl Drop for PartialGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub fn run(args: &QuantizeArgs) -> Result<(), String> {
    let (name, ftype) = parse_type(&args.ty)?;
    check_input(&args.input)?;
    let partial = partial_path(&args.output);
    watch_parent(partial.clone());
    let guard = PartialGuard(Some(partial.clone()));
    let threads = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get() as i32),
        n => n as i32,
    };
    let started = Instant::now();
    let mut errors = Vec::new();
    let mut tensors = 0u64;
    let mut on_log = |level: ffi::QuantLog, text: &str| match level {
        ffi::QuantLog::Info => {
            if let Some((i, n)) = tensor_progress(text) {
                tensors = n;
                if i > 1 {
                    emit(json!({ "completed": i - 1, "total": n }));
                }
            }
        }
        ffi::QuantLog::Warn => eprint!("{text}"),
        ffi::QuantLog::Error => {
            eprint!("{text}");
            errors.push(text.to_owned());
        }
    };
    let done = ffi::model_quantize(&args.input, &partial, ftype, threads, &mut on_log);
    if done.is_err() {
        return Err(failure_reason(&errors));
    }
    std::fs::rename(&partial, &args.output)
        .map_err(|e| format!("cannot rename to {}: {e}", args.output.display()))?;
    drop(guard);
    let size = std::fs::metadata(&args.output).map_or(0, |m| m.len());
    if tensors > 0 {
        emit(json!({ "completed": tensors, "total": tensors }));
    }
    emit(json!({
        "done": true,
        "type": name,
        "tensors": tensors,
        "size": size,
        "seconds": started.elapsed().as_secs_f64(),
    }));
    Ok(())
}

/// When stdin is a pipe, its EOF means the parent died or gave up: remove the partial output and
/// exit, rather than finishing work nobody will use.
fn watch_parent(partial: PathBuf) {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let is_pipe = std::fs::metadata("/proc/self/fd/0").is_ok_and(|m| m.file_type().is_fifo());
    if !is_pipe {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = std::fs::remove_file(&partial);
            std::process::exit(3);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names() {
        let table = [
            ("f32", Some("F32")),
            ("F16", Some("F16")),
            ("bf16", Some("BF16")),
            ("q8_0", Some("Q8_0")),
            ("Q4_K_S", Some("Q4_K_S")),
            ("q4_k_m", Some("Q4_K_M")),
            ("Q4_K", Some("Q4_K_M")),
            ("q4_0", None),
            ("Q5_K_M", None),
            ("", None),
        ];
        for (input, want) in table {
            assert_eq!(parse_type(input).ok().map(|t| t.0), want, "{input}");
        }
        assert_eq!(parse_type("q4_k").unwrap().1, ffi::ftype::Q4_K_M);
        assert_ne!(ffi::ftype::Q4_K_M, ffi::ftype::Q4_K_S);
    }

    #[test]
    fn tensor_lines() {
        let table = [
            (
                "[   1/ 201]                    token_embd.weight - [  576, 49152,     1,     1], type =    f16, ",
                Some((1, 201)),
            ),
            ("[ 201/ 201] output_norm.weight", Some((201, 201))),
            ("[0/3] x", None),
            ("[4/3] x", None),
            ("converting to q8_0 .. ", None),
            ("size =     1.00 MiB\n", None),
            ("[a/b]", None),
        ];
        for (line, want) in table {
            assert_eq!(tensor_progress(line), want, "{line}");
        }
    }

    #[test]
    fn failure_reasons() {
        let e = |v: &[&str]| failure_reason(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            e(&[
                "gguf_init: bad magic\n",
                "llama_model_quantize: failed to quantize: tensor 'x' data is not within the file bounds\n"
            ]),
            "tensor 'x' data is not within the file bounds"
        );
        assert_eq!(e(&["something broke\n"]), "something broke");
        assert_eq!(e(&[]), "llama.cpp could not quantize the model");
    }

    #[test]
    fn partial_is_a_sibling() {
        assert_eq!(
            partial_path(Path::new("/b/.tmp-1")),
            PathBuf::from("/b/.tmp-1.partial")
        );
    }
}
