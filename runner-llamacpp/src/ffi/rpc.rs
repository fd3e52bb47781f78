//! ggml's RPC backend (`libggml-rpc.so`, a loadable backend module like the CPU one): serving this
//! host's devices to a remote runner (`serve`, for `runner-llamacpp rpc-server`) and adding a
//! remote host's devices to this process (`add_servers`, for `--rpc`). The module's entry points
//! are reached through `ggml_backend_reg_get_proc_address` (a module is not linked, so its
//! symbols are not either), with the C signatures of `ggml-rpc.h` restated below.
//!
//! Security invariant (issue 20): llama.cpp's RPC protocol has no authentication. `serve` is only
//! ever called with a loopback endpoint; herd's worker fronts it with an authenticated TLS
//! tunnel, and `--rpc` endpoints are the serving host's own loopback tunnel ends.
#![allow(unsafe_code)]

use super::sys;
use std::ffi::{c_char, CStr, CString};

/// `ggml-rpc.h`'s protocol version, reported by the worker.
pub const PROTO_VERSION: (u32, u32, u32) = (
    sys::RPC_PROTO_MAJOR_VERSION,
    sys::RPC_PROTO_MINOR_VERSION,
    sys::RPC_PROTO_PATCH_VERSION,
);

/// `ggml_backend_rpc_add_server` (ggml-rpc.h).
type AddServerFn = unsafe extern "C" fn(endpoint: *const c_char) -> sys::ggml_backend_reg_t;
/// `ggml_backend_rpc_start_server` (ggml-rpc.h).
type StartServerFn = unsafe extern "C" fn(
    endpoint: *const c_char,
    cache_dir: *const c_char,
    n_threads: usize,
    n_devices: usize,
    devices: *mut sys::ggml_backend_dev_t,
);

/// One compute device ggml knows (after `init_backends` and any `add_servers`), in ggml's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    pub description: String,
    /// A device of a remote host, reached through the RPC backend.
    pub rpc: bool,
    /// CPU-type (CPU or ACCEL): llama.cpp does not offload layers to these.
    pub cpu: bool,
    pub free: u64,
    pub total: u64,
}

fn rpc_reg() -> Result<sys::ggml_backend_reg_t, String> {
    let reg = unsafe { sys::ggml_backend_reg_by_name(c"RPC".as_ptr()) };
    if reg.is_null() {
        return Err("the RPC backend module (libggml-rpc.so) is not next to the runner".into());
    }
    Ok(reg)
}

fn proc_address(name: &CStr) -> Result<*mut std::ffi::c_void, String> {
    let reg = rpc_reg()?;
    let f = unsafe { sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr()) };
    if f.is_null() {
        return Err(format!(
            "the RPC backend module has no {}",
            name.to_string_lossy()
        ));
    }
    Ok(f)
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Every device, in ggml's registration order.
pub fn devices() -> Vec<Device> {
    let n = unsafe { sys::ggml_backend_dev_count() };
    (0..n)
        .map(|i| unsafe {
            let dev = sys::ggml_backend_dev_get(i);
            let reg = sys::ggml_backend_dev_backend_reg(dev);
            let kind = sys::ggml_backend_dev_type(dev);
            let (mut free, mut total) = (0usize, 0usize);
            sys::ggml_backend_dev_memory(dev, &mut free, &mut total);
            Device {
                name: text(sys::ggml_backend_dev_name(dev)),
                description: text(sys::ggml_backend_dev_description(dev)),
                rpc: !reg.is_null() && text(sys::ggml_backend_reg_name(reg)) == "RPC",
                cpu: kind == sys::GGML_BACKEND_DEVICE_TYPE_CPU
                    || kind == sys::GGML_BACKEND_DEVICE_TYPE_ACCEL,
                free: free as u64,
                total: total as u64,
            }
        })
        .collect()
}

/// Whether a local (not RPC) GPU device is loaded. `llama_supports_gpu_offload` also answers
/// true when merely the RPC module is loaded, which is not a GPU.
pub fn local_gpu() -> bool {
    devices().iter().any(|d| !d.rpc && !d.cpu)
}

/// Add the devices of the RPC servers at `endpoints` (`host:port`) to this process, so the next
/// model load can place layers on them. Returns how many devices were added. ggml aborts the
/// process when it cannot connect or the handshake fails (ggml-rpc.cpp `GGML_ABORT`); the
/// server probes its tunnel ends before it passes them.
pub fn add_servers(endpoints: &[String]) -> Result<usize, String> {
    if endpoints.is_empty() {
        return Ok(0);
    }
    let f = proc_address(c"ggml_backend_rpc_add_server")?;
    // SAFETY: the module exports this name with ggml-rpc.h's signature.
    let add: AddServerFn = unsafe { std::mem::transmute(f) };
    let mut added = 0;
    for ep in endpoints {
        let c = CString::new(ep.as_str()).map_err(|_| format!("RPC endpoint {ep:?} has NUL"))?;
        let reg = unsafe { add(c.as_ptr()) };
        if reg.is_null() {
            return Err(format!("the RPC server at {ep} offers no device"));
        }
        unsafe {
            added += sys::ggml_backend_reg_dev_count(reg);
            sys::ggml_backend_register(reg);
        }
    }
    Ok(added)
}

/// Serve this host's devices on `endpoint` (an IPv4 `127.0.0.1:port`; ggml binds it, backlog
/// 1, one client at a time). Devices as llama.cpp's rpc-server picks them: every non-CPU device,
/// else the CPU. Blocks while serving; returns only on failure, with the reason.
pub fn serve(endpoint: &str, threads: usize) -> String {
    if !endpoint.starts_with("127.") {
        return format!("refusing to serve RPC on {endpoint}: loopback only (herd tunnels it)");
    }
    let f = match proc_address(c"ggml_backend_rpc_start_server") {
        Ok(f) => f,
        Err(e) => return e,
    };
    // SAFETY: the module exports this name with ggml-rpc.h's signature.
    let start: StartServerFn = unsafe { std::mem::transmute(f) };
    let mut devs: Vec<sys::ggml_backend_dev_t> = Vec::new();
    let n = unsafe { sys::ggml_backend_dev_count() };
    for i in 0..n {
        let dev = unsafe { sys::ggml_backend_dev_get(i) };
        let kind = unsafe { sys::ggml_backend_dev_type(dev) };
        if kind != sys::GGML_BACKEND_DEVICE_TYPE_CPU && kind != sys::GGML_BACKEND_DEVICE_TYPE_ACCEL
        {
            devs.push(dev);
        }
    }
    if devs.is_empty() {
        let cpu = unsafe { sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU) };
        if cpu.is_null() {
            return "no device to serve (no backend module loaded)".into();
        }
        devs.push(cpu);
    }
    let c = match CString::new(endpoint) {
        Ok(c) => c,
        Err(_) => return "endpoint has NUL".into(),
    };
    // SAFETY: `devs` outlives the call (it blocks while serving); no cache dir.
    unsafe {
        start(
            c.as_ptr(),
            std::ptr::null(),
            threads,
            devs.len(),
            devs.as_mut_ptr(),
        )
    };
    format!("the RPC server on {endpoint} stopped (the port may be taken)")
}
