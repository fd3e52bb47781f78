//! The MLX pin as pure functions: the `native/mlx.lock` format and which wheel a build uses.
//! Shared by `build.rs` (which acts on them) and the crate's unit tests (which check them).

#[path = "../../native/build_support.rs"]
pub mod support;

/// One wheel of the pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wheel {
    pub package: String,
    pub archive: String,
    pub sha256: String,
    /// The wheel's bundled-library dir beside `mlx/` (empty: none).
    pub libs_dir: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub version: String,
    pub cpu: Wheel,
    pub cuda: Wheel,
}

impl Lock {
    /// The pin format of native/*.lock (support::parse_pin).
    pub fn parse(text: &str) -> Result<Lock, String> {
        let mut kv = support::parse_pin(text)?;
        let mut take = |k: &str| kv.remove(k).ok_or_else(|| format!("missing key `{k}`"));
        let mut wheel = |p: &str| -> Result<Wheel, String> {
            let w = Wheel {
                package: take(&format!("{p}_package"))?,
                archive: take(&format!("{p}_archive"))?,
                sha256: take(&format!("{p}_sha256"))?,
                libs_dir: take(&format!("{p}_libs_dir"))?,
            };
            if !support::is_sha256(&w.sha256) {
                return Err(format!("{p}_sha256 must be 64 lowercase hex digits"));
            }
            if w.archive.contains('/') || !w.archive.ends_with(".whl") || w.libs_dir.contains('/') {
                return Err(format!("{p}_archive must be a wheel file name"));
            }
            Ok(w)
        };
        let cpu = wheel("cpu")?;
        let cuda = wheel("cuda")?;
        Ok(Lock {
            version: take("version")?,
            cpu,
            cuda,
        })
    }

    /// The wheel for `HERD_GPU` (unset, empty or `cpu`: the CPU wheel; `cuda`: CUDA 13).
    pub fn wheel(&self, herd_gpu: Option<&str>) -> Result<&Wheel, String> {
        match herd_gpu.unwrap_or("") {
            "" | "cpu" => Ok(&self.cpu),
            "cuda" => Ok(&self.cuda),
            other => Err(format!(
                "HERD_GPU={other}: runner-mlx builds for cpu or cuda (Metal needs the macOS `mlx` wheel, not pinned yet)"
            )),
        }
    }
}

/// The cache dir a wheel unpacks into: `<cache>/mlx/<archive without .whl>`.
pub fn unpack_dir_name(w: &Wheel) -> String {
    w.archive.trim_end_matches(".whl").to_string()
}
