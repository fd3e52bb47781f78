//! The runner's memory report for `/info`: ggml's devices joined with llama.cpp's per-buffer-type
//! accounting, as one [`DeviceMemory`] per device (host RAM first). Pure functions over what
//! `ffi::devices` read, so the attribution rules are table-tested without a model.
//!
//! Rules: host buffers (mmapped weights, pinned staging, the CPU KV cache) belong to the host
//! RAM entry; every other buffer to the device that owns its buffer type. `memory_bytes` is the
//! sum of everything, `memory_device_bytes` the part on non-CPU devices (Ollama's `size` and
//! `size_vram`), except that with every layer offloaded the host part (input embeddings, pinned
//! staging and output buffers) counts as device memory too, as Ollama's `VRAMSize` does "to
//! represent complete offloading" (so `ollama ps` says `100% GPU`).

use crate::ffi::{BufferMemory, Device};
use runner_protocol::{DeviceKind, DeviceMemory};

fn entry(d: &Device) -> DeviceMemory {
    DeviceMemory {
        name: d.name.clone(),
        description: d.description.clone(),
        kind: d.kind,
        free: d.free,
        total: d.total,
        ..DeviceMemory::default()
    }
}

/// One entry per device, host RAM first, with the buffers of every loaded context added in.
pub fn report(devices: &[Device], buffers: &[BufferMemory]) -> Vec<DeviceMemory> {
    let mut out: Vec<DeviceMemory> = Vec::new();
    match devices.iter().find(|d| d.kind == DeviceKind::Cpu) {
        Some(cpu) => out.push(entry(cpu)),
        None => out.push(DeviceMemory {
            name: "CPU".into(),
            ..DeviceMemory::default()
        }),
    }
    out.extend(
        devices
            .iter()
            .filter(|d| d.kind != DeviceKind::Cpu)
            .map(entry),
    );
    for b in buffers {
        let i = match &b.device {
            None => 0,
            Some(name) => match out.iter().position(|d| &d.name == name) {
                // A CPU-kind device other than the first is still host RAM.
                Some(i) if out[i].kind == DeviceKind::Cpu => 0,
                Some(i) => i,
                None => {
                    // Not in ggml's registry (cannot happen with one ggml): still not host RAM.
                    out.push(DeviceMemory {
                        name: name.clone(),
                        kind: DeviceKind::Gpu,
                        ..DeviceMemory::default()
                    });
                    out.len() - 1
                }
            },
        };
        out[i].weights += b.weights;
        out[i].kv_cache += b.kv_cache;
        out[i].compute += b.compute;
    }
    out
}

/// `runner-llamacpp devices`: loads the backends beside the executable and prints every
/// device's memory (nothing held) as a JSON array of [`DeviceMemory`] on stdout. Exit status 1
/// when no backend loaded.
pub fn devices_main() -> i32 {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| ".".into());
    if crate::ffi::init_backends(&dir, crate::ffi::LogLevel::Warn) == 0 {
        eprintln!(
            "runner-llamacpp: no ggml backend loaded from {}",
            dir.display()
        );
        return 1;
    }
    let list = report(&crate::ffi::devices(), &[]);
    println!(
        "{}",
        serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
    );
    0
}

/// (everything held, of which on accelerators). `all_layers_offloaded`: every layer went to a
/// GPU, so what stays on the host is counted as on the device (when a GPU holds anything).
pub fn totals(report: &[DeviceMemory], all_layers_offloaded: bool) -> (u64, u64) {
    let all = report.iter().map(DeviceMemory::held).sum();
    let device: u64 = report
        .iter()
        .filter(|d| d.kind != DeviceKind::Cpu)
        .map(DeviceMemory::held)
        .sum();
    if all_layers_offloaded && device > 0 {
        (all, all)
    } else {
        (all, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, kind: DeviceKind) -> Device {
        Device {
            name: name.into(),
            description: format!("{name} device"),
            kind,
            free: 1000,
            total: 2000,
        }
    }

    fn buf(device: Option<&str>, w: u64, kv: u64, c: u64) -> BufferMemory {
        BufferMemory {
            device: device.map(str::to_owned),
            weights: w,
            kv_cache: kv,
            compute: c,
        }
    }

    #[test]
    fn attribution_table() {
        use DeviceKind::*;
        let cpu_only = [dev("CPU", Cpu)];
        let one_gpu = [dev("CPU", Cpu), dev("CUDA0", Gpu)];
        let two_gpu = [dev("CUDA0", Gpu), dev("CUDA1", Gpu), dev("CPU", Cpu)];
        // (name, devices, buffers, [(device, weights, kv, compute)], (all, device))
        type Row<'a> = (
            &'static str,
            &'a [Device],
            Vec<BufferMemory>,
            Vec<(&'static str, u64, u64, u64)>,
            (u64, u64),
        );
        #[rustfmt::skip]
        let cases: Vec<Row<'_>> = vec![
            ("cpu only: everything is host RAM", &cpu_only,
                vec![buf(None, 100, 20, 5)], vec![("CPU", 100, 20, 5)], (125, 0)),
            ("full offload: only mmap remainder on host", &one_gpu,
                vec![buf(None, 10, 0, 3), buf(Some("CUDA0"), 90, 20, 7)],
                vec![("CPU", 10, 0, 3), ("CUDA0", 90, 20, 7)], (130, 117)),
            ("pinned host buffer named after a GPU counts as host", &one_gpu,
                vec![buf(None, 0, 0, 4), buf(Some("CUDA0"), 50, 0, 0)],
                vec![("CPU", 0, 0, 4), ("CUDA0", 50, 0, 0)], (54, 50)),
            ("split over two GPUs, host listed last by ggml", &two_gpu,
                vec![buf(Some("CUDA0"), 40, 8, 2), buf(Some("CUDA1"), 60, 12, 2), buf(None, 1, 0, 1)],
                vec![("CPU", 1, 0, 1), ("CUDA0", 40, 8, 2), ("CUDA1", 60, 12, 2)], (126, 124)),
            ("a CPU-kind device name is host RAM", &cpu_only,
                vec![buf(Some("CPU"), 7, 0, 0)], vec![("CPU", 7, 0, 0)], (7, 0)),
            ("two contexts (a draft) add up", &one_gpu,
                vec![buf(Some("CUDA0"), 90, 20, 7), buf(Some("CUDA0"), 9, 2, 1)],
                vec![("CPU", 0, 0, 0), ("CUDA0", 99, 22, 8)], (129, 129)),
            ("nothing loaded: devices still listed", &one_gpu,
                vec![], vec![("CPU", 0, 0, 0), ("CUDA0", 0, 0, 0)], (0, 0)),
        ];
        for (name, devices, buffers, want, want_totals) in cases {
            let r = report(devices, &buffers);
            let got: Vec<_> = r
                .iter()
                .map(|d| (d.name.as_str(), d.weights, d.kv_cache, d.compute))
                .collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(totals(&r, false), want_totals, "{name}");
            // Complete offload: the host part counts as VRAM once a GPU holds anything.
            let (all, device) = want_totals;
            let full = if device > 0 { (all, all) } else { (all, 0) };
            assert_eq!(totals(&r, true), full, "{name}, all layers offloaded");
            assert!(
                r.iter().all(|d| d.total == 2000 && d.free == 1000),
                "{name}"
            );
        }
    }
}
