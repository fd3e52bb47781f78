//! `herd stop|rm|cp|pull|push` against a recording stand-in server: the requests each sends
//! and what it prints, as Ollama's cmd/cmd.go handlers (StopHandler, DeleteHandler,
//! CopyHandler, PullHandler, PushHandler) do.

mod cli_support;

use cli_support::{ndjson, Recorder, Seen};
use serde_json::{json, Value};

fn not_found(model: &str) -> (u16, String) {
    (
        404,
        json!({"error": format!("model '{model}' not found")}).to_string(),
    )
}

/// Knows `local` and `cloud` (a stub of a model on another server).
fn models() -> Recorder {
    Recorder::start(|req: &Seen| {
        let model = req.body["model"].as_str().unwrap_or_default().to_owned();
        match (req.path.as_str(), model.as_str()) {
            ("/api/show", "local") => (200, json!({"capabilities": ["completion"]}).to_string()),
            ("/api/show", "cloud") => (
                200,
                json!({"remote_host": "https://ollama.com:443", "remote_model": "gpt-oss:20b"})
                    .to_string(),
            ),
            ("/api/generate", "local") => (
                200,
                json!({"done": true, "done_reason": "unload"}).to_string(),
            ),
            ("/api/delete", "local" | "cloud") => (200, String::new()),
            ("/api/copy", _) => (200, String::new()),
            _ => not_found(&model),
        }
    })
}

fn requests(seen: &[Seen]) -> Vec<(String, Value)> {
    seen.iter()
        .map(|s| (s.path.clone(), s.body.clone()))
        .collect()
}

#[test]
fn stop_describes_then_unloads() {
    let s = models();
    let (code, out, err) = s.herd(&["stop", "local"], "");
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert_eq!(
        requests(&s.seen()),
        [
            ("/api/show".into(), json!({"model": "local"})),
            (
                "/api/generate".into(),
                json!({"model": "local", "keep_alive": "0s"})
            ),
        ]
    );
    // A model on another server is not unloaded from here (Ollama's loadOrUnloadModel).
    let (code, _, err) = s.herd(&["stop", "cloud"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(s.seen().last().unwrap().path, "/api/show");
    let (code, _, err) = s.herd(&["stop", "ghost"], "");
    assert_eq!(code, 1);
    assert_eq!(err, "Error: couldn't find model \"ghost\" to stop\n");
}

#[test]
fn rm_unloads_then_deletes_each() {
    let s = models();
    let (code, out, err) = s.herd(&["rm", "local", "cloud"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "deleted 'local'\ndeleted 'cloud'\n");
    assert_eq!(err, "", "no warning for a remote stub");
    let paths: Vec<String> = s.seen().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        [
            "/api/show",
            "/api/generate",
            "/api/delete",
            "/api/show",
            "/api/delete"
        ]
    );
    assert_eq!(s.seen()[2].body, json!({"model": "local"}));
    // An unknown model: no warning for the unload, the delete's error ends the run.
    let (code, out, err) = s.herd(&["rm", "ghost"], "");
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(err, "Error: model 'ghost' not found\n");
}

#[test]
fn cp_copies() {
    let s = models();
    let (code, out, err) = s.herd(&["cp", "local", "mine"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "copied 'local' to 'mine'\n");
    assert_eq!(
        requests(&s.seen()),
        [(
            "/api/copy".into(),
            json!({"source": "local", "destination": "mine"})
        )]
    );
}

fn layer(status: &str, completed: u64) -> Value {
    let digest = format!("sha256:0123456789ab{}", "c".repeat(52));
    json!({"status": status, "digest": digest, "total": 1000, "completed": completed})
}

#[test]
fn pull_and_push_progress() {
    let s = Recorder::start(|req: &Seen| match req.path.as_str() {
        "/api/pull" => (
            200,
            ndjson(&[
                json!({"status": "pulling manifest"}),
                layer("pulling 0123456789ab", 0),
                layer("pulling 0123456789ab", 1000),
                json!({"status": "verifying sha256 digest"}),
                json!({"status": "success"}),
            ]),
        ),
        "/api/push" if req.body["model"] == "localhost:5000/me/m" => (
            200,
            ndjson(&[
                json!({"status": "retrieving manifest"}),
                layer("pushing 0123456789ab", 0),
                layer("pushing 0123456789ab", 1000),
                json!({"status": "pushing manifest"}),
                json!({"status": "success"}),
            ]),
        ),
        "/api/push" => (
            200,
            ndjson(&[
                json!({"status": "retrieving manifest"}),
                json!({"error": "unauthorized: authentication required"}),
            ]),
        ),
        _ => (404, "{}".into()),
    });
    // Not a terminal: each status once, each layer once done; the pulled layer named from its
    // digest, with a colon; no 0% line.
    let (code, out, err) = s.herd(&["pull", "m"], "");
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert_eq!(lines[0], "pulling manifest");
    assert!(
        lines[1].starts_with("pulling 0123456789ab: 100% ▕"),
        "{err}"
    );
    assert!(lines[1].ends_with("▏   1 KB"), "{err}");
    assert_eq!(lines[2..], ["verifying sha256 digest", "success"]);

    // A pushed layer shows the server's status as it is (no colon); the end says where the
    // model is.
    let (code, out, err) = s.herd(&["push", "localhost:5000/me/m"], "");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("\npushing 0123456789ab 100% ▕"), "{err}");
    assert_eq!(
        out,
        "\nYou can find your model at:\n\n\tlocalhost:5000/me/m:latest\n"
    );
    // A registry's refusal, in Ollama's words.
    let (code, out, err) = s.herd(&["push", "me/m"], "");
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.ends_with("Error: you are not authorized to push to this namespace, create the model under a namespace you own\n"),
        "{err}"
    );
}
