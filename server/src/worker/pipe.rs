//! Bytes both ways between two streams, counted, until either side ends. ggml RPC is strictly
//! request/response, so the first side to end (EOF or error) ends the tunnel: there is no
//! half-closed state worth keeping.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Which side ended the pipe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    A,
    B,
}

/// Copies `a → b` (counted in `a_to_b`) and `b → a` (counted in `b_to_a`) until one side's read
/// ends or a write fails; returns the side whose read or write ended it.
pub async fn pump<A, B>(a: A, b: B, a_to_b: &AtomicU64, b_to_a: &AtomicU64) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    // A direction's result: Ended::A when a's read ended, Ended::B when b's write failed.
    let forward = copy(&mut ar, &mut bw, a_to_b, Ended::A, Ended::B);
    let backward = copy(&mut br, &mut aw, b_to_a, Ended::B, Ended::A);
    tokio::select! {
        e = forward => e,
        e = backward => e,
    }
}

async fn copy<R, W>(r: &mut R, w: &mut W, count: &AtomicU64, reader: Ended, writer: Ended) -> Ended
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return reader,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
            return writer;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_flow_both_ways_counted_and_the_closing_side_is_named() {
        let (a_near, mut a_far) = tokio::io::duplex(1024);
        let (b_near, mut b_far) = tokio::io::duplex(1024);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let far = async {
            a_far.write_all(b"request").await.unwrap();
            let mut got = [0u8; 7];
            b_far.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"request");
            b_far.write_all(b"reply!").await.unwrap();
            let mut got = [0u8; 6];
            a_far.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"reply!");
            drop(b_far); // the B side goes away first
            a_far
        };
        let (ended, _a_far) = tokio::join!(pump(a_near, b_near, &up, &down), far);
        assert_eq!(ended, Ended::B);
        assert_eq!(
            (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed)),
            (7, 6)
        );
    }
}
