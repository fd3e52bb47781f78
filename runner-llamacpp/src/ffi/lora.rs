//! LoRA adapters (a model's Modelfile `ADAPTER` layers): loaded for the context's model and
//! applied to the context at scale 1.0, as Ollama's runner applies them.
//! Invariant: llama.cpp frees adapters with their model, and the context holds an `Arc` of the
//! model, so the adapter pointers stay valid for as long as the context can use them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{sys, Context};

impl Context {
    /// Loads every adapter file and sets them all on this context. A file llama.cpp cannot read
    /// as a LoRA for this model is an error naming its position, never a silent skip.
    pub fn apply_lora(&mut self, paths: &[PathBuf]) -> Result<(), String> {
        if paths.is_empty() {
            return Ok(());
        }
        let mut adapters = Vec::with_capacity(paths.len());
        for (i, p) in paths.iter().enumerate() {
            let c = CString::new(p.as_os_str().as_bytes())
                .map_err(|_| format!("adapter {i}: path holds a NUL byte"))?;
            // SAFETY: the model pointer is live (held by `self.model`); `c` outlives the call.
            let a = unsafe { sys::llama_adapter_lora_init(self.model.ptr.as_ptr(), c.as_ptr()) };
            if a.is_null() {
                return Err(format!(
                    "adapter {i} could not be loaded as a LoRA for this model"
                ));
            }
            adapters.push(a);
        }
        let mut scales = vec![1.0f32; adapters.len()];
        // SAFETY: both arrays hold `adapters.len()` elements and live across the call.
        let rc = unsafe {
            sys::llama_set_adapters_lora(
                self.ptr.as_ptr(),
                adapters.as_mut_ptr(),
                adapters.len(),
                scales.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(format!("llama.cpp refused the adapters (code {rc})"));
        }
        Ok(())
    }
}
