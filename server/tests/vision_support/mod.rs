//! Test assets for the vision path: tiny random-weight gemma3 (fixed resolution) and gemma4v
//! (dynamic resolution) projectors (mmproj GGUFs) that llama.cpp's clip loader accepts for
//! gemma3-270m (projection 640 = its embedding width), and small images made in memory.
//!
//! The projector has no transformer blocks (`clip.vision.block_count` 0, which clip.cpp allows):
//! patch embedding + learned positions → 4×4 average pool → RMS norm → projection. With a
//! 128-pixel input and 8-pixel patches that is 16×16 patches pooled to 4×4 = 16 image tokens,
//! whatever the input's size (gemma3 resizes every image to its fixed square).
#![allow(dead_code)]

use server::gguf::{GgmlType, GgufBuilder};

/// gemma3-270m's embedding width.
pub const TEXT_EMBD: u64 = 640;
const EMBD: u64 = 32;
const IMAGE: u32 = 128;
const PATCH: u32 = 8;
const MERGE: u32 = 4;
/// Tokens one image takes with [`tiny_gemma3_mmproj`].
pub const IMAGE_TOKENS: usize = ((IMAGE / PATCH / MERGE) * (IMAGE / PATCH / MERGE)) as usize;

struct Rng(u64);

impl Rng {
    fn weight(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
    }
}

fn f32s(rng: &mut Rng, n: u64) -> Vec<u8> {
    (0..n).flat_map(|_| rng.weight().to_le_bytes()).collect()
}

/// The projector GGUF (`general.type` mmproj, `clip.projector_type` gemma3).
pub fn tiny_gemma3_mmproj(seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let patches = u64::from((IMAGE / PATCH) * (IMAGE / PATCH));
    let p = u64::from(PATCH);
    let ones: Vec<u8> = (0..EMBD).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    GgufBuilder::new()
        .kv("general.architecture", "clip")
        .kv("general.type", "mmproj")
        .kv("clip.has_vision_encoder", true)
        .kv("clip.projector_type", "gemma3")
        .kv("clip.vision.embedding_length", EMBD as u32)
        .kv("clip.vision.feed_forward_length", (4 * EMBD) as u32)
        .kv("clip.vision.block_count", 0u32)
        .kv("clip.vision.attention.head_count", 2u32)
        .kv("clip.vision.attention.layer_norm_epsilon", 1e-6f32)
        .kv("clip.vision.projection_dim", TEXT_EMBD as u32)
        .kv("clip.vision.image_size", IMAGE)
        .kv("clip.vision.patch_size", PATCH)
        .kv("clip.vision.projector.scale_factor", MERGE)
        .kv("clip.vision.image_mean", vec![0.5f32, 0.5, 0.5])
        .kv("clip.vision.image_std", vec![0.5f32, 0.5, 0.5])
        .tensor(
            "v.patch_embd.weight",
            GgmlType::F32,
            &[p, p, 3, EMBD],
            f32s(&mut rng, p * p * 3 * EMBD),
        )
        .tensor(
            "v.position_embd.weight",
            GgmlType::F32,
            &[EMBD, patches],
            f32s(&mut rng, EMBD * patches),
        )
        .tensor("mm.soft_emb_norm.weight", GgmlType::F32, &[EMBD], ones)
        .tensor(
            "mm.input_projection.weight",
            GgmlType::F32,
            &[TEXT_EMBD, EMBD],
            f32s(&mut rng, TEXT_EMBD * EMBD),
        )
        .build()
        .expect("tiny gemma3 mmproj fixture")
}

/// Pixels per token cell side of [`tiny_gemma4v_mmproj`] (patch 4 × pooling kernel 3).
pub const G4_CELL: u32 = G4_PATCH * G4_MERGE;
const G4_PATCH: u32 = 4;
const G4_MERGE: u32 = 3;
/// Entries per axis of its learned position table: at most 42 cells per side.
pub const G4_POSITIONS: u64 = 128;

/// A tiny random-weight gemma4v projector (`clip.projector_type` gemma4v, mtmd's dynamic
/// resolution type: an image's tokens follow its size, 70–1120 by default) for gemma3-270m:
/// no transformer blocks (patch embedding + x/y position tables → 3×3 average pool → RMS
/// norm → projection to 640), so an image of `gx·12 × gy·12` pixels is `gx·gy` tokens.
pub fn tiny_gemma4v_mmproj(seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let p = u64::from(G4_PATCH);
    GgufBuilder::new()
        .kv("general.architecture", "clip")
        .kv("general.type", "mmproj")
        .kv("clip.has_vision_encoder", true)
        .kv("clip.projector_type", "gemma4v")
        .kv("clip.vision.embedding_length", EMBD as u32)
        .kv("clip.vision.feed_forward_length", (4 * EMBD) as u32)
        .kv("clip.vision.block_count", 0u32)
        .kv("clip.vision.attention.head_count", 2u32)
        .kv("clip.vision.attention.layer_norm_epsilon", 1e-6f32)
        .kv("clip.vision.projection_dim", TEXT_EMBD as u32)
        .kv("clip.vision.image_size", 224u32)
        .kv("clip.vision.patch_size", G4_PATCH)
        .kv("clip.vision.projector.scale_factor", G4_MERGE)
        .kv("clip.vision.image_mean", vec![0.0f32, 0.0, 0.0])
        .kv("clip.vision.image_std", vec![1.0f32, 1.0, 1.0])
        .tensor(
            "v.patch_embd.weight",
            GgmlType::F32,
            &[p, p, 3, EMBD],
            f32s(&mut rng, p * p * 3 * EMBD),
        )
        .tensor(
            "v.position_embd.weight",
            GgmlType::F32,
            &[EMBD, G4_POSITIONS, 2],
            f32s(&mut rng, EMBD * G4_POSITIONS * 2),
        )
        .tensor(
            "mm.input_projection.weight",
            GgmlType::F32,
            &[EMBD, TEXT_EMBD],
            f32s(&mut rng, TEXT_EMBD * EMBD),
        )
        .build()
        .expect("tiny gemma4v mmproj fixture")
}

/// A `w`×`h` PNG of pseudo-random colours (`seed` picks them).
pub fn png(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let img = image::RgbImage::from_fn(w, h, |_, _| {
        let mut c = || (rng.weight() * 1000.0).abs() as u8;
        image::Rgb([c(), c(), c()])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}
