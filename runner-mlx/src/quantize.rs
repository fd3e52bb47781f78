//! `runner-mlx quantize SRC_DIR OUT_DIR --bits 4|8 --group-size 64`: herd create's
//! `--experimental -q int4|int8`. Every `*.safetensors` of SRC_DIR is quantized by MLX's affine
//! `quantize` (shim/quantize.cpp) into OUT_DIR under the same name; the other files are copied,
//! config.json with a `quantization` section (mlx-lm's form: global bits/group, and the
//! embedding/lm_head override) so loaders and herd's importer know each weight's bits.
//! Ollama's policy for int4: the token embedding and lm_head stay at 8 bits.
//! Invariant: OUT_DIR must not exist; on failure it is removed, so no partial output remains.

use std::path::Path;

use serde_json::{json, Value};

/// Quantizes the checkpoint in `src` into the new directory `out`.
pub fn run(src: &Path, out: &Path, bits: u32, group_size: u32) -> Result<(), String> {
    if bits != 4 && bits != 8 {
        return Err(format!("--bits {bits}: only 4 and 8 are supported"));
    }
    if ![32, 64, 128].contains(&group_size) {
        return Err(format!("--group-size {group_size}: use 32, 64 or 128"));
    }
    std::fs::create_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let r = quantize_into(src, out, bits, group_size);
    if r.is_err() {
        let _ = std::fs::remove_dir_all(out);
    }
    r
}

fn quantize_into(src: &Path, out: &Path, bits: u32, group_size: u32) -> Result<(), String> {
    let embed_bits = 8;
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut quantized = 0;
    let mut config: Option<Value> = None;
    for p in &entries {
        let name = p.file_name().unwrap_or_default();
        let dest = out.join(name);
        if p.extension().is_some_and(|x| x == "safetensors") {
            quantized +=
                crate::ffi::quantize::quantize_file(p, &dest, bits, embed_bits, group_size)
                    .map_err(|e| format!("{}: {e}", p.display()))?;
        } else if name == "config.json" {
            let text = std::fs::read_to_string(p).map_err(|e| format!("config.json: {e}"))?;
            config = Some(serde_json::from_str(&text).map_err(|e| format!("config.json: {e}"))?);
        } else if p.is_file() {
            std::fs::copy(p, &dest).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    if quantized == 0 {
        return Err("no weight could be quantized (no float 2-D *.weight tensors)".into());
    }
    let mut config = config.ok_or("config.json is missing")?;
    let override_ = json!({"group_size": group_size, "bits": embed_bits});
    let q = json!({
        "group_size": group_size,
        "bits": bits,
        "model.embed_tokens": override_,
        "lm_head": override_,
    });
    config["quantization"] = q.clone();
    config["quantization_config"] = q;
    let text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    std::fs::write(out.join("config.json"), text).map_err(|e| format!("config.json: {e}"))
}
