//! Finding manifests on disk and canonicalizing a requested name against them (ollama PR #18438).
//!
//! The walk reads directory entries only (no file contents), never follows symlinks, and skips any
//! path whose four components are not a valid name (hidden files, `.tmp-*` temp files, junk). Its
//! result is sorted, so resolution never depends on directory iteration order — the root cause of
//! Ollama's intermittent "model not found" (#18447).

use std::fs;
use std::path::Path;

use super::name::ModelName;
use crate::error::Result;

/// Every valid manifest name under `manifests_dir` (`*/*/*/*`, regular files only), sorted by
/// (host, namespace, model, tag) bytewise.
pub(crate) fn manifest_names(manifests_dir: &Path) -> Result<Vec<ModelName>> {
    names_under(manifests_dir, [None, None, None])
}

/// Like `manifest_names`, but at each of the three directory levels only entries equal to
/// `only[level]` ignoring ASCII case are entered (`None`: all).
fn names_under(manifests_dir: &Path, only: [Option<&str>; 3]) -> Result<Vec<ModelName>> {
    let keep = |level: usize, name: &str| only[level].is_none_or(|p| p.eq_ignore_ascii_case(name));
    let mut out = Vec::new();
    for host in subdirs(manifests_dir)?.into_iter().filter(|h| keep(0, h)) {
        let host_dir = manifests_dir.join(&host);
        for ns in subdirs(&host_dir)?.into_iter().filter(|n| keep(1, n)) {
            let ns_dir = host_dir.join(&ns);
            for model in subdirs(&ns_dir)?.into_iter().filter(|m| keep(2, m)) {
                let model_dir = ns_dir.join(&model);
                for tag in entries(&model_dir, false)? {
                    if let Ok(n) = ModelName::from_parts(&host, &ns, &model, &tag) {
                        out.push(n);
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.parts().cmp(&b.parts()));
    Ok(out)
}

/// `resolve_among(req, manifest_names(dir))` without walking the whole tree: only manifests
/// whose host matches can influence the result, and `resolve_among` only ever picks from the
/// candidates with the longest matching prefix, so it suffices to walk the most specific
/// non-empty tier: same (host, namespace, model), else same (host, namespace), else same host.
/// For an existing model this reads four directories regardless of store size.
pub(crate) fn resolve_on_disk(manifests_dir: &Path, req: &ModelName) -> Result<ModelName> {
    let [h, ns, m, _] = req.parts();
    for only in [
        [Some(h), Some(ns), Some(m)],
        [Some(h), Some(ns), None],
        [Some(h), None, None],
    ] {
        let tier = names_under(manifests_dir, only)?;
        if !tier.is_empty() {
            return Ok(resolve_among(req, &tier));
        }
    }
    Ok(req.clone())
}

fn subdirs(dir: &Path) -> Result<Vec<String>> {
    entries(dir, true)
}

/// UTF-8 names of the entries of `dir` that are real directories (`want_dir`) or regular files;
/// symlinks are neither. A directory that vanished meanwhile is empty, not an error.
fn entries(dir: &Path, want_dir: bool) -> Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry?;
        // DirEntry::file_type does not follow symlinks.
        let ft = entry.file_type()?;
        let keep = if want_dir { ft.is_dir() } else { ft.is_file() };
        if !keep {
            continue;
        }
        if let Ok(name) = entry.file_name().into_string() {
            if !name.starts_with('.') {
                out.push(name);
            }
        }
    }
    Ok(out)
}

/// PR #18438 semantics over `existing` (which must be sorted as `manifest_names` returns it):
///
/// 1. Manifests whose four parts all equal the request ignoring case: the exact-case one if
///    present, else the first in sorted order; its casing is returned.
/// 2. Otherwise the one manifest with the longest case-insensitive prefix of (host, namespace,
///    model) supplies the casing of those prefix parts (ties: more exactly-cased prefix parts,
///    then sorted order); the request's own tag is kept.
/// 3. No part matches anywhere: the request unchanged.
///
/// Each part therefore takes its casing from at most one manifest. The request's scheme is kept.
pub(crate) fn resolve_among(req: &ModelName, existing: &[ModelName]) -> ModelName {
    let mut folded_match: Option<&ModelName> = None;
    for e in existing {
        if e.eq_ignore_case(req) {
            if e.parts() == req.parts() {
                return req.clone();
            }
            folded_match.get_or_insert(e);
        }
    }
    if let Some(e) = folded_match {
        return req.with_parts(e.host(), e.namespace(), e.model(), e.tag());
    }

    let r = req.parts();
    let mut best: Option<(&ModelName, usize, usize)> = None;
    for e in existing {
        let p = e.parts();
        let k = (0..3)
            .take_while(|&i| p[i].eq_ignore_ascii_case(r[i]))
            .count();
        if k == 0 {
            continue;
        }
        let exact = (0..k).filter(|&i| p[i] == r[i]).count();
        if best.is_none_or(|(_, bk, bx)| (k, exact) > (bk, bx)) {
            best = Some((e, k, exact));
        }
    }
    match best {
        None => req.clone(),
        Some((e, k, _)) => {
            let p = e.parts();
            let pick = |i: usize| if i < k { p[i] } else { r[i] };
            req.with_parts(pick(0), pick(1), pick(2), r[3])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> ModelName {
        ModelName::parse(s).unwrap()
    }

    fn sorted(names: &[&str]) -> Vec<ModelName> {
        let mut v: Vec<ModelName> = names.iter().map(|s| n(s)).collect();
        v.sort_by(|a, b| a.parts().cmp(&b.parts()));
        v
    }

    #[test]
    fn resolve_table() {
        // (existing manifests, request, expected full name)
        let cases: &[(&[&str], &str, &str)] = &[
            (&[], "Llama3", "registry.ollama.ai/library/Llama3:latest"),
            (
                &["llama3"],
                "Llama3",
                "registry.ollama.ai/library/llama3:latest",
            ),
            (
                &["llama3:LATEST"],
                "LLAMA3",
                "registry.ollama.ai/library/llama3:LATEST",
            ),
            // Exact-case wins over other case variants, whatever their order.
            (
                &["Llama3", "llama3", "LLAMA3"],
                "llama3",
                "registry.ollama.ai/library/llama3:latest",
            ),
            (
                &["Llama3", "llama3", "LLAMA3"],
                "LLAMA3",
                "registry.ollama.ai/library/LLAMA3:latest",
            ),
            // No exact case: the first in sorted order (uppercase sorts first).
            (
                &["llama3", "Llama3"],
                "lLaMa3",
                "registry.ollama.ai/library/Llama3:latest",
            ),
            // The bug Ollama had: another model's tag casing must not leak in.
            (
                &["llama3:8B", "qwen:8b"],
                "LLAMA3:8b",
                "registry.ollama.ai/library/llama3:8B",
            ),
            (
                &["Mistral:latest", "llama3:LATEST"],
                "mistral",
                "registry.ollama.ai/library/Mistral:latest",
            ),
            // Pass 2: prefix casing from one manifest, request's tag kept.
            (
                &["Llama3:latest"],
                "llama3:8b",
                "registry.ollama.ai/library/Llama3:8b",
            ),
            (
                &["Llama3:latest", "qwen:8B"],
                "LLAMA3:8b",
                "registry.ollama.ai/library/Llama3:8b",
            ),
            (
                &["example.com/Team/x"],
                "EXAMPLE.com/team/y:t",
                "example.com/Team/y:t",
            ),
            (
                &["example.com/Team/x", "Example.com/other/y"],
                "EXAMPLE.com/team/y:t",
                "example.com/Team/y:t",
            ),
            (
                &["Registry.Ollama.AI/Library/m"],
                "q",
                "Registry.Ollama.AI/Library/q:latest",
            ),
            // Longest prefix wins; tie on length prefers more exact parts.
            (
                &["registry.ollama.ai/User/a", "registry.ollama.ai/user/b"],
                "user/c",
                "registry.ollama.ai/user/c:latest",
            ),
            (
                &["registry.ollama.ai/User/a", "registry.ollama.ai/USER/M"],
                "user/m:x",
                "registry.ollama.ai/USER/M:x",
            ),
            // Host does not match: nothing canonicalized, even if later parts would.
            (
                &["other.com/library/llama3"],
                "LLAMA3",
                "registry.ollama.ai/library/LLAMA3:latest",
            ),
        ];
        for (existing, req, want) in cases {
            let got = resolve_among(&n(req), &sorted(existing));
            assert_eq!(got.to_string(), *want, "existing={existing:?} req={req}");
        }
    }

    #[test]
    fn keeps_scheme() {
        let req = n("http://LOCALHOST:5000/ns/m");
        let got = resolve_among(&req, &sorted(&["localhost:5000/ns/m"]));
        assert_eq!(got.to_string(), "localhost:5000/ns/m:latest");
        assert!(got.is_insecure());
    }

    #[test]
    fn walk_skips_junk_and_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("manifests");
        let model_dir = m.join("registry.ollama.ai/library/llama3");
        fs::create_dir_all(&model_dir).unwrap();
        fs::write(model_dir.join("latest"), b"{}").unwrap();
        fs::write(model_dir.join(".tmp-0123"), b"{}").unwrap();
        fs::write(model_dir.join("bad name"), b"{}").unwrap();
        fs::create_dir(model_dir.join("dir-not-file")).unwrap();
        fs::write(m.join("registry.ollama.ai/library/stray-file"), b"").unwrap();
        fs::create_dir_all(m.join("h/n.bad/x")).unwrap();
        fs::write(m.join("h/n.bad/x/t"), b"{}").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(model_dir.join("latest"), model_dir.join("link")).unwrap();
            let outside = t.path().join("outside/ns/mod");
            fs::create_dir_all(&outside).unwrap();
            fs::write(outside.join("tag"), b"{}").unwrap();
            std::os::unix::fs::symlink(t.path().join("outside"), m.join("evilhost")).unwrap();
        }
        let names = manifest_names(&m).unwrap();
        let got: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(got, vec!["registry.ollama.ai/library/llama3:latest"]);
        assert!(manifest_names(&t.path().join("absent")).unwrap().is_empty());
    }

    /// The tiered on-disk walk must agree with the specification (`resolve_among` over every
    /// manifest) on random stores full of case variants.
    #[test]
    fn on_disk_resolution_matches_specification() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(18438);
        let hosts = [
            "registry.ollama.ai",
            "Registry.Ollama.AI",
            "example.com",
            "EXAMPLE.com",
        ];
        let nss = ["library", "Library", "user", "USER"];
        let models = ["llama3", "Llama3", "LLAMA3", "qwen", "Qwen"];
        let tags = ["latest", "LATEST", "8b", "8B"];
        let pick =
            |rng: &mut rand::rngs::StdRng, xs: &[&'static str]| xs[rng.gen_range(0..xs.len())];
        for _ in 0..30 {
            let t = tempfile::tempdir().unwrap();
            let count = rng.gen_range(0..12);
            for _ in 0..count {
                let parts = [
                    pick(&mut rng, &hosts),
                    pick(&mut rng, &nss),
                    pick(&mut rng, &models),
                ];
                let dir = t.path().join(parts.join("/"));
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join(pick(&mut rng, &tags)), b"{}").unwrap();
            }
            let all = manifest_names(t.path()).unwrap();
            for _ in 0..20 {
                let req = ModelName::from_parts(
                    pick(&mut rng, &hosts),
                    pick(&mut rng, &nss),
                    pick(&mut rng, &models),
                    pick(&mut rng, &tags),
                )
                .unwrap();
                let want = resolve_among(&req, &all);
                let got = resolve_on_disk(t.path(), &req).unwrap();
                assert_eq!(got, want, "req={req} store={all:?}");
            }
        }
    }
}
