//! A small GGUF v3 writer: key/values of any type, tensors with a given type, shape and bytes,
//! and alignment padding. Tests use it to build fixtures; `create` can use it to rewrite metadata.
//! It refuses to write what the reader would reject (wrong data length, unaligned layout), so a
//! fixture that builds is a valid file.

use std::io::Write;

use super::types::GgmlType;
use super::value::{ArrayValues, Value};
use crate::error::{Error, Result};

#[derive(Clone, Debug, Default)]
pub struct GgufBuilder {
    kvs: Vec<(String, Value)>,
    tensors: Vec<(String, GgmlType, Vec<u64>, Vec<u8>)>,
}

impl GgufBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a key/value (file order is call order). Setting `general.alignment` (a u32) changes
    /// the padding used for tensor data.
    pub fn kv(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.kvs.push((key.to_owned(), value.into()));
        self
    }

    /// Appends a tensor; `dims` is in ggml order (row length first) and `data` must be exactly the
    /// type's size for that shape (checked by `build`).
    pub fn tensor(mut self, name: &str, ty: GgmlType, dims: &[u64], data: Vec<u8>) -> Self {
        self.tensors
            .push((name.to_owned(), ty, dims.to_vec(), data));
        self
    }

    /// An F32 tensor of the given shape filled with zeros.
    pub fn zeros_f32(self, name: &str, dims: &[u64]) -> Self {
        let n: u64 = dims.iter().product();
        self.tensor(name, GgmlType::F32, dims, vec![0; (n * 4) as usize])
    }

    /// A minimal llama-architecture model: the hyper-parameter keys a scheduler reads, a file type,
    /// and two F32 tensors (2×8 token embedding + 8-element norm, 24 parameters). Add a chat
    /// template with `.kv("tokenizer.chat_template", ...)`.
    pub fn tiny_llama() -> Self {
        GgufBuilder::new()
            .kv("general.architecture", "llama")
            .kv("general.name", "tiny")
            .kv("general.file_type", 0u32)
            .kv("llama.context_length", 4096u32)
            .kv("llama.embedding_length", 8u32)
            .kv("llama.block_count", 1u32)
            .kv("llama.attention.head_count", 2u32)
            .kv("llama.attention.head_count_kv", 1u32)
            .kv("tokenizer.ggml.model", "gpt2")
            .kv("tokenizer.ggml.tokens", vec!["a", "b"])
            .zeros_f32("token_embd.weight", &[8, 2])
            .zeros_f32("output_norm.weight", &[8])
    }

    fn alignment(&self) -> Result<u64> {
        match self.kvs.iter().find(|(k, _)| k == "general.alignment") {
            None => Ok(32),
            Some((_, Value::U32(a))) if a.is_power_of_two() => Ok((*a).into()),
            Some(_) => Err(Error::InvalidGguf(
                "general.alignment must be a power-of-two u32".into(),
            )),
        }
    }

    pub fn build(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    pub fn write_to<W: Write>(&self, w: &mut W) -> Result<()> {
        let align = self.alignment()?;
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            if let Value::Array(a) = v {
                if a.values.is_none() && a.len > 0 {
                    return Err(Error::InvalidGguf(format!(
                        "{k}: array elements were not read; re-read with full_arrays to rewrite it"
                    )));
                }
            }
            put_str(&mut head, k);
            head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (name, ty, dims, data) in &self.tensors {
            let n: u64 = dims.iter().product();
            let want = ty.bytes_for(dims.first().copied().unwrap_or(1), n);
            if want != Some(data.len() as u64) {
                return Err(Error::InvalidGguf(format!(
                    "tensor {name:?}: {} bytes of data, shape needs {want:?}",
                    data.len()
                )));
            }
            put_str(&mut head, name);
            head.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&ty.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len() as u64).next_multiple_of(align);
        }
        if !self.tensors.is_empty() {
            pad(&mut head, align);
        }
        w.write_all(&head)?;
        let mut written = 0u64;
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            w.write_all(&vec![0; (off - written) as usize])?;
            w.write_all(data)?;
            written = off + data.len() as u64;
        }
        Ok(())
    }
}

fn pad(buf: &mut Vec<u8>, align: u64) {
    let len = buf.len() as u64;
    buf.resize(len.next_multiple_of(align) as usize, 0);
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::Array(a) => {
            buf.extend_from_slice(&(a.elem as u32).to_le_bytes());
            buf.extend_from_slice(&a.len.to_le_bytes());
            // `write_to` refused summarized arrays of non-zero length up front.
            let Some(values) = &a.values else { return };
            macro_rules! each {
                ($v:expr) => {
                    for x in $v {
                        buf.extend_from_slice(&x.to_le_bytes());
                    }
                };
            }
            match values {
                ArrayValues::U8(v) => buf.extend_from_slice(v),
                ArrayValues::I8(v) => each!(v),
                ArrayValues::U16(v) => each!(v),
                ArrayValues::I16(v) => each!(v),
                ArrayValues::U32(v) => each!(v),
                ArrayValues::I32(v) => each!(v),
                ArrayValues::U64(v) => each!(v),
                ArrayValues::I64(v) => each!(v),
                ArrayValues::F32(v) => each!(v),
                ArrayValues::F64(v) => each!(v),
                ArrayValues::Bool(v) => buf.extend(v.iter().map(|b| u8::from(*b))),
                ArrayValues::String(v) => v.iter().for_each(|s| put_str(buf, s)),
            }
        }
    }
}
