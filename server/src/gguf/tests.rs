//! Reader/writer tests: round trips through `GgufBuilder`, every hard bound of the reader on
//! hand-made hostile files, truncation at every byte, and the derived `info` facts.

use super::*;
use crate::error::Error;

/// Hand-assembled GGUF bytes, for files the builder refuses to write.
#[derive(Clone, Default)]
pub(crate) struct Raw(pub Vec<u8>);

impl Raw {
    pub fn header(version: u32, tensors: u64, kvs: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(version).u64(tensors).u64(kvs)
    }
    pub fn u32(mut self, v: u32) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A tensor info: name, dims, ggml type id, offset.
    pub fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for d in dims {
            r = r.u64(*d);
        }
        r.u32(ty).u64(offset)
    }
    pub fn pad(mut self, align: usize) -> Raw {
        self.0.resize(self.0.len().next_multiple_of(align), 0);
        self
    }
    pub fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

fn parse(b: &[u8]) -> Result<GgufFile, Error> {
    read_bytes(b, ReadOptions::default())
}

/// Asserts the bytes are rejected as invalid GGUF with a message containing `needle`.
#[track_caller]
fn rejects(b: &[u8], needle: &str) {
    match parse(b) {
        Err(Error::InvalidGguf(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected InvalidGguf({needle:?}), got {other:?}"),
    }
}

fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor("t", dims, ty, offset)
        .pad(32)
        .zeros(data)
        .0
}

fn every_type_builder() -> GgufBuilder {
    GgufBuilder::new()
        .kv("general.architecture", "llama")
        .kv("general.alignment", 64u32)
        .kv("u8", 1u8)
        .kv("i8", -2i8)
        .kv("u16", 3u16)
        .kv("i16", -4i16)
        .kv("u32", 5u32)
        .kv("i32", -6i32)
        .kv("u64", u64::MAX)
        .kv("i64", i64::MIN)
        .kv("f32", 0.5f32)
        .kv("f64", -1.25f64)
        .kv("bool", true)
        .kv("str", "héllo")
        .kv("empty", Vec::<u32>::new())
        .kv("a.u8", vec![1u8, 2])
        .kv("a.i16", vec![-1i16, 7])
        .kv("a.u64", vec![9u64])
        .kv("a.f32", vec![1.5f32, -0.0])
        .kv("a.f64", vec![2.5f64])
        .kv("a.bool", vec![true, false])
        .kv("a.str", vec!["x", "", "zz"])
        .tensor("q4k", GgmlType::Q4_K, &[256, 2], vec![7; 2 * 144])
        .tensor("q80", GgmlType::Q8_0, &[64], vec![1; 2 * 34])
        .zeros_f32("f", &[3, 1, 1, 2])
}

#[test]
fn round_trip_every_value_type_and_tensor_layout() {
    let b = every_type_builder();
    let bytes = b.build().unwrap();
    let f = parse(&bytes).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 64);
    assert_eq!(f.kvs.len(), 22);
    assert_eq!(f.get("u64"), Some(&Value::U64(u64::MAX)));
    assert_eq!(f.get("i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(f.get("str").and_then(Value::as_str), Some("héllo"));
    assert_eq!(f.get("a.str"), Some(&Value::from(vec!["x", "", "zz"])));
    assert_eq!(f.get("a.bool"), Some(&Value::from(vec![true, false])));
    assert_eq!(f.get("empty"), Some(&Value::from(Vec::<u32>::new())));
    // Key order is file order.
    assert_eq!(f.kvs[2].0, "u8");
    assert_eq!(f.kvs[21].0, "a.str");

    let names: Vec<_> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["q4k", "q80", "f"]);
    let t = &f.tensors[0];
    assert_eq!(
        (t.ggml_type, t.n_elements, t.n_bytes, t.offset),
        (GgmlType::Q4_K, 512, 288, 0)
    );
    assert_eq!(f.tensors[1].offset, 320); // 288 rounded up to 64
    assert_eq!(f.tensors[2].dims, [3, 1, 1, 2]);
    assert_eq!(f.data_offset % 64, 0);
    assert_eq!(f.parameter_count, 512 + 64 + 6);
    // The data really sits where the infos say.
    let start = (f.data_offset + f.tensors[1].offset) as usize;
    assert_eq!(&bytes[start..start + 68], &[1; 68][..]);
    assert_eq!(f.data_offset + f.tensors[2].offset + 24, f.file_size);
}

#[test]
fn long_arrays_are_summarized_unless_full_arrays() {
    let tokens: Vec<String> = (0..3000).map(|i| format!("tok{i}")).collect();
    let ids: Vec<i32> = (0..2000).collect();
    let bytes = GgufBuilder::new()
        .kv("tokens", tokens.clone())
        .kv("ids", ids.clone())
        .kv("after", 42u32)
        .build()
        .unwrap();
    let f = parse(&bytes).unwrap();
    let a = f.get("tokens").and_then(Value::as_array).unwrap();
    assert_eq!(
        (a.elem, a.len, a.values.is_none()),
        (ValueType::String, 3000, true)
    );
    assert_eq!(f.get("ids").and_then(Value::as_array).unwrap().len, 2000);
    // Skipping kept the cursor in step: the next key is intact.
    assert_eq!(f.get("after"), Some(&Value::U32(42)));

    let full = read_bytes(&bytes, ReadOptions { full_arrays: true }).unwrap();
    assert_eq!(full.get("tokens"), Some(&Value::from(tokens)));
    assert_eq!(full.get("ids"), Some(&Value::from(ids)));
}

#[test]
fn header_errors() {
    rejects(b"GGU", "magic");
    rejects(b"GGML\x03\0\0\0", "not a GGUF file");
    rejects(&Raw::header(1, 0, 0).0, "v1 is not supported");
    rejects(&Raw::header(4, 0, 0).0, "unsupported GGUF version 4");
    rejects(&Raw::header(3u32.swap_bytes(), 0, 0).0, "big-endian");
    let v2 = parse(&Raw::header(2, 0, 0).0).unwrap();
    assert_eq!((v2.version, v2.kvs.len(), v2.tensors.len()), (2, 0, 0));
}

#[test]
fn counts_must_fit_in_the_file() {
    // CVE-2024-23605 shape: n_kv near 2^64 in a tiny file.
    rejects(&Raw::header(3, 0, u64::MAX).0, "kv_count");
    rejects(&Raw::header(3, 0, 2).str("k").u32(4).u32(1).0, "kv_count");
    rejects(&Raw::header(3, u64::MAX / 8, 0).0, "tensor_count");
    rejects(&Raw::header(3, 3, 0).zeros(60).0, "tensor_count");
}

#[test]
fn string_bounds() {
    rejects(
        &Raw::header(3, 0, 1).u64(1 << 63).zeros(16).0,
        "exceeds the maximum",
    );
    rejects(
        &Raw::header(3, 0, 1).u64(MAX_STRING_LEN + 1).zeros(16).0,
        "exceeds the maximum",
    );
    rejects(
        &Raw::header(3, 0, 1).u64(100).bytes(b"short").0,
        "truncated",
    );
    rejects(
        &Raw::header(3, 0, 1).str("k").u32(8).u64(1 << 40).0,
        "exceeds the maximum",
    );
    rejects(
        &Raw::header(3, 0, 1)
            .u64(2)
            .bytes(&[0xff, 0xfe])
            .u32(4)
            .u32(0)
            .0,
        "UTF-8",
    );
    // Invalid UTF-8 in a *value* is replaced, not rejected.
    let f = parse(&Raw::header(3, 0, 1).str("k").u32(8).u64(1).bytes(&[0xff]).0).unwrap();
    assert_eq!(f.get("k").and_then(Value::as_str), Some("\u{fffd}"));
}

#[test]
fn value_and_array_type_errors() {
    rejects(
        &Raw::header(3, 0, 1).str("k").u32(13).u32(0).0,
        "unknown value type 13",
    );
    // #26690 shape: array element type not checked.
    rejects(
        &Raw::header(3, 0, 1).str("k").u32(9).u32(77).u64(1).u32(0).0,
        "unknown value type 77",
    );
    rejects(
        &Raw::header(3, 0, 1).str("k").u32(9).u32(9).u64(1).0,
        "nested arrays",
    );
    rejects(
        &Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(4)
            .u64(MAX_ARRAY_LEN + 1)
            .0,
        "exceeds",
    );
    rejects(
        &Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(10)
            .u64(1000)
            .zeros(80)
            .0,
        "cannot fit",
    );
    rejects(
        &Raw::header(3, 0, 1).str("k").u32(7).bytes(&[2]).0,
        "bool byte 2",
    );
    rejects(
        &Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(7)
            .u64(2)
            .bytes(&[1, 5])
            .0,
        "bool byte 5",
    );
    let dup = Raw::header(3, 0, 2)
        .str("k")
        .u32(4)
        .u32(1)
        .str("k")
        .u32(4)
        .u32(2);
    rejects(&dup.0, "duplicate key");
}

#[test]
fn known_key_checks() {
    let kv = |k: &str, ty: u32, v: &[u8]| Raw::header(3, 0, 1).str(k).u32(ty).bytes(v).0;
    rejects(
        &kv("general.alignment", 4, &0u32.to_le_bytes()),
        "power of two",
    );
    rejects(
        &kv("general.alignment", 4, &48u32.to_le_bytes()),
        "power of two",
    );
    rejects(
        &kv("general.alignment", 4, &(1u32 << 21).to_le_bytes()),
        "power of two",
    );
    rejects(
        &kv("general.alignment", 10, &32u64.to_le_bytes()),
        "must be uint32",
    );
    rejects(
        &kv("general.architecture", 4, &1u32.to_le_bytes()),
        "must be a string",
    );
    let arch = |ty: u32, v: &[u8]| {
        Raw::header(3, 0, 2)
            .str("general.architecture")
            .u32(8)
            .str("llama")
            .str("llama.block_count")
            .u32(ty)
            .bytes(v)
            .0
    };
    rejects(
        &arch(4, &100_000u32.to_le_bytes()),
        "exceeds the maximum 512",
    );
    rejects(&arch(5, &(-1i32).to_le_bytes()), "non-negative integer");
    rejects(&arch(6, &1f32.to_le_bytes()), "non-negative integer");
    assert!(parse(&arch(4, &512u32.to_le_bytes())).is_ok());
}

#[test]
fn tensor_errors() {
    rejects(&one_tensor(&[1, 1, 1, 1, 1], 0, 0, 4), "n_dims 5");
    // CVE-2024-21802 / CVE-2026-33298 shapes: ne products that overflow.
    rejects(&one_tensor(&[1 << 32, 1 << 32], 0, 0, 0), "overflows");
    rejects(&one_tensor(&[u64::MAX], 0, 0, 0), "overflows");
    rejects(&one_tensor(&[1 << 62], 0, 0, 0), "overflows");
    rejects(&one_tensor(&[4], 0, 0, 15), "past end of file");
    rejects(&one_tensor(&[4], 0, u64::MAX - 31, 16), "past end of file");
    rejects(&one_tensor(&[4], 0, 8, 64), "not a multiple of alignment");
    rejects(&one_tensor(&[32], 4, 0, 64), "unknown ggml type 4");
    rejects(&one_tensor(&[32], 99, 0, 64), "unknown ggml type 99");
    rejects(&one_tensor(&[100], 12, 0, 1024), "block size");
    let bad_name = Raw::header(3, 1, 0)
        .u64(1)
        .bytes(&[0xc3])
        .u32(1)
        .u64(1)
        .u32(0)
        .u64(0);
    rejects(&bad_name.pad(32).zeros(4).0, "UTF-8");
    let dup = Raw::header(3, 2, 0)
        .tensor("t", &[1], 0, 0)
        .tensor("t", &[1], 0, 32);
    rejects(&dup.pad(32).zeros(64).0, "duplicate tensor");
    // Zero dims: a one-element scalar, as ggml treats it.
    let ok = parse(&one_tensor(&[], 0, 0, 4)).unwrap();
    assert_eq!((ok.tensors[0].n_elements, ok.tensors[0].n_bytes), (1, 4));
}

#[test]
fn truncation_at_every_byte_is_a_clean_error() {
    let bytes = GgufBuilder::tiny_llama()
        .kv("tokenizer.chat_template", "{{ x }}")
        .kv("f", vec![1.0f32; 3])
        .build()
        .unwrap();
    assert!(parse(&bytes).is_ok());
    for n in 0..bytes.len() {
        match parse(&bytes[..n]) {
            Err(Error::InvalidGguf(_)) => {}
            other => panic!("prefix of {n} bytes: {other:?}"),
        }
    }
}

#[test]
fn flipping_any_header_byte_never_panics() {
    let bytes = every_type_builder().build().unwrap();
    let end = parse(&bytes).unwrap().data_offset as usize;
    for i in 0..end {
        for x in [0x01, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= x;
            let _ = parse(&b); // must return, Ok or Err
        }
    }
}

#[test]
fn writer_refuses_inconsistent_tensors() {
    let b = GgufBuilder::new().tensor("t", GgmlType::F32, &[4], vec![0; 15]);
    assert!(matches!(b.build(), Err(Error::InvalidGguf(_))));
    let summarized = Value::Array(Array {
        elem: ValueType::U8,
        len: 3,
        values: None,
    });
    assert!(GgufBuilder::new().kv("a", summarized).build().is_err());
}

#[test]
fn model_info_follows_ollama() {
    let bytes = GgufBuilder::tiny_llama()
        .kv("general.parameter_count", 999u64)
        .kv("tokenizer.chat_template", "{{ x }}")
        .kv("llama.rope.freq_base", 10000f32)
        .kv("small", vec![1u32, 2])
        .kv("nothing", Vec::<String>::new())
        .build()
        .unwrap();
    let f = read_bytes(&bytes, ReadOptions { full_arrays: true }).unwrap();
    let info = f.model_info(false);
    let keys: Vec<_> = info.keys().cloned().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(!info.contains_key("general.name"));
    assert!(!info.contains_key("tokenizer.chat_template"));
    assert_eq!(info["general.parameter_count"], 24);
    assert_eq!(info["general.architecture"], "llama");
    assert_eq!(info["llama.context_length"], 4096);
    assert_eq!(info["llama.rope.freq_base"], 10000.0);
    assert!(info["small"].is_null());
    assert!(info["tokenizer.ggml.tokens"].is_null());
    assert_eq!(info["nothing"], serde_json::json!([]));
    let verbose = f.model_info(true);
    assert_eq!(verbose["small"], serde_json::json!([1, 2]));
    assert_eq!(
        verbose["tokenizer.ggml.tokens"],
        serde_json::json!(["a", "b"])
    );
}

#[test]
fn details_and_hyperparameters() {
    let f = parse(&GgufBuilder::tiny_llama().build().unwrap()).unwrap();
    let d = f.details();
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        serde_json::json!({"format": "gguf", "family": "llama", "families": ["llama"],
            "parameter_size": "24", "quantization_level": "F32"})
    );
    assert_eq!(f.context_length(), Some(4096));
    assert_eq!(f.embedding_length(), Some(8));
    assert_eq!(f.block_count(), Some(1));
    assert_eq!((f.head_count(), f.head_count_kv()), (Some(2), Some(1)));
    assert_eq!((f.key_length(), f.value_length()), (Some(4), Some(4)));
    assert_eq!(f.chat_template(), None);
    assert_eq!(f.capabilities(), ["completion"]);
    assert_eq!(
        f.tensors_json()[0],
        serde_json::json!({"name": "token_embd.weight", "type": "F32", "shape": [8, 2]})
    );

    let per_layer = GgufBuilder::new()
        .kv("general.architecture", "x")
        .kv("x.attention.head_count", vec![4u32, 8, 6])
        .kv("x.attention.key_length", 0u32)
        .kv("x.embedding_length", 64u64);
    let f = parse(&per_layer.build().unwrap()).unwrap();
    assert_eq!((f.head_count(), f.head_count_kv()), (Some(8), Some(8)));
    assert_eq!(f.key_length(), Some(8)); // 0 is treated as absent
    assert_eq!(f.context_length(), None);
    assert_eq!(f.details().quantization_level, "unknown");
    assert_eq!(f.details().family, "x");
}

#[test]
fn quantization_level_and_capabilities() {
    let q = GgufBuilder::new()
        .kv("general.architecture", "bert")
        .kv("general.file_type", 3u32)
        .kv("bert.pooling_type", 1u32)
        .kv("bert.vision.block_count", 2u32)
        .kv("bert.audio.block_count", 2u32);
    let f = parse(&q.clone().build().unwrap()).unwrap();
    assert_eq!(f.quantization_level(), "Q4_1");
    assert_eq!(f.capabilities(), ["embedding", "vision", "audio"]);
    // Unknown ftype: fall back to the type holding most elements.
    let f = parse(
        &GgufBuilder::new()
            .kv("general.file_type", 4u32)
            .tensor("a", GgmlType::Q8_0, &[64], vec![0; 68])
            .zeros_f32("b", &[8])
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(f.quantization_level(), "Q8_0");
    assert_eq!(f.details().family, "unknown");
}
