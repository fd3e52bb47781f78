//! Golden parity on SmolLM2-135M: runner-mlx's forward pass on the MLX checkpoint made from the
//! GGUF (scripts/make-mlx-test-model) against runner-llamacpp on the same weights, greedy, on
//! fixed prompts (teacher-forced on llama.cpp's tokens). llama.cpp runs an F32 copy of the Q4_1
//! GGUF (`runner-llamacpp quantize --type F32` dequantizes exactly): on Q4_1 itself its CPU
//! kernels round the activations to 8 bits (Q8_1) for every matmul, which MLX never does, so
//! that comparison measures the kernels' rounding rather than the engines (96.7 % there). Tokens compare by their bytes (the llama runner streams token bytes with
//! logprobs); the first step's log-probabilities of llama.cpp's top 20 compare numerically.
//! Also checks that the tokenizers-crate vocabulary tokenizes the prompts as llama.cpp does.

use runner_core::select::argmax;
use runner_core::{Token, Vocabulary};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROMPTS: &[&str] = &[
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox",
    "In 1969, the first man to walk on the moon was",
    "List of fruits: apple, banana,",
    "Photosynthesis is the process by which",
];
const N: usize = 64;

mod support;
use support::model_dir;

/// runner-llamacpp beside this test's binary (target/<profile>/); `scripts/test` builds every
/// binary first. Missing is a failure, not a skip.
fn llama_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("runner-llamacpp");
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build -p runner-llamacpp --bins` first",
        p.display()
    );
    p
}

struct Llama {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gguf` dequantized to F32 by runner-llamacpp's quantize subcommand, under `dir`.
fn dequantized(gguf: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("f32.gguf");
    let st = Command::new(llama_exe())
        .arg("quantize")
        .arg("--input")
        .arg(gguf)
        .arg("--output")
        .arg(&out)
        .args(["--type", "F32", "--threads", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("run runner-llamacpp quantize");
    assert!(st.success() && out.is_file(), "dequantizing {gguf:?}: {st}");
    out
}

impl Llama {
    fn start(gguf: &Path) -> Llama {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("r.sock");
        let child = Command::new(llama_exe())
            .arg("--model")
            .arg(gguf)
            .arg("--socket")
            .arg(&socket)
            .args(["--threads", "2", "--ctx-size", "512"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start runner-llamacpp");
        let l = Llama {
            child,
            socket,
            _dir: dir,
        };
        let t = Instant::now();
        loop {
            if l.socket.exists() {
                if let Ok(h) = l.call("GET", "/health", None) {
                    if h.contains("ready") {
                        return l;
                    }
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "llama runner not ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<String, String> {
        let mut c = Command::new("curl");
        c.args(["-s", "--unix-socket"])
            .arg(&self.socket)
            .args(["-X", method]);
        if let Some(b) = body {
            c.args(["-H", "content-type: application/json", "-d"])
                .arg(b.to_string());
        }
        let out = c
            .arg(format!("http://runner{path}"))
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("curl {path}: {}", out.status));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn log_softmax(l: &[f32]) -> Vec<f32> {
    let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let s: f64 = l.iter().map(|&x| ((x - m) as f64).exp()).sum();
    let ls = m + s.ln() as f32;
    l.iter().map(|&x| x - ls).collect()
}

#[test]
fn smollm2_greedy_tokens_match_llama_cpp() {
    let dir = model_dir();
    let gguf = dir
        .parent()
        .unwrap()
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut m = runner_mlx::load(&dir, runner_mlx::Compute::F32).expect("load the MLX checkpoint");
    assert!(runner_mlx::PIN.starts_with("mlx-"), "{}", runner_mlx::PIN);
    let tmp = tempfile::tempdir().unwrap();
    let llama = Llama::start(&dequantized(&gguf, tmp.path()));
    let by_bytes: HashMap<Vec<u8>, Token> = (0..m.vocab.n_vocab())
        .rev()
        .map(|t| (m.vocab.token_piece(t, true), t))
        .collect();
    let (mut same, mut total, mut max_dl) = (0usize, 0usize, 0f32);
    let mut mlx_time = Duration::ZERO;
    for (pi, prompt) in PROMPTS.iter().enumerate() {
        let tok: Value = serde_json::from_str(
            &llama
                .call(
                    "POST",
                    "/tokenize",
                    Some(&json!({"content": prompt, "parse_special": true})),
                )
                .unwrap(),
        )
        .unwrap();
        let ids: Vec<Token> = tok["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as Token)
            .collect();
        assert_eq!(
            m.vocab.tokenize(prompt, true, true).unwrap(),
            ids,
            "tokenizer.json tokenizes {prompt:?} as llama.cpp does"
        );
        let req = json!({"prompt": ids, "sampling": {"temperature": 0.0, "repeat_penalty": 1.0},
            "num_predict": N, "logprobs": true, "top_logprobs": 20});
        let lines = llama.call("POST", "/completion", Some(&req)).unwrap();
        let mut want: Vec<Vec<u8>> = Vec::new();
        let mut first_top: Vec<(Vec<u8>, f32)> = Vec::new();
        for line in lines.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_ne!(v["type"], "error", "{line}");
            for lp in v["logprobs"].as_array().into_iter().flatten() {
                let bytes = |v: &Value| -> Vec<u8> {
                    v["bytes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|b| b.as_u64().unwrap() as u8)
                        .collect()
                };
                if want.is_empty() {
                    first_top = lp["top_logprobs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| (bytes(t), t["logprob"].as_f64().unwrap() as f32))
                        .collect();
                }
                want.push(bytes(lp));
            }
        }
        assert!(
            !want.is_empty(),
            "llama.cpp generated nothing for {prompt:?}"
        );

        let t = Instant::now();
        let mut cache = m.model.new_cache();
        let mut logits = m.model.forward(&mut [(&mut cache, &ids)]).unwrap();
        let lp = log_softmax(&logits);
        for (b, l) in &first_top {
            if let Some(&id) = by_bytes.get(b) {
                max_dl = max_dl.max((lp[id as usize] - l).abs());
            }
        }
        // Teacher-forced: at each position MLX's greedy choice is compared with llama.cpp's,
        // then llama.cpp's token is fed, so one near-tie does not misalign every later position.
        // The first disagreement is where the free-running greedy outputs would diverge.
        let mut agree = 0;
        let mut first_diff = None;
        for (i, w) in want.iter().enumerate() {
            let next = argmax(&logits).unwrap();
            if &m.vocab.token_piece(next, true) == w {
                agree += 1;
            } else if first_diff.is_none() {
                first_diff = Some(i);
            }
            if i + 1 == want.len() {
                break;
            }
            let fed = *by_bytes
                .get(w)
                .expect("llama.cpp's token is in the vocabulary");
            logits = m.model.forward(&mut [(&mut cache, &[fed])]).unwrap();
        }
        mlx_time += t.elapsed();
        let n = want.len();
        println!(
            "prompt {pi}: {agree}/{n} positions agree, first divergence {first_diff:?}: {:?}",
            String::from_utf8_lossy(&want.concat())
        );
        same += agree;
        total += n;
    }
    println!(
        "golden: {same}/{total} positions agree ({:.1} %); first step max |Δ logprob| over llama.cpp's top 20 = {max_dl:.4}; MLX greedy time {mlx_time:?}",
        100.0 * same as f64 / total as f64
    );
    // Measured on the F32 copy: 547/547 positions (100 %), max |Δ logprob| 0.0081. Issue 18's
    // bar is 99 %.
    assert!(
        max_dl < 0.05,
        "first-step log-probabilities differ by {max_dl}"
    );
    assert!(same * 100 >= total * 99, "{same}/{total} positions agree");
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// One step over several sequences gives each the logits it gets alone, and a truncated cache
/// continues as if the dropped positions had never been evaluated (prefix reuse).
#[test]
fn multi_sequence_steps_and_truncated_caches_match_solo_runs() {
    let mut m =
        runner_mlx::load(&model_dir(), runner_mlx::Compute::F32).expect("load the MLX checkpoint");
    let a = m
        .vocab
        .tokenize("The capital of France is", true, true)
        .unwrap();
    let b = m
        .vocab
        .tokenize("Once upon a time, there", true, true)
        .unwrap();
    let (mut ca, mut cb) = (m.model.new_cache(), m.model.new_cache());
    let la = m.model.forward(&mut [(&mut ca, &a)]).unwrap();
    let lb = m.model.forward(&mut [(&mut cb, &b)]).unwrap();
    assert_eq!((ca.len(), cb.len()), (a.len(), b.len()));
    let (ta, tb) = (argmax(&la).unwrap(), argmax(&lb).unwrap());
    // Solo next steps on copies of the same state: prefill again from scratch.
    let solo = |m: &mut runner_mlx::Loaded, p: &[Token], t: Token| {
        let mut c = m.model.new_cache();
        m.model.forward(&mut [(&mut c, p)]).unwrap();
        m.model.forward(&mut [(&mut c, &[t])]).unwrap()
    };
    let (sa, sb) = (solo(&mut m, &a, ta), solo(&mut m, &b, tb));
    let both = m
        .model
        .forward(&mut [(&mut ca, &[ta]), (&mut cb, &[tb])])
        .unwrap();
    let v = m.vocab.n_vocab() as usize;
    assert_eq!(both.len(), 2 * v);
    let (da, db) = (max_diff(&both[..v], &sa), max_diff(&both[v..], &sb));
    println!("batched vs solo max |Δlogit|: {da:.2e}, {db:.2e}");
    assert!(da < 1e-3 && db < 1e-3, "{da} {db}");

    // Drop the generated token and the prompt's last two, then evaluate them again.
    ca.truncate(a.len() - 2);
    assert_eq!(ca.len(), a.len() - 2);
    let again = m
        .model
        .forward(&mut [(&mut ca, &a[a.len() - 2..])])
        .unwrap();
    let d = max_diff(&again, &la);
    println!("after truncation max |Δlogit|: {d:.2e}");
    assert!(d < 1e-3, "{d}");
    assert!(!ca.is_empty());
    // Bad input is an error and leaves the cache alone.
    let e = m.model.forward(&mut [(&mut ca, &[1 << 30])]).unwrap_err();
    assert!(e.contains("out of range"), "{e}");
    assert_eq!(ca.len(), a.len());
}

/// A drafted step's rows (`forward_rows`: the logits of a segment's every token) are the rows
/// one-token steps give, bit for bit: what makes drafting leave greedy output unchanged.
#[test]
fn drafted_rows_equal_one_token_steps_bit_for_bit() {
    let mut m =
        runner_mlx::load(&model_dir(), runner_mlx::Compute::F32).expect("load the MLX checkpoint");
    let p = m
        .vocab
        .tokenize("def fibonacci(n):\n    if n < 2:", true, true)
        .unwrap();
    let v = m.vocab.n_vocab() as usize;
    // Greedy, one token a step.
    let mut c = m.model.new_cache();
    let mut row = m.model.forward(&mut [(&mut c, &p)]).unwrap();
    let (mut toks, mut rows) = (Vec::new(), Vec::new());
    for _ in 0..12 {
        let t = argmax(&row).unwrap();
        rows.push(row.clone());
        toks.push(t);
        row = m.model.forward(&mut [(&mut c, &[t])]).unwrap();
    }
    // The prompt's last token and the first 8 generated in one segment, beside a one-token
    // decode of another sequence: every row of the segment is the one-token step's.
    let (mut d, mut o) = (m.model.new_cache(), m.model.new_cache());
    m.model.forward(&mut [(&mut d, &p[..p.len() - 1])]).unwrap();
    m.model.forward(&mut [(&mut o, &p[..3])]).unwrap();
    let mut seg = vec![p[p.len() - 1]];
    seg.extend_from_slice(&toks[..8]);
    let got = m
        .model
        .forward_rows(&mut [(&mut d, &seg), (&mut o, &p[3..4])], &[seg.len(), 1])
        .unwrap();
    assert_eq!(got.len(), (seg.len() + 1) * v);
    for (i, want) in rows.iter().take(seg.len()).enumerate() {
        assert!(
            got[i * v..(i + 1) * v] == want[..],
            "row {i} differs by {}",
            max_diff(&got[i * v..(i + 1) * v], want)
        );
    }
    assert_eq!(d.len(), p.len() - 1 + seg.len());
    // A bad row count is refused before anything is evaluated.
    let e = m
        .model
        .forward_rows(&mut [(&mut d, &[toks[8]])], &[2])
        .unwrap_err();
    assert!(e.contains("row count"), "{e}");
    assert_eq!(d.len(), p.len() - 1 + seg.len());
}
