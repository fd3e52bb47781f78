//! A safetensors (MLX) model made ready for runner-mlx: the model directory the runner loads
//! (`--model DIR`) and the facts the scheduler and prompt rendering need from config.json and
//! tokenizer_config.json.
//!
//! The directory (the contract with runner-mlx): every `json` layer under its layer `name`
//! (config.json, tokenizer.json, tokenizer_config.json, generation_config.json,
//! chat_template.jinja) and every `tensor` layer's blob as `tensors/NNNNN.safetensors`, in
//! manifest order — symlinks to the blobs, never copies, never writes into the blob store.
//! Invariants: it lives under the scheduler's private 0700 runner directory (removed with
//! it), keyed by manifest digest (a changed manifest is a new directory); it is built in a
//! temp name and renamed into place, so a runner never sees a half-made one; a layer name that
//! is not a plain file name is refused (a hostile manifest cannot point outside DIR).

use std::path::{Path, PathBuf};

use crate::api::show::ModelView;
use crate::error::{Error, Result};
use crate::mlx::{info, view as mv};
use crate::prompt::Template;
use crate::scheduler::MemoryInputs;

/// What `Model::prepare_in` needs from a safetensors model.
pub struct Prepared {
    pub dir: PathBuf,
    pub ctx_train: Option<u32>,
    pub embedding_length: Option<u64>,
    pub memory: MemoryInputs,
    pub template: Template,
    pub bos_text: Option<String>,
}

/// A json layer's name as a file in DIR: one plain component.
fn file_name(name: &str) -> Result<&str> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    if ok {
        Ok(name)
    } else {
        Err(Error::InvalidManifest(format!(
            "json layer name {name:?} is not a plain file name"
        )))
    }
}

/// Builds (or reuses) `root/<digest>` for `view`. Blocking.
pub fn prepare_dir(view: &ModelView, root: &Path, digest: &str) -> Result<PathBuf> {
    let dir = root.join(format!("mlx-{digest}"));
    if dir.is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(root)?;
    // One temp name per call, not per process: concurrent first requests for one model each
    // build their own and the first rename wins (a shared name let them delete each other's).
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = root.join(format!(".mlx-{digest}.{}.{seq}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let build = || -> Result<()> {
        std::fs::create_dir(&tmp)?;
        std::fs::create_dir(tmp.join("tensors"))?;
        for l in &view.json_layers {
            std::os::unix::fs::symlink(&l.path, tmp.join(file_name(&l.name)?))?;
        }
        for (i, l) in view.tensor_layers.iter().enumerate() {
            let link = tmp.join("tensors").join(format!("{i:05}.safetensors"));
            std::os::unix::fs::symlink(&l.path, link)?;
        }
        Ok(())
    };
    if let Err(e) = build() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another request built it first: theirs is identical (same digest).
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e.into())
        }
    }
}

/// The model directory plus config facts and the prompt template (TEMPLATE layer, else the
/// Jinja chat template from the json layers, else `{{ .Prompt }}`).
pub fn prepare(view: &ModelView, root: &Path, digest: &str) -> Result<Prepared> {
    if view.tensor_layers.is_empty() {
        return Err(Error::InvalidManifest(
            "the safetensors model has no tensor layers".into(),
        ));
    }
    let cfg = mv::config(view)?;
    let dir = prepare_dir(view, root, digest)?;
    let u32_of = |v: Option<u64>| v.map(|n| n.min(u64::from(u32::MAX)) as u32);
    let hidden = info::dim(&cfg, "hidden_size");
    let heads = u32_of(cfg["num_attention_heads"].as_u64());
    let head_dim = u32_of(cfg["head_dim"].as_u64());
    let file_size = view.tensor_layers.iter().map(|l| l.size).sum();
    let memory = MemoryInputs::from_heads(
        file_size,
        u32_of(info::dim(&cfg, "num_hidden_layers")).unwrap_or(0),
        u32_of(hidden).unwrap_or(0),
        heads.unwrap_or(0),
        u32_of(cfg["num_key_value_heads"].as_u64()),
        head_dim,
        head_dim,
    );
    let (template, bos_text) = match &view.template {
        _ if !view.config.renderer.is_empty() => {
            super::model::builtin_for(view, &view.config.renderer, "", &view.config.model_type)?
        }
        Some(src) => (
            Template::parse_go(src).map_err(Template::parse_error)?,
            None,
        ),
        None => match mv::chat_template(view)? {
            Some(src) => {
                let (bos, eos) = mv::special_tokens(view)?;
                let t = Template::jinja(
                    src,
                    bos.clone().unwrap_or_default(),
                    eos.unwrap_or_default(),
                )?;
                (t, bos)
            }
            None => (Template::default_go(), None),
        },
    };
    Ok(Prepared {
        dir,
        ctx_train: u32_of(info::dim(&cfg, "max_position_embeddings")),
        embedding_length: hidden,
        memory,
        template,
        bos_text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::show::NamedBlob;

    #[test]
    fn the_dir_links_every_layer_and_refuses_escaping_names() {
        let blobs = tempfile::tempdir().unwrap();
        let blob = |n: &str| {
            let p = blobs.path().join(n);
            std::fs::write(&p, n).unwrap();
            NamedBlob {
                name: n.into(),
                path: p,
                size: 1,
            }
        };
        let view = ModelView {
            json_layers: vec![blob("config.json"), blob("tokenizer.json")],
            tensor_layers: vec![blob("a.weight"), blob("b.weight")],
            ..ModelView::default()
        };
        let root = tempfile::tempdir().unwrap();
        let dir = prepare_dir(&view, root.path(), "abc").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("config.json")).unwrap(),
            "config.json"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("tensors/00001.safetensors")).unwrap(),
            "b.weight"
        );
        assert_eq!(prepare_dir(&view, root.path(), "abc").unwrap(), dir);
        for bad in ["../x", "a/b", "..", ""] {
            let mut v = view.clone();
            v.json_layers[0].name = bad.into();
            let e = prepare_dir(&v, root.path(), bad.replace('/', "_").as_str()).unwrap_err();
            assert!(e.to_string().contains("plain file name"), "{bad}: {e}");
        }
        // No temp directories are left behind.
        let names: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("mlx-abc")]);

        // Concurrent first builds of one model all get the same complete directory.
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| prepare_dir(&view, root.path(), "race").unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for d in &dirs {
            assert_eq!(d, &dirs[0]);
        }
        assert_eq!(
            std::fs::read_to_string(dirs[0].join("tokenizer.json")).unwrap(),
            "tokenizer.json"
        );
        let names: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("mlx-race")]);
    }
}
