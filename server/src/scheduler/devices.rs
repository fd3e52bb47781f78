//! Device discovery at startup: `<runner> devices` prints the GPUs (and host RAM) ggml sees, as
//! the runners will see them (same binary, same allow-listed environment). The default context
//! tier, the GPU memory budget and `OLLAMA_MAX_LOADED_MODELS`' default come from it before any
//! model loads. A runner without the subcommand (the fake runner, runner-mlx) or one that fails
//! yields no devices: the server then runs with the CPU-only defaults until a loaded runner
//! reports its devices in `/info`.

use runner_protocol::{DeviceKind, DeviceMemory};
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `<runner> devices` with `env` (only), waiting at most `timeout`.
pub fn discover(
    runner: &Path,
    env: &[(OsString, OsString)],
    timeout: Duration,
) -> Vec<DeviceMemory> {
    let child = Command::new(runner)
        .arg("devices")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Vec::new();
    };
    let end = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut out = String::new();
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_string(&mut out);
    }
    match status {
        Some(s) if s.success() => parse(&out),
        _ => Vec::new(),
    }
}

/// The JSON line `devices` prints; anything else is no devices.
pub fn parse(out: &str) -> Vec<DeviceMemory> {
    serde_json::from_str(out.trim()).unwrap_or_default()
}

/// Total memory of each non-CPU device.
pub fn gpu_totals(devices: &[DeviceMemory]) -> Vec<u64> {
    devices
        .iter()
        .filter(|d| d.kind != DeviceKind::Cpu)
        .map(|d| d.total)
        .collect()
}

/// Total memory of each CUDA GPU (ggml names them `CUDA0`, `CUDA1`, …).
pub fn cuda_totals(devices: &[DeviceMemory]) -> Vec<u64> {
    devices
        .iter()
        .filter(|d| d.kind != DeviceKind::Cpu && d.name.starts_with("CUDA"))
        .map(|d| d.total)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let two = r#"[{"name":"CPU","kind":"cpu","free":1,"total":2},
                      {"name":"CUDA0","description":"NVIDIA H200","kind":"gpu","free":5,"total":150}]"#;
        let cases: [(&str, Vec<u64>); 4] = [
            (two, vec![150]),
            (
                r#"[{"name":"CPU","kind":"cpu","free":1,"total":2}]"#,
                vec![],
            ),
            ("usage: fake-runner --socket PATH", vec![]),
            ("", vec![]),
        ];
        for (out, want) in cases {
            assert_eq!(gpu_totals(&parse(out)), want, "{out}");
        }
        let mixed = parse(
            r#"[{"name":"CPU","kind":"cpu","free":1,"total":2},
                {"name":"Metal","kind":"gpu","free":3,"total":40},
                {"name":"CUDA1","kind":"gpu","free":5,"total":80}]"#,
        );
        assert_eq!(cuda_totals(&mixed), vec![80]);
        assert_eq!(gpu_totals(&mixed), vec![40, 80]);
    }

    #[test]
    fn a_missing_or_failing_runner_is_no_devices() {
        let none = discover(
            Path::new("/nonexistent/runner"),
            &[],
            Duration::from_secs(1),
        );
        assert!(none.is_empty());
        // `false devices` exits 1 without output.
        let failed = discover(Path::new("/bin/false"), &[], Duration::from_secs(5));
        assert!(failed.is_empty());
    }
}
