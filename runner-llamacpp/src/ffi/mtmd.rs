//! The vision projector through llama.cpp's libmtmd: loading an mmproj GGUF beside the model,
//! tokenizing a prompt of text and images into chunks, encoding an image chunk into embeddings,
//! and decoding those embeddings into a context's KV (one `llama_decode`, so the image's tokens
//! share one micro-batch, which mtmd's non-causal attention needs).
//!
//! Invariants:
//! - `Projector` holds an `Arc<Model>`: the text model it was built for outlives it.
//! - Every call into the mtmd context holds `Projector::lock`; libmtmd documents no thread
//!   safety, and the runner tokenizes on blocking threads while the engine thread encodes.
//! - An `ImageChunk` is an owned copy (`mtmd_input_chunk_copy`), valid after its chunk list is
//!   freed, and freed exactly once by `Drop`.

use std::ffi::{c_char, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::{sys, Context, DecodeError, Model, Token};

struct Raw(NonNull<sys::mtmd_context>);
// SAFETY: only used under `Projector::lock` (module invariants).
unsafe impl Send for Raw {}

pub struct Projector {
    lock: Mutex<Raw>,
    /// Keeps the text model alive for as long as mtmd holds its pointer.
    _model: Arc<Model>,
    n_embd: usize,
    mrope: bool,
}

/// One part of a prompt to tokenize.
pub enum Part<'a> {
    Text(&'a str),
    /// RGB8 pixels, `width * height * 3` bytes; `id` keys mtmd's own bookkeeping.
    Image {
        width: u32,
        height: u32,
        rgb: &'a [u8],
        id: &'a str,
    },
}

/// A tokenized prompt piece.
pub enum Piece {
    Text(Vec<Token>),
    Image(ImageChunk),
}

/// An image's chunk: what the projector encodes, `n_tokens` KV positions.
pub struct ImageChunk {
    ptr: NonNull<sys::mtmd_input_chunk>,
    pub n_tokens: usize,
}

// SAFETY: an owned, immutable copy; mtmd reads it only under the projector's lock.
unsafe impl Send for ImageChunk {}

impl Drop for ImageChunk {
    fn drop(&mut self) {
        unsafe { sys::mtmd_input_chunk_free(self.ptr.as_ptr()) }
    }
}

impl Drop for Projector {
    fn drop(&mut self) {
        let raw = self
            .lock
            .get_mut()
            .map(|r| r.0)
            .unwrap_or_else(|p| p.get_ref().0);
        unsafe { sys::mtmd_free(raw.as_ptr()) }
    }
}

impl Projector {
    /// Loads `path` for `model`; `limits` (min, max tokens) replace the projector's own bounds
    /// on an image (for dynamic-resolution types; others ignore them). Refused: a projector without vision
    /// (audio-only), and one whose images need M-RoPE positions (the engine gives image tokens
    /// plain consecutive positions).
    pub fn load(
        path: &Path,
        model: Arc<Model>,
        threads: i32,
        gpu: bool,
        limits: (Option<u32>, Option<u32>),
    ) -> Result<Self, String> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| "projector path holds a NUL byte".to_string())?;
        // SAFETY: the params are mtmd's defaults with plain fields set; `c` and the model live
        // across the call.
        let ptr = unsafe {
            let mut p = sys::mtmd_context_params_default();
            p.use_gpu = gpu;
            p.n_threads = threads.max(1);
            p.print_timings = false;
            p.warmup = false;
            let tokens = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            if let Some(n) = limits.0 {
                p.image_min_tokens = tokens(n);
            }
            if let Some(n) = limits.1 {
                p.image_max_tokens = tokens(n);
            }
            sys::mtmd_init_from_file(c.as_ptr(), model.ptr.as_ptr(), p)
        };
        let raw = NonNull::new(ptr)
            .ok_or_else(|| "llama.cpp could not load the projector for this model".to_string())?;
        let (vision, mrope) = unsafe {
            (
                sys::mtmd_support_vision(raw.as_ptr()),
                sys::mtmd_decode_use_mrope(raw.as_ptr()),
            )
        };
        let n_embd = unsafe { sys::llama_model_n_embd_inp(model.ptr.as_ptr()) }.max(0) as usize;
        let proj = Projector {
            lock: Mutex::new(Raw(raw)),
            _model: model,
            n_embd,
            mrope,
        };
        if !vision {
            return Err("the projector has no vision encoder".into());
        }
        if proj.mrope {
            return Err("projectors whose images use M-RoPE positions are not supported".into());
        }
        Ok(proj)
    }

    /// Tokenizes `parts` in order: text with special-token parsing as `parse_special` says,
    /// images as one chunk each (plus the text markers mtmd wraps them in, as text pieces).
    pub fn tokenize(
        &self,
        parts: &[Part<'_>],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Piece>, String> {
        struct Bitmap(*mut sys::mtmd_bitmap);
        impl Drop for Bitmap {
            fn drop(&mut self) {
                unsafe { sys::mtmd_bitmap_free(self.0) }
            }
        }
        let mut texts = Vec::new();
        let mut bitmaps = Vec::new();
        for p in parts {
            match p {
                Part::Text(t) => texts.push(sys::mtmd_input_text {
                    text: t.as_ptr() as *const c_char,
                    text_len: t.len(),
                    add_special: false,
                    parse_special,
                }),
                Part::Image {
                    width,
                    height,
                    rgb,
                    id,
                } => {
                    let need = *width as usize * *height as usize * 3;
                    if rgb.len() != need || need == 0 {
                        return Err(format!(
                            "image is {}x{} but carries {} bytes of RGB",
                            width,
                            height,
                            rgb.len()
                        ));
                    }
                    let cid = CString::new(*id).map_err(|_| "image id holds a NUL byte")?;
                    // SAFETY: `rgb` holds nx*ny*3 bytes (checked); mtmd copies them.
                    let b = unsafe { sys::mtmd_bitmap_init(*width, *height, rgb.as_ptr()) };
                    if b.is_null() {
                        return Err("mtmd could not take the image".into());
                    }
                    unsafe { sys::mtmd_bitmap_set_id(b, cid.as_ptr()) };
                    bitmaps.push(Bitmap(b));
                }
            }
        }
        let (mut ti, mut bi) = (texts.iter(), bitmaps.iter());
        let owned: Vec<sys::mtmd_input_part> = parts
            .iter()
            .map(|p| match p {
                Part::Text(_) => sys::mtmd_input_part {
                    text: ti.next().map_or(std::ptr::null(), |t| t as *const _),
                    bitmap: std::ptr::null(),
                },
                Part::Image { .. } => sys::mtmd_input_part {
                    text: std::ptr::null(),
                    bitmap: bi.next().map_or(std::ptr::null(), |b| b.0 as *const _),
                },
            })
            .collect();
        let ptrs: Vec<*const sys::mtmd_input_part> = owned.iter().map(|p| p as *const _).collect();
        let guard = self.lock.lock().map_err(|_| "projector lock poisoned")?;
        // SAFETY: every part points at live text/bitmap values above; `chunks` is freed below.
        unsafe {
            let chunks = sys::mtmd_input_chunks_init();
            if chunks.is_null() {
                return Err("mtmd could not allocate chunks".into());
            }
            let rc = sys::mtmd_tokenize_from_parts(
                guard.0.as_ptr(),
                chunks,
                ptrs.as_ptr(),
                ptrs.len(),
                add_special,
            );
            let out = if rc != 0 {
                Err(format!(
                    "mtmd could not tokenize the prompt's images (code {rc})"
                ))
            } else {
                collect(chunks)
            };
            sys::mtmd_input_chunks_free(chunks);
            out
        }
    }

    /// The embeddings of an image chunk (`n_tokens × n_embd` floats), computed by the projector.
    pub fn encode(&self, chunk: &ImageChunk) -> Result<Vec<f32>, String> {
        let guard = self.lock.lock().map_err(|_| "projector lock poisoned")?;
        // SAFETY: the chunk is live; the output buffer holds n_tokens * n_embd_inp floats
        // (mtmd.h) until the next encode, and is copied out before the lock is released.
        unsafe {
            let rc = sys::mtmd_encode_chunk(guard.0.as_ptr(), chunk.ptr.as_ptr());
            if rc != 0 {
                return Err(format!(
                    "the projector failed to encode the image (code {rc})"
                ));
            }
            let p = sys::mtmd_get_output_embd(guard.0.as_ptr());
            if p.is_null() {
                return Err("the projector returned no embeddings".into());
            }
            Ok(std::slice::from_raw_parts(p, chunk.n_tokens * self.n_embd).to_vec())
        }
    }

    /// Whether the model attends to this image's tokens non-causally.
    pub fn non_causal(&self, chunk: &ImageChunk) -> bool {
        let Ok(guard) = self.lock.lock() else {
            return false;
        };
        unsafe { sys::mtmd_decode_use_non_causal(guard.0.as_ptr(), chunk.ptr.as_ptr()) }
    }
}

/// Owned pieces of a chunk list.
unsafe fn collect(chunks: *mut sys::mtmd_input_chunks) -> Result<Vec<Piece>, String> {
    let n = sys::mtmd_input_chunks_size(chunks);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let c = sys::mtmd_input_chunks_get(chunks, i);
        match sys::mtmd_input_chunk_get_type(c) {
            sys::MTMD_INPUT_CHUNK_TYPE_TEXT => {
                let mut len = 0usize;
                let t = sys::mtmd_input_chunk_get_tokens_text(c, &mut len);
                let tokens = if t.is_null() || len == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(t, len).to_vec()
                };
                out.push(Piece::Text(tokens));
            }
            sys::MTMD_INPUT_CHUNK_TYPE_IMAGE => {
                let n_tokens = sys::mtmd_input_chunk_get_n_tokens(c);
                let n_pos = sys::mtmd_input_chunk_get_n_pos(c);
                if n_pos as usize != n_tokens {
                    return Err("the projector's image positions differ from its tokens".into());
                }
                let copy = NonNull::new(sys::mtmd_input_chunk_copy(c))
                    .ok_or("mtmd could not copy an image chunk")?;
                out.push(Piece::Image(ImageChunk {
                    ptr: copy,
                    n_tokens,
                }));
            }
            _ => return Err("the prompt produced a chunk that is neither text nor image".into()),
        }
    }
    Ok(out)
}

impl Context {
    /// Decodes `n` embeddings (`embd`, `n × n_embd` floats) at positions `pos0..pos0+n` of
    /// `seq`, in one `llama_decode` and without logits; `non_causal` switches the model's
    /// attention to non-causal for the call. The context's `n_ubatch` must hold `n`.
    pub fn decode_embd(
        &mut self,
        embd: &[f32],
        n: usize,
        pos0: i32,
        seq: i32,
        non_causal: bool,
    ) -> Result<(), DecodeError> {
        if n == 0 || embd.len() < n * self.n_embd_inp() {
            return Err(DecodeError::Failed(-1));
        }
        // SAFETY: the batch is allocated for `n` entries of n_embd floats and one seq id each,
        // filled within those bounds, and freed after the decode.
        unsafe {
            let n_embd = self.n_embd_inp();
            let mut b = sys::llama_batch_init(n as i32, n_embd as i32, 1);
            std::ptr::copy_nonoverlapping(embd.as_ptr(), b.embd, n * n_embd);
            for i in 0..n {
                *b.pos.add(i) = pos0 + i as i32;
                *b.n_seq_id.add(i) = 1;
                *(*b.seq_id.add(i)).add(0) = seq;
                *b.logits.add(i) = 0;
            }
            b.n_tokens = n as i32;
            if non_causal {
                sys::llama_set_causal_attn(self.ptr.as_ptr(), false);
            }
            let rc = sys::llama_decode(self.ptr.as_ptr(), b);
            if non_causal {
                sys::llama_set_causal_attn(self.ptr.as_ptr(), true);
            }
            sys::llama_synchronize(self.ptr.as_ptr());
            sys::llama_batch_free(b);
            match rc {
                0 => {
                    self.device.decoded();
                    Ok(())
                }
                1 => Err(DecodeError::NoKvSlot),
                2 => Err(DecodeError::Aborted),
                c => Err(DecodeError::Failed(c)),
            }
        }
    }

    fn n_embd_inp(&self) -> usize {
        unsafe { sys::llama_model_n_embd_inp(self.model.ptr.as_ptr()) }.max(0) as usize
    }
}
