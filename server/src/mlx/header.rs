//! A bounded reader for safetensors headers as MLX checkpoints and Ollama's tensor blobs use
//! them (any element type MLX writes, quantized U32 words included), plus the writer of the
//! one-tensor / packed-group blobs herd stores (Ollama's `x/create` layout).
//!
//! Invariants every successful [`read`] guarantees, so hostile files are refused with a clear
//! message and never a panic or an allocation proportional to a claimed size:
//! - the header is at most [`MAX_HEADER_LEN`] bytes and lies inside the file;
//! - every tensor has a known dtype, at most [`MAX_DIMS`] dims, a byte size (elements × dtype
//!   size, checked) equal to its `data_offsets` span, and lies inside the file's data section;
//! - entries are sorted by name; `__metadata__` (string map) is kept apart.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use serde_json::{Map, Value as Json};

use crate::error::{Error, Result};

/// The safetensors library refuses headers above 100 MB.
pub const MAX_HEADER_LEN: u64 = 100 << 20;
pub const MAX_DIMS: usize = 8;

/// One tensor entry of a header. `start` is the absolute file offset of its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub start: u64,
    pub len: u64,
}

impl Entry {
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A parsed header: tensors sorted by name, and the `__metadata__` strings.
#[derive(Clone, Debug, Default)]
pub struct Header {
    pub tensors: Vec<Entry>,
    pub metadata: BTreeMap<String, String>,
}

/// Bytes per element of the dtypes safetensors defines (`None` for an unknown name).
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => 1,
        _ => return None,
    })
}

fn bad(label: &str, msg: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("invalid safetensors file {label}: {msg}"))
}

/// Reads and validates the header of the safetensors file at `path`.
pub fn read(path: &Path) -> Result<Header> {
    let label = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    read_as(path, &label)
}

/// [`read`], naming the file `label` in errors (the uploaded file's name, not its blob).
pub fn read_as(file: &Path, label: &str) -> Result<Header> {
    let path = label;
    let mut f = std::fs::File::open(file)?;
    let file_len = f.metadata()?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| bad(path, "shorter than its 8-byte header length"))?;
    let n = u64::from_le_bytes(n);
    if n > file_len - 8 {
        return Err(bad(
            path,
            format!("the header ({n} bytes) is longer than the file ({file_len} bytes)"),
        ));
    }
    if n > MAX_HEADER_LEN {
        return Err(bad(
            path,
            format!("header of {n} bytes exceeds {MAX_HEADER_LEN}"),
        ));
    }
    let mut h = vec![0u8; n as usize];
    f.read_exact(&mut h)?;
    parse(path, &h, file_len)
}

fn parse(path: &str, h: &[u8], file_len: u64) -> Result<Header> {
    let data_start = 8 + h.len() as u64;
    let data_len = file_len - data_start;
    let v: Map<String, Json> =
        serde_json::from_slice(h).map_err(|e| bad(path, format!("header: {e}")))?;
    let mut out = Header::default();
    for (name, t) in v {
        if name == "__metadata__" {
            // MLX's writer stores `null` when there is none.
            if t.is_null() {
                continue;
            }
            let m = t
                .as_object()
                .ok_or_else(|| bad(path, "__metadata__ is not an object"))?;
            for (k, v) in m {
                let s = v
                    .as_str()
                    .ok_or_else(|| bad(path, format!("__metadata__.{k} is not a string")))?;
                out.metadata.insert(k.clone(), s.to_owned());
            }
            continue;
        }
        let dtype = t["dtype"].as_str().unwrap_or_default().to_owned();
        let size = dtype_size(&dtype)
            .ok_or_else(|| bad(path, format!("tensor {name}: unknown dtype {dtype:?}")))?;
        let shape: Vec<u64> = t["shape"]
            .as_array()
            .filter(|a| a.len() <= MAX_DIMS)
            .and_then(|a| a.iter().map(Json::as_u64).collect())
            .ok_or_else(|| bad(path, format!("tensor {name}: bad shape")))?;
        let offs: Vec<u64> = t["data_offsets"]
            .as_array()
            .filter(|a| a.len() == 2)
            .and_then(|a| a.iter().map(Json::as_u64).collect())
            .ok_or_else(|| bad(path, format!("tensor {name}: bad data_offsets")))?;
        let (a, b) = (offs[0], offs[1]);
        if a > b || b > data_len {
            return Err(bad(
                path,
                format!("tensor {name}: data offsets {a}..{b} lie past the end of the file"),
            ));
        }
        let bytes = shape
            .iter()
            .try_fold(size, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(path, format!("tensor {name}: size overflows")))?;
        if bytes != b - a {
            return Err(bad(
                path,
                format!(
                    "tensor {name}: shape {shape:?} × {dtype} needs {bytes} bytes, offsets give {}",
                    b - a
                ),
            ));
        }
        out.tensors.push(Entry {
            name,
            dtype,
            shape,
            start: data_start + a,
            len: b - a,
        });
    }
    out.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One tensor of a blob to write: its name in the blob and where its bytes are.
pub struct Part<'a> {
    pub name: String,
    pub src: &'a Entry,
    pub file: &'a std::fs::File,
}

/// Writes a safetensors file of `parts` (in order, contiguous) with `metadata`, copying each
/// tensor's bytes from its source file. The header is padded with spaces to 8 bytes (as the
/// safetensors library does) so tensor data stays aligned.
pub fn write_packed(
    w: &mut dyn Write,
    parts: &[Part<'_>],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut header = Map::new();
    if !metadata.is_empty() {
        let m: Map<String, Json> = metadata
            .iter()
            .map(|(k, v)| (k.clone(), Json::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), Json::Object(m));
    }
    let mut off = 0u64;
    for p in parts {
        header.insert(
            p.name.clone(),
            serde_json::json!({"dtype": p.src.dtype, "shape": p.src.shape, "data_offsets": [off, off + p.src.len]}),
        );
        off += p.src.len;
    }
    let mut h = serde_json::to_vec(&Json::Object(header))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    w.write_all(&(h.len() as u64).to_le_bytes())?;
    w.write_all(&h)?;
    let mut buf = vec![0u8; 1 << 20];
    for p in parts {
        let mut pos = p.src.start;
        let end = p.src.start + p.src.len;
        while pos < end {
            let n = ((end - pos) as usize).min(buf.len());
            p.file.read_exact_at(&mut buf[..n], pos)?;
            w.write_all(&buf[..n])?;
            pos += n as u64;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.write_all(&vec![0u8; data]).unwrap();
        f
    }

    #[test]
    fn headers_are_validated() {
        let ok = file(
            r#"{"b":{"dtype":"U32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"format":"mlx"},"a":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]}}"#,
            24,
        );
        let h = read(ok.path()).unwrap();
        assert_eq!(
            h.tensors
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(h.metadata["format"], "mlx");
        let cases = [
            (
                r#"{"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}"#,
                4,
                "past the end",
            ),
            (
                r#"{"a":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}}"#,
                8,
                "needs 6 bytes",
            ),
            (
                r#"{"a":{"dtype":"Q9","shape":[4],"data_offsets":[0,8]}}"#,
                8,
                "unknown dtype",
            ),
            (
                r#"{"a":{"dtype":"F16","shape":[4],"data_offsets":[8,0]}}"#,
                8,
                "past the end",
            ),
            (r#"[1]"#, 0, "header"),
        ];
        for (h, data, want) in cases {
            let f = file(h, data);
            let e = read(f.path()).unwrap_err().to_string();
            assert!(e.contains(want), "{h}: {e}");
        }
        // A header length larger than the file.
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&1000u64.to_le_bytes()).unwrap();
        f.write_all(b"{}").unwrap();
        let e = read(f.path()).unwrap_err().to_string();
        assert!(e.contains("longer than the file"), "{e}");
    }

    #[test]
    fn packed_blobs_round_trip() {
        let mut src = tempfile::NamedTempFile::new().unwrap();
        let h = r#"{"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"s":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}"#;
        src.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
        src.write_all(h.as_bytes()).unwrap();
        src.write_all(&[1, 2, 3, 4, 5]).unwrap();
        let hd = read(src.path()).unwrap();
        let f = std::fs::File::open(src.path()).unwrap();
        let parts: Vec<Part> = hd
            .tensors
            .iter()
            .rev()
            .map(|t| Part {
                name: format!("x.{}", t.name),
                src: t,
                file: &f,
            })
            .collect();
        let meta = BTreeMap::from([("quant_type".to_owned(), "int4".to_owned())]);
        let mut out = tempfile::NamedTempFile::new().unwrap();
        write_packed(out.as_file_mut(), &parts, &meta).unwrap();
        let back = read(out.path()).unwrap();
        assert_eq!(back.metadata["quant_type"], "int4");
        let bytes = std::fs::read(out.path()).unwrap();
        let w = back.tensors.iter().find(|t| t.name == "x.w").unwrap();
        assert_eq!(&bytes[w.start as usize..][..3], &[1, 2, 3]);
        assert_eq!((8 + bytes.len() - 5 - 8) % 8, 0);
    }
}
