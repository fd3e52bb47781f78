//! Refused creates: every one is a 4xx with Ollama's text where Ollama has one, and leaves no
//! manifest behind. The malformed GGUFs are the gguf stream's CVE-shaped fuzz seeds.

mod create_util;

use server::create::CreateRequest;
use server::store::Digest;

use create_util::{files, store, tiny_gguf};

fn req(model: &str, key: &str, d: &Digest) -> CreateRequest {
    CreateRequest {
        model: model.into(),
        files: files(&[(key, d)]),
        ..CreateRequest::default()
    }
}

#[test]
fn non_gguf_is_refused_with_ollamas_text() {
    let t = store();
    for bytes in [
        b"PK\x03\x04 a zip file".as_slice(),
        b"GGML\x01\x00\x00\x00 legacy ggml",
        b"{\"not\": \"gguf\"}",
        b"GGU",
        b"",
    ] {
        let d = t.upload(bytes);
        for key in ["model.gguf", "model.bin"] {
            let err = t.create(&req("m", key, &d)).unwrap_err();
            assert_eq!(err.status(), 400, "{bytes:?} {key}");
            let want = if key == "model.gguf" {
                "supplied file was not in GGUF format"
            } else {
                // Without a .gguf name nothing identifies the file as a model at all.
                "unknown type"
            };
            assert_eq!(err.to_string(), want, "{bytes:?} {key}");
        }
    }
    assert!(t.store.list().unwrap().is_empty());
}

#[test]
fn cve_shaped_ggufs_are_400_and_create_nothing() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf_reader");
    let t = store();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("seed-valid") {
            continue;
        }
        n += 1;
        let d = t.upload(&std::fs::read(&path).unwrap());
        let before = t.blob_count();
        let err = t.create(&req("evil", "model.gguf", &d)).unwrap_err();
        assert_eq!(err.status(), 400, "{name}: {err}");
        assert!(t.read("evil").is_none(), "{name}");
        assert_eq!(
            t.blob_count(),
            before,
            "{name}: no layer or config blob written"
        );
    }
    assert!(n >= 8, "expected the CVE seeds in {}", dir.display());
}

#[test]
fn file_paths_must_be_relative() {
    let t = store();
    let d = t.upload(&tiny_gguf());
    for key in [
        "/etc/passwd",
        "../model.gguf",
        "a/../../model.gguf",
        "a/../model.gguf",
        "./model.gguf",
        "a//model.gguf",
        "model.gguf/",
        "..",
        "",
        "a\\..\\model.gguf",
        "model\0.gguf",
    ] {
        let err = t.create(&req("m", key, &d)).unwrap_err();
        assert_eq!(err.status(), 400, "{key:?}");
        assert_eq!(err.to_string(), "file path must be relative", "{key:?}");
    }
    // Adapters and draft files are held to the same rule.
    let mut r = req("m", "model.gguf", &d);
    r.adapters = files(&[("/abs/lora.gguf", &d)]);
    assert_eq!(
        t.create(&r).unwrap_err().to_string(),
        "file path must be relative"
    );
    let mut r = req("m", "model.gguf", &d);
    r.draft_files = files(&[("../draft.gguf", &d)]);
    assert_eq!(
        t.create(&r).unwrap_err().to_string(),
        "file path must be relative"
    );
    assert!(t.store.list().unwrap().is_empty());
    // Nested relative paths are fine.
    t.create(&req("m", "sub/dir/model.gguf", &d)).unwrap();
}

#[test]
fn request_level_errors() {
    let t = store();
    let d = t.upload(&tiny_gguf());
    let cases: Vec<(CreateRequest, u16, String)> = vec![
        (
            CreateRequest {
                model: "m".into(),
                ..CreateRequest::default()
            },
            400,
            "neither 'from' or 'files' was specified".into(),
        ),
        (
            req("bad name!", "m.gguf", &d),
            400,
            "invalid model name".into(),
        ),
        (req("", "m.gguf", &d), 400, "invalid model name".into()),
        (
            CreateRequest {
                model: "m".into(),
                from: "nosuch".into(),
                ..CreateRequest::default()
            },
            404,
            "model 'nosuch:latest' not found, pull it first".into(),
        ),
        (
            CreateRequest {
                model: "m".into(),
                files: Some(Default::default()),
                ..CreateRequest::default()
            },
            400,
            "no files provided to convert".into(),
        ),
        (
            CreateRequest {
                model: "m".into(),
                files: Some([("m.gguf".to_string(), "sha256:abc".to_string())].into()),
                ..CreateRequest::default()
            },
            400,
            "invalid digest format".into(),
        ),
        (
            CreateRequest {
                model: "m".into(),
                files: Some([("m.gguf".to_string(), String::new())].into()),
                ..CreateRequest::default()
            },
            400,
            "invalid digest format".into(),
        ),
        (
            CreateRequest {
                license: Some(serde_json::json!(["MIT", 3])),
                ..req("m", "m.gguf", &d)
            },
            400,
            "license must be a string or a list of strings".into(),
        ),
        (
            CreateRequest {
                template: "{{ if .System }}unclosed".into(),
                ..req("m", "m.gguf", &d)
            },
            400,
            format!(
                "template error: {}",
                server::prompt::Template::parse_go("{{ if .System }}unclosed").unwrap_err()
            ),
        ),
        (
            CreateRequest {
                files: files(&[("model.safetensors", &d)]),
                ..req("m", "m.gguf", &d)
            },
            400,
            // A safetensors upload is converted (crate::convert): without config.json it is refused.
            "config.json is missing from the checkpoint".into(),
        ),
        (
            CreateRequest {
                adapters: files(&[("a.gguf", &d), ("b.gguf", &d)]),
                ..req("m", "m.gguf", &d)
            },
            400,
            "only one adapter is currently supported".into(),
        ),
        (
            CreateRequest {
                draft_quantize: "q8_0".into(),
                ..req("m", "m.gguf", &d)
            },
            400,
            "--draft-quantize requires a DRAFT model".into(),
        ),
        (
            CreateRequest {
                draft_files: files(&[("d.gguf", &d)]),
                draft_quantize: "q3_k".into(),
                ..req("m", "m.gguf", &d)
            },
            400,
            "unsupported quantization type Q3_K - supported types are F32, F16, Q4_K_S, Q4_K_M, Q8_0"
                .into(),
        ),
    ];
    for (r, status, msg) in cases {
        let err = t.create(&r).unwrap_err();
        assert_eq!(
            (err.status().as_u16(), err.to_string()),
            (status, msg),
            "{r:?}"
        );
    }
    // A digest that is well-formed but was never uploaded.
    let missing = Digest::of_bytes(b"never uploaded");
    let err = t.create(&req("m", "m.gguf", &missing)).unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.to_string().contains("was not uploaded"), "{err}");
    assert!(t.store.list().unwrap().is_empty());
}
