//! The `Digest` newtype: a sha256 content address, and the ONLY value from which a blob path can be
//! built (anchors.md §1, Probllama and its regressions). Every string that names a blob — from a
//! registry manifest, an API path, a file name in `blobs/` — passes through `Digest::parse*` first,
//! so `../`, NUL, separators, wrong lengths and uppercase never reach the filesystem.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// `sha256:` + exactly 64 lowercase hex characters.
///
/// Invariant: `hex` is always 64 bytes of `[0-9a-f]`; the constructors are the only way in.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

/// True iff `s` is 64 lowercase hex characters (checked byte-wise, so non-ASCII fails).
fn is_lower_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Digest {
    /// Canonical form only: `sha256:<64 lowercase hex>`. Used for manifests and registry data.
    pub fn parse(s: &str) -> Result<Digest> {
        match s.strip_prefix("sha256:") {
            Some(hex) if is_lower_hex64(hex) => Ok(Digest {
                hex: hex.to_owned(),
            }),
            _ => Err(Error::InvalidDigest),
        }
    }

    /// The API form: `sha256:` or `sha256-` followed by 64 lowercase hex (`/api/blobs/:digest`
    /// receives either spelling).
    pub fn parse_api(s: &str) -> Result<Digest> {
        let hex = s
            .strip_prefix("sha256:")
            .or_else(|| s.strip_prefix("sha256-"))
            .ok_or(Error::InvalidDigest)?;
        if is_lower_hex64(hex) {
            Ok(Digest {
                hex: hex.to_owned(),
            })
        } else {
            Err(Error::InvalidDigest)
        }
    }

    /// Recognises a blob file name (`sha256-<hex>`) exactly; anything else (partials, temp files,
    /// legacy names) is `None`.
    pub fn from_blob_file_name(name: &str) -> Option<Digest> {
        let hex = name.strip_prefix("sha256-")?;
        is_lower_hex64(hex).then(|| Digest {
            hex: hex.to_owned(),
        })
    }

    /// Digest of raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Self::from_sha256(Sha256::digest(bytes).into())
    }

    /// Digest and size of a file's contents, streamed in 1 MiB reads (the one file hasher: the
    /// CLI before uploading, create after quantizing).
    pub fn of_file(path: &std::path::Path) -> std::io::Result<(Digest, u64)> {
        use std::io::Read;
        let mut f = std::fs::File::open(path)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            let k = f.read(&mut buf)?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            n += k as u64;
        }
        Ok((Self::from_sha256(h.finalize().into()), n))
    }

    /// From a finished sha256 state.
    pub fn from_sha256(sum: [u8; 32]) -> Digest {
        Digest {
            hex: hex::encode(sum),
        }
    }

    /// The 64 hex characters, no prefix (what `/api/tags` calls `digest` for manifests).
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// `sha256-<hex>`: the file name inside `blobs/`. Built only from a validated digest.
    pub fn blob_file_name(&self) -> String {
        format!("sha256-{}", self.hex)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest(sha256:{})", self.hex)
    }
}

impl std::str::FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Digest> {
        Digest::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Deserialization validates, so a hostile manifest fails to parse instead of carrying a path.
impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Digest, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Digest::parse(&s).map_err(|_| serde::de::Error::custom(format!("invalid digest {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parse_table() {
        let upper = HEX.to_uppercase();
        let cases: Vec<(String, bool)> = vec![
            (format!("sha256:{HEX}"), true),
            (format!("sha256-{HEX}"), false),
            (HEX.to_string(), false),
            (format!("sha256:{}", &HEX[..63]), false),
            (format!("sha256:{HEX}0"), false),
            (format!("sha256:{upper}"), false),
            (format!("sha256:{}A", &HEX[..63]), false),
            (format!("sha256:{}\0", &HEX[..63]), false),
            (format!("sha256:{HEX}\0"), false),
            ("sha256:../../../../etc/ld.so.preload".into(), false),
            (format!("sha256:../{}", &HEX[..61]), false),
            ("sha256-..".into(), false),
            (format!("/sha256:{HEX}"), false),
            (format!("sha256:/{}", &HEX[..63]), false),
            (format!("sha256:..\\{}", &HEX[..61]), false),
            (format!("sha256:{}\\", &HEX[..63]), false),
            (format!("sha512:{HEX}"), false),
            (format!("SHA256:{HEX}"), false),
            (format!(" sha256:{HEX}"), false),
            (format!("sha256:{HEX} "), false),
            (format!("sha256:{}g", &HEX[..63]), false),
            (format!("sha256:{}é", &HEX[..62]), false),
            ("".into(), false),
            ("sha256:".into(), false),
        ];
        for (s, ok) in cases {
            assert_eq!(Digest::parse(&s).is_ok(), ok, "parse({s:?})");
        }
    }

    #[test]
    fn parse_api_accepts_both_separators_only() {
        assert_eq!(
            Digest::parse_api(&format!("sha256-{HEX}")).unwrap(),
            Digest::parse(&format!("sha256:{HEX}")).unwrap()
        );
        assert!(Digest::parse_api(&format!("sha256:{HEX}")).is_ok());
        for bad in [
            format!("sha256_{HEX}"),
            format!("sha256--{HEX}"),
            format!("sha256-{}", HEX.to_uppercase()),
            format!("sha256-{}", &HEX[..63]),
            "sha256-..".to_string(),
            "sha256-../../etc/passwd".to_string(),
            format!("sha256-{}/", &HEX[..63]),
            HEX.to_string(),
        ] {
            assert!(
                matches!(Digest::parse_api(&bad), Err(Error::InvalidDigest)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn blob_file_name_and_back() {
        let d = Digest::parse(&format!("sha256:{HEX}")).unwrap();
        assert_eq!(d.blob_file_name(), format!("sha256-{HEX}"));
        assert_eq!(d.hex(), HEX);
        assert_eq!(d.to_string(), format!("sha256:{HEX}"));
        assert_eq!(Digest::from_blob_file_name(&d.blob_file_name()), Some(d));
        for not_blob in [
            format!("sha256:{HEX}"),
            format!("sha256-{HEX}-partial"),
            format!("sha256-{HEX}-partial-0"),
            ".tmp-abc".to_string(),
            "sha256-123456".to_string(),
        ] {
            assert_eq!(Digest::from_blob_file_name(&not_blob), None, "{not_blob}");
        }
    }

    #[test]
    fn of_bytes_is_sha256() {
        // sha256 of the empty string is the well-known HEX above.
        assert_eq!(Digest::of_bytes(b"").hex(), HEX);
        assert_ne!(Digest::of_bytes(b"a").hex(), HEX);
    }

    #[test]
    fn serde_validates() {
        let d: Digest = serde_json::from_str(&format!("\"sha256:{HEX}\"")).unwrap();
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            format!("\"sha256:{HEX}\"")
        );
        assert!(serde_json::from_str::<Digest>("\"sha256:../../x\"").is_err());
        assert!(serde_json::from_str::<Digest>(&format!("\"sha256-{HEX}\"")).is_err());
    }
}
