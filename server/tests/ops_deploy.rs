//! `scripts/deploy` end to end without systemd: `HERD_SERVICE_CMD` is a small stub that starts
//! and stops `<prefix>/current/herd serve` in the background with exactly the env file. Starting
//! from a build installed as `0.0.9-old`: a new build whose herd exits at start is rolled back
//! (the old server answers again); a service whose effective config differs from the env file
//! (the stub adds a variable) is rolled back; the real build then deploys, answers with its
//! commit and the env file's config digest, passes the smoke generate on SmolLM2, and the
//! previous build is archived beside the store.
//!
//! Needs `cargo build --workspace --bins`, `scripts/fetch-test-models`, curl and python3; a
//! missing prerequisite fails the test unless HERD_ALLOW_SKIP=1.

mod ops_support;
mod serve_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

const STUB: &str = r#"#!/bin/sh
# Test stand-in for systemctl: restart|start|stop UNIT.
set -eu
pidf="$STUB_DIR/pid"
alive() { [ -e "/proc/$1" ] && ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; }
stop() {
  [ -f "$pidf" ] || return 0
  pid="$(cat "$pidf")"
  kill -TERM "$pid" 2>/dev/null || :
  while alive "$pid"; do sleep 0.1; done
  rm -f "$pidf"
}
start() {
  echo "start $(readlink "$STUB_PREFIX/current")" >>"$STUB_DIR/calls"
  env -i PATH="$PATH" HOME="$STUB_HOME" ${STUB_EXTRA_ENV:-} sh -c 'set -a; . "$0"; set +a; exec "$1" serve' \
    "$STUB_ENV_FILE" "$STUB_PREFIX/current/herd" </dev/null >>"$STUB_DIR/log" 2>&1 &
  echo $! >"$pidf"
}
case "$1" in
  restart) stop; start ;;
  start) start ;;
  stop) stop ;;
  *) echo "stub: $1?" >&2; exit 2 ;;
esac
"#;

struct Rig {
    tmp: tempfile::TempDir,
    prefix: PathBuf,
    stub: PathBuf,
    env_file: PathBuf,
    state: PathBuf,
    base: String,
}

impl Rig {
    fn stub(&self, action: &str, extra_env: &str) {
        let ok = Command::new(&self.stub)
            .args([action, "herd.service"])
            .envs(self.stub_env(extra_env))
            .status()
            .unwrap()
            .success();
        assert!(ok, "stub {action}");
    }

    fn stub_env(&self, extra_env: &str) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("STUB_DIR", self.tmp.path().to_path_buf()),
            ("STUB_PREFIX", self.prefix.clone()),
            ("STUB_HOME", self.state.clone()),
            ("STUB_ENV_FILE", self.env_file.clone()),
            ("STUB_EXTRA_ENV", extra_env.into()),
        ]
    }

    fn deploy(&self, build: &Path, extra_env: &str) -> Output {
        let out = Command::new(repo().join("scripts/deploy"))
            .arg(build)
            .envs(self.stub_env(extra_env))
            .env("HERD_PREFIX", &self.prefix)
            .env("HERD_ENV_FILE", &self.env_file)
            .env("HERD_STATE_DIR", &self.state)
            .env("HERD_SERVICE_CMD", &self.stub)
            .env("HERD_READY_TIMEOUT", "30")
            .env("HERD_SMOKE_MODEL", "smol")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        eprintln!(
            "deploy {}:\n{}{}",
            build.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn current(&self) -> String {
        std::fs::read_link(self.prefix.join("current"))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// The executable of the server the stub runs now.
    fn serving_exe(&self) -> PathBuf {
        let pid = std::fs::read_to_string(self.tmp.path().join("pid")).unwrap();
        std::fs::read_link(format!("/proc/{}/exe", pid.trim())).unwrap()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = Command::new(&self.stub)
            .args(["stop", "herd.service"])
            .envs(self.stub_env(""))
            .status();
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_ready(base: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ops_support::get(&format!("{base}/readyz")).0 != 200 {
        assert!(std::time::Instant::now() < deadline, "{base} not ready");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn copy_build(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let ok = Command::new("sh")
        .arg("-c")
        .arg(r#"cp -P "$1"/herd "$1"/runner-llamacpp "$1"/*.so "$1"/*.so.* "$2"/"#)
        .args(["sh", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn deploy_rolls_back_failures_and_deploys_a_good_build() {
    let Some(runner) = native_runner() else {
        return;
    };
    let Some(model) = test_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let build = runner.parent().unwrap().to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("opt/herd");
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let port = free_port();
    let env_file = tmp.path().join("herd.env");
    std::fs::write(
        &env_file,
        format!(
            "OLLAMA_HOST=127.0.0.1:{port}\nOLLAMA_MODELS={}\nOLLAMA_KEEP_ALIVE=1m\n",
            ts.root().display()
        ),
    )
    .unwrap();
    let stub = tmp.path().join("stub-service");
    std::fs::write(&stub, STUB).unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rig = Rig {
        base: format!("http://127.0.0.1:{port}"),
        tmp,
        prefix,
        stub,
        env_file,
        state,
    };

    // The running "old" build: this build's files under another name.
    copy_build(&build, &rig.prefix.join("0.0.9-old"));
    std::os::unix::fs::symlink("0.0.9-old", rig.prefix.join("current")).unwrap();
    rig.stub("start", "");
    wait_ready(&rig.base);
    let old_exe = rig.serving_exe();
    assert!(
        old_exe.starts_with(rig.prefix.join("0.0.9-old")),
        "{old_exe:?}"
    );

    // 1. A build whose herd exits at start: rolled back, the old server answers again.
    let broken = rig.tmp.path().join("broken");
    copy_build(&build, &broken);
    std::fs::remove_file(broken.join("herd")).unwrap();
    std::fs::write(
        broken.join("herd"),
        "#!/bin/sh\n[ \"$*\" = \"archive --print-id\" ] && { echo 9.9.9-broken; exit 0; }\necho broken build >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(broken.join("herd"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = rig.deploy(&broken, "");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success());
    assert!(text.contains("did not become ready"), "{text}");
    assert!(text.contains("rolled back: 0.0.9-old answers"), "{text}");
    assert_eq!(rig.current(), "0.0.9-old");
    assert!(rig.serving_exe().starts_with(rig.prefix.join("0.0.9-old")));
    assert_eq!(
        ops_support::get(&format!("{}/api/version", rig.base)).0,
        200
    );
    let calls = std::fs::read_to_string(rig.tmp.path().join("calls")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["start 0.0.9-old", "start 9.9.9-broken", "start 0.0.9-old"]
    );

    // 2. A service that does not run with the env file's configuration: rolled back.
    let out = rig.deploy(&build, "OLLAMA_NUM_PARALLEL=3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success());
    assert!(text.contains("effective config sha256:"), "{text}");
    assert!(text.contains("is not the env file's sha256:"), "{text}");
    assert_eq!(rig.current(), "0.0.9-old");
    wait_ready(&rig.base);

    // 3. The real build: deployed, answering with its commit and the intended config.
    let out = rig.deploy(&build, "");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let id = String::from_utf8(
        Command::new(HERD)
            .args(["archive", "--print-id"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    assert!(text.contains(&format!("deployed {id}")), "{text}");
    assert_eq!(rig.current(), id);
    assert!(rig.serving_exe().starts_with(rig.prefix.join(&id)));
    let (status, version) = ops_support::get(&format!("{}/api/version", rig.base));
    assert_eq!(status, 200);
    assert!(
        id.ends_with(&version["git_commit"].as_str().unwrap()[..12]),
        "{version}"
    );
    assert!(
        id.starts_with(&format!("{}-", version["herd_version"].as_str().unwrap())),
        "{version}"
    );
    // The digest the server reports is the env file's, as the new herd computes it.
    let want = Command::new("sh")
        .arg("-c")
        .arg(r#"set -a; . "$0"; exec "$1" doctor --print-config-digest"#)
        .arg(&rig.env_file)
        .arg(rig.prefix.join(&id).join("herd"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", &rig.state)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&want.stdout).trim(),
        version["config_digest"].as_str().unwrap()
    );
    // The previous build was archived beside the store first.
    assert!(ts
        .dir
        .path()
        .join("binaries")
        .join(&id)
        .join("manifest.json")
        .exists());
    // Both builds stay in the prefix for the next rollback.
    assert!(rig.prefix.join("0.0.9-old/herd").exists());
}
