//! Conversion memory bench (run by scripts/bench.d/convert; ignored in the normal test run).
//! Two steps in two processes, so the generator's buffers never count against the converter:
//! `generate` writes a random llama-shaped checkpoint to `$HERD_BENCH_DIR/model`, `convert`
//! converts it and reports the process's peak RSS (VmHWM) against the bound
//! (1.2 × largest tensor + 256 MB). `HERD_BENCH_SIZE` picks the shape: `golden` (the golden
//! test's llama checkpoint) or `1g` (~1 GB, default).

mod convert_support;

use std::path::PathBuf;
use std::time::Instant;

use convert_support::{
    config, smollm_tokenizer, tensor_list, write_safetensors, Arch, Shape, TINY,
};
use server::convert::safetensors::Dtype;
use server::convert::{plan, write, Source};

const ONE_GB: Shape = Shape {
    hidden: 2048,
    ff: 5632,
    heads: 32,
    kv_heads: 4,
    head_dim: 64,
    layers: 8,
};

fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os("HERD_BENCH_DIR").expect("HERD_BENCH_DIR"))
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore]
fn generate() {
    let shape = match std::env::var("HERD_BENCH_SIZE").as_deref() {
        Ok("golden") => TINY,
        _ => ONE_GB,
    };
    let model = dir().join("model");
    std::fs::create_dir_all(&model).unwrap();
    let vocab = smollm_tokenizer(&model);
    let c = config(Arch::Llama, &shape, vocab, Dtype::BF16);
    std::fs::write(model.join("config.json"), c.to_string()).unwrap();
    write_safetensors(
        &model.join("model.safetensors"),
        &tensor_list(Arch::Llama, &shape, vocab),
        Dtype::BF16,
        1,
    );
}

#[test]
#[ignore]
fn convert() {
    let model = dir().join("model");
    let before = vm_hwm_kib();
    let started = Instant::now();
    let p = plan(&Source::from_dir(&model).unwrap(), "bench").unwrap();
    let out = dir().join("out.gguf");
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&out).unwrap());
    let done = write(&p, &mut f).unwrap();
    drop(f);
    let secs = started.elapsed().as_secs_f64();
    let hwm = vm_hwm_kib() * 1024;
    let input: u64 = std::fs::metadata(model.join("model.safetensors"))
        .unwrap()
        .len();
    let bound = done.largest_tensor as f64 * 1.2 + 256.0 * 1e6;
    let mb = |b: f64| b / 1e6;
    println!(
        "checkpoint: {:.0} MB bf16, {} tensors, largest tensor {:.1} MB",
        mb(input as f64),
        done.tensors,
        mb(done.largest_tensor as f64)
    );
    println!(
        "output: {:.0} MB F16 GGUF in {secs:.1} s ({:.0} MB/s of input)",
        mb(done.bytes as f64),
        mb(input as f64) / secs
    );
    println!("peak RSS: {:.1} MB (process before converting: {:.1} MB); bound 1.2 x largest + 256 MB = {:.0} MB", mb(hwm as f64), mb(before as f64 * 1024.0), mb(bound));
    assert!((hwm as f64) <= bound, "peak RSS over the bound");
    std::fs::remove_file(out).unwrap();
}
