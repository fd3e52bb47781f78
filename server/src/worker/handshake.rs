//! The tunnel's first bytes, inside TLS: the client's hello and the worker's one-byte answer.
//!
//! ```text
//! client → worker: "HERDRPC1" | kind (0 connect, 1 probe) | token length (u16 BE) | token
//! worker → client: status (0 ok, 1 denied, 2 busy, 3 unavailable); then, for an accepted
//!                  connect, the raw ggml RPC stream both ways
//! ```
//!
//! Invariant: the worker reads at most `MAX_HELLO` bytes before deciding, and decides before it
//! opens any connection to the RPC server. Tokens compare as SHA-256 digests in constant time,
//! so neither the content nor the length of the expected token leaks through timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt};

pub const MAGIC: &[u8; 8] = b"HERDRPC1";
/// The longest token a hello may carry.
pub const MAX_TOKEN: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pipe to the RPC server.
    Connect,
    /// Check the credential and the RPC server, then close (the serving side's health probe).
    Probe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    Denied = 1,
    /// Another client holds the worker (ggml's RPC server serves one at a time).
    Busy = 2,
    /// The worker's RPC server is not running.
    Unavailable = 3,
}

impl Status {
    pub fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::Denied,
            2 => Status::Busy,
            3 => Status::Unavailable,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "accepted",
            Status::Denied => {
                "the worker refused the credential (HERD_RPC_TOKEN or client certificate)"
            }
            Status::Busy => "the worker is serving another runner",
            Status::Unavailable => "the worker's RPC server is not running",
        }
    }
}

/// The client's hello.
pub fn hello(kind: Kind, token: Option<&str>) -> Vec<u8> {
    let token = token.unwrap_or("").as_bytes();
    let len = token.len().min(MAX_TOKEN);
    let mut v = Vec::with_capacity(11 + len);
    v.extend_from_slice(MAGIC);
    v.push(match kind {
        Kind::Connect => 0,
        Kind::Probe => 1,
    });
    v.extend_from_slice(&(len as u16).to_be_bytes());
    v.extend_from_slice(&token[..len]);
    v
}

/// Reads one hello: `(kind, token)`, or why it is not one.
pub async fn read_hello<R: AsyncRead + Unpin>(r: &mut R) -> Result<(Kind, Vec<u8>), String> {
    let mut head = [0u8; 11];
    r.read_exact(&mut head)
        .await
        .map_err(|e| format!("no complete hello: {e}"))?;
    if &head[..8] != MAGIC {
        return Err("not a herd tunnel hello".into());
    }
    let kind = match head[8] {
        0 => Kind::Connect,
        1 => Kind::Probe,
        k => return Err(format!("unknown hello kind {k}")),
    };
    let len = u16::from_be_bytes([head[9], head[10]]) as usize;
    if len > MAX_TOKEN {
        return Err("token too long".into());
    }
    let mut token = vec![0u8; len];
    r.read_exact(&mut token)
        .await
        .map_err(|e| format!("no complete hello: {e}"))?;
    Ok((kind, token))
}

/// Whether `got` is the expected token; `None` expected = no token required.
pub fn token_ok(expected: Option<&str>, got: &[u8]) -> bool {
    match expected {
        None => true,
        Some(want) => {
            let a = Sha256::digest(want.as_bytes());
            let b = Sha256::digest(got);
            bool::from(a.ct_eq(&b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(bytes: &[u8]) -> Result<(Kind, Vec<u8>), String> {
        let mut r = bytes;
        read_hello(&mut r).await
    }

    #[tokio::test]
    async fn hellos_round_trip_and_others_are_refused() {
        let h = hello(Kind::Connect, Some("0123456789abcdef"));
        assert_eq!(
            parse(&h).await.unwrap(),
            (Kind::Connect, b"0123456789abcdef".to_vec())
        );
        assert_eq!(
            parse(&hello(Kind::Probe, None)).await.unwrap(),
            (Kind::Probe, vec![])
        );
        // ggml RPC's own first message (RPC_CMD_HELLO, then a u64 size) is no hello.
        let rpc = [14u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(parse(&rpc).await.unwrap_err().contains("not a herd"));
        assert!(parse(b"HERDRPC1")
            .await
            .unwrap_err()
            .contains("no complete"));
        let mut bad = hello(Kind::Probe, None);
        bad[8] = 9;
        assert!(parse(&bad).await.is_err());
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&[0, 0xff, 0xff]);
        assert!(parse(&long).await.unwrap_err().contains("too long"));
        let mut short = hello(Kind::Connect, Some("abcdef"));
        short.truncate(13);
        assert!(parse(&short).await.is_err());
    }

    #[test]
    fn tokens_compare_exactly() {
        let t = Some("0123456789abcdef");
        assert!(token_ok(t, b"0123456789abcdef"));
        assert!(!token_ok(t, b"0123456789abcdeF"));
        assert!(!token_ok(t, b"0123456789abcdef0"));
        assert!(!token_ok(t, b""));
        assert!(token_ok(None, b""));
        for b in 0..=4u8 {
            assert_eq!(Status::from_byte(b).map(|s| s as u8), (b < 4).then_some(b));
        }
    }
}
