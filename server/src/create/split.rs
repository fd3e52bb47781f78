//! Merging llama.cpp split GGUFs (`name-0000N-of-0000M.gguf`) into one model blob, since a
//! layer must be one file the runner can load. Shards are validated as Ollama does (file-name
//! pattern, `split.count` / `split.no` agreement, every shard exactly once), then written as one
//! GGUF v3: shard 0's key/values minus the `split.*` keys, every shard's tensors in shard order,
//! data copied through a 1 MiB buffer (memory stays bounded whatever the model size).
//!
//! The merged file is necessarily a second copy of the data; the uploaded shards stay as
//! unreferenced blobs until prune removes them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use super::import::GgufLayer;
use crate::error::{Error, Result};
use crate::gguf::{self, GgufBuilder, GgufFile, ReadOptions, TensorInfo, Value};
use crate::store::{BlobStore, Digest, Layer};

const SPLIT_KEYS: [&str; 3] = ["split.no", "split.count", "split.tensors.count"];

fn bad(msg: String) -> Error {
    Error::BadRequest(msg)
}

/// `split.<suffix>` or `<arch>.split.<suffix>` as a u16.
fn split_u16(g: &GgufFile, key: &str) -> Option<u16> {
    g.get(key)
        .or_else(|| g.arch_value(key))
        .and_then(Value::as_u64)
        .and_then(|v| u16::try_from(v).ok())
}

/// `(prefix, zero-based index, count)` from a `-0000N-of-0000M.gguf` file name.
fn parse_split_name(path: &str) -> Option<(String, u16, u16)> {
    let base = path.rsplit('/').next()?;
    let stem = base.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    let five = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !five(index) || !five(count) {
        return None;
    }
    let (index, count): (u16, u16) = (index.parse().ok()?, count.parse().ok()?);
    (index > 0 && count > 0).then(|| (prefix.to_owned(), index - 1, count))
}

/// Replaces every group of split shards in `layers` by one merged layer (placed after the
/// unsplit ones, as Ollama orders them). Non-split layers pass through untouched.
pub(crate) fn merge_splits(blobs: &BlobStore, layers: Vec<GgufLayer>) -> Result<Vec<GgufLayer>> {
    let mut out = Vec::new();
    let mut groups: Vec<(String, u16, Vec<GgufLayer>)> = Vec::new();
    for l in layers {
        let count = split_u16(&l.gguf, "split.count").unwrap_or(1);
        if count <= 1 {
            out.push(l);
            continue;
        }
        let from = l.layer.from.clone().unwrap_or_default();
        let (prefix, index, name_count) = parse_split_name(&from).ok_or_else(|| {
            bad(format!(
                "split GGUF {from:?} must use llama.cpp split filename pattern"
            ))
        })?;
        if name_count != count {
            return Err(bad(format!(
                "split GGUF {from:?} filename count {name_count} does not match metadata count {count}"
            )));
        }
        let no = split_u16(&l.gguf, "split.no")
            .ok_or_else(|| bad(format!("split GGUF {from:?} is missing split.no metadata")))?;
        if no != index {
            return Err(bad(format!(
                "split GGUF {from:?} filename index {index} does not match metadata index {no}"
            )));
        }
        let key = format!("{}:{prefix}:{count}", l.layer.media_type);
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, members)) => members.push(l),
            None => groups.push((key, count, vec![l])),
        }
    }
    for (_, count, members) in groups {
        out.push(merge_group(blobs, count, members)?);
    }
    Ok(out)
}

fn merge_group(blobs: &BlobStore, count: u16, members: Vec<GgufLayer>) -> Result<GgufLayer> {
    let first_from = members[0].layer.from.clone().unwrap_or_default();
    if members.len() != usize::from(count) {
        return Err(bad(format!(
            "split GGUF {first_from:?} has {} shards, expected {count}",
            members.len()
        )));
    }
    let mut by_index: Vec<Option<GgufLayer>> = vec![None; usize::from(count)];
    for m in members {
        let i = usize::from(split_u16(&m.gguf, "split.no").unwrap_or(0));
        if by_index[i].is_some() {
            return Err(bad(format!("split GGUF has duplicate shard index {i}")));
        }
        by_index[i] = Some(m);
    }
    let shards: Vec<GgufLayer> = by_index
        .into_iter()
        .map(|s| s.expect("count checked"))
        .collect();
    let primary = &shards[0];
    let digest = write_merged(blobs, &shards, &[])?;
    let size = blobs.size(&digest)?.unwrap_or_default();
    let mut layer = Layer::new(&primary.layer.media_type, digest.clone(), size);
    layer.from = primary.layer.from.clone();
    // Re-reading checks the merged file with the same bounded reader as any upload.
    let merged = gguf::read_path(&blobs.path(&digest), ReadOptions::default())?;
    Ok(GgufLayer {
        layer,
        gguf: merged,
        new_blob: true,
    })
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Writes the merged GGUF into the blob store, with `extra` key/values added after shard 0's
/// own (one shard: a copy of it with those keys); returns its digest.
pub(crate) fn write_merged(
    blobs: &BlobStore,
    shards: &[GgufLayer],
    extra: &[(&str, Value)],
) -> Result<Digest> {
    let head_path = blobs.path(&shards[0].layer.digest);
    let full = gguf::read_path(&head_path, ReadOptions { full_arrays: true })?;
    let alignment = full.alignment;
    // Key/values through the fixture writer (no tensors): its bytes are the header prefix.
    let mut builder = GgufBuilder::new();
    for (k, v) in &full.kvs {
        let split = SPLIT_KEYS
            .iter()
            .any(|s| k == s || k.strip_suffix(s).is_some_and(|p| p.ends_with('.')));
        if !split && !extra.iter().any(|(e, _)| e == k) {
            builder = builder.kv(k, v.clone());
        }
    }
    for (k, v) in extra {
        builder = builder.kv(k, v.clone());
    }
    let mut head = builder.build()?;
    let tensors: Vec<(&GgufLayer, &TensorInfo)> = shards
        .iter()
        .flat_map(|s| s.gguf.tensors.iter().map(move |t| (s, t)))
        .collect();
    let mut names = std::collections::HashSet::new();
    if let Some((_, t)) = tensors.iter().find(|(_, t)| !names.insert(t.name.as_str())) {
        return Err(bad(format!(
            "split GGUF has tensor {:?} in more than one shard",
            t.name
        )));
    }
    head[8..16].copy_from_slice(&(tensors.len() as u64).to_le_bytes());
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut offset = 0u64;
    for (_, t) in &tensors {
        put_str(&mut head, &t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ggml_type.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.n_bytes).next_multiple_of(alignment);
    }
    if !tensors.is_empty() {
        head.resize((head.len() as u64).next_multiple_of(alignment) as usize, 0);
    }

    let (digest, _) = blobs.write_with(|w| {
        w.write_all(&head)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut written = 0u64;
        let mut open: Option<(Digest, File)> = None;
        for ((shard, t), off) in tensors.iter().zip(offsets) {
            w.write_all(&vec![0; (off - written) as usize])?;
            if open.as_ref().is_none_or(|(d, _)| *d != shard.layer.digest) {
                let f = File::open(blobs.path(&shard.layer.digest))?;
                open = Some((shard.layer.digest.clone(), f));
            }
            let (_, f) = open.as_mut().expect("opened above");
            f.seek(SeekFrom::Start(shard.gguf.data_offset + t.offset))?;
            let mut left = t.n_bytes;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                f.read_exact(&mut buf[..n])?;
                w.write_all(&buf[..n])?;
                left -= n as u64;
            }
            written = off + t.n_bytes;
        }
        Ok(())
    })?;
    Ok(digest)
}
