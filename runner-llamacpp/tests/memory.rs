//! The runner's `/info` memory report on the real SmolLM2-135M: per device, weights from
//! llama.cpp's own buffers, a KV cache that grows exactly with the context, compute buffers,
//! and nothing on an accelerator in a CPU-only build.

mod common;

use common::*;
use hyper::StatusCode;
use runner_protocol::{DeviceKind, Info};

async fn info(ctx: &str, parallel: &str) -> Info {
    let smol = gemma().with_file_name("SmolLM2-135M-Instruct.Q4_1.gguf");
    let r = Runner::spawn(&smol, &["--ctx-size", ctx, "--parallel", parallel]);
    r.wait_ready().await;
    let (st, b) = call(&r.socket, "GET", "/info", None).await;
    assert_eq!(st, StatusCode::OK);
    serde_json::from_slice(&b).unwrap()
}

#[tokio::test]
async fn info_reports_weights_kv_and_compute_per_device() {
    let _g = serial().await;
    let file = std::fs::metadata(gemma().with_file_name("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .unwrap()
        .len();
    let small = info("512", "1").await;
    let big = info("1024", "1").await;
    let two = info("512", "2").await;
    for i in [&small, &big, &two] {
        let host = &i.devices[0];
        assert_eq!(
            host.kind,
            DeviceKind::Cpu,
            "host RAM first: {:?}",
            i.devices
        );
        assert!(
            host.total > 0 && host.free > 0 && host.free <= host.total,
            "{host:?}"
        );
        // Weights: the tensors of the file (its header and metadata are not tensors).
        assert!(
            host.weights <= file && host.weights > file * 9 / 10,
            "weights {} vs file {file}",
            host.weights
        );
        assert!(
            host.compute > 0,
            "compute buffers are reserved at load: {host:?}"
        );
        let held: u64 = i.devices.iter().map(|d| d.held()).sum();
        assert_eq!(i.memory_bytes, held);
        assert!(
            i.memory_bytes > file,
            "size includes the KV cache: {}",
            i.memory_bytes
        );
        if cfg!(not(feature = "cuda")) && cfg!(not(feature = "metal")) {
            assert_eq!(
                i.memory_device_bytes, 0,
                "a CPU build holds no VRAM: {:?}",
                i.devices
            );
        }
    }
    // SmolLM2: 30 layers × (3 KV heads × 64) × (K + V) × f16 = 23040 bytes per token.
    let per_token = 30 * 192 * 2 * 2;
    let kv = |i: &Info| i.devices[0].kv_cache;
    assert!(kv(&small) >= 512 * per_token, "kv {}", kv(&small));
    assert_eq!(
        kv(&big) - kv(&small),
        512 * per_token,
        "512 more cells of KV"
    );
    // Two slots of 512: the same 1024 cells, plus one more row of logits output.
    assert!(kv(&two) >= kv(&big), "{} vs {}", kv(&two), kv(&big));
}

#[test]
fn devices_subcommand_lists_host_ram_first() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runner-llamacpp"))
        .arg("devices")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<runner_protocol::DeviceMemory> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0].kind, DeviceKind::Cpu, "{list:?}");
    assert!(list[0].total > 0, "{list:?}");
    assert!(
        list.iter().all(|d| d.held() == 0),
        "nothing loaded: {list:?}"
    );
    if cfg!(not(feature = "cuda")) && cfg!(not(feature = "metal")) {
        assert_eq!(list.len(), 1, "a CPU build has no GPU device: {list:?}");
    }
}
