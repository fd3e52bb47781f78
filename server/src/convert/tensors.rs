//! The output tensor plan and its streaming writer. Each output tensor names its source tensor
//! and the transforms the reference converter applies (Q/K row permutation for llama, +1 on
//! Gemma 3 norms, dropping out-of-vocabulary embedding rows), and its output type (`--outtype
//! f16`: F16 for ≥2-D weights, F32 for 1-D tensors, norms and anything not named `.weight`).
//!
//! Memory bound: data moves in chunks of at most `CHUNK` input bytes (whole rows; one row at a
//! time when a row is larger), so peak memory is a few MiB whatever the tensor size. Every
//! transform maps output rows to input rows, which is what makes chunking possible.

use std::io::Write;

use super::arch::{Arch, Hparams};
use super::float;
use super::safetensors::{Dtype, SafeTensors, StTensor};
use crate::error::{Error, Result};
use crate::gguf::GgmlType;

const CHUNK: u64 = 8 << 20;

#[derive(Clone, Debug)]
pub struct OutTensor {
    pub name: String,
    /// Index of the checkpoint part and of the tensor within it; `None` for generated data.
    pub src: Option<(usize, usize)>,
    /// Generated F32 data (llama3 rope frequency factors).
    pub data: Option<Vec<f32>>,
    /// Row-major output shape.
    pub shape: Vec<u64>,
    pub out_type: GgmlType,
    /// Q/K permutation: the head count to permute rows by.
    pub permute_heads: Option<u64>,
    /// Added to every element (Gemma 3 norms store weight − 1).
    pub shift: f32,
}

impl OutTensor {
    pub fn n_bytes(&self) -> u64 {
        let n: u64 = self.shape.iter().product();
        n * self.out_type.type_size()
    }

    /// ggml order: the row length first.
    pub fn dims(&self) -> Vec<u64> {
        self.shape.iter().rev().copied().collect()
    }
}

/// Decides the output tensors for one source tensor (already renamed by `arch::map_tensor_name`).
pub fn plan_one(
    hp: &Hparams,
    new_name: String,
    src: (usize, usize),
    t: &StTensor,
    n_vocab: Option<u64>,
) -> Result<OutTensor> {
    let mut shape = t.shape.clone();
    let mut permute_heads = None;
    if hp.arch == Arch::Llama {
        if t.name.ends_with("q_proj.weight") || t.name.ends_with("q_proj.bias") {
            permute_heads = Some(hp.n_head()?);
        } else if t.name.ends_with("k_proj.weight") || t.name.ends_with("k_proj.bias") {
            let (h, kv) = (hp.n_head()?, hp.n_head_kv()?);
            permute_heads = Some(if h != kv { kv } else { h });
        }
    }
    if let Some(h) = permute_heads {
        let rows = shape.first().copied().unwrap_or(0);
        if h == 0 || rows % (2 * h) != 0 {
            return Err(Error::BadRequest(format!(
                "tensor {:?}: {rows} rows cannot be split into {h} rotary heads",
                t.name
            )));
        }
    }
    let mut shift = 0.0;
    if hp.arch == Arch::Gemma3 {
        if t.name.contains("embed_tokens.weight") {
            if let (Some(n), Some(rows)) = (n_vocab, shape.first_mut()) {
                *rows = (*rows).min(n);
            }
        }
        if t.name.ends_with("norm.weight") {
            shift = 1.0;
        }
    }
    let n_dims = shape.len();
    let out_type =
        if n_dims <= 1 || new_name.ends_with("_norm.weight") || !new_name.ends_with(".weight") {
            GgmlType::F32
        } else {
            GgmlType::F16
        };
    Ok(OutTensor {
        name: new_name,
        src: Some(src),
        data: None,
        shape,
        out_type,
        permute_heads,
        shift,
    })
}

/// Llama 3 rope frequency factors (the reference's `rope_freqs.weight`), or `None` when the
/// config has no llama3 rope scaling.
pub fn llama3_rope_freqs(hp: &Hparams) -> Result<Option<OutTensor>> {
    let Some(rope) = hp.rope_scaling() else {
        return Ok(None);
    };
    let kind = rope
        .get("rope_type")
        .or_else(|| rope.get("type"))
        .and_then(|v| v.as_str());
    if hp.arch != Arch::Llama || !kind.is_some_and(|k| k.eq_ignore_ascii_case("llama3")) {
        return Ok(None);
    }
    let num = |k: &str, d: f64| rope.get(k).and_then(|v| v.as_f64()).unwrap_or(d);
    let base = rope
        .get("rope_theta")
        .and_then(|v| v.as_f64())
        .or_else(|| hp.get("rope_theta").and_then(|v| v.as_f64()))
        .unwrap_or(10000.0);
    let dim = match hp.get("head_dim").and_then(|v| v.as_u64()) {
        Some(d) => d,
        None => hp.find_u64(&["hidden_size"]).unwrap_or(0) / hp.n_head()?,
    };
    let factor = num("factor", 8.0);
    let low = num("low_freq_factor", 1.0);
    let high = num("high_freq_factor", 4.0);
    let old_ctx = num("original_max_position_embeddings", 8192.0);
    let (low_wavelen, high_wavelen) = ((old_ctx / low) as f32, (old_ctx / high) as f32);
    // The reference computes in f32 (torch tensors with Python scalars); so does this.
    let (factor, low, high, old_ctx) = (factor as f32, low as f32, high as f32, old_ctx as f32);
    let data: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| {
            let exp = (i as f32) / (dim as f32);
            let freq = 1.0f32 / (base as f32).powf(exp);
            let wavelen = (2.0 * std::f64::consts::PI) as f32 / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect();
    Ok(Some(OutTensor {
        name: "rope_freqs.weight".into(),
        src: None,
        shape: vec![data.len() as u64],
        data: Some(data),
        out_type: GgmlType::F32,
        permute_heads: None,
        shift: 0.0,
    }))
}

/// Input row for output row `o` under the reference's permutation
/// `reshape(h, 2, rows/h/2, …).swapaxes(1, 2).reshape(rows, …)`.
fn permuted_row(o: u64, rows: u64, heads: u64) -> u64 {
    let half = rows / heads / 2;
    let (h, rem) = (o / (2 * half), o % (2 * half));
    let (j, k) = (rem / 2, rem % 2);
    h * 2 * half + k * half + j
}

/// Converts `n` elements of `src` (dtype `d`) into `out` as `ty`, adding `shift`.
fn convert_into(d: Dtype, src: &[u8], n: usize, ty: GgmlType, shift: f32, out: &mut Vec<u8>) {
    let src = &src[..n * d.size() as usize];
    out.reserve(n * ty.type_size() as usize);
    // The common cases get their own loops: no per-element dispatch, and f16 → f16 is a copy
    // (widening then narrowing an f16 is exact).
    match (d, ty, shift == 0.0) {
        (Dtype::F16, GgmlType::F16, true) => out.extend_from_slice(src),
        (Dtype::BF16, GgmlType::F16, true) => {
            for c in src.chunks_exact(2) {
                let x = float::bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                out.extend_from_slice(&float::f32_to_f16(x).to_le_bytes());
            }
        }
        (Dtype::F32, GgmlType::F16, true) => {
            for c in src.chunks_exact(4) {
                let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                out.extend_from_slice(&float::f32_to_f16(x).to_le_bytes());
            }
        }
        _ => {
            for i in 0..n {
                let mut x = float::load(d, src, i);
                if shift != 0.0 {
                    x += shift;
                    // torch adds to an f16 tensor in f16: the sum is rounded to f16 first.
                    if d == Dtype::F16 {
                        x = float::f16_to_f32(float::f32_to_f16(x));
                    }
                }
                if ty == GgmlType::F16 {
                    out.extend_from_slice(&float::f32_to_f16(x).to_le_bytes());
                } else {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
}

/// Streams one output tensor's data into `w`.
pub fn write_data(
    o: &OutTensor,
    part: Option<&SafeTensors>,
    t: Option<&StTensor>,
    w: &mut dyn Write,
) -> Result<()> {
    if let Some(data) = &o.data {
        for x in data {
            w.write_all(&x.to_le_bytes())?;
        }
        return Ok(());
    }
    let (Some(part), Some(t)) = (part, t) else {
        return Err(Error::Internal(format!("tensor {} has no source", o.name)));
    };
    let rows = o.shape.first().copied().unwrap_or(1).max(1);
    let row_elems: u64 = o.shape.iter().skip(1).product();
    let row_elems = if o.shape.is_empty() { 1 } else { row_elems };
    let row_bytes = row_elems * t.dtype.size();
    let mut inbuf: Vec<u8> = Vec::new();
    let mut outbuf: Vec<u8> = Vec::new();
    let rows_per_chunk = match o.permute_heads {
        Some(_) => 1,
        None => (CHUNK / row_bytes.max(1)).max(1),
    };
    let mut r = 0u64;
    while r < rows {
        let n_rows = rows_per_chunk.min(rows - r);
        let src_row = match o.permute_heads {
            Some(h) => permuted_row(r, rows, h),
            None => r,
        };
        let bytes = (n_rows * row_bytes) as usize;
        inbuf.resize(bytes, 0);
        part.read_at(t, src_row * row_bytes, &mut inbuf)?;
        outbuf.clear();
        convert_into(
            t.dtype,
            &inbuf,
            (n_rows * row_elems) as usize,
            o.out_type,
            o.shift,
            &mut outbuf,
        );
        w.write_all(&outbuf)?;
        r += n_rows;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_matches_reshape_swapaxes() {
        // 2 heads × 2 halves × 3 rows each: within a head, rows interleave the two halves.
        let got: Vec<u64> = (0..12).map(|o| permuted_row(o, 12, 2)).collect();
        assert_eq!(got, [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
        // A permutation: every input row used once.
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, (0..12).collect::<Vec<_>>());
    }
}
