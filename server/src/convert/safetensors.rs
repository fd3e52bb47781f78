//! A bounded safetensors reader: the 8-byte header length, the JSON header, and positional reads
//! of one tensor's bytes at a time (no mmap: mapping memory needs the FFI escape hatch, which
//! only the runners' ffi modules may use).
//!
//! Invariants every successful `open` guarantees (so hostile files fail with a 400, never a panic
//! or an allocation proportional to a claimed size):
//! - the header is at most `MAX_HEADER_LEN` bytes and lies inside the file;
//! - every tensor has a supported float dtype, at most `MAX_DIMS` dims, an element count whose
//!   byte size fits in u64 and equals its `data_offsets` span, and lies wholly inside the file's
//!   data section; no two tensors overlap; names are unique;
//! - tensors are listed sorted by name (the order the reference converter and the safetensors
//!   library iterate in), which fixes the output tensor order.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{Error, Result};

/// The safetensors library refuses headers above 100 MB; real headers are < 2 MB.
pub const MAX_HEADER_LEN: u64 = 100 << 20;
pub const MAX_DIMS: usize = 8;

/// The element types conversion accepts (what Hugging Face text checkpoints use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
}

impl Dtype {
    pub fn size(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }

    fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            _ => return None,
        })
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq)]
pub struct StTensor {
    pub name: String,
    pub dtype: Dtype,
    /// Row-major (PyTorch) order: the last dim is the row length.
    pub shape: Vec<u64>,
    /// Absolute file offset of the first byte.
    pub start: u64,
    pub len: u64,
}

impl StTensor {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// An open safetensors file and its validated tensor table.
#[derive(Debug)]
pub struct SafeTensors {
    path: PathBuf,
    file: File,
    /// Sorted by name.
    pub tensors: Vec<StTensor>,
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Error::BadRequest(format!("invalid safetensors file {name}: {msg}"))
}

impl SafeTensors {
    /// Opens and validates `path`. `label` names the file in error messages (the upload path).
    pub fn open(path: &Path, label: &str) -> Result<SafeTensors> {
        let shown = Path::new(label);
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let mut len8 = [0u8; 8];
        if file_len < 8 {
            return Err(bad(shown, "shorter than its 8-byte header length"));
        }
        file.read_exact_at(&mut len8, 0)?;
        let header_len = u64::from_le_bytes(len8);
        if header_len > MAX_HEADER_LEN {
            return Err(bad(
                shown,
                format!("header of {header_len} bytes exceeds the {MAX_HEADER_LEN}-byte limit"),
            ));
        }
        if 8 + header_len > file_len {
            return Err(bad(shown, "header extends past the end of the file"));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact_at(&mut header, 8)?;
        let json: Json = serde_json::from_slice(&header)
            .map_err(|e| bad(shown, format!("header is not valid JSON: {e}")))?;
        let Json::Object(entries) = json else {
            return Err(bad(shown, "header is not a JSON object"));
        };
        let data_start = 8 + header_len;
        let data_len = file_len - data_start;
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, meta) in &entries {
            if name == "__metadata__" {
                continue;
            }
            tensors.push(parse_entry(shown, name, meta, data_start, data_len)?);
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let mut spans: Vec<(u64, u64, &str)> = tensors
            .iter()
            .map(|t| (t.start, t.start + t.len, t.name.as_str()))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(bad(
                    shown,
                    format!("tensors {:?} and {:?} overlap", w[0].2, w[1].2),
                ));
            }
        }
        Ok(SafeTensors {
            path: path.to_owned(),
            file,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads `buf.len()` bytes of tensor `t` starting `offset` bytes into its data.
    pub fn read_at(&self, t: &StTensor, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= t.len)
            .ok_or_else(|| Error::Internal(format!("read past the end of tensor {}", t.name)))?;
        debug_assert!(end <= t.len);
        self.file.read_exact_at(buf, t.start + offset)?;
        Ok(())
    }
}

fn parse_entry(
    shown: &Path,
    name: &str,
    meta: &Json,
    data_start: u64,
    data_len: u64,
) -> Result<StTensor> {
    let field = |k: &str| {
        meta.get(k)
            .ok_or_else(|| bad(shown, format!("tensor {name:?} has no {k}")))
    };
    let dtype_s = field("dtype")?
        .as_str()
        .ok_or_else(|| bad(shown, format!("tensor {name:?}: dtype is not a string")))?;
    let dtype = Dtype::parse(dtype_s).ok_or_else(|| {
        bad(
            shown,
            format!("tensor {name:?} has dtype {dtype_s}; only F32, F16 and BF16 can be converted"),
        )
    })?;
    let shape: Vec<u64> = field("shape")?
        .as_array()
        .ok_or_else(|| bad(shown, format!("tensor {name:?}: shape is not a list")))?
        .iter()
        .map(Json::as_u64)
        .collect::<Option<_>>()
        .ok_or_else(|| bad(shown, format!("tensor {name:?}: shape holds a non-integer")))?;
    if shape.len() > MAX_DIMS {
        return Err(bad(
            shown,
            format!("tensor {name:?} has {} dims", shape.len()),
        ));
    }
    let offsets: Vec<u64> = field("data_offsets")?
        .as_array()
        .filter(|a| a.len() == 2)
        .and_then(|a| a.iter().map(Json::as_u64).collect::<Option<Vec<_>>>())
        .ok_or_else(|| {
            bad(
                shown,
                format!("tensor {name:?}: data_offsets is not [begin, end]"),
            )
        })?;
    let (begin, end) = (offsets[0], offsets[1]);
    let bytes = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(shown, format!("tensor {name:?}: shape overflows")))?;
    if begin > end || end - begin != bytes {
        return Err(bad(
            shown,
            format!("tensor {name:?}: data_offsets [{begin}, {end}] do not match its {bytes}-byte shape"),
        ));
    }
    if end > data_len {
        return Err(bad(
            shown,
            format!("tensor {name:?} extends past the end of the file"),
        ));
    }
    Ok(StTensor {
        name: name.to_owned(),
        dtype,
        shape,
        start: data_start + begin,
        len: bytes,
    })
}

/// A checkpoint of one or more safetensors files; every tensor name is unique across them.
#[derive(Debug)]
pub struct Checkpoint {
    /// In part-name order; within a part, tensors by name.
    pub parts: Vec<SafeTensors>,
}

impl Checkpoint {
    /// Opens the parts (given as (label, path), in the order tensors are to be converted) and
    /// checks them against the optional `model.safetensors.index.json` weight map.
    pub fn open(parts: &[(String, PathBuf)], index: Option<&Json>) -> Result<Checkpoint> {
        let mut opened = Vec::with_capacity(parts.len());
        let mut names = HashSet::new();
        for (label, path) in parts {
            let st = SafeTensors::open(path, label)?;
            for t in &st.tensors {
                if !names.insert(t.name.clone()) {
                    return Err(Error::BadRequest(format!(
                        "tensor {:?} appears in more than one safetensors file",
                        t.name
                    )));
                }
            }
            opened.push(st);
        }
        if let Some(index) = index {
            let map = index
                .get("weight_map")
                .and_then(Json::as_object)
                .ok_or_else(|| {
                    Error::BadRequest("model.safetensors.index.json has no weight_map".into())
                })?;
            let listed: HashSet<&str> = map.keys().map(String::as_str).collect();
            let missing: Vec<&str> = listed
                .iter()
                .copied()
                .filter(|n| !names.contains(*n))
                .collect();
            if let Some(first) = missing.first() {
                let file = map.get(*first).and_then(Json::as_str).unwrap_or("?");
                return Err(Error::BadRequest(format!(
                    "missing or incomplete model files: tensor {first:?} (in {file}) was not uploaded"
                )));
            }
            if let Some(extra) = names.iter().find(|n| !listed.contains(n.as_str())) {
                return Err(Error::BadRequest(format!(
                    "tensor {extra:?} is not in model.safetensors.index.json"
                )));
            }
        }
        Ok(Checkpoint { parts: opened })
    }

    /// Every tensor with the file it lives in, in conversion order.
    pub fn tensors(&self) -> impl Iterator<Item = (&SafeTensors, &StTensor)> {
        self.parts
            .iter()
            .flat_map(|p| p.tensors.iter().map(move |t| (p, t)))
    }
}

/// Serialises a safetensors header for tensors stored back to back in the given order (tests and
/// the bench write checkpoints with it; the data must follow in the same order). The JSON is
/// padded with spaces to a multiple of 8 bytes, as the safetensors library writes it.
pub fn encode_header(entries: &[(&str, Dtype, &[u64])]) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, dtype, shape) in entries {
        let len = shape.iter().product::<u64>() * dtype.size();
        let dt = match dtype {
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
        };
        map.insert(
            (*name).to_owned(),
            serde_json::json!({"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len]}),
        );
        offset += len;
    }
    let mut json = serde_json::to_vec(&Json::Object(map)).expect("a JSON map serialises");
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}
