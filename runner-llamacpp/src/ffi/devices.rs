//! ggml's device list (name, kind, free/total memory) and llama.cpp's per-buffer-type memory
//! breakdown of a context (weights, KV cache, compute buffers), through the C shim in
//! `devices_shim.cpp`. Pure data comes out; `crate::memory` turns it into the protocol's
//! per-device report.
//!
//! Invariant: a buffer type that is host memory (`ggml_backend_buft_is_host`: mmapped or
//! pinned host buffers, CUDA_Host included) is attributed to host RAM, never to the device
//! that registered it, so pinned staging buffers never count as VRAM.

use super::{sys, Context};
use runner_protocol::DeviceKind;
use std::ffi::CStr;

/// One ggml backend device and its memory now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub description: String,
    pub kind: DeviceKind,
    pub free: u64,
    pub total: u64,
}

/// What one buffer type holds for a context: `device` is `None` for host memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferMemory {
    /// Name of the device the memory is on (`Device::name`), `None` for host RAM.
    pub device: Option<String>,
    pub weights: u64,
    pub kv_cache: u64,
    pub compute: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct HerdBuftMemory {
    buft: sys::ggml_backend_buffer_type_t,
    model: usize,
    context: usize,
    compute: usize,
}

extern "C" {
    fn herd_memory_breakdown(
        ctx: *const sys::llama_context,
        out: *mut HerdBuftMemory,
        cap: usize,
    ) -> usize;
}

fn string(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns NUL-terminated strings owned by the device for the process's life.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn kind(t: sys::ggml_backend_dev_type) -> DeviceKind {
    match t {
        sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceKind::Gpu,
        sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceKind::Igpu,
        sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceKind::Accel,
        _ => DeviceKind::Cpu,
    }
}

fn device(dev: sys::ggml_backend_dev_t) -> Device {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: `dev` comes from ggml's registry, which lives as long as the process.
    unsafe { sys::ggml_backend_dev_memory(dev, &mut free, &mut total) };
    Device {
        name: string(unsafe { sys::ggml_backend_dev_name(dev) }),
        description: string(unsafe { sys::ggml_backend_dev_description(dev) }),
        kind: kind(unsafe { sys::ggml_backend_dev_type(dev) }),
        free: free as u64,
        total: total as u64,
    }
}

/// Every device ggml has registered (after `ffi::init` loaded the backends), in registry order.
pub fn devices() -> Vec<Device> {
    // SAFETY: plain queries of ggml's global device registry.
    let n = unsafe { sys::ggml_backend_dev_count() };
    (0..n)
        .map(|i| device(unsafe { sys::ggml_backend_dev_get(i) }))
        .collect()
}

impl Context {
    /// llama.cpp's own accounting of what this context and its model allocated, per buffer
    /// type (the numbers `llama_memory_breakdown_print` shows).
    pub fn memory_breakdown(&self) -> Vec<BufferMemory> {
        let mut raw = vec![
            HerdBuftMemory {
                buft: std::ptr::null_mut(),
                model: 0,
                context: 0,
                compute: 0,
            };
            16
        ];
        loop {
            // SAFETY: `raw` has room for `raw.len()` entries; the context is alive (`&self`).
            let n =
                unsafe { herd_memory_breakdown(self.ptr.as_ptr(), raw.as_mut_ptr(), raw.len()) };
            if n <= raw.len() {
                raw.truncate(n);
                break;
            }
            raw.resize(n, raw[0]);
        }
        raw.iter()
            .map(|b| {
                // SAFETY: buffer types are static objects of their backend.
                let host = b.buft.is_null() || unsafe { sys::ggml_backend_buft_is_host(b.buft) };
                let device = if host {
                    None
                } else {
                    let dev = unsafe { sys::ggml_backend_buft_get_device(b.buft) };
                    (!dev.is_null()).then(|| string(unsafe { sys::ggml_backend_dev_name(dev) }))
                };
                BufferMemory {
                    device,
                    weights: b.model as u64,
                    kv_cache: b.context as u64,
                    compute: b.compute as u64,
                }
            })
            .collect()
    }
}
