//! The quantizer's FFI (shim/quantize.cpp): one call per safetensors file. A submodule of
//! `ffi`, so `unsafe` stays in the runner's ffi module.

#![allow(unsafe_code)]

use std::path::Path;

use super::{c_path, message, ERR_LEN};
use crate::quantize::Scheme;

extern "C" {
    fn herd_mlx_quantize_safetensors(
        input: *const std::ffi::c_char,
        output: *const std::ffi::c_char,
        mode: *const std::ffi::c_char,
        bits: i32,
        group_size: i32,
        embed_mode: *const std::ffi::c_char,
        embed_bits: i32,
        embed_group: i32,
        n_quantized: *mut i32,
        err: *mut std::ffi::c_char,
        err_len: usize,
    ) -> i32;
}

/// Quantizes `input` into `output`, the token embedding and lm_head in `embed`, every other
/// eligible weight in `main`; returns how many weights were quantized.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    main: Scheme,
    embed: Scheme,
) -> Result<u32, String> {
    let (i, o) = (c_path(input)?, c_path(output)?);
    let mode = |s: Scheme| std::ffi::CString::new(s.mode.name()).expect("no NUL in a mode name");
    let (m, em) = (mode(main), mode(embed));
    let mut err = [0u8; ERR_LEN];
    let mut n = 0i32;
    let to_i32 = |v: u32| i32::try_from(v).map_err(|_| format!("{v} is out of range"));
    // SAFETY: NUL-terminated paths and modes, a live i32 and an ERR_LEN buffer for the call's duration.
    let rc = unsafe {
        herd_mlx_quantize_safetensors(
            i.as_ptr(),
            o.as_ptr(),
            m.as_ptr(),
            to_i32(main.bits)?,
            to_i32(main.group)?,
            em.as_ptr(),
            to_i32(embed.bits)?,
            to_i32(embed.group)?,
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
