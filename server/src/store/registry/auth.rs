//! Registry authentication as Ollama does it: an ed25519 key pair in OpenSSH format at
//! `<dir>/id_ed25519` (+ `.pub`), the `WWW-Authenticate: Bearer` challenge, and the signed token
//! request. The token request is `GET <realm>?nonce=..&scope=..&service=..&ts=..` carrying
//! `Authorization: <base64 ssh public key blob>:<base64 raw signature>` over the string
//! `GET,<that url>,<base64(hex(sha256("")))>`; the reply is `{"token": ...}`.
//!
//! Invariant: a challenge is answered only when its realm is on the host we were talking to
//! (`policy::realm_allowed`), so neither the signature nor the token leaves that host.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use sha2::{Digest as _, Sha256};
use ssh_key::{Algorithm, LineEnding, PrivateKey};
use url::Url;

use crate::error::{Error, Result};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The loaded identity.
#[derive(Clone)]
pub struct KeyPair {
    signing: SigningKey,
    /// SSH wire-format public key blob (what `authorized_keys` base64-encodes).
    public_blob: Vec<u8>,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair({})", B64.encode(&self.public_blob))
    }
}

/// `<dir>/id_ed25519`.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join("id_ed25519")
}

/// Loads `<dir>/id_ed25519`, creating the pair (private key mode 0600, `.pub` beside it) when
/// absent, as `ollama serve` does at startup. An existing key that is not an unencrypted ed25519
/// OpenSSH key is an error (never overwritten).
/// The key pair in `dir` ([`ensure_keypair`]), loaded or made once per `cell`, on the blocking
/// pool; `None` = no key directory, which `missing` explains.
pub async fn cached_keypair(
    cell: &tokio::sync::OnceCell<KeyPair>,
    dir: Option<std::path::PathBuf>,
    missing: &str,
) -> Result<KeyPair> {
    let dir = dir.ok_or_else(|| Error::Internal(missing.to_owned()))?;
    cell.get_or_try_init(|| async move {
        tokio::task::spawn_blocking(move || ensure_keypair(&dir))
            .await
            .map_err(|e| Error::Internal(format!("key task: {e}")))?
    })
    .await
    .cloned()
}

pub fn ensure_keypair(dir: &Path) -> Result<KeyPair> {
    let path = key_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => return parse_private(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    std::fs::create_dir_all(dir)?;
    let key = PrivateKey::random(&mut rand::rngs::OsRng, Algorithm::Ed25519)
        .map_err(|e| Error::Internal(format!("generate key: {e}")))?;
    let pem = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| Error::Internal(format!("encode key: {e}")))?;
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| Error::Internal(format!("encode public key: {e}")))?;
    write_new(&path, pem.as_bytes(), 0o600)?;
    write_new(
        &dir.join("id_ed25519.pub"),
        format!("{public}\n").as_bytes(),
        0o644,
    )?;
    tracing::info!(path = %path.display(), "created new registry key pair");
    parse_private(&pem)
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

fn parse_private(text: &str) -> Result<KeyPair> {
    let key = PrivateKey::from_openssh(text)
        .map_err(|e| Error::Internal(format!("read registry key: {e}")))?;
    let pair = key
        .key_data()
        .ed25519()
        .ok_or_else(|| Error::Internal("registry key is not ed25519".into()))?;
    let public_blob = key
        .public_key()
        .to_bytes()
        .map_err(|e| Error::Internal(format!("encode public key: {e}")))?;
    Ok(KeyPair {
        signing: SigningKey::from(&pair.private),
        public_blob,
    })
}

impl KeyPair {
    /// `<base64 public key blob>:<base64 signature>`, Ollama's `auth.Sign` format.
    pub fn sign(&self, data: &[u8]) -> String {
        let sig = self.signing.sign(data);
        format!(
            "{}:{}",
            B64.encode(&self.public_blob),
            B64.encode(sig.to_bytes())
        )
    }

    /// The raw 32-byte ed25519 public key (for verifying in tests).
    pub fn verifying_key(&self) -> ed25519_dalek::VerifyingKey {
        self.signing.verifying_key()
    }

    /// The public key blob as it appears in `id_ed25519.pub` (second field).
    pub fn public_base64(&self) -> String {
        B64.encode(&self.public_blob)
    }
}

/// A parsed `WWW-Authenticate: Bearer ...` challenge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    pub realm: String,
    pub service: String,
    pub scope: String,
}

/// Parses `Bearer realm="..",service="..",scope=".."` (quoted values may contain commas;
/// unknown parameters are ignored). `None` for any other scheme or a missing realm.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let rest = header.trim();
    let (scheme, mut rest) = rest.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut c = Challenge::default();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if rest.is_empty() {
            break;
        }
        let (key, after) = rest.split_once('=')?;
        let (value, after) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "realm" => c.realm = value.to_owned(),
            "service" => c.service = value.to_owned(),
            "scope" => c.scope = value.to_owned(),
            _ => {}
        }
        rest = after;
    }
    (!c.realm.is_empty()).then_some(c)
}

/// The token URL Ollama builds: the realm with `service`, each space-separated `scope`, `ts`
/// (unix seconds) and a 16-byte base64url `nonce` added, query keys sorted (Go's
/// `url.Values.Encode`).
pub fn token_url(c: &Challenge, ts: u64, nonce: &[u8; 16]) -> Result<Url> {
    let mut url = Url::parse(&c.realm)
        .map_err(|e| Error::Internal(format!("invalid auth realm {:?}: {e}", c.realm)))?;
    let mut pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    pairs.push(("service".into(), c.service.clone()));
    for s in c.scope.split(' ') {
        pairs.push(("scope".into(), s.to_owned()));
    }
    pairs.push(("ts".into(), ts.to_string()));
    pairs.push((
        "nonce".into(),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(nonce),
    ));
    // Stable sort by key keeps repeated keys (scope) in insertion order, as Go does.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    url.set_query(None);
    url.query_pairs_mut().extend_pairs(pairs);
    Ok(url)
}

/// The string signed for a token request: `GET,<url>,<base64(hex(sha256 of empty body))>`.
pub fn token_request_payload(url: &Url) -> String {
    let empty = hex::encode(Sha256::digest(b""));
    format!("GET,{url},{}", B64.encode(empty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier as _;

    #[test]
    fn keypair_is_created_once_and_reloaded() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join(".ollama");
        let a = ensure_keypair(&dir).unwrap();
        let text = std::fs::read_to_string(key_path(&dir)).unwrap();
        assert!(
            text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(key_path(&dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let public = std::fs::read_to_string(dir.join("id_ed25519.pub")).unwrap();
        assert!(public.starts_with("ssh-ed25519 "), "{public}");
        assert_eq!(public.split(' ').nth(1).unwrap().trim(), a.public_base64());
        let b = ensure_keypair(&dir).unwrap();
        assert_eq!(a.public_base64(), b.public_base64());
        // A non-key is refused, not replaced.
        std::fs::write(key_path(&dir), "garbage").unwrap();
        assert!(ensure_keypair(&dir).is_err());
        assert_eq!(std::fs::read_to_string(key_path(&dir)).unwrap(), "garbage");
    }

    #[test]
    fn signature_format_verifies() {
        let t = tempfile::tempdir().unwrap();
        let k = ensure_keypair(t.path()).unwrap();
        let s = k.sign(b"GET,https://x/token,abc");
        let (pubkey, sig) = s.split_once(':').unwrap();
        assert_eq!(pubkey, k.public_base64());
        // The blob is the SSH wire format: string "ssh-ed25519", string <32 bytes>.
        let blob = B64.decode(pubkey).unwrap();
        assert_eq!(&blob[..4], &[0, 0, 0, 11]);
        assert_eq!(&blob[4..15], b"ssh-ed25519");
        assert_eq!(&blob[19..], k.verifying_key().as_bytes());
        let sig = ed25519_dalek::Signature::from_slice(&B64.decode(sig).unwrap()).unwrap();
        k.verifying_key()
            .verify(b"GET,https://x/token,abc", &sig)
            .unwrap();
        assert!(k.verifying_key().verify(b"other", &sig).is_err());
    }

    #[test]
    fn challenge_parsing() {
        let c = parse_challenge(
            r#"Bearer realm="https://registry.ollama.ai/v2/token",service="registry.ollama.ai",scope="repository:library/m:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://registry.ollama.ai/v2/token");
        assert_eq!(c.service, "registry.ollama.ai");
        assert_eq!(c.scope, "repository:library/m:pull,push");
        let c = parse_challenge("bearer realm=http://h/t, scope=\"a b\"").unwrap();
        assert_eq!((c.realm.as_str(), c.scope.as_str()), ("http://h/t", "a b"));
        assert_eq!(parse_challenge("Basic realm=\"x\""), None);
        assert_eq!(parse_challenge("Bearer service=\"x\""), None);
        assert_eq!(parse_challenge("Bearer realm=\"unterminated"), None);
        assert_eq!(parse_challenge(""), None);
    }

    #[test]
    fn token_url_and_payload_match_ollama() {
        let c = Challenge {
            realm: "https://r.example/v2/token?x=1".into(),
            service: "r.example".into(),
            scope: "repository:a/b:pull repository:c/d:pull".into(),
        };
        let url = token_url(&c, 1700000000, &[0xfb; 16]).unwrap();
        assert_eq!(
            url.as_str(),
            "https://r.example/v2/token?nonce=-_v7-_v7-_v7-_v7-_v7-w&scope=repository%3Aa%2Fb%3Apull&scope=repository%3Ac%2Fd%3Apull&service=r.example&ts=1700000000&x=1"
        );
        assert_eq!(
            token_request_payload(&url),
            format!(
                "GET,{url},ZTNiMGM0NDI5OGZjMWMxNDlhZmJmNGM4OTk2ZmI5MjQyN2FlNDFlNDY0OWI5MzRjYTQ5NTk5MWI3ODUyYjg1NQ=="
            )
        );
    }
}
