//! The fake runner's devices: what `/info` (and the `devices` subcommand the server runs at
//! startup) reports. Host RAM always; then either one fake GPU `FAKE0` holding `--vram` bytes,
//! or, with `HERD_RUNNER_FAKE_GPUS=FREE[,FREE…]` (bytes; the server passes `HERD_RUNNER_*`
//! variables through to runners), fake GPUs `FAKE0`, `FAKE1`, … of [`TOTAL`] bytes each with
//! that much free before this runner loads. The `--vram` bytes then go where llama.cpp would put
//! them: all on `--main-gpu`, else split evenly over the GPUs; each GPU's reported `free` is its
//! scripted free memory less what this runner holds there (the fake knows no other runner).

use runner_protocol::{DeviceKind, DeviceMemory};

/// The environment variable that scripts the GPUs.
pub const ENV: &str = "HERD_RUNNER_FAKE_GPUS";
/// Total memory of each scripted GPU.
pub const TOTAL: u64 = 16 << 30;
const GIB: u64 = 1 << 30;

/// `HERD_RUNNER_FAKE_GPUS` as free bytes per GPU; `None` when unset.
pub fn from_env() -> Result<Option<Vec<u64>>, String> {
    match std::env::var(ENV) {
        Ok(v) => parse(&v).map(Some),
        Err(_) => Ok(None),
    }
}

fn parse(v: &str) -> Result<Vec<u64>, String> {
    v.split(',')
        .map(|f| match f.trim().parse::<u64>() {
            Ok(n) if n <= TOTAL => Ok(n),
            _ => Err(format!("{ENV}: {f:?} is not a byte count up to {TOTAL}")),
        })
        .collect()
}

/// Every device with what this runner holds: `memory` bytes in all, `vram` of them on GPUs.
pub fn report(
    scripted: Option<&[u64]>,
    memory: u64,
    vram: u64,
    main_gpu: Option<u32>,
) -> Vec<DeviceMemory> {
    let vram = vram.min(memory);
    let mut devices = vec![DeviceMemory {
        name: "CPU".into(),
        kind: DeviceKind::Cpu,
        free: 8 * GIB,
        total: 16 * GIB,
        weights: memory - vram,
        ..DeviceMemory::default()
    }];
    let gpu = |i: usize, free: u64, total: u64, held: u64| DeviceMemory {
        name: format!("FAKE{i}"),
        description: "fake GPU".into(),
        kind: DeviceKind::Gpu,
        free: free.saturating_sub(held),
        total,
        weights: held,
        ..DeviceMemory::default()
    };
    match scripted {
        None if vram > 0 => devices.push(gpu(0, 8 * GIB, 8 * GIB, vram)),
        None => {}
        Some(free) => {
            let held = spread(vram, free.len(), main_gpu);
            devices.extend(
                free.iter()
                    .zip(held)
                    .enumerate()
                    .map(|(i, (&f, h))| gpu(i, f, TOTAL, h)),
            );
        }
    }
    devices
}

/// `vram` bytes over `n` GPUs: all on `main_gpu`, else evenly (the remainder on the first).
fn spread(vram: u64, n: usize, main_gpu: Option<u32>) -> Vec<u64> {
    let mut held = vec![0; n];
    if n == 0 {
        return held;
    }
    match main_gpu {
        Some(g) => {
            if let Some(h) = held.get_mut(g as usize) {
                *h = vram;
            }
        }
        None => {
            let each = vram / n as u64;
            held.iter_mut().for_each(|h| *h = each);
            held[0] += vram - each * n as u64;
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_gpus_table() {
        assert_eq!(parse("100, 200"), Ok(vec![100, 200]));
        assert!(parse("1,x").is_err());
        assert!(parse(&format!("{}", TOTAL + 1)).is_err());
        // (main_gpu) → held on FAKE0, FAKE1
        for (main_gpu, want) in [(None, [51, 50]), (Some(1), [0, 101]), (Some(0), [101, 0])] {
            let r = report(Some(&[1000, 2000]), 300, 101, main_gpu);
            let held: Vec<u64> = r[1..].iter().map(|d| d.weights).collect();
            assert_eq!(held, want, "{main_gpu:?}");
            assert_eq!(r[1].free, 1000 - want[0]);
            assert_eq!(r[2].free, 2000 - want[1]);
            assert_eq!(r[0].weights, 300 - 101, "the rest is host RAM");
        }
        // Without the variable: one FAKE0 only when something is on it.
        assert_eq!(report(None, 300, 0, None).len(), 1);
        let one = report(None, 300, 100, Some(3));
        assert_eq!((one[1].name.as_str(), one[1].weights), ("FAKE0", 100));
    }
}
