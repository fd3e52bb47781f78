//! `runner-llamacpp quantize` as the server runs it: a tiny random-weight F16 llama (built by the
//! server's GGUF writer) is quantized to Q8_0 and Q4_K_M; progress is NDJSON over every tensor,
//! the output has the requested file type and tensor types, shrinks as expected, and loads and
//! generates in the runner. Bad types, non-GGUF input and quantized sources fail with one
//! `{"error"}` line, a non-zero exit and no output file.

mod common;
#[path = "../../server/tests/create_util/tiny_llama.rs"]
mod tiny_llama;

use serde_json::Value;
use server::gguf::{read_path, GgmlType, ReadOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_runner-llamacpp");

struct Run {
    ok: bool,
    lines: Vec<Value>,
    stderr: String,
}

fn quantize(input: &Path, output: &Path, ty: &str) -> Run {
    let out = Command::new(EXE)
        .args(["quantize", "--threads", "1", "--type", ty, "--input"])
        .arg(input)
        .arg("--output")
        .arg(output)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not NDJSON: {l:?}: {e}")))
        .collect();
    Run {
        ok: out.status.success(),
        lines,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn f16_model(dir: &Path) -> PathBuf {
    let p = dir.join("tiny-f16.gguf");
    std::fs::write(&p, tiny_llama::tiny_llama(GgmlType::F16, 7)).unwrap();
    p
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Checks the NDJSON contract of a successful run; returns the done line.
fn check_progress(run: &Run) -> &Value {
    assert!(run.ok, "quantize failed: {}", run.stderr);
    let (done, progress) = run.lines.split_last().expect("no output");
    assert_eq!(done["done"], true, "{done}");
    let n = tiny_llama::TENSORS;
    assert_eq!(done["tensors"], n);
    let completed: Vec<u64> = progress
        .iter()
        .map(|l| {
            assert_eq!(l["total"], n, "{l}");
            l["completed"].as_u64().unwrap()
        })
        .collect();
    let want: Vec<u64> = (1..=n).collect();
    assert_eq!(completed, want, "one line per finished tensor, in order");
    done
}

#[tokio::test]
async fn quantizes_f16_to_q8_0_and_q4_k_m_which_load_and_generate() {
    let dir = tempfile::tempdir().unwrap();
    let input = f16_model(dir.path());
    let f16_size = std::fs::metadata(&input).unwrap().len();
    for (ty, name, ftype, matrix, ratio) in [
        ("q8_0", "Q8_0", 7u64, GgmlType::Q8_0, (0.50, 0.56)),
        ("Q4_K", "Q4_K_M", 15, GgmlType::Q4_K, (0.28, 0.40)),
    ] {
        let output = dir.path().join(format!("out-{name}.gguf"));
        let run = quantize(&input, &output, ty);
        let done = check_progress(&run);
        assert_eq!(done["type"], name);
        let size = std::fs::metadata(&output).unwrap().len();
        assert_eq!(done["size"], size);
        let r = size as f64 / f16_size as f64;
        assert!(
            (ratio.0..ratio.1).contains(&r),
            "{name}: {size} bytes is {r:.3} of the F16 file"
        );
        let g = read_path(&output, ReadOptions::default()).unwrap();
        assert_eq!(g.file_type(), Some(ftype));
        assert_eq!(g.quantization_level(), name);
        let q = g
            .tensors
            .iter()
            .find(|t| t.name == "blk.0.attn_q.weight")
            .unwrap();
        assert_eq!(q.ggml_type, matrix, "{name}");
        let norm = g
            .tensors
            .iter()
            .find(|t| t.name == "output_norm.weight")
            .unwrap();
        assert_eq!(norm.ggml_type, GgmlType::F32, "norms stay F32");

        let _serial = common::serial().await;
        let runner = common::Runner::spawn(&output, &["--ctx-size", "256"]);
        runner.wait_ready().await;
        let c = common::complete(&runner.socket, common::greedy("Hello world", 8)).await;
        assert!(c.timings.eval_count >= 1, "{name}: {c:?}");
    }
    assert!(
        !files_in(dir.path()).iter().any(|f| f.ends_with(".partial")),
        "{:?}",
        files_in(dir.path())
    );
}

fn assert_fails(run: &Run, needle: &str, dir: &Path, output: &Path) {
    assert!(!run.ok, "should fail: {:?}", run.lines);
    assert_eq!(run.lines.len(), 1, "{:?}", run.lines);
    let err = run.lines[0]["error"].as_str().unwrap();
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(!output.exists());
    assert!(
        !files_in(dir).iter().any(|f| f.starts_with("out")),
        "{:?}",
        files_in(dir)
    );
}

#[test]
fn bad_type_non_gguf_and_quantized_sources_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let input = f16_model(dir.path());
    let output = dir.path().join("out.gguf");

    let run = quantize(&input, &output, "q3_k_m");
    assert_fails(
        &run,
        "unsupported quantization type q3_k_m",
        dir.path(),
        &output,
    );

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "this is not a model, just text\n").unwrap();
    let run = quantize(&text, &output, "q8_0");
    assert_fails(&run, "is not a GGUF file", dir.path(), &output);

    // GGUF magic but a truncated file: llama.cpp's own refusal comes back.
    let bytes = std::fs::read(&input).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let run = quantize(&cut, &output, "q8_0");
    assert!(!run.ok);
    assert!(
        run.lines.last().unwrap()["error"].is_string(),
        "{:?}",
        run.lines
    );
    assert!(!output.exists());

    // A Q8_0 file cannot be quantized again (llama.cpp refuses requantizing).
    let q8 = dir.path().join("q8.gguf");
    assert!(quantize(&input, &q8, "q8_0").ok);
    let run = quantize(&q8, &output, "q4_k_m");
    assert!(!run.ok);
    assert!(
        run.lines.last().unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("requantiz"),
        "{:?}",
        run.lines
    );
    assert!(!output.exists());
    assert!(!files_in(dir.path()).iter().any(|f| f.ends_with(".partial")));
    // Dequantizing is allowed: F32 holds the Q8_0 weights exactly (runner-mlx's golden test
    // compares the engines on such a copy).
    let f32 = dir.path().join("f32.gguf");
    let run = quantize(&q8, &f32, "f32");
    assert!(run.ok, "{:?}", run.lines);
    assert!(std::fs::metadata(&f32).unwrap().len() > std::fs::metadata(&q8).unwrap().len());
}
