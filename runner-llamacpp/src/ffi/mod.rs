//! The only module that touches llama.cpp's C API. It wraps the bindgen output
//! (`OUT_DIR/llama_bindings.rs`, from llama.h + mtmd.h) in owning types whose `Drop` frees the
//! native object, so the rest of the runner is safe Rust.
//!
//! Invariants kept here:
//! - `Model` is immutable after load; llama.cpp documents its vocab/tokenizer API as thread-safe,
//!   so it is `Send + Sync` and shared by `Arc`.
//! - A `Context` owns an `Arc<Model>`, so the model outlives every context built from it; it is
//!   `Send` but not `Sync` (one engine thread drives it).
//! - Slices handed out (logits, embeddings) borrow the context, so the next `decode` (which needs
//!   `&mut`) cannot run while they are alive.
#![allow(unsafe_code)]

mod sys {
    #![allow(
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code
    )]
    #![allow(clippy::all, unsafe_op_in_unsafe_fn, improper_ctypes)]
    include!(concat!(env!("OUT_DIR"), "/llama_bindings.rs"));
}

mod backend_sampling;
mod batch;
mod chain;
mod devices;
mod log;
mod lora;
mod mtmd;
mod quantize;
mod rows;
pub mod rpc;
pub use devices::{devices, BufferMemory, Device};

pub use batch::Batch;
pub use chain::SamplerChain;
use log::{log_cb, take_load_error, LOG_MIN};
pub use log::{log_debug, LogLevel};
pub use mtmd::{ImageChunk, Part, Piece, Projector};
pub use rows::Row;

pub use quantize::{ftype, model_quantize, QuantLog};
pub use sys::llama_token_data as TokenData;

use std::ffi::{c_char, c_void, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};

pub type Token = i32;

/// Load the backend modules (`libggml-cpu*.so`, GPU modules) from `lib_dir` and initialise
/// llama.cpp once per process. Must run before any model load. Returns the number of compute
/// devices found (0: no backend module could be loaded).
pub fn init_backends(lib_dir: &Path, log: LogLevel) -> usize {
    static INIT: Once = Once::new();
    LOG_MIN.store(
        match log {
            LogLevel::Debug => 1,
            LogLevel::Warn => 3,
        },
        Ordering::Relaxed,
    );
    INIT.call_once(|| {
        let dir = CString::new(lib_dir.to_string_lossy().as_bytes()).unwrap_or_default();
        unsafe {
            sys::llama_log_set(Some(log_cb), std::ptr::null_mut());
            sys::ggml_log_set(Some(log_cb), std::ptr::null_mut());
            sys::ggml_backend_load_all_from_path(dir.as_ptr());
            sys::llama_backend_init();
        }
    });
    unsafe { sys::ggml_backend_dev_count() }
}

/// The CUDA backend's switch of patch 0005 (patches/llama.cpp): one CUDA graph per step token
/// count instead of one for all.
const GRAPH_PER_SHAPE: &str = "GGML_CUDA_GRAPH_PER_SHAPE";

/// Turns on one CUDA graph per step token count (patch 0005) unless the environment already
/// says: decode steps change their token count as streams end, drafts are verified and forced
/// JSON is fast-forwarded, and with one graph every change re-runs llama.cpp's warm-up, an
/// ungraphed step costing ~7 ms of host time on an 8B (H100, run O: constrained ÷ free at 16
/// streams 0.939 → 0.978, n-gram copy 1.85x → 2.21x, free decoding level). Call before any
/// thread starts (it sets the process environment); no effect without a CUDA backend.
pub fn prefer_graph_per_shape() {
    if std::env::var_os(GRAPH_PER_SHAPE).is_none() {
        std::env::set_var(GRAPH_PER_SHAPE, "1");
    }
}

/// Whether a local GPU device is loaded (after `init_backends`). Not llama.cpp's
/// `llama_supports_gpu_offload`, which also says yes when only the RPC module is loaded: remote
/// devices run the same patched kernels as this host's CPU (ffi/rpc.rs).
pub fn supports_gpu_offload() -> bool {
    rpc::local_gpu()
}

/// Model load settings (the subset of `llama_model_params` the runner exposes).
#[derive(Debug, Clone)]
pub struct ModelParams {
    pub gpu_layers: i32,
    pub main_gpu: Option<u32>,
    pub mmap: bool,
    /// Repack weights into the CPU's interleaved layouts (llama.cpp's extra buffer types; on by
    /// default there). Faster on CPU; rows stay batch-invariant with patches/llama.cpp/0001
    /// (see numerics.rs).
    pub repack: bool,
    /// Share of the offloaded layers per offload device, in llama.cpp's device order (remote
    /// RPC devices first); empty = by free memory.
    pub tensor_split: Vec<f32>,
}

pub struct Model {
    ptr: NonNull<sys::llama_model>,
}

// SAFETY: see the module invariants: a loaded model is read-only and its vocab API thread-safe.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

unsafe extern "C" fn progress_cb(p: f32, user: *mut c_void) -> bool {
    let f = &mut *(user as *mut &mut dyn FnMut(f32) -> bool);
    f(p)
}

impl Model {
    /// Load a GGUF file. `progress` gets 0.0..=1.0 and returns false to abort the load.
    pub fn load(
        path: &Path,
        p: &ModelParams,
        mut progress: impl FnMut(f32) -> bool,
    ) -> Result<Model, String> {
        let cpath = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| "model path contains NUL".to_string())?;
        let mut cb: &mut dyn FnMut(f32) -> bool = &mut progress;
        let _ = take_load_error();
        // llama.cpp reads llama_max_devices() floats; alive until the load returns.
        let mut split = p.tensor_split.clone();
        let max = unsafe { sys::llama_max_devices() };
        if split.len() > max {
            return Err(format!(
                "tensor split has {} entries; at most {max}",
                split.len()
            ));
        }
        split.resize(max, 0.0);
        let ptr = unsafe {
            let mut mp = sys::llama_model_default_params();
            mp.n_gpu_layers = p.gpu_layers;
            if let Some(g) = p.main_gpu {
                mp.main_gpu = g as i32;
                mp.split_mode = sys::LLAMA_SPLIT_MODE_NONE;
            }
            mp.load_mode = if p.mmap {
                sys::LLAMA_LOAD_MODE_AUTO
            } else {
                sys::LLAMA_LOAD_MODE_NONE
            };
            mp.use_extra_bufts = p.repack;
            if !p.tensor_split.is_empty() {
                mp.tensor_split = split.as_ptr();
            }
            mp.progress_callback = Some(progress_cb);
            mp.progress_callback_user_data =
                &mut cb as *mut &mut dyn FnMut(f32) -> bool as *mut c_void;
            sys::llama_model_load_from_file(cpath.as_ptr(), mp)
        };
        NonNull::new(ptr).map(|ptr| Model { ptr }).ok_or_else(|| {
            let why = take_load_error()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            format!("llama.cpp could not load {}{why}", path.display())
        })
    }

    fn vocab(&self) -> *const sys::llama_vocab {
        unsafe { sys::llama_model_get_vocab(self.ptr.as_ptr()) }
    }

    pub fn n_vocab(&self) -> i32 {
        unsafe { sys::llama_vocab_n_tokens(self.vocab()) }
    }
    pub fn n_embd(&self) -> i32 {
        unsafe { sys::llama_model_n_embd_out(self.ptr.as_ptr()) }
    }
    /// Repeating layers, MTP ("nextn") layers included: llama.cpp's offload count adds one for
    /// the output layer on top of these.
    pub fn n_layer(&self) -> i32 {
        unsafe {
            sys::llama_model_n_layer(self.ptr.as_ptr())
                + sys::llama_model_n_layer_nextn(self.ptr.as_ptr())
        }
    }
    pub fn n_ctx_train(&self) -> i32 {
        unsafe { sys::llama_model_n_ctx_train(self.ptr.as_ptr()) }
    }
    pub fn size_bytes(&self) -> u64 {
        unsafe { sys::llama_model_size(self.ptr.as_ptr()) }
    }

    pub fn is_eog(&self, t: Token) -> bool {
        unsafe { sys::llama_vocab_is_eog(self.vocab(), t) }
    }

    /// Every end-of-generation token id (EOS, EOT and the vocab's other EOG markers).
    pub fn eog_tokens(&self) -> Vec<Token> {
        (0..self.n_vocab()).filter(|&t| self.is_eog(t)).collect()
    }

    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Token>, String> {
        let len = i32::try_from(text.len()).map_err(|_| "text too long to tokenize".to_string())?;
        let mut out = vec![0; text.len() + 2];
        for _ in 0..2 {
            let n = unsafe {
                sys::llama_tokenize(
                    self.vocab(),
                    text.as_ptr() as *const c_char,
                    len,
                    out.as_mut_ptr(),
                    out.len() as i32,
                    add_special,
                    parse_special,
                )
            };
            if n == i32::MIN {
                return Err("tokenization overflowed".into());
            }
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out);
            }
            out.resize((-n) as usize, 0);
        }
        Err("tokenizer disagreed with itself about the token count".into())
    }

    /// Bytes of one token (may be part of a multi-byte character). `special`: render control
    /// tokens as their text.
    pub fn token_piece(&self, t: Token, special: bool) -> Vec<u8> {
        let mut buf = vec![0u8; 32];
        loop {
            let n = unsafe {
                sys::llama_token_to_piece(
                    self.vocab(),
                    t,
                    buf.as_mut_ptr() as *mut c_char,
                    buf.len() as i32,
                    0,
                    special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return buf;
            }
            buf.resize((-n) as usize, 0);
        }
    }

    /// Inverse of tokenize. `render_special`: special tokens appear as text (else dropped).
    pub fn detokenize(&self, tokens: &[Token], render_special: bool) -> Vec<u8> {
        let mut buf = vec![0u8; tokens.len() * 8 + 16];
        loop {
            let n = unsafe {
                sys::llama_detokenize(
                    self.vocab(),
                    tokens.as_ptr(),
                    tokens.len() as i32,
                    buf.as_mut_ptr() as *mut c_char,
                    buf.len() as i32,
                    false,
                    render_special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return buf;
            }
            buf.resize((-n) as usize, 0);
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::llama_model_free(self.ptr.as_ptr()) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    None,
    Mean,
    Cls,
    Last,
    Rank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvType {
    F16,
    Q8_0,
    Q4_0,
}

/// Context settings (the subset of `llama_context_params` the runner exposes).
#[derive(Debug, Clone)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_seq_max: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub threads: i32,
    /// None = automatic.
    pub flash_attn: Option<bool>,
    pub kv_type: KvType,
}

/// A check the abort callback runs during a decode: true = abort it.
pub type AbortWatch = Box<dyn Fn() -> bool + Send>;

/// What llama.cpp's abort callback reads (CPU backend: between graph nodes, so inside a ubatch).
/// Boxed in the context, so its address is stable for as long as llama.cpp holds it.
struct AbortState {
    /// Shutdown: every decode from now on stops.
    stop: Arc<AtomicBool>,
    /// Per-decode checks (requests of the running step that may be cancelled). Only the engine
    /// thread writes it, between decodes; the callback only `try_lock`s, never waits.
    watch: Mutex<Vec<AbortWatch>>,
}

pub struct Context {
    ptr: NonNull<sys::llama_context>,
    model: Arc<Model>,
    abort: Arc<AtomicBool>,
    abort_state: Box<AbortState>,
    n_vocab: usize,
    n_embd: usize,
    /// Fields drop after `Drop for Context` has run `llama_free`, so these chains outlive the
    /// llama.cpp context that holds raw pointers to them.
    device: backend_sampling::DeviceSampling,
}

// SAFETY: a context is used from one thread at a time (`&mut` for every mutating call).
unsafe impl Send for Context {}

unsafe extern "C" fn abort_cb(data: *mut c_void) -> bool {
    // SAFETY: `data` is the context's boxed `AbortState`, which outlives `llama_free`.
    let state = &*(data as *const AbortState);
    state.stop.load(Ordering::Relaxed)
        || state
            .watch
            .try_lock()
            .is_ok_and(|w| w.iter().any(|check| check()))
}

/// Outcome of a failed `decode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// No room in the KV cache for this batch.
    NoKvSlot,
    /// The abort flag was raised, or a watch (see `Context::set_abort_watch`) fired. The
    /// aborted ubatch's positions are gone from the KV cache; earlier ubatches' remain.
    Aborted,
    /// Any other engine failure (code as llama.cpp returned it).
    Failed(i32),
}

impl Context {
    /// Without device sampling (the numerics experiments).
    #[cfg(test)]
    pub fn new(model: Arc<Model>, p: &ContextParams) -> Result<Context, String> {
        Context::with_device_top_k(model, p, None)
    }

    /// `device_top_k`: attach a top-k chain of that size to every sequence (backend_sampling.rs).
    pub fn with_device_top_k(
        model: Arc<Model>,
        p: &ContextParams,
        device_top_k: Option<u32>,
    ) -> Result<Context, String> {
        let abort = Arc::new(AtomicBool::new(false));
        let abort_state = Box::new(AbortState {
            stop: abort.clone(),
            watch: Mutex::new(Vec::new()),
        });
        let n_vocab = model.n_vocab().max(0) as usize;
        let device = backend_sampling::DeviceSampling::new(device_top_k, p.n_seq_max, n_vocab);
        let mut seq_samplers = device.seq_configs();
        let ptr = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = p.n_ctx;
            cp.n_seq_max = p.n_seq_max;
            cp.n_batch = p.n_batch;
            cp.n_ubatch = p.n_ubatch;
            cp.n_threads = p.threads;
            cp.n_threads_batch = p.threads;
            cp.flash_attn_type = match p.flash_attn {
                None => sys::LLAMA_FLASH_ATTN_TYPE_AUTO,
                Some(true) => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
                Some(false) => sys::LLAMA_FLASH_ATTN_TYPE_DISABLED,
            };
            let t = match p.kv_type {
                KvType::F16 => sys::GGML_TYPE_F16,
                KvType::Q8_0 => sys::GGML_TYPE_Q8_0,
                KvType::Q4_0 => sys::GGML_TYPE_Q4_0,
            };
            cp.type_k = t;
            cp.type_v = t;
            // Full-size sliding-window caches keep every position, so prefix reuse and
            // seq_rm of a suffix work the same on SWA models (gemma3) as on the rest.
            cp.swa_full = true;
            cp.kv_unified = false;
            cp.no_perf = true;
            cp.abort_callback = Some(abort_cb);
            cp.abort_callback_data = &*abort_state as *const AbortState as *mut c_void;
            if !seq_samplers.is_empty() {
                cp.samplers = seq_samplers.as_mut_ptr();
                cp.n_samplers = seq_samplers.len();
            }
            sys::llama_init_from_model(model.ptr.as_ptr(), cp)
        };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| "llama.cpp could not create a context (memory?)".to_string())?;
        let n_embd = model.n_embd().max(0) as usize;
        Ok(Context {
            ptr,
            model,
            abort,
            abort_state,
            n_vocab,
            n_embd,
            device,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Raised → the current and later decodes stop with `Aborted`.
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.abort.clone()
    }

    /// Whether the shutdown flag (`abort_flag`) is raised.
    pub fn stopping(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }

    /// Checks the next decodes run while computing (replacing earlier ones); any that returns
    /// true aborts that decode with `Aborted`.
    pub fn set_abort_watch(&mut self, watch: Vec<AbortWatch>) {
        *self
            .abort_state
            .watch
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = watch;
    }

    pub fn n_ctx_seq(&self) -> u32 {
        unsafe { sys::llama_n_ctx_seq(self.ptr.as_ptr()) }
    }
    pub fn state_size(&self) -> usize {
        unsafe { sys::llama_state_get_size(self.ptr.as_ptr()) }
    }

    pub fn pooling(&self) -> Pooling {
        match unsafe { sys::llama_pooling_type(self.ptr.as_ptr()) } {
            sys::LLAMA_POOLING_TYPE_MEAN => Pooling::Mean,
            sys::LLAMA_POOLING_TYPE_CLS => Pooling::Cls,
            sys::LLAMA_POOLING_TYPE_LAST => Pooling::Last,
            sys::LLAMA_POOLING_TYPE_RANK => Pooling::Rank,
            _ => Pooling::None,
        }
    }

    pub fn set_embeddings(&mut self, on: bool) {
        unsafe { sys::llama_set_embeddings(self.ptr.as_ptr(), on) }
    }

    pub fn decode(&mut self, batch: &Batch) -> Result<(), DecodeError> {
        self.launch(batch)?;
        // On GPU backends llama_decode returns before the device finishes; wait here so
        // the caller's timings (prompt_eval/eval durations) cover the real compute.
        self.synchronize();
        Ok(())
    }

    /// `llama_decode` without waiting for the device (on a CPU backend it computes in full):
    /// the outputs are valid after `synchronize`.
    pub fn launch(&mut self, batch: &Batch) -> Result<(), DecodeError> {
        if batch.is_empty() {
            return Ok(());
        }
        match unsafe { sys::llama_decode(self.ptr.as_ptr(), batch.raw) } {
            0 => {
                self.device.decoded();
                Ok(())
            }
            1 => Err(DecodeError::NoKvSlot),
            2 => Err(DecodeError::Aborted),
            c => Err(DecodeError::Failed(c)),
        }
    }

    /// Wait until the device has finished the last `launch`.
    pub fn synchronize(&mut self) {
        unsafe { sys::llama_synchronize(self.ptr.as_ptr()) };
    }

    /// Per-token embedding of batch entry `i` (pooling none).
    pub fn embedding(&self, i: i32) -> Option<&[f32]> {
        let p = unsafe { sys::llama_get_embeddings_ith(self.ptr.as_ptr(), i) };
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, self.n_embd) })
    }

    /// Pooled embedding of a sequence (pooling mean/cls/last).
    pub fn embedding_seq(&self, seq: i32) -> Option<&[f32]> {
        let p = unsafe { sys::llama_get_embeddings_seq(self.ptr.as_ptr(), seq) };
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, self.n_embd) })
    }

    fn mem(&self) -> sys::llama_memory_t {
        unsafe { sys::llama_get_memory(self.ptr.as_ptr()) }
    }

    /// Remove positions [p0, p1) of `seq` (p1 < 0: to the end). False if the memory cannot drop a
    /// partial range (recurrent models); removing a whole sequence never fails.
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> bool {
        unsafe { sys::llama_memory_seq_rm(self.mem(), seq, p0, p1) }
    }

    /// Make `dst` a copy of the whole sequence `src` (`dst`'s old content is dropped). Between
    /// two KV streams llama.cpp copies the stream buffers at the next decode; `src` keeps its
    /// content.
    pub fn seq_cp(&mut self, src: i32, dst: i32) {
        unsafe { sys::llama_memory_seq_cp(self.mem(), src, dst, -1, -1) }
    }

    /// Shift positions [p0, p1) of `seq` by `delta`.
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, delta: i32) {
        unsafe { sys::llama_memory_seq_add(self.mem(), seq, p0, p1, delta) }
    }

    pub fn can_shift(&self) -> bool {
        unsafe { sys::llama_memory_can_shift(self.mem()) }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::llama_free(self.ptr.as_ptr()) }
    }
}
