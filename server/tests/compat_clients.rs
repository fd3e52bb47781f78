//! The official client libraries (ollama-python, openai-python, anthropic-python, the ollama
//! npm package) against the real `herd` binary and runner, via `scripts/test-clients`. The
//! script installs the pinned clients (cached); when it cannot (no network, no npm, no runner
//! binary) it fails, or with `HERD_ALLOW_SKIP=1` exits 77 and this test passes as skipped.

use std::path::Path;
use std::process::Command;

#[test]
fn official_clients_against_herd() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let status = Command::new(root.join("scripts/test-clients"))
        .env("HERD_BIN", env!("CARGO_BIN_EXE_herd"))
        .status()
        .expect("running scripts/test-clients");
    match status.code() {
        Some(0) => {}
        Some(77) => eprintln!(
            "official_clients_against_herd: SKIPPED in whole or in part (see scripts/test-clients above)"
        ),
        _ => panic!("scripts/test-clients failed: {status}"),
    }
}
