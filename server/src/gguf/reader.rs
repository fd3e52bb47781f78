//! The GGUF metadata reader: header, key/values and tensor infos of a little-endian GGUF v2/v3
//! file, validated so that hostile input fails with `Error::InvalidGguf` and never panics, never
//! allocates more than a small multiple of the file's size, and never reads tensor data.
//!
//! Invariants every successful read guarantees (each one answers a known parser CVE, see
//! shared/research/anchors.md §1):
//! - every length and count is checked against the bytes left in the file *before* allocating;
//!   strings are ≤ 16 MiB, arrays ≤ 64 Mi elements, key/value and tensor counts ≤ 1 Mi;
//! - arrays hold scalars or strings only (nested arrays are refused, so depth is 1), and an
//!   unknown element type is an error, not a skip;
//! - tensors have ≤ 4 dims, an element count and byte size that fit in i64 (checked arithmetic),
//!   a known ggml type whose block size divides the row, an offset aligned to `general.alignment`
//!   (a u32 power of two ≤ 1 MiB, default 32), and lie wholly inside the file;
//! - keys and tensor names are unique valid UTF-8; `general.architecture` is a string and
//!   `<arch>.block_count`, when present, an integer ≤ 512 (llama.cpp's layer limit).

use std::collections::HashSet;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use super::types::GgmlType;
use super::value::{Array, ArrayValues, Value, ValueType};
use crate::error::{Error, Result};

pub const MAX_STRING_LEN: u64 = 16 << 20;
pub const MAX_ARRAY_LEN: u64 = 64 << 20;
pub const MAX_DIMS: u32 = 4;
/// Real models have < 100 keys and < 10k tensors; the cap bounds the info vectors on huge files.
pub const MAX_KV_COUNT: u64 = 1 << 20;
pub const MAX_TENSOR_COUNT: u64 = 1 << 20;
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// llama.cpp's `LLAMA_MAX_LAYERS`; larger values overflowed fixed arrays there (#25821).
pub const MAX_BLOCK_COUNT: u64 = 512;
/// Arrays up to this many elements are always kept; longer ones only with `full_arrays`.
pub const INLINE_ARRAY_MAX: u64 = 1024;

const MAGIC: &[u8; 4] = b"GGUF";
/// Smallest encodings: a KV is key length + type + a 1-byte value; a tensor info is name length
/// + n_dims + type + offset.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// What to materialise while reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Keep every array's elements (needed by `/api/show` with `verbose`); otherwise arrays longer
    /// than `INLINE_ARRAY_MAX` keep only their type and length and their bytes are skipped.
    pub full_arrays: bool,
}

/// A parsed GGUF metadata prefix.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufFile {
    pub version: u32,
    /// Key/values in file order.
    pub kvs: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the tensor data section; tensor offsets are relative to it.
    pub data_offset: u64,
    pub file_size: u64,
    /// Sum of all tensors' element counts (cannot overflow: checked while reading).
    pub parameter_count: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from `GgufFile::data_offset`.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kvs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Reads the metadata of the GGUF at `path`; tensor data is not read.
pub fn read_path(path: &Path, opts: ReadOptions) -> Result<GgufFile> {
    read(std::fs::File::open(path)?, opts)
}

pub fn read_bytes(bytes: &[u8], opts: ReadOptions) -> Result<GgufFile> {
    read(std::io::Cursor::new(bytes), opts)
}

/// Reads the metadata prefix of a GGUF from any seekable source.
pub fn read<R: Read + Seek>(mut source: R, opts: ReadOptions) -> Result<GgufFile> {
    let file_size = source.seek(SeekFrom::End(0))?;
    source.seek(SeekFrom::Start(0))?;
    let mut c = Cursor {
        r: BufReader::with_capacity(64 << 10, source),
        pos: 0,
        len: file_size,
    };
    parse(&mut c, opts, file_size)
}

fn parse<R: Read + Seek>(c: &mut Cursor<R>, opts: ReadOptions, file_size: u64) -> Result<GgufFile> {
    let magic = c.bytes(4, "magic")?;
    if magic != MAGIC {
        return Err(c.err_at(0, "magic", "not a GGUF file"));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err(c.err_at(4, "version", "GGUF v1 is not supported")),
        v if (1..=3).contains(&v.swap_bytes()) => {
            return Err(c.err_at(4, "version", "big-endian GGUF is not supported"))
        }
        v => return Err(c.err_at(4, "version", &format!("unsupported GGUF version {v}"))),
    }
    let tensor_count = c.u64("tensor_count")?;
    let kv_count = c.u64("kv_count")?;
    c.check_count(kv_count, MAX_KV_COUNT, MIN_KV_BYTES, "kv_count")?;
    // The tensor infos follow the KVs; this early check is loose, the exact one runs after them.
    c.check_count(
        tensor_count,
        MAX_TENSOR_COUNT,
        MIN_TENSOR_INFO_BYTES,
        "tensor_count",
    )?;

    let mut kvs: Vec<(String, Value)> = Vec::with_capacity(kv_count.min(256) as usize);
    let mut keys = HashSet::new();
    for _ in 0..kv_count {
        let at = c.pos;
        let key = c.utf8("key")?;
        if !keys.insert(key.clone()) {
            return Err(c.err_at(at, &format!("key {key:?}"), "duplicate key"));
        }
        let ty = c.value_type(&key)?;
        let value = c.value(ty, &key, opts)?;
        kvs.push((key, value));
    }
    let alignment = check_known_keys(&kvs)?;

    c.check_count(
        tensor_count,
        MAX_TENSOR_COUNT,
        MIN_TENSOR_INFO_BYTES,
        "tensor_count",
    )?;
    let mut tensors = Vec::with_capacity(tensor_count.min(1024) as usize);
    let mut names = HashSet::new();
    let mut parameter_count: u64 = 0;
    for _ in 0..tensor_count {
        let at = c.pos;
        let t = c.tensor_info()?;
        if !names.insert(t.name.clone()) {
            return Err(c.err_at(at, &format!("tensor {:?}", t.name), "duplicate tensor name"));
        }
        parameter_count = parameter_count
            .checked_add(t.n_elements)
            .ok_or_else(|| c.err_at(at, "tensor", "total parameter count overflows"))?;
        tensors.push(t);
    }

    let data_offset = c
        .pos
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| c.err_at(c.pos, "data offset", "overflows"))?;
    for t in &tensors {
        let what = format!("tensor {:?}", t.name);
        if !t.offset.is_multiple_of(alignment) {
            let msg = format!(
                "offset {} is not a multiple of alignment {alignment}",
                t.offset
            );
            return Err(c.err_at(data_offset, &what, &msg));
        }
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_size => {}
            _ => {
                let msg = format!(
                    "data at {}+{} ({} bytes) extends past end of file ({file_size} bytes)",
                    data_offset, t.offset, t.n_bytes
                );
                return Err(c.err_at(data_offset, &what, &msg));
            }
        }
    }

    Ok(GgufFile {
        version,
        kvs,
        tensors,
        alignment,
        data_offset,
        file_size,
        parameter_count,
    })
}

/// Type and range checks on the few keys whose misuse crashed other loaders. Returns the alignment.
fn check_known_keys(kvs: &[(String, Value)]) -> Result<u64> {
    let get = |k: &str| kvs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    let bad = |m: String| Err(Error::InvalidGguf(clip(&m)));
    let alignment = match get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() && u64::from(*a) <= MAX_ALIGNMENT => (*a).into(),
        Some(Value::U32(a)) => {
            return bad(format!(
                "general.alignment: {a} is not a power of two in 1..={MAX_ALIGNMENT}"
            ))
        }
        Some(v) => {
            return bad(format!(
                "general.alignment: must be uint32, found {:?}",
                v.value_type()
            ))
        }
    };
    let arch = match get("general.architecture") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => {
            let t = v.value_type();
            return bad(format!(
                "general.architecture: must be a string, found {t:?}"
            ));
        }
    };
    if let Some(arch) = arch {
        let key = format!("{arch}.block_count");
        if let Some(v) = get(&key) {
            match v.as_u64() {
                Some(n) if n <= MAX_BLOCK_COUNT => {}
                Some(n) => return bad(format!("{key}: {n} exceeds the maximum {MAX_BLOCK_COUNT}")),
                None => {
                    let t = v.value_type();
                    return bad(format!(
                        "{key}: must be a non-negative integer, found {t:?}"
                    ));
                }
            }
        }
    }
    Ok(alignment)
}

/// Keys, names and architectures may be up to 16 MiB; error messages carry a short prefix.
fn clip(s: &str) -> String {
    match s.char_indices().nth(160) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s.to_owned(),
    }
}

/// A position-tracking reader over a source of known length. Every read first checks that the
/// bytes exist, so a claimed length can never make us allocate or seek past the end.
struct Cursor<R> {
    r: BufReader<R>,
    pos: u64,
    len: u64,
}

impl<R: Read + Seek> Cursor<R> {
    fn err_at(&self, at: u64, what: &str, msg: &str) -> Error {
        Error::InvalidGguf(format!("{} at offset {at}: {msg}", clip(what)))
    }

    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    fn need(&self, n: u64, what: &str) -> Result<()> {
        if n > self.remaining() {
            let msg = format!(
                "needs {n} bytes, only {} left (truncated file)",
                self.remaining()
            );
            return Err(self.err_at(self.pos, what, &msg));
        }
        Ok(())
    }

    /// Rejects a count above `max`, or one whose items (each ≥ `min_bytes`) cannot fit.
    fn check_count(&self, n: u64, max: u64, min_bytes: u64, what: &str) -> Result<()> {
        if n > max {
            return Err(self.err_at(self.pos, what, &format!("{n} exceeds the maximum {max}")));
        }
        if n.saturating_mul(min_bytes) > self.remaining() {
            let msg = format!(
                "{n} entries cannot fit in the {} bytes left",
                self.remaining()
            );
            return Err(self.err_at(self.pos, what, &msg));
        }
        Ok(())
    }

    fn io(&self, e: std::io::Error, what: &str) -> Error {
        if e.kind() == ErrorKind::UnexpectedEof {
            // The source shrank under us: same as a truncated file.
            self.err_at(self.pos, what, "unexpected end of file")
        } else {
            Error::Io(e)
        }
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        self.need(n, what)?;
        let mut buf = vec![0; n as usize];
        self.r.read_exact(&mut buf).map_err(|e| self.io(e, what))?;
        self.pos += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        self.need(N as u64, what)?;
        let mut buf = [0; N];
        self.r.read_exact(&mut buf).map_err(|e| self.io(e, what))?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<()> {
        self.need(n, what)?;
        let delta = i64::try_from(n).map_err(|_| self.err_at(self.pos, what, "skip too large"))?;
        self.r.seek_relative(delta).map_err(|e| self.io(e, what))?;
        self.pos += n;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string_len(&mut self, what: &str) -> Result<u64> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n > MAX_STRING_LEN {
            let msg = format!("string length {n} exceeds the maximum {MAX_STRING_LEN}");
            return Err(self.err_at(at, what, &msg));
        }
        self.need(n, what)?;
        Ok(n)
    }

    /// A string that must be valid UTF-8 (keys, tensor names).
    fn utf8(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let n = self.string_len(what)?;
        let bytes = self.bytes(n, what)?;
        String::from_utf8(bytes).map_err(|_| self.err_at(at, what, "not valid UTF-8"))
    }

    /// A string value: invalid UTF-8 is replaced (U+FFFD), as Go's JSON encoder would print it;
    /// token lists of some converters carry raw bytes and llama.cpp accepts them.
    fn lossy(&mut self, what: &str) -> Result<String> {
        let n = self.string_len(what)?;
        let bytes = self.bytes(n, what)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType> {
        let at = self.pos;
        let id = self.u32(key)?;
        ValueType::from_id(id)
            .ok_or_else(|| self.err_at(at, key, &format!("unknown value type {id}")))
    }

    fn value(&mut self, ty: ValueType, key: &str, opts: ReadOptions) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(key)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(key)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            ValueType::Bool => Value::Bool(self.bool(key)?),
            ValueType::String => Value::String(self.lossy(key)?),
            ValueType::Array => Value::Array(self.array_value(key, opts)?),
        })
    }

    fn bool(&mut self, what: &str) -> Result<bool> {
        let at = self.pos;
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err_at(at, what, &format!("bool byte {b} is neither 0 nor 1"))),
        }
    }

    fn array_value(&mut self, key: &str, opts: ReadOptions) -> Result<Array> {
        let at = self.pos;
        let elem = self.value_type(key)?;
        if elem == ValueType::Array {
            return Err(self.err_at(at, key, "nested arrays are not supported"));
        }
        let len = self.u64(key)?;
        if len > MAX_ARRAY_LEN {
            let msg = format!("array length {len} exceeds the maximum {MAX_ARRAY_LEN}");
            return Err(self.err_at(at, key, &msg));
        }
        if len * elem.min_size() > self.remaining() {
            let msg = format!(
                "array of {len} {elem:?} cannot fit in the {} bytes left",
                self.remaining()
            );
            return Err(self.err_at(at, key, &msg));
        }
        let values = if opts.full_arrays || len <= INLINE_ARRAY_MAX {
            Some(self.array_values(elem, len, key)?)
        } else {
            match elem.fixed_size() {
                Some(size) => self.skip(len * size, key)?,
                None => {
                    for _ in 0..len {
                        let n = self.string_len(key)?;
                        self.skip(n, key)?;
                    }
                }
            }
            None
        };
        Ok(Array { elem, len, values })
    }

    /// Reads `len` elements; the caller checked that `len * min_size` bytes remain.
    fn array_values(&mut self, elem: ValueType, len: u64, key: &str) -> Result<ArrayValues> {
        let Some(size) = elem.fixed_size() else {
            let mut out = Vec::with_capacity(len as usize);
            for _ in 0..len {
                out.push(self.lossy(key)?);
            }
            return Ok(ArrayValues::String(out));
        };
        let raw = self.bytes(len * size, key)?;
        fn conv<T, const N: usize>(raw: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
            raw.chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunks_exact yields N bytes")))
                .collect()
        }
        Ok(match elem {
            ValueType::U8 => ArrayValues::U8(raw),
            ValueType::I8 => ArrayValues::I8(conv(&raw, i8::from_le_bytes)),
            ValueType::U16 => ArrayValues::U16(conv(&raw, u16::from_le_bytes)),
            ValueType::I16 => ArrayValues::I16(conv(&raw, i16::from_le_bytes)),
            ValueType::U32 => ArrayValues::U32(conv(&raw, u32::from_le_bytes)),
            ValueType::I32 => ArrayValues::I32(conv(&raw, i32::from_le_bytes)),
            ValueType::U64 => ArrayValues::U64(conv(&raw, u64::from_le_bytes)),
            ValueType::I64 => ArrayValues::I64(conv(&raw, i64::from_le_bytes)),
            ValueType::F32 => ArrayValues::F32(conv(&raw, f32::from_le_bytes)),
            ValueType::F64 => ArrayValues::F64(conv(&raw, f64::from_le_bytes)),
            ValueType::Bool => {
                if let Some(b) = raw.iter().find(|b| **b > 1) {
                    let msg = format!("bool byte {b} is neither 0 nor 1");
                    return Err(self.err_at(self.pos - len, key, &msg));
                }
                ArrayValues::Bool(raw.iter().map(|b| *b == 1).collect())
            }
            ValueType::String | ValueType::Array => unreachable!("fixed-size types only"),
        })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let at = self.pos;
        let name = self.utf8("tensor name")?;
        let what = format!("tensor {name:?}");
        let n_dims = self.u32(&what)?;
        if n_dims > MAX_DIMS {
            let msg = format!("n_dims {n_dims} exceeds the maximum {MAX_DIMS}");
            return Err(self.err_at(at, &what, &msg));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for _ in 0..n_dims {
            let d = self.u64(&what)?;
            n_elements = n_elements
                .checked_mul(d)
                .filter(|n| *n <= i64::MAX as u64)
                .filter(|_| d <= i64::MAX as u64)
                .ok_or_else(|| self.err_at(at, &what, "element count overflows"))?;
            dims.push(d);
        }
        let type_at = self.pos;
        let type_id = self.u32(&what)?;
        let ggml_type = GgmlType::from_id(type_id)
            .ok_or_else(|| self.err_at(type_at, &what, &format!("unknown ggml type {type_id}")))?;
        let offset = self.u64(&what)?;
        let row = dims.first().copied().unwrap_or(1);
        let n_bytes = ggml_type
            .bytes_for(row, n_elements)
            .filter(|b| *b <= i64::MAX as u64)
            .ok_or_else(|| {
                let msg = format!(
                    "row length {row} is not a multiple of {}'s block size {}, or the size overflows",
                    ggml_type.name(),
                    ggml_type.block_size()
                );
                self.err_at(at, &what, &msg)
            })?;
        Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_elements,
            n_bytes,
        })
    }
}
