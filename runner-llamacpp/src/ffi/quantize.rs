//! Quantization through `llama_model_quantize` (the `runner-llamacpp quantize` subcommand, see
//! ../quantize.rs). llama.cpp reports per-tensor progress only through its logger, so a
//! temporary log callback routes those lines to the caller and the runner's logger is restored
//! before returning.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;

use super::{log_cb, sys};

/// llama.cpp file types the quantize subcommand offers (`llama_ftype`).
pub mod ftype {
    use super::super::sys;
    pub const F32: u32 = sys::LLAMA_FTYPE_ALL_F32;
    pub const F16: u32 = sys::LLAMA_FTYPE_MOSTLY_F16;
    pub const BF16: u32 = sys::LLAMA_FTYPE_MOSTLY_BF16;
    pub const Q8_0: u32 = sys::LLAMA_FTYPE_MOSTLY_Q8_0;
    pub const Q4_K_S: u32 = sys::LLAMA_FTYPE_MOSTLY_Q4_K_S;
    pub const Q4_K_M: u32 = sys::LLAMA_FTYPE_MOSTLY_Q4_K_M;
}

/// Severity of one llama.cpp log message seen during quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantLog {
    Info,
    Warn,
    Error,
}

/// What the C log callback reaches through its `user_data` pointer.
struct QuantSink<'a> {
    on_log: &'a mut dyn FnMut(QuantLog, &str),
    last: QuantLog,
}

unsafe extern "C" fn quant_log_cb(
    level: sys::ggml_log_level,
    text: *const c_char,
    ud: *mut c_void,
) {
    if text.is_null() || ud.is_null() {
        return;
    }
    // SAFETY: `ud` is the `QuantSink` that `model_quantize` keeps alive (and exclusively lent to
    // this callback) until it has unset the callback again; llama.cpp logs from the calling
    // thread during quantization.
    let sink = &mut *(ud as *mut QuantSink<'_>);
    let lvl = match level {
        sys::GGML_LOG_LEVEL_ERROR => QuantLog::Error,
        sys::GGML_LOG_LEVEL_WARN => QuantLog::Warn,
        sys::GGML_LOG_LEVEL_CONT => sink.last,
        _ => QuantLog::Info,
    };
    sink.last = lvl;
    let s = CStr::from_ptr(text).to_string_lossy();
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (sink.on_log)(lvl, &s)));
}

/// Runs `llama_model_quantize(input → output)` to file type `ftype` (see [`ftype`]) on `threads`
/// threads (0 = llama.cpp's choice). Every llama.cpp log message during the call goes to
/// `on_log` (one call per message; a message may be part of a line). Requantizing an already
/// quantized tensor is refused unless `ftype` is a float type (F32, F16, BF16): that is a
/// dequantization, which adds no error of its own at F32 (the golden parity test compares
/// engines on the same weights that way; the server refuses quantized sources itself).
/// Returns llama.cpp's failure as `Err(())`; its reason was logged at `QuantLog::Error`.
pub fn model_quantize(
    input: &Path,
    output: &Path,
    ftype: u32,
    threads: i32,
    on_log: &mut dyn FnMut(QuantLog, &str),
) -> Result<(), ()> {
    let c = |p: &Path| CString::new(p.to_string_lossy().as_bytes()).map_err(|_| ());
    let (inp, out) = (c(input)?, c(output)?);
    let mut sink = QuantSink {
        on_log,
        last: QuantLog::Info,
    };
    let rc = unsafe {
        let mut params = sys::llama_model_quantize_default_params();
        params.nthread = threads;
        params.ftype = ftype;
        params.allow_requantize = [ftype::F32, ftype::F16, ftype::BF16].contains(&ftype);
        sys::llama_log_set(
            Some(quant_log_cb),
            &mut sink as *mut QuantSink<'_> as *mut c_void,
        );
        let rc = sys::llama_model_quantize(inp.as_ptr(), out.as_ptr(), &params);
        // `sink` dies with this frame: detach it before anything else can log.
        sys::llama_log_set(Some(log_cb), std::ptr::null_mut());
        rc
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(())
    }
}
