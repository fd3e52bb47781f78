//! The only module that touches the C++ shim (shim/herd_mlx.h), and so libmlx. Owning types
//! free their native object on drop, so the rest of the runner is safe Rust.
//!
//! Invariants: a `Model` is only used by the engine thread (MLX graphs are built and evaluated
//! there), so it is `Send` but not `Sync`; a `Cache` belongs to one slot and is only passed to
//! `forward` together with its model; `forward` takes each cache at most once per call (`&mut`).
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;

#[repr(C)]
struct RawModel {
    _p: [u8; 0],
}
#[repr(C)]
struct RawCache {
    _p: [u8; 0],
}

/// The llama-family shape (shim's `HerdMlxConfig`, which documents each field; qwen3 is llama
/// with `qk_norm`, gemma3 text is llama with `gemma`, `qk_norm` and the window fields).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub n_layer: i32,
    pub n_embd: i32,
    pub n_ff: i32,
    pub n_head: i32,
    pub n_head_kv: i32,
    pub head_dim: i32,
    pub n_vocab: i32,
    pub rope_theta: f32,
    pub norm_eps: f32,
    pub rope_traditional: i32,
    pub tied_embeddings: i32,
    /// qwen3's per-head Q/K RMS norms.
    pub qk_norm: i32,
    /// gemma3's (1 + w) norms, post-attention/MLP norms, GELU-tanh MLP, scaled embedding.
    pub gemma: i32,
    /// 0: 1/sqrt(head_dim).
    pub attn_scale: f32,
    /// 0: no sliding window.
    pub sliding_window: i32,
    /// Layer i is global when (i + 1) % global_every == 0 (0: all layers slide).
    pub global_every: i32,
    pub rope_local_theta: f32,
    /// Global layers' RoPE position multiplier (1 / linear factor).
    pub rope_scale: f32,
    /// 0: no soft-capping.
    pub attn_softcap: f32,
    pub final_softcap: f32,
}

/// shim's `HerdMlxQuant`: one quantized weight's declared format.
#[repr(C)]
struct RawQuant {
    prefix: *const c_char,
    mode: *const c_char,
    bits: i32,
    group: i32,
}

extern "C" {
    fn herd_mlx_version() -> *const c_char;
    fn herd_mlx_backend() -> *const c_char;
    fn herd_mlx_load(
        paths: *const *const c_char,
        n_paths: i32,
        quants: *const RawQuant,
        n_quants: i32,
        cfg: *const Shape,
        compute_bf16: i32,
        err: *mut c_char,
        n: usize,
    ) -> *mut RawModel;
    fn herd_mlx_model_free(m: *mut RawModel);
    fn herd_mlx_model_bytes(m: *const RawModel) -> u64;
    fn herd_mlx_cache_new(m: *const RawModel) -> *mut RawCache;
    fn herd_mlx_cache_free(c: *mut RawCache);
    fn herd_mlx_cache_len(c: *const RawCache) -> i32;
    fn herd_mlx_cache_truncate(c: *mut RawCache, len: i32);
    fn herd_mlx_forward(
        m: *mut RawModel,
        n_seg: i32,
        caches: *const *mut RawCache,
        tokens: *const i32,
        n_tokens: *const i32,
        n_out: *const i32,
        logits: *mut f32,
        err: *mut c_char,
        n: usize,
    ) -> i32;
    fn herd_mlx_convert_gguf(
        gguf: *const c_char,
        out: *const c_char,
        meta: *const c_char,
        err: *mut c_char,
        n: usize,
    ) -> i32;
}

const ERR_LEN: usize = 1024;

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.to_string_lossy().as_bytes())
        .map_err(|_| format!("{} has a NUL byte", p.display()))
}

fn message(buf: &[u8]) -> String {
    CStr::from_bytes_until_nul(buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown MLX error".into())
}

/// libmlx's version string (e.g. `0.32.4`).
pub fn version() -> String {
    // SAFETY: returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(herd_mlx_version()) }
        .to_string_lossy()
        .into_owned()
}

/// Where the loaded libmlx computes: `cuda` or `cpu` (one binary runs against either wheel's
/// library).
pub fn backend() -> String {
    // SAFETY: returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(herd_mlx_backend()) }
        .to_string_lossy()
        .into_owned()
}

pub struct Model {
    ptr: NonNull<RawModel>,
    n_vocab: usize,
}

// SAFETY: owned exclusively and driven by one thread at a time (the engine thread).
unsafe impl Send for Model {}

impl Model {
    /// Load the tensors of `files` (safetensors, merged by name) checked against `shape`, each
    /// quantized weight in its format among `quants`, to compute in `compute`.
    pub fn load(
        files: &[std::path::PathBuf],
        quants: &[crate::checkpoint::quant::Format],
        shape: &Shape,
        compute: crate::Compute,
    ) -> Result<Model, String> {
        let owned: Vec<CString> = files.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|p| p.as_ptr()).collect();
        let c_str = |s: &str| CString::new(s).map_err(|_| format!("{s:?} has a NUL byte"));
        let names: Vec<(CString, CString)> = quants
            .iter()
            .map(|q| Ok((c_str(&q.prefix)?, c_str(q.mode.name())?)))
            .collect::<Result<_, String>>()?;
        let raw: Vec<RawQuant> = quants
            .iter()
            .zip(&names)
            .map(|(q, (p, m))| RawQuant {
                prefix: p.as_ptr(),
                mode: m.as_ptr(),
                bits: q.bits as i32,
                group: q.group as i32,
            })
            .collect();
        let mut err = [0u8; ERR_LEN];
        // SAFETY: `ptrs` holds ptrs.len() NUL-terminated paths and `raw` raw.len() formats whose
        // strings (`names`) outlive the call, a live Shape, an ERR_LEN buffer.
        let ptr = unsafe {
            herd_mlx_load(
                ptrs.as_ptr(),
                ptrs.len() as i32,
                raw.as_ptr(),
                raw.len() as i32,
                shape,
                i32::from(compute == crate::Compute::Bf16),
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        NonNull::new(ptr)
            .map(|ptr| Model {
                ptr,
                n_vocab: shape.n_vocab as usize,
            })
            .ok_or_else(|| message(&err))
    }

    pub fn size_bytes(&self) -> u64 {
        // SAFETY: live model.
        unsafe { herd_mlx_model_bytes(self.ptr.as_ptr()) }
    }

    pub fn new_cache(&self) -> Cache {
        // SAFETY: live model; the shim's cache does not borrow it.
        let ptr = unsafe { herd_mlx_cache_new(self.ptr.as_ptr()) };
        Cache {
            ptr: NonNull::new(ptr).expect("herd_mlx_cache_new returned NULL"),
        }
    }

    /// One step: segment i appends `segments[i].1` to `segments[i].0`; returns the logits of
    /// each segment's last token, `n_vocab` per segment. On error from bad input no cache
    /// changed; when evaluation itself failed the segments' caches are empty (`len` 0), since
    /// their buffers are written in place.
    pub fn forward(&mut self, segments: &mut [(&mut Cache, &[i32])]) -> Result<Vec<f32>, String> {
        let rows = vec![1; segments.len()];
        self.forward_rows(segments, &rows)
    }

    /// [`Model::forward`] with the logits of each segment's last `rows[i]` tokens (1 up to the
    /// segment's length), in segment and position order: a drafted step's verification rows.
    pub fn forward_rows(
        &mut self,
        segments: &mut [(&mut Cache, &[i32])],
        rows: &[usize],
    ) -> Result<Vec<f32>, String> {
        if rows.len() != segments.len()
            || rows
                .iter()
                .zip(segments.iter())
                .any(|(&r, (_, t))| r == 0 || r > t.len())
        {
            return Err("bad output row count".into());
        }
        let caches: Vec<*mut RawCache> = segments.iter().map(|(c, _)| c.ptr.as_ptr()).collect();
        let counts: Vec<i32> = segments.iter().map(|(_, t)| t.len() as i32).collect();
        let n_out: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
        let tokens: Vec<i32> = segments
            .iter()
            .flat_map(|(_, t)| t.iter().copied())
            .collect();
        let mut logits = vec![0f32; rows.iter().sum::<usize>() * self.n_vocab];
        let mut err = [0u8; ERR_LEN];
        // SAFETY: the caches are distinct (each borrowed `&mut` once), the arrays have the
        // lengths the shim reads (`n_out[i]` checked to be within 1..=n_tokens[i] above), and
        // `logits` holds sum(n_out) * n_vocab floats.
        let rc = unsafe {
            herd_mlx_forward(
                self.ptr.as_ptr(),
                segments.len() as i32,
                caches.as_ptr(),
                tokens.as_ptr(),
                counts.as_ptr(),
                n_out.as_ptr(),
                logits.as_mut_ptr(),
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        if rc == 0 {
            Ok(logits)
        } else {
            Err(message(&err))
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { herd_mlx_model_free(self.ptr.as_ptr()) }
    }
}

/// One sequence's KV cache.
pub struct Cache {
    ptr: NonNull<RawCache>,
}

// SAFETY: owned exclusively; used by the engine thread.
unsafe impl Send for Cache {}

impl Cache {
    pub fn len(&self) -> usize {
        // SAFETY: live cache.
        unsafe { herd_mlx_cache_len(self.ptr.as_ptr()) as usize }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Keep the first `len` positions (prefix reuse).
    pub fn truncate(&mut self, len: usize) {
        // SAFETY: live cache.
        unsafe { herd_mlx_cache_truncate(self.ptr.as_ptr(), len.min(i32::MAX as usize) as i32) }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { herd_mlx_cache_free(self.ptr.as_ptr()) }
    }
}

/// GGUF (llama) → `out` safetensors with HF names; the GGUF metadata as JSON into `meta`.
pub fn convert_gguf(gguf: &Path, out: &Path, meta: &Path) -> Result<(), String> {
    let (g, o, m) = (c_path(gguf)?, c_path(out)?, c_path(meta)?);
    let mut err = [0u8; ERR_LEN];
    // SAFETY: NUL-terminated paths and an ERR_LEN buffer.
    let rc = unsafe {
        herd_mlx_convert_gguf(
            g.as_ptr(),
            o.as_ptr(),
            m.as_ptr(),
            err.as_mut_ptr().cast(),
            ERR_LEN,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(message(&err))
    }
}

/// `runner-mlx quantize`'s call into MLX (kept beside the rest of the FFI).
pub mod quantize;
