//! The runner-mlx binary. In this slice it offers only `convert-gguf GGUF DIR` (the test
//! model's converter); serving over the runner protocol comes with the engine thread.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(version, about = "herd's MLX runner")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert a llama-architecture GGUF into an MLX checkpoint directory (model.safetensors,
    /// config.json, tokenizer.json, tokenizer_config.json).
    ConvertGguf { gguf: PathBuf, dir: PathBuf },
    /// Quantize a safetensors checkpoint directory with MLX's affine quantization (herd create
    /// --experimental -q int4|int8) into the new directory OUT_DIR.
    Quantize {
        src: PathBuf,
        out: PathBuf,
        #[arg(long)]
        bits: u32,
        #[arg(long, default_value_t = 64)]
        group_size: u32,
    },
    /// Print the MLX version this binary runs against.
    Version,
}

fn main() {
    match Args::parse().cmd {
        Cmd::ConvertGguf { gguf, dir } => {
            if let Err(e) = runner_mlx::convert::run(&gguf, &dir) {
                eprintln!("runner-mlx: convert-gguf: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Quantize {
            src,
            out,
            bits,
            group_size,
        } => {
            if let Err(e) = runner_mlx::quantize::run(&src, &out, bits, group_size) {
                eprintln!("runner-mlx: quantize: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Version => println!(
            "{} (libmlx {})",
            runner_mlx::PIN,
            runner_mlx::ffi::version()
        ),
    }
}
