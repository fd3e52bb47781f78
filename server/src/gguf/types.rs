//! The ggml tensor-type table (block size and bytes per block for every type a GGUF file may name)
//! and llama.cpp's `general.file_type` (llama_ftype) names. Sizes follow the block structs of
//! ggml-common.h at llama.cpp master (types 0..=42); ids that upstream removed from GGUF files
//! (4, 5, 31..=33, 36..=38) and ids past the end are unknown, so a file naming them is rejected.

/// A ggml tensor element type, as stored in a GGUF tensor info (`ggml_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(u32);

/// `(id, name, elements per block, bytes per block)`; the one source of truth for tensor sizes.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 2 + 16),
    (3, "Q4_1", 32, 2 + 2 + 16),
    (6, "Q5_0", 32, 2 + 4 + 16),
    (7, "Q5_1", 32, 2 + 2 + 4 + 16),
    (8, "Q8_0", 32, 2 + 32),
    (9, "Q8_1", 32, 2 + 2 + 32),
    (10, "Q2_K", 256, 16 + 64 + 2 + 2),
    (11, "Q3_K", 256, 32 + 64 + 12 + 2),
    (12, "Q4_K", 256, 2 + 2 + 12 + 128),
    (13, "Q5_K", 256, 2 + 2 + 12 + 32 + 128),
    (14, "Q6_K", 256, 128 + 64 + 16 + 2),
    (15, "Q8_K", 256, 4 + 256 + 32),
    (16, "IQ2_XXS", 256, 2 + 64),
    (17, "IQ2_XS", 256, 2 + 64 + 8),
    (18, "IQ3_XXS", 256, 2 + 64 + 32),
    (19, "IQ1_S", 256, 2 + 32 + 16),
    (20, "IQ4_NL", 32, 2 + 16),
    (21, "IQ3_S", 256, 2 + 64 + 32 + 8 + 4),
    (22, "IQ2_S", 256, 2 + 64 + 16),
    (23, "IQ4_XS", 256, 2 + 2 + 128 + 4),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 32 + 16 + 8),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 48 + 4 + 2),
    (35, "TQ2_0", 256, 64 + 2),
    (39, "MXFP4", 32, 1 + 16),
    (40, "NVFP4", 64, 4 + 32),
    (41, "Q1_0", 128, 2 + 16),
    (42, "Q2_0", 64, 2 + 16),
];

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q4_0: GgmlType = GgmlType(2);
    pub const Q4_1: GgmlType = GgmlType(3);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q6_K: GgmlType = GgmlType(14);
    pub const BF16: GgmlType = GgmlType(30);
    pub const MXFP4: GgmlType = GgmlType(39);

    /// The type with this id, or `None` if ggml does not define it (or removed it from GGUF).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().any(|t| t.0 == id).then_some(GgmlType(id))
    }

    pub fn id(self) -> u32 {
        self.0
    }

    fn row(self) -> &'static (u32, &'static str, u64, u64) {
        // Construction goes through `from_id` or the constants above, so the id is in the table.
        TYPES
            .iter()
            .find(|t| t.0 == self.0)
            .expect("GgmlType ids come from the table")
    }

    /// Upper-case name as Ollama's `/api/show` `tensors[].type` prints it (e.g. `Q4_K`).
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// Elements per block; a tensor's first dimension must be a multiple of it.
    pub fn block_size(self) -> u64 {
        self.row().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().3
    }

    /// Bytes taken by `elements` elements whose rows are `row_len` long, or `None` if the row is
    /// not a whole number of blocks or the size overflows.
    pub fn bytes_for(self, row_len: u64, elements: u64) -> Option<u64> {
        let block = self.block_size();
        if !row_len.is_multiple_of(block) {
            return None;
        }
        (elements / block).checked_mul(self.type_size())
    }
}

/// llama.cpp's name for a `general.file_type` value (`llama_ftype`), e.g. 15 → `Q4_K_M`, as Ollama
/// prints it in `details.quantization_level`. `None` for ids llama.cpp does not define.
pub fn file_type_name(ftype: u64) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ids_are_unique_and_sizes_sane() {
        for (i, a) in TYPES.iter().enumerate() {
            assert!(a.2 > 0 && a.3 > 0, "{}", a.1);
            for b in &TYPES[i + 1..] {
                assert_ne!(a.0, b.0);
                assert_ne!(a.1, b.1);
            }
        }
    }

    #[test]
    fn removed_and_future_ids_are_unknown() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 43, 1000, u32::MAX] {
            assert!(GgmlType::from_id(id).is_none(), "{id}");
        }
    }

    #[test]
    fn bits_per_weight_match_the_published_figures() {
        // bpw = 8 * type_size / block_size; well-known values from llama.cpp's quantize table.
        let bpw = |id: u32| {
            let t = GgmlType::from_id(id).unwrap();
            8.0 * t.type_size() as f64 / t.block_size() as f64
        };
        assert_eq!(bpw(2), 4.5); // Q4_0
        assert_eq!(bpw(8), 8.5); // Q8_0
        assert_eq!(bpw(12), 4.5); // Q4_K
        assert_eq!(bpw(14), 6.5625); // Q6_K
        assert_eq!(bpw(10), 2.625); // Q2_K
        assert_eq!(bpw(11), 3.4375); // Q3_K
        assert_eq!(bpw(13), 5.5); // Q5_K
        assert_eq!(bpw(16), 2.0625); // IQ2_XXS
        assert_eq!(bpw(23), 4.25); // IQ4_XS
        assert_eq!(bpw(39), 4.25); // MXFP4
        assert_eq!(bpw(41), 1.125); // Q1_0
    }

    #[test]
    fn bytes_for_checks_rows_and_overflow() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512, 1024), Some(4 * 144));
        assert_eq!(GgmlType::Q4_K.bytes_for(100, 100), None);
        assert_eq!(GgmlType::F32.bytes_for(1, u64::MAX), None);
        assert_eq!(GgmlType::F32.bytes_for(3, 6), Some(24));
    }

    #[test]
    fn ftype_names() {
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(38), Some("MXFP4_MOE"));
        assert_eq!(file_type_name(4), None);
        assert_eq!(file_type_name(33), None);
    }
}
