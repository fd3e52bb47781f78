//! Store-level tests: listing, byte-exact writes, case-insensitive overwrite, delete refcounting,
//! prune, corrupt manifests, traversal rejection, and resolve determinism at scale.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::manifest::{MEDIA_TYPE_CONFIG, MEDIA_TYPE_MODEL, MEDIA_TYPE_TEMPLATE};
use super::*;

fn n(s: &str) -> ModelName {
    ModelName::parse(s).unwrap()
}

/// A temp dir holding the store at `<tmp>/models` plus a sentinel file beside it.
fn setup() -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("sentinel"), b"outside").unwrap();
    let s = Store::open(t.path().join("models")).unwrap();
    (t, s)
}

/// Every file under `dir` (relative path -> bytes); directories listed with empty content
/// marked by a trailing '/'.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(base).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &e.path(), out);
            } else {
                out.insert(rel, std::fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Stores a config + model + template layer and writes the manifest; returns it.
fn make_model(s: &Store, name: &str, model_bytes: &[u8]) -> Manifest {
    let cfg = s
        .blobs()
        .write_bytes(b"{\"model_format\":\"gguf\"}")
        .unwrap();
    let model = s.blobs().write_bytes(model_bytes).unwrap();
    let tmpl = s.blobs().write_bytes(b"{{ .Prompt }}").unwrap();
    let m = Manifest::new(
        Layer::new(MEDIA_TYPE_CONFIG, cfg, 23),
        vec![
            Layer::new(MEDIA_TYPE_MODEL, model, model_bytes.len() as u64),
            Layer::new(MEDIA_TYPE_TEMPLATE, tmpl, 13),
        ],
    );
    s.write_manifest(&n(name), &m).unwrap();
    m
}

fn set_mtime(p: &Path, t: SystemTime) {
    std::fs::File::open(p).unwrap().set_modified(t).unwrap();
}

fn hours_ago(h: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(h * 3600)
}

#[test]
fn open_creates_layout_and_fixes_legacy_blobs() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("models");
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    let d = Digest::of_bytes(b"old");
    std::fs::write(root.join(format!("blobs/sha256:{}", d.hex())), b"old").unwrap();
    let s = Store::open(&root).unwrap();
    assert!(root.join("manifests").is_dir());
    assert!(s.blobs().exists(&d));
    assert!(!root.join(format!("blobs/sha256:{}", d.hex())).exists());
}

#[test]
fn list_reports_digest_size_and_exact_casing() {
    let (_t, s) = setup();
    let m = make_model(&s, "Llama3:8B", b"GGUF-weights");
    make_model(&s, "user/other", b"GGUF-other");
    // A pulled manifest with foreign formatting is stored and hashed verbatim.
    let pulled = String::from_utf8(m.to_bytes())
        .unwrap()
        .replace(",\"", ", \"");
    s.write_manifest_bytes(&n("example.com/ns/pulled:v1"), pulled.as_bytes())
        .unwrap();

    let list = s.list().unwrap();
    let names: Vec<String> = list.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(
        names,
        vec![
            "example.com/ns/pulled:v1",
            "registry.ollama.ai/library/Llama3:8B",
            "registry.ollama.ai/user/other:latest",
        ]
    );
    let pulled_entry = &list[0];
    assert_eq!(pulled_entry.bytes, pulled.as_bytes());
    assert_eq!(
        pulled_entry.digest_hex,
        Digest::of_bytes(pulled.as_bytes()).hex()
    );
    let on_disk = std::fs::read(s.root().join("manifests/example.com/ns/pulled/v1")).unwrap();
    assert_eq!(on_disk, pulled.as_bytes());
    assert_eq!(list[1].size, 23 + 12 + 13);
    assert_eq!(list[1].manifest, m);
    assert_eq!(list[1].digest_hex, Digest::of_bytes(&m.to_bytes()).hex());
    assert!(list[1].modified > hours_ago(1));
}

#[test]
fn corrupt_manifest_is_skipped_and_its_blobs_survive_prune() {
    let (_t, s) = setup();
    let m = make_model(&s, "broken", b"broken-weights");
    make_model(&s, "fine", b"fine-weights");
    let path = s
        .root()
        .join("manifests/registry.ollama.ai/library/broken/latest");
    std::fs::write(&path, b"\0\0\0 truncated by a crash").unwrap();
    let names: Vec<String> = s
        .list()
        .unwrap()
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, vec!["registry.ollama.ai/library/fine:latest"]);
    assert!(matches!(
        s.read(&n("broken")),
        Err(Error::InvalidManifest(_))
    ));

    for l in m.blobs() {
        set_mtime(&s.blobs().path(&l.digest), hours_ago(2));
    }
    let report = s.prune(Duration::from_secs(3600)).unwrap();
    assert_eq!(report.corrupt_manifests, 1);
    assert_eq!(report.blobs_removed, 0);
    for l in m.blobs() {
        assert!(s.blobs().exists(&l.digest));
    }
}

#[test]
fn case_variant_write_and_copy_overwrite_existing_manifest() {
    let (_t, s) = setup();
    make_model(&s, "llama3", b"v1");
    let m2 = make_model(&s, "LLAMA3:Latest", b"v2");
    let dir = s.root().join("manifests/registry.ollama.ai/library");
    let files = snapshot(&dir);
    let keys: Vec<&String> = files.keys().collect();
    assert_eq!(keys, vec!["llama3/", "llama3/latest"]);
    assert_eq!(files["llama3/latest"], m2.to_bytes());

    make_model(&s, "qwen", b"q");
    let written = s.copy(&n("QWEN"), &n("Llama3")).unwrap().unwrap();
    assert_eq!(
        written.to_string(),
        "registry.ollama.ai/library/llama3:latest"
    );
    let after = snapshot(&dir);
    assert_eq!(after["llama3/latest"], after["qwen/latest"]);
    assert_eq!(after.len(), 4);
    // A new tag of an existing model reuses the model directory's casing.
    let written = s.copy(&n("qwen"), &n("LLAMA3:8b")).unwrap().unwrap();
    assert_eq!(written.to_string(), "registry.ollama.ai/library/llama3:8b");
    assert_eq!(s.copy(&n("missing"), &n("x")).unwrap(), None);
}

#[test]
fn read_and_find_resolve_case_insensitively() {
    let (_t, s) = setup();
    let m = make_model(&s, "MixedCase/Model:Tag", b"w");
    let e = s.read(&n("mixedcase/model:TAG")).unwrap().unwrap();
    assert_eq!(e.name.to_string(), "registry.ollama.ai/MixedCase/Model:Tag");
    assert_eq!(e.manifest, m);
    assert_eq!(
        s.find(&n("MIXEDCASE/MODEL:tag")).unwrap(),
        Some(n("MixedCase/Model:Tag"))
    );
    assert_eq!(s.find(&n("mixedcase/model:other")).unwrap(), None);
    assert!(s.read(&n("nothing")).unwrap().is_none());
}

#[test]
fn delete_removes_only_unshared_blobs_and_empty_dirs() {
    let (_t, s) = setup();
    let a = make_model(&s, "user/a", b"weights-a");
    let b = make_model(&s, "user/b", b"weights-b"); // shares config + template with a
    let deleted = s.delete(&n("USER/A")).unwrap().unwrap();
    assert_eq!(deleted.name.to_string(), "registry.ollama.ai/user/a:latest");
    assert_eq!(deleted.blobs_removed, 1);
    assert_eq!(deleted.bytes_freed, 9);
    assert!(!s.blobs().exists(&a.layers[0].digest));
    for l in b.blobs() {
        assert!(s.blobs().exists(&l.digest));
    }
    assert!(!s
        .root()
        .join("manifests/registry.ollama.ai/user/a")
        .exists());
    assert!(s
        .root()
        .join("manifests/registry.ollama.ai/user/b")
        .exists());
    assert_eq!(s.delete(&n("user/a")).unwrap(), None);

    s.delete(&n("user/b")).unwrap().unwrap();
    assert_eq!(snapshot(&s.root().join("manifests")).len(), 0);
    assert_eq!(snapshot(s.blobs().dir()).len(), 0);
}

#[test]
fn delete_keeps_blobs_named_by_a_corrupt_manifest() {
    let (_t, s) = setup();
    let a = make_model(&s, "a", b"shared-weights");
    let b = make_model(&s, "b", b"shared-weights");
    let pb = s
        .root()
        .join("manifests/registry.ollama.ai/library/b/latest");
    let text = String::from_utf8(b.to_bytes()).unwrap();
    std::fs::write(&pb, &text[..text.len() - 40]).unwrap(); // truncated JSON
    let deleted = s.delete(&n("a")).unwrap().unwrap();
    // Config and model digests appear in b's surviving text; the template's (last) was cut off.
    assert!(s.blobs().exists(&a.config.digest));
    assert!(s.blobs().exists(&a.layers[0].digest));
    assert!(!s.blobs().exists(&a.layers[1].digest));
    assert_eq!(deleted.blobs_removed, 1);
    // Deleting the corrupt manifest itself removes the file but no blob.
    let d = s.delete(&n("b")).unwrap().unwrap();
    assert_eq!((d.blobs_removed, pb.exists()), (0, false));
    assert!(s.blobs().exists(&a.layers[0].digest));
}

#[test]
fn prune_honours_grace_and_references() {
    let (_t, s) = setup();
    let kept = make_model(&s, "kept", b"kept-weights");
    let old = hours_ago(2);
    let bd = s.blobs().dir().to_path_buf();
    let orphan_old = s.blobs().write_bytes(b"orphan-old").unwrap();
    let orphan_new = s.blobs().write_bytes(b"orphan-new").unwrap();
    set_mtime(&s.blobs().path(&orphan_old), old);
    for l in kept.blobs() {
        set_mtime(&s.blobs().path(&l.digest), old);
    }
    let partial_old = s.blobs().partial_path(&orphan_new);
    let part_state_old = s.blobs().partial_part_path(&orphan_new, 0);
    let partial_new = s.blobs().partial_path(&orphan_old);
    let temp_old = bd.join(".tmp-00aa");
    let ollama_temp_old = bd.join("sha256-1234567890");
    let unknown_old = bd.join("README");
    for p in [
        &partial_old,
        &part_state_old,
        &partial_new,
        &temp_old,
        &ollama_temp_old,
        &unknown_old,
    ] {
        std::fs::write(p, b"x").unwrap();
    }
    for p in [
        &partial_old,
        &part_state_old,
        &temp_old,
        &ollama_temp_old,
        &unknown_old,
    ] {
        set_mtime(p, old);
    }
    let m = s.root().join("manifests");
    std::fs::create_dir_all(m.join("h/empty-ns/empty-model")).unwrap();
    std::fs::write(m.join("registry.ollama.ai/library/kept/.tmp-1"), b"").unwrap();
    set_mtime(&m.join("registry.ollama.ai/library/kept/.tmp-1"), old);

    let r = s.prune(Duration::from_secs(3600)).unwrap();
    assert_eq!(
        r,
        PruneReport {
            blobs_removed: 1,
            bytes_freed: 10,
            partials_removed: 2,
            temps_removed: 3,
            dirs_removed: 3,
            corrupt_manifests: 0,
        }
    );
    assert!(!s.blobs().exists(&orphan_old));
    assert!(s.blobs().exists(&orphan_new));
    for l in kept.blobs() {
        assert!(s.blobs().exists(&l.digest));
    }
    assert!(partial_new.exists() && unknown_old.exists());
    assert!(!partial_old.exists() && !temp_old.exists() && !ollama_temp_old.exists());
    assert!(!m.join("h").exists());
    assert!(m.join("registry.ollama.ai/library/kept/latest").exists());
    // Nothing left to do on a second run.
    assert_eq!(
        s.prune(Duration::from_secs(3600)).unwrap(),
        PruneReport::default()
    );
}

#[test]
fn hostile_manifests_leave_store_and_outside_unchanged() {
    let (t, s) = setup();
    make_model(&s, "victim", b"w");
    let good = s.read(&n("victim")).unwrap().unwrap().bytes;
    let text = String::from_utf8(good).unwrap();
    let before = snapshot(t.path());
    let model_hex = Digest::of_bytes(b"w").hex().to_owned();
    let hostile = [
        text.replace(
            &format!("sha256:{model_hex}"),
            "sha256:../../../../sentinel",
        ),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256:{}", &model_hex[..63]),
        ),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256:{model_hex}0"),
        ),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256-{model_hex}"),
        ),
        text.replace(&format!("sha256:{model_hex}"), "sha256-.."),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256:{}\\u0000", &model_hex[..63]),
        ),
        text.replace(&format!("sha256:{model_hex}"), "/etc/passwd"),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256:..\\\\{}", &model_hex[..61]),
        ),
        text.replace(
            &format!("sha256:{model_hex}"),
            &format!("sha256:{}", model_hex.to_uppercase()),
        ),
        // Valid digest, but the blob is not in the store.
        text.replace(&model_hex, &"0".repeat(64)),
    ];
    for bad in &hostile {
        let err = s
            .write_manifest_bytes(&n("attacker"), bad.as_bytes())
            .unwrap_err();
        assert!(matches!(err, Error::InvalidManifest(_)), "{err}");
        assert_eq!(snapshot(t.path()), before, "store changed by {bad}");
    }
    for bad in [
        "../../sentinel",
        "a/../../b",
        "..",
        "sha256:../x",
        "a/b/c/d",
        "m\0",
    ] {
        assert!(ModelName::parse(bad).is_err(), "{bad}");
    }
    for bad in ["sha256:../../sentinel", "sha256-..", "../sentinel"] {
        assert!(Digest::parse_api(bad).is_err());
    }
    assert_eq!(snapshot(t.path()), before);
}

#[cfg(unix)]
#[test]
fn symlinked_manifest_dirs_are_not_followed() {
    let (t, s) = setup();
    let outside = t.path().join("outside");
    std::fs::create_dir_all(outside.join("ns/m")).unwrap();
    std::os::unix::fs::symlink(&outside, s.root().join("manifests/evil.com")).unwrap();
    make_model(&s, "x", b"x");
    let bytes = s.read(&n("x")).unwrap().unwrap().bytes;
    assert!(s
        .write_manifest_bytes(&n("evil.com/ns/m:t"), &bytes)
        .is_err());
    assert!(!outside.join("ns/m/t").exists());
    assert_eq!(std::fs::read_dir(outside.join("ns/m")).unwrap().count(), 0);
    assert_eq!(s.list().unwrap().len(), 1);
}

/// 3000 manifests, with case-only variants of the requested model (and of other models' tags),
/// created in different orders: the lookup is the same exact-cased manifest every time.
#[test]
fn resolve_is_deterministic_over_3000_manifests() {
    let variants = [
        "mymodel:8B",
        "MyModel:8b",
        "MYMODEL:8b",
        "mymodel:8b",
        "other:8B",
    ];
    let mut all: Vec<String> = (0..2995)
        .map(|i| format!("ns{}/m{i}:t{}", i % 7, i % 3))
        .collect();
    all.extend(variants.iter().map(|s| s.to_string()));
    assert_eq!(all.len(), 3000);

    let mut first_timing = None;
    for round in 0..3u64 {
        let t = tempfile::tempdir().unwrap();
        let s = Store::open(t.path()).unwrap();
        let cfg = s.blobs().write_bytes(b"{}").unwrap();
        let bytes = Manifest::new(Layer::new(MEDIA_TYPE_CONFIG, cfg, 2), vec![]).to_bytes();
        // Different creation orders: rotate and reverse.
        let mut order = all.clone();
        let shift = (round as usize * 997) % order.len();
        order.rotate_left(shift);
        if round % 2 == 1 {
            order.reverse();
        }
        for name in &order {
            // Plain writes (no resolve, no fsync): each name, even a case variant, gets its own file.
            let path = t.path().join(n(name).manifest_rel_path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, &bytes).unwrap();
        }
        assert_eq!(
            resolve::manifest_names(&t.path().join("manifests"))
                .unwrap()
                .len(),
            3000
        );

        let want_exact = n("mymodel:8b");
        let want_folded = n("MYMODEL:8b"); // no exact-case manifest: first in sorted order
        let lookups = if round == 0 { 1000 } else { 50 };
        let start = Instant::now();
        for _ in 0..lookups {
            let got = s.resolve(&n("mymodel:8b")).unwrap();
            assert_eq!(got.parts(), want_exact.parts());
            let got = s.resolve(&n("myMODEL:8B")).unwrap();
            assert_eq!(got.parts(), want_folded.parts());
        }
        let per = start.elapsed() / (2 * lookups);
        first_timing.get_or_insert(per);
        // And through a fresh Store handle each time.
        for _ in 0..20 {
            let fresh = Store::open(t.path()).unwrap();
            assert_eq!(
                fresh.find(&n("MyModel:8B")).unwrap().unwrap().parts(),
                want_folded.parts()
            );
        }
        if round == 0 {
            let list_start = Instant::now();
            assert_eq!(s.list().unwrap().len(), 3000);
            eprintln!("list of 3000 manifests: {:?}", list_start.elapsed());
        }
        eprintln!("round {round}: resolve among 3000 manifests: {per:?}/lookup");
    }
    // Generous bound (debug build, shared 2-core box): a lookup is one directory walk.
    assert!(first_timing.unwrap() < Duration::from_millis(250));
}
