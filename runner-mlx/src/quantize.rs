//! `runner-mlx quantize SRC_DIR OUT_DIR [--mode affine|nvfp4|mxfp4|mxfp8] [--bits 4|8]
//! [--group-size N]`: herd create's `--experimental -q int4|int8|nvfp4|mxfp4|mxfp8`. Every
//! `*.safetensors` of SRC_DIR is quantized by MLX's `quantize` (shim/quantize.cpp) into OUT_DIR
//! under the same name; the other files are copied, config.json with a `quantization` section
//! (mlx-lm's form: global bits/group/mode, and the embedding/lm_head override) so loaders and
//! herd's importer know each weight's format. Ollama's policy: the token embedding and lm_head
//! take the 8-bit type of the requested family (int8 under int4, mxfp8 under nvfp4/mxfp4).
//! Invariant: OUT_DIR must not exist; on failure it is removed, so no partial output remains.

use std::path::Path;

use serde_json::{json, Value};

use crate::checkpoint::quant::Mode;

/// One quantization scheme: MLX's mode, bits and group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    pub mode: Mode,
    pub bits: u32,
    pub group: u32,
}

impl Scheme {
    /// The scheme for `mode` (`affine`, `nvfp4`, `mxfp4`, `mxfp8`): affine needs `bits` (4 or 8)
    /// and takes `group` (32, 64 or 128; default 64); the fp modes have MLX's fixed bits and
    /// group, and a `bits`/`group` that disagrees is refused.
    pub fn new(mode: &str, bits: Option<u32>, group: Option<u32>) -> Result<Scheme, String> {
        let m = Mode::parse(mode)
            .ok_or_else(|| format!("--mode {mode}: use affine, nvfp4, mxfp4 or mxfp8"))?;
        if let Some((b, g)) = m.fixed() {
            if bits.is_some_and(|v| v != b) || group.is_some_and(|v| v != g) {
                return Err(format!(
                    "--mode {mode} is {b}-bit with --group-size {g}; leave --bits and --group-size out"
                ));
            }
            return Ok(Scheme {
                mode: m,
                bits: b,
                group: g,
            });
        }
        let bits = bits.ok_or("--mode affine needs --bits")?;
        if bits != 4 && bits != 8 {
            return Err(format!("--bits {bits}: only 4 and 8 are supported"));
        }
        let group = group.unwrap_or(64);
        if ![32, 64, 128].contains(&group) {
            return Err(format!("--group-size {group}: use 32, 64 or 128"));
        }
        Ok(Scheme {
            mode: m,
            bits,
            group,
        })
    }

    /// What the token embedding and lm_head take: 8 bits in the same family.
    pub fn embed(self) -> Scheme {
        match self.mode {
            Mode::Affine => Scheme { bits: 8, ..self },
            _ => Scheme {
                mode: Mode::Mxfp8,
                bits: 8,
                group: 32,
            },
        }
    }

    /// config.json's `quantization` entry (mlx-lm's keys; `mode` only when not affine, the
    /// default, so int4/int8 output reads as before).
    fn config(self) -> Value {
        let mut v = json!({"group_size": self.group, "bits": self.bits});
        if self.mode != Mode::Affine {
            v["mode"] = json!(self.mode.name());
        }
        v
    }
}

/// Quantizes the checkpoint in `src` into the new directory `out`.
pub fn run(src: &Path, out: &Path, scheme: Scheme) -> Result<(), String> {
    std::fs::create_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let r = quantize_into(src, out, scheme);
    if r.is_err() {
        let _ = std::fs::remove_dir_all(out);
    }
    r
}

fn quantize_into(src: &Path, out: &Path, scheme: Scheme) -> Result<(), String> {
    let embed = scheme.embed();
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
            quantized += crate::ffi::quantize::quantize_file(p, &dest, scheme, embed)
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
    let mut q = scheme.config();
    q["model.embed_tokens"] = embed.config();
    q["lm_head"] = embed.config();
    config["quantization"] = q.clone();
    config["quantization_config"] = q;
    let text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    std::fs::write(out.join("config.json"), text).map_err(|e| format!("config.json: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_follow_the_mode() {
        let s = |m: &str, b: Option<u32>, g: Option<u32>| Scheme::new(m, b, g);
        let fixed = |mode, bits, group| Scheme { mode, bits, group };
        assert_eq!(s("nvfp4", None, None), Ok(fixed(Mode::Nvfp4, 4, 16)));
        assert_eq!(s("mxfp4", Some(4), Some(32)), Ok(fixed(Mode::Mxfp4, 4, 32)));
        assert_eq!(s("MXFP8", None, None), Ok(fixed(Mode::Mxfp8, 8, 32)));
        assert_eq!(s("affine", Some(4), None), Ok(fixed(Mode::Affine, 4, 64)));
        assert_eq!(
            s("affine", Some(8), Some(32)),
            Ok(fixed(Mode::Affine, 8, 32))
        );
        for (m, b, g, want) in [
            ("nvfp4", Some(8), None, "leave --bits"),
            ("mxfp4", None, Some(64), "--group-size 32"),
            ("affine", None, None, "needs --bits"),
            ("affine", Some(3), None, "only 4 and 8"),
            ("affine", Some(4), Some(16), "use 32, 64 or 128"),
            ("fp4", None, None, "use affine, nvfp4"),
        ] {
            let e = s(m, b, g).unwrap_err();
            assert!(e.contains(want), "{m}: {e:?} should mention {want:?}");
        }
        // The embedding: 8 bits in the family.
        assert_eq!(
            fixed(Mode::Affine, 4, 64).embed(),
            fixed(Mode::Affine, 8, 64)
        );
        for m in [Mode::Nvfp4, Mode::Mxfp4, Mode::Mxfp8] {
            let (b, g) = m.fixed().unwrap();
            assert_eq!(fixed(m, b, g).embed(), fixed(Mode::Mxfp8, 8, 32));
        }
        assert_eq!(
            fixed(Mode::Nvfp4, 4, 16).config(),
            json!({"group_size": 16, "bits": 4, "mode": "nvfp4"})
        );
        assert_eq!(
            fixed(Mode::Affine, 8, 64).config(),
            json!({"group_size": 64, "bits": 8})
        );
    }
}
