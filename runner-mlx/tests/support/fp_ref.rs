//! What the fp-format tests need beside the tiny model: a minimal safetensors reader and
//! writer, and an independent pure-Rust decoder of MLX's nvfp4 / mxfp4 / mxfp8 weights (E2M1
//! and E4M3 elements, E4M3 and E8M0 block scales, values packed into u32 words from the low
//! bits up), so a checkpoint's quantized weights can be dequantized to f32 without MLX.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// One tensor: safetensors dtype, shape, little-endian bytes.
pub type Tensor = (String, Vec<usize>, Vec<u8>);
pub type File = (BTreeMap<String, Tensor>, BTreeMap<String, String>);

/// The tensors and `__metadata__` of a safetensors file.
pub fn read(path: &Path) -> File {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let h: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut tensors = BTreeMap::new();
    let mut meta = BTreeMap::new();
    for (name, t) in h.as_object().unwrap() {
        if name == "__metadata__" {
            for (k, v) in t.as_object().into_iter().flatten() {
                meta.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
            }
            continue;
        }
        let o: Vec<usize> = t["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let shape = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let dtype = t["dtype"].as_str().unwrap().to_owned();
        tensors.insert(name.clone(), (dtype, shape, data[o[0]..o[1]].to_vec()));
    }
    (tensors, meta)
}

/// Writes `tensors` (and `metadata` when not empty) as a safetensors file.
pub fn write(path: &Path, tensors: &BTreeMap<String, Tensor>, metadata: &BTreeMap<String, String>) {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), json!(metadata));
    }
    let mut data: Vec<u8> = Vec::new();
    for (name, (dtype, shape, bytes)) in tensors {
        let start = data.len();
        data.extend(bytes);
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let h = Value::Object(header).to_string().into_bytes();
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(data);
    std::fs::write(path, file).unwrap();
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// FP4 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
pub fn e2m1(n: u32) -> f32 {
    let (s, e, m) = ((n >> 3) & 1, (n >> 1) & 3, n & 1);
    let v = if e == 0 {
        0.5 * m as f32
    } else {
        (1.0 + 0.5 * m as f32) * 2f32.powi(e as i32 - 1)
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// FP8 E4M3 (OCP, "fn": no infinities): 4 exponent bits (bias 7), 3 mantissa bits.
pub fn e4m3(b: u32) -> f32 {
    let (s, e, m) = ((b >> 7) & 1, (b >> 3) & 15, b & 7);
    let v = if e == 0 {
        m as f32 / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m as f32 / 8.0) * 2f32.powi(e as i32 - 7)
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// E8M0: a power of two, 2^(b - 127).
pub fn e8m0(b: u32) -> f32 {
    2f32.powi(b as i32 - 127)
}

/// The f32 values of an fp-mode weight `[rows, words]` with U8 `scales` `[rows, groups]`:
/// element = element code × block scale (× `global`, one scalar or one per row).
pub fn dequantize(
    mode: &str,
    words: &[u32],
    rows: usize,
    scales: &[u8],
    global: Option<&[f32]>,
) -> Vec<f32> {
    let (bits, group) = match mode {
        "nvfp4" => (4, 16),
        "mxfp4" => (4, 32),
        "mxfp8" => (8, 32),
        m => panic!("not an fp mode: {m}"),
    };
    let per_word = 32 / bits;
    let cols = words.len() / rows * per_word;
    let groups = cols / group;
    assert_eq!(scales.len(), rows * groups, "{mode}: scales per row");
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let m = global.map_or(1.0, |g| if g.len() == 1 { g[0] } else { g[r] });
        for c in 0..cols {
            let word = words[(r * cols + c) / per_word];
            let code = (word >> (bits * (c % per_word))) & ((1 << bits) - 1);
            let s = scales[r * groups + c / group] as u32;
            let (v, scale) = match mode {
                "nvfp4" => (e2m1(code), e4m3(s)),
                "mxfp4" => (e2m1(code), e8m0(s)),
                _ => (e4m3(code), e8m0(s)),
            };
            out.push(v * scale * m);
        }
    }
    out
}

#[test]
fn decoders_know_the_formats() {
    let fp4: Vec<f32> = (0..16).map(e2m1).collect();
    assert_eq!(
        fp4,
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    );
    // E4M3's largest finite value, one, its smallest subnormal; E8M0's one and two.
    assert_eq!(
        (e4m3(0x7E), e4m3(0x38), e4m3(0x01)),
        (448.0, 1.0, 2f32.powi(-9))
    );
    assert_eq!((e4m3(0xB8), e8m0(127), e8m0(128)), (-1.0, 1.0, 2.0));
    // Low bits first: element 1 of a word is its second nibble.
    let w = [0x0000_0020u32];
    let d = dequantize("nvfp4", &[w[0], 0], 1, &[0x38], None);
    assert_eq!((d[0], d[1], d.len()), (0.0, 1.0, 16));
}
