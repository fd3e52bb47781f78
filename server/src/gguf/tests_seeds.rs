//! The fuzz seed corpus (server/fuzz/corpus/gguf_reader): each seed mimics a published GGUF
//! parser bug. `fuzz_seeds_match_and_are_classified` checks the committed files equal what this
//! module generates and that the reader accepts exactly the valid ones; regenerate with
//! `cargo test -p server --lib gguf::tests_seeds -- --ignored`.

use std::path::PathBuf;

use super::tests::Raw;
use super::*;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf_reader")
}

/// `(file name, bytes, None if the reader must accept it, else a word its error must contain)`.
/// Names start with `seed-` and have no `.gguf` suffix so the .gitignore rules for libFuzzer's
/// hash-named files and for model files do not hide them.
fn seeds() -> Vec<(&'static str, Vec<u8>, Option<&'static str>)> {
    let arch_kv = |r: Raw| r.str("general.architecture").u32(8).str("llama");
    vec![
        (
            "seed-valid-tiny-llama",
            GgufBuilder::tiny_llama()
                .kv("tokenizer.chat_template", "{{ messages }}")
                .build()
                .unwrap(),
            None,
        ),
        (
            "seed-valid-quantized-aligned64",
            GgufBuilder::new()
                .kv("general.alignment", 64u32)
                .kv("f", vec![0.5f32, 1.5])
                .kv("b", vec![true])
                .kv("s", vec!["x"])
                .tensor("q", GgmlType::Q4_K, &[256], vec![0; 144])
                .tensor("m", GgmlType::MXFP4, &[32], vec![0; 17])
                .build()
                .unwrap(),
            None,
        ),
        // CVE-2024-39720: a 4-byte file crashed Ollama's create.
        (
            "seed-cve-2024-39720-four-byte-file",
            b"GGUF".to_vec(),
            Some("truncated"),
        ),
        // CVE-2024-23605: header.n_kv overflow in llama.cpp.
        (
            "seed-cve-2024-23605-n-kv-overflow",
            Raw::header(3, 0, u64::MAX / 2).str("k").u32(4).u32(1).0,
            Some("kv_count"),
        ),
        // CVE-2024-21802: info->ne overflow (dims product wraps).
        (
            "seed-cve-2024-21802-tensor-ne-overflow",
            Raw::header(3, 1, 0)
                .tensor("t", &[1 << 32, 1 << 32, 2], 0, 0)
                .pad(32)
                .zeros(64)
                .0,
            Some("element count overflows"),
        ),
        // CVE-2026-33298: ggml_nbytes overflow, element count fits but bytes do not.
        (
            "seed-cve-2026-33298-nbytes-overflow",
            Raw::header(3, 1, 0)
                .tensor("t", &[1 << 61, 2], 0, 0)
                .pad(32)
                .zeros(64)
                .0,
            Some("size overflows"),
        ),
        // CVE-2025-0315 / CVE-2025-49847: unbounded allocation from a string length of 2^63.
        (
            "seed-cve-2025-0315-string-len-2e63",
            Raw::header(3, 0, 1).u64(1 << 63).zeros(32).0,
            Some("string length"),
        ),
        // llama.cpp #26690: array element type never checked.
        (
            "seed-gh26690-array-unchecked-elem-type",
            Raw::header(3, 0, 1)
                .str("k")
                .u32(9)
                .u32(0xdead)
                .u64(4)
                .zeros(32)
                .0,
            Some("unknown value type 57005"),
        ),
        // llama.cpp #25821: block_count far above LLAMA_MAX_LAYERS.
        (
            "seed-gh25821-block-count-100000",
            arch_kv(Raw::header(3, 0, 2))
                .str("llama.block_count")
                .u32(4)
                .u32(100_000)
                .0,
            Some("exceeds the maximum 512"),
        ),
        // CVE-2024-8063: block_count of the wrong type led to a division by zero.
        (
            "seed-cve-2024-8063-block-count-string",
            arch_kv(Raw::header(3, 0, 2))
                .str("llama.block_count")
                .u32(8)
                .str("18")
                .0,
            Some("non-negative integer"),
        ),
        // CVE-2025-0317: general.alignment 0, a division by zero in the padding computation.
        (
            "seed-cve-2025-0317-alignment-zero",
            Raw::header(3, 1, 1)
                .str("general.alignment")
                .u32(4)
                .u32(0)
                .tensor("t", &[1], 0, 0)
                .zeros(64)
                .0,
            Some("power of two"),
        ),
        // CVE-2026-7482 "Bleeding Llama": tensor offset+size past the end of the file.
        (
            "seed-cve-2026-7482-tensor-past-eof",
            Raw::header(3, 1, 0)
                .tensor("t", &[1024], 0, 0)
                .pad(32)
                .zeros(16)
                .0,
            Some("past end of file"),
        ),
    ]
}

#[test]
fn fuzz_seeds_match_and_are_classified() {
    for (name, bytes, expect) in seeds() {
        match (read_bytes(&bytes, ReadOptions::default()), expect) {
            (Ok(_), None) => {}
            (Err(crate::error::Error::InvalidGguf(m)), Some(needle)) => {
                assert!(m.contains(needle), "{name}: {m:?} lacks {needle:?}")
            }
            (got, _) => panic!("{name}: unexpected {got:?}"),
        }
        let committed = std::fs::read(corpus_dir().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}; regenerate the corpus (see module docs)"));
        assert_eq!(committed, bytes, "{name} is stale; regenerate the corpus");
    }
}

#[test]
#[ignore = "writes the seed corpus into the source tree"]
fn write_fuzz_seeds() {
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for (name, bytes, _) in seeds() {
        std::fs::write(corpus_dir().join(name), bytes).unwrap();
    }
}
