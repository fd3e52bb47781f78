//! `runner-llamacpp rpc-server --port P [--threads N]`: serves this host's devices with ggml's RPC
//! server on `127.0.0.1:P` for `herd worker`, which starts one per authenticated tunnel
//! connection and pipes that connection to it (server/src/worker). Never reachable from the
//! network: the address is loopback only, and herd's worker is the only client it expects.
//!
//! Contract with the worker: the process serves until its stdin reaches EOF (the worker holds
//! the pipe for the connection's life, so a worker that dies takes its servers with it) or it is
//! killed. stdout/stderr carry ggml's own messages ("Accepted client connection", …).

use crate::ffi;
use clap::Parser;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(
    name = "runner-llamacpp rpc-server",
    about = "Serve this host's devices over ggml RPC on a loopback port (for herd worker)"
)]
pub struct RpcServerArgs {
    /// Loopback port to listen on (127.0.0.1 only).
    #[arg(long)]
    pub port: u16,
    /// CPU threads for the CPU device; 0 = one per available CPU.
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
}

/// Runs the subcommand (`args` starts at the subcommand name); returns the exit code.
pub fn main(args: impl Iterator<Item = std::ffi::OsString>) -> i32 {
    let a = match RpcServerArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    if a.port == 0 {
        eprintln!("runner-llamacpp rpc-server: --port must be a fixed port");
        return 2;
    }
    let lib_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    if ffi::init_backends(&lib_dir, ffi::LogLevel::Warn) == 0 {
        eprintln!(
            "runner-llamacpp rpc-server: no ggml backend module found in {}",
            lib_dir.display()
        );
        return 1;
    }
    std::thread::spawn(|| {
        // EOF (or an error) on stdin: the worker is gone or done with this connection.
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    let threads = match a.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    };
    let (ma, mi, pa) = ffi::rpc::PROTO_VERSION;
    eprintln!(
        "runner-llamacpp rpc-server: ggml RPC v{ma}.{mi}.{pa} on 127.0.0.1:{}",
        a.port
    );
    let why = ffi::rpc::serve(&format!("127.0.0.1:{}", a.port), threads);
    eprintln!("runner-llamacpp rpc-server: {why}");
    1
}
