//! The quantizer's FFI (shim/quantize.cpp): one call per safetensors file. A submodule of
//! `ffi`, so `unsafe` stays in the runner's ffi module.

#![allow(unsafe_code)]

use std::path::Path;

use super::{c_path, message, ERR_LEN};

extern "C" {
    fn herd_mlx_quantize_safetensors(
        input: *const std::ffi::c_char,
        output: *const std::ffi::c_char,
        bits: i32,
        embed_bits: i32,
        group_size: i32,
        n_quantized: *mut i32,
        err: *mut std::ffi::c_char,
        err_len: usize,
    ) -> i32;
}

/// Quantizes `input` into `output`; returns how many weights were quantized.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    bits: u32,
    embed_bits: u32,
    group_size: u32,
) -> Result<u32, String> {
    let (i, o) = (c_path(input)?, c_path(output)?);
    let mut err = [0u8; ERR_LEN];
    let mut n = 0i32;
    let to_i32 = |v: u32| i32::try_from(v).map_err(|_| format!("{v} is out of range"));
    // SAFETY: NUL-terminated paths, a live i32 and an ERR_LEN buffer for the call's duration.
    let rc = unsafe {
        herd_mlx_quantize_safetensors(
            i.as_ptr(),
            o.as_ptr(),
            to_i32(bits)?,
            to_i32(embed_bits)?,
            to_i32(group_size)?,
            &mut n,
            err.as_mut_ptr().cast(),
            ERR_LEN,
        )
    };
    if rc == 0 {
        Ok(n.max(0) as u32)
    } else {
        Err(message(&err))
    }
}
