//! `scripts/install` staged into a temp root (`--root`: nothing touches the host's users or
//! services) from the build next to the test binaries: every file checked (mode, owner, content),
//! the unit verified by `systemd-analyze verify` (its ExecStart pointed at the staged binary; a
//! negative control proves the verifier's warnings are seen), the installed runner loads its
//! libraries from the prefix, the env file survives a reinstall, a differing build under the same
//! id is refused, `--uninstall` keeps the store and `--purge` removes it; the launchd plist is
//! parsed with python3's plistlib.
//!
//! Needs `cargo build --workspace --bins`, systemd-analyze and python3 (scripts/setup); a missing
//! prerequisite fails the test unless HERD_ALLOW_SKIP=1.

#[path = "prereq/mod.rs"]
mod prereq;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The directory cargo built herd, the runner and the engine libraries into.
fn build_dir() -> Option<PathBuf> {
    let dir = Path::new(HERD).parent().unwrap().to_path_buf();
    if !dir.join("runner-llamacpp").exists() {
        prereq::missing("runner-llamacpp not built (cargo build --workspace --bins)");
        return None;
    }
    Some(dir)
}

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        prereq::missing(format!("{tool} (scripts/setup)"));
    }
    ok
}

fn install(args: &[&str], home: &Path) -> Output {
    let out = Command::new(repo().join("scripts/install"))
        .args(args)
        .env("HOME", home)
        .env_remove("DESTDIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "install {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn build_id() -> String {
    let out = Command::new(HERD)
        .args(["archive", "--print-id"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `systemd-analyze verify` output (stdout + stderr) and status for a unit file.
fn verify(unit: &Path) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(unit)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn systemd_install_is_staged_checked_and_uninstalled() {
    let Some(build) = build_dir() else { return };
    if !have("systemd-analyze") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let from = build.to_str().unwrap();
    let out = install(
        &["--root", root.to_str().unwrap(), "--from", from],
        tmp.path(),
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    for would in [
        "would run: useradd --system --user-group --home-dir /var/lib/herd",
        "would run: chown herd:herd /var/lib/herd /var/lib/herd/models",
        "would run: chown root:herd /etc/herd/herd.env",
        "would run: systemctl daemon-reload",
        "would run: systemctl enable herd.service",
        "would run: systemctl restart herd.service",
    ] {
        assert!(log.contains(would), "missing {would:?} in:\n{log}");
    }

    let id = build_id();
    let prefix = root.join("opt/herd");
    assert_eq!(
        std::fs::read_link(prefix.join("current")).unwrap(),
        PathBuf::from(&id)
    );
    let version = prefix.join(&id);
    let uid = nix::unistd::getuid().as_raw();
    for exe in ["herd", "runner-llamacpp"] {
        assert_eq!(mode(&version.join(exe)), 0o755, "{exe}");
        assert_eq!(std::fs::metadata(version.join(exe)).unwrap().uid(), uid);
    }
    // Engine libraries: regular files 0644, sonames kept as the build's symlinks.
    let mut libs = 0;
    for e in std::fs::read_dir(&build).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.ends_with(".so") || name.contains(".so.")) || name.ends_with(".d") {
            continue;
        }
        libs += 1;
        let installed = version.join(&name);
        let src_meta = std::fs::symlink_metadata(e.path()).unwrap();
        if src_meta.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&installed).unwrap(),
                std::fs::read_link(e.path()).unwrap(),
                "{name}"
            );
        } else {
            assert_eq!(mode(&installed), 0o644, "{name}");
            assert_eq!(
                std::fs::read(&installed).unwrap(),
                std::fs::read(e.path()).unwrap()
            );
        }
    }
    assert!(libs >= 4, "engine libraries in {}", build.display());
    // The installed runner resolves its libraries inside the prefix (RUNPATH=$ORIGIN).
    let v = Command::new(prefix.join("current/runner-llamacpp"))
        .arg("--version")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(v.status.success(), "{v:?}");
    let v = Command::new(prefix.join("current/herd"))
        .args(["archive", "--print-id"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), id);

    // State, env file, unit.
    for d in ["var/lib/herd", "var/lib/herd/models"] {
        assert_eq!(mode(&root.join(d)), 0o750, "{d}");
    }
    let env_file = root.join("etc/herd/herd.env");
    assert_eq!(mode(&env_file), 0o640);
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(
        env.lines()
            .any(|l| l == "OLLAMA_MODELS=/var/lib/herd/models"),
        "{env}"
    );
    assert!(
        env.lines().any(|l| l == "OLLAMA_HOST=127.0.0.1:11434"),
        "{env}"
    );
    let unit_path = root.join("etc/systemd/system/herd.service");
    assert_eq!(mode(&unit_path), 0o644);
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert!(!unit.contains('@'), "unrendered placeholder:\n{unit}");
    for line in [
        "User=herd",
        "Group=herd",
        "EnvironmentFile=/etc/herd/herd.env",
        "ExecStart=/opt/herd/current/herd serve",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "ReadWritePaths=/var/lib/herd",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "LimitNOFILE=65536",
        "Restart=on-failure",
        "WantedBy=multi-user.target",
    ] {
        assert!(unit.lines().any(|l| l == line), "missing {line:?}:\n{unit}");
    }

    // systemd-analyze verify: ExecStart must exist, so point it at the staged binary.
    let staged = tmp.path().join("herd.service");
    let staged_exec = prefix.join("current/herd");
    std::fs::write(
        &staged,
        unit.replace("/opt/herd/current/herd", staged_exec.to_str().unwrap()),
    )
    .unwrap();
    let (ok, text) = verify(&staged);
    assert!(
        ok && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );
    // Negative control: an unknown key is reported (rc stays 0, so the output is what counts).
    let bad = tmp.path().join("bad.service");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&staged)
            .unwrap()
            .replace("PrivateTmp=yes", "PrivateTmp=yes\nPrivateTmpp=yes"),
    )
    .unwrap();
    let (_, text) = verify(&bad);
    assert!(text.contains("PrivateTmpp"), "verifier saw nothing: {text}");

    // Reinstall: the edited env file is kept.
    std::fs::write(&env_file, "OLLAMA_HOST=0.0.0.0:9\n").unwrap();
    let out = install(
        &[
            "--root",
            root.to_str().unwrap(),
            "--from",
            from,
            "--no-start",
        ],
        tmp.path(),
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(log.contains("kept /etc/herd/herd.env"), "{log}");
    assert!(
        !log.contains("systemctl restart"),
        "--no-start started: {log}"
    );
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "OLLAMA_HOST=0.0.0.0:9\n"
    );

    // A different build under the same id is refused, and `current` is untouched.
    std::fs::write(version.join("libextra.so"), b"not from this build").unwrap();
    let out = install(
        &["--root", root.to_str().unwrap(), "--from", from],
        tmp.path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("different files"));
    std::fs::remove_file(version.join("libextra.so")).unwrap();

    // Uninstall keeps the store; purge removes it.
    std::fs::write(root.join("var/lib/herd/models/keep-me"), b"model").unwrap();
    let out = install(
        &["--root", root.to_str().unwrap(), "--uninstall"],
        tmp.path(),
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        log.contains("would run: systemctl disable --now herd.service"),
        "{log}"
    );
    assert!(!prefix.exists());
    assert!(!unit_path.exists());
    assert!(!env_file.exists());
    assert!(root.join("var/lib/herd/models/keep-me").exists());
    assert!(!log.contains("userdel"), "{log}");
    let out = install(
        &["--root", root.to_str().unwrap(), "--uninstall", "--purge"],
        tmp.path(),
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("would run: userdel herd"));
    assert!(!root.join("var/lib/herd").exists());

    // Bad arguments are refused.
    let out = install(&["--purge"], tmp.path());
    assert!(!out.status.success());
    let out = install(&["--bogus"], tmp.path());
    assert!(!out.status.success());
}

#[test]
fn launchd_plist_and_wrapper() {
    let Some(build) = build_dir() else { return };
    if !have("python3") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let home = Path::new("/Users/someone");
    let out = install(
        &[
            "--launchd",
            "--root",
            root.to_str().unwrap(),
            "--from",
            build.to_str().unwrap(),
        ],
        home,
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        log.contains("would run: launchctl bootstrap gui/")
            && log.contains("/Users/someone/Library/LaunchAgents/sh.herd.plist"),
        "{log}"
    );
    let staged_home = root.join("Users/someone");
    let plist = staged_home.join("Library/LaunchAgents/sh.herd.plist");
    assert_eq!(mode(&plist), 0o644);
    let script = r#"
import json, plistlib, sys
with open(sys.argv[1], "rb") as f:
    print(json.dumps(plistlib.load(f)))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&plist)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["Label"], "sh.herd");
    assert_eq!(
        p["ProgramArguments"],
        serde_json::json!(["/bin/sh", "/Users/someone/.local/opt/herd/herd-launchd"])
    );
    assert_eq!(
        p["EnvironmentVariables"]["HERD_ENV_FILE"],
        "/Users/someone/.config/herd/herd.env"
    );
    assert_eq!(p["RunAtLoad"], true);
    assert_eq!(p["KeepAlive"]["SuccessfulExit"], false);
    assert_eq!(p["SoftResourceLimits"]["NumberOfFiles"], 65536);
    assert_eq!(
        p["StandardErrorPath"],
        "/Users/someone/Library/Logs/herd/herd.log"
    );

    let wrapper = staged_home.join(".local/opt/herd/herd-launchd");
    assert_eq!(mode(&wrapper), 0o755);
    let text = std::fs::read_to_string(&wrapper).unwrap();
    assert!(!text.contains('@'), "{text}");
    assert!(
        text.contains(r#"exec "/Users/someone/.local/opt/herd/current/herd" serve"#),
        "{text}"
    );
    let env = std::fs::read_to_string(staged_home.join(".config/herd/herd.env")).unwrap();
    assert!(
        env.lines()
            .any(|l| l == "OLLAMA_MODELS=/Users/someone/.ollama/models"),
        "{env}"
    );

    // The wrapper exports the env file to what it execs: run it with the exec target swapped
    // for `env`, against the staged env file.
    let probe = tmp.path().join("probe");
    std::fs::write(
        &probe,
        text.replace(
            r#"exec "/Users/someone/.local/opt/herd/current/herd" serve"#,
            "exec env",
        ),
    )
    .unwrap();
    let out = Command::new("/bin/sh")
        .arg(&probe)
        .env("HERD_ENV_FILE", staged_home.join(".config/herd/herd.env"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l == "OLLAMA_HOST=127.0.0.1:11434"));
}
