//! The client half of `herd create`: path resolution, directory file selection, request keys,
//! hashing and the Modelfile → CreateRequest conversion.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use server::cli::create::{expand_path, file_keys, files_for_model, hash_file, prepare};
use server::create::Message;
use server::modelfile::parse;
use server::store::Digest;

fn touch(dir: &Path, rel: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
    p
}

fn names(dir: &Path, files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .map(|f| f.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn expand_path_rules() {
    let dir = Path::new("/models/here");
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .dir;
    assert_eq!(
        expand_path("/abs/m.gguf", dir).unwrap(),
        PathBuf::from("/abs/m.gguf")
    );
    assert_eq!(expand_path("m.gguf", dir).unwrap(), dir.join("m.gguf"));
    assert_eq!(
        expand_path("../up/m.gguf", dir).unwrap(),
        dir.join("../up/m.gguf")
    );
    assert_eq!(expand_path("~", dir).unwrap(), home);
    assert_eq!(expand_path("~/m.gguf", dir).unwrap(), home.join("m.gguf"));
    let root_home = nix::unistd::User::from_name("root").unwrap().unwrap().dir;
    assert_eq!(expand_path("~root/x", dir).unwrap(), root_home.join("x"));
    assert_eq!(
        expand_path("~no_such_user_zz/x", dir)
            .unwrap_err()
            .to_string(),
        "failed to find user 'no_such_user_zz'"
    );
}

#[test]
fn directory_file_selection() {
    let d = tempfile::tempdir().unwrap();
    let st = d.path().join("st");
    for f in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
        "tokenizer.json",
        "sub/model-extra.safetensors",
        "sub/config.json",
        "tokenizer.model",
        "chat_template.jinja",
        "README.md",
        "other.gguf",
    ] {
        touch(&st, f, b"x");
    }
    assert_eq!(
        names(&st, &files_for_model(&st).unwrap()),
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "sub/model-extra.safetensors",
            "config.json",
            "tokenizer.json",
            "sub/config.json",
            "chat_template.jinja",
            "tokenizer.model"
        ]
    );
    let gg = d.path().join("gg");
    for f in ["b.gguf", "a.gguf", "config.json", "notes.txt"] {
        touch(&gg, f, b"x");
    }
    // GGUF directories contribute only their GGUFs (see module docs).
    assert_eq!(
        names(&gg, &files_for_model(&gg).unwrap()),
        ["a.gguf", "b.gguf"]
    );
    let empty = d.path().join("empty");
    touch(&empty, "notes.txt", b"x");
    assert_eq!(
        files_for_model(&empty).unwrap_err().to_string(),
        "no Modelfile or safetensors files found"
    );
}

#[test]
fn request_keys_are_relative_to_the_common_root() {
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(file_keys(&[p("/a/b/model.gguf")]), ["model.gguf"]);
    assert_eq!(
        file_keys(&[
            p("/m/model.safetensors"),
            p("/m/config.json"),
            p("/m/sub/config.json")
        ]),
        ["model.safetensors", "config.json", "sub/config.json"]
    );
    assert_eq!(
        file_keys(&[p("/x/one/a.gguf"), p("/x/two/b.gguf")]),
        ["one/a.gguf", "two/b.gguf"]
    );
    for k in file_keys(&[p("/x/one/a.gguf"), p("/y/b.gguf")]) {
        assert!(server::create::valid_rel_path(&k), "{k}");
    }
}

#[test]
fn hash_file_is_sha256_of_the_contents() {
    let d = tempfile::tempdir().unwrap();
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let f = touch(d.path(), "big.bin", &content);
    assert_eq!(
        hash_file(&f).unwrap(),
        (Digest::of_bytes(&content), content.len() as u64)
    );
}

#[test]
fn modelfile_becomes_a_create_request() {
    let d = tempfile::tempdir().unwrap();
    let model = touch(d.path(), "models/m.gguf", b"GGUF fake bytes");
    let lora = touch(d.path(), "lora.gguf", b"GGUF lora");
    let mf = parse(
        "FROM ./models/m.gguf\nADAPTER lora.gguf\nTEMPLATE \"\"\"{{ .Prompt }}\"\"\"\n\
         SYSTEM be brief\nPARAMETER temperature 0.5\nPARAMETER stop a\nPARAMETER stop b\n\
         PARAMETER mirostat 1\nMESSAGE user hi\nMESSAGE assistant hello\nLICENSE MIT\n\
         REQUIRES v0.14.1\nRENDERER r\nPARSER p\n",
    )
    .unwrap();
    let prep = prepare(&mf, d.path()).unwrap();
    let r = &prep.request;
    let md = Digest::of_bytes(b"GGUF fake bytes");
    let ld = Digest::of_bytes(b"GGUF lora");
    assert_eq!(r.from, "");
    assert_eq!(
        r.files.clone().unwrap(),
        [("m.gguf".to_string(), md.to_string())].into()
    );
    assert_eq!(
        r.adapters.clone().unwrap(),
        [("lora.gguf".to_string(), ld.to_string())].into()
    );
    assert_eq!(r.template, "{{ .Prompt }}");
    assert_eq!(r.system, "be brief");
    assert_eq!(
        serde_json::Value::Object(r.parameters.clone().unwrap()),
        json!({"temperature": 0.5, "stop": ["a", "b"]})
    );
    assert_eq!(
        r.messages,
        [
            Message {
                role: "user".into(),
                content: "hi".into(),
                ..Message::default()
            },
            Message {
                role: "assistant".into(),
                content: "hello".into(),
                ..Message::default()
            }
        ]
    );
    assert_eq!(r.license, Some(json!(["MIT"])));
    assert_eq!(
        (r.requires.as_str(), r.renderer.as_str(), r.parser.as_str()),
        ("0.14.1", "r", "p")
    );
    assert_eq!(prep.warnings, ["warning: parameter mirostat is deprecated"]);
    let uploads: Vec<_> = prep.uploads.iter().map(|u| (&u.path, &u.digest)).collect();
    assert_eq!(
        uploads,
        [
            (&fs::canonicalize(&model).unwrap(), &md),
            (&fs::canonicalize(&lora).unwrap(), &ld)
        ]
    );

    // A FROM that names no file is a model name.
    let named = prepare(&parse("FROM llama3.2:1b\nSYSTEM x\n").unwrap(), d.path()).unwrap();
    assert_eq!(named.request.from, "llama3.2:1b");
    assert!(named.request.files.is_none() && named.uploads.is_empty());

    for (text, err) in [
        (
            "FROM x\nPARAMETER num_ctx lots\n",
            "invalid int value [lots]",
        ),
        (
            "FROM x\nREQUIRES 1.x\n",
            "requires must be a valid semver (e.g. 0.14.0)",
        ),
        ("FROM x\nPARAMETER nope 1\n", "unknown parameter 'nope'"),
    ] {
        let e = prepare(&parse(text).unwrap(), d.path()).unwrap_err();
        assert_eq!(e.to_string(), err, "{text}");
    }
    let e = prepare(&parse("FROM x\nADAPTER missing.gguf\n").unwrap(), d.path()).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("missing.gguf: no such file or directory"),
        "{e}"
    );
}

#[test]
fn symlinks_out_of_a_model_directory_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let outside = touch(d.path(), "secret.gguf", b"GGUF");
    let dir = d.path().join("model");
    fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("m.gguf")).unwrap();
    let e = prepare(&parse("FROM ./model\n").unwrap(), d.path()).unwrap_err();
    assert!(e.to_string().starts_with("insecure path: "), "{e}");
}
