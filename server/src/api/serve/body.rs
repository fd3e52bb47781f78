//! The request-body transfer rule: a body must keep arriving. Two bounds, both from
//! [`BodyPolicy`]: no gap without a byte longer than `timeout`, and once `timeout` has passed
//! since the body started, an average of at least `min_rate` bytes per second. A body trickled
//! at 1 byte/s is cut after `timeout`; a large upload over any real link never is.
//!
//! [`deadline`] is the pure rule (table-tested); [`RateBody`] applies it to a request body: it
//! ends the body with [`BodyTooSlow`] when the deadline passes, which the JSON extractor turns
//! into 408 and the blob upload into its own failure; the connection is then closed (the unread
//! rest of the body cannot be skipped).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPolicy {
    /// Longest gap between bytes, and the grace before the average rate counts.
    pub timeout: Duration,
    /// Least average bytes per second after the grace; 0 = no rate rule.
    pub min_rate: u64,
}

impl Default for BodyPolicy {
    fn default() -> Self {
        BodyPolicy {
            timeout: Duration::from_secs(30),
            min_rate: 4096,
        }
    }
}

/// How far after the body's start it must have made progress again: the earlier of "`timeout`
/// after the last byte" and "the moment `received` bytes fall below `min_rate` on average",
/// never before the grace ends.
pub fn deadline(
    policy: &BodyPolicy,
    since_last: Duration,
    elapsed: Duration,
    received: u64,
) -> Duration {
    let gap = elapsed.saturating_sub(since_last) + policy.timeout;
    if policy.min_rate == 0 {
        return gap;
    }
    // `received` bytes keep the average at `min_rate` until received / min_rate seconds.
    let rate = Duration::from_secs_f64(received as f64 / policy.min_rate as f64);
    gap.min(rate.max(policy.timeout))
}

/// The error a too-slow body ends with.
#[derive(Debug, thiserror::Error)]
#[error("request body arrived too slowly")]
pub struct BodyTooSlow;

/// Whether `err` (or what it wraps) is [`BodyTooSlow`].
pub fn is_too_slow(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cur) = e {
        if cur.is::<BodyTooSlow>() {
            return true;
        }
        e = cur.source();
    }
    false
}

/// A request body held to a [`BodyPolicy`].
pub struct RateBody<B> {
    inner: B,
    policy: BodyPolicy,
    started: Instant,
    last: Instant,
    received: u64,
    timer: Pin<Box<Sleep>>,
    done: bool,
}

impl<B> RateBody<B> {
    pub fn new(inner: B, policy: BodyPolicy) -> RateBody<B> {
        let now = Instant::now();
        RateBody {
            inner,
            policy,
            started: now,
            last: now,
            received: 0,
            timer: Box::pin(tokio::time::sleep_until(
                now + deadline(&policy, Duration::ZERO, Duration::ZERO, 0),
            )),
            done: false,
        }
    }

    fn rearm(&mut self) {
        let now = Instant::now();
        let at = deadline(
            &self.policy,
            now - self.last,
            now - self.started,
            self.received,
        );
        self.timer.as_mut().reset(self.started + at);
    }
}

impl<B> Body for RateBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    if !d.is_empty() {
                        this.received += d.len() as u64;
                        this.last = Instant::now();
                        this.rearm();
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.done = true;
                    tracing::debug!(received = this.received, "request body too slow; closing");
                    Poll::Ready(Some(Err(Box::new(BodyTooSlow))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines() {
        let p = BodyPolicy {
            timeout: Duration::from_secs(30),
            min_rate: 1000,
        };
        let s = Duration::from_secs;
        // (since last byte, elapsed, received) → deadline from the start
        let table = [
            // Nothing yet: the gap rule (30 s).
            ((s(0), s(0), 0), s(30)),
            // 1 byte/s for 10 s: the grace ends at 30 s and 10 bytes are far below 1000/s.
            ((s(0), s(10), 10), s(30)),
            // Fast: 1 MB in 2 s keeps the average up until 1000 s; the gap rule bounds it.
            ((s(0), s(2), 1_000_000), s(32)),
            // A stalled fast upload: last byte 25 s ago → 5 s left.
            ((s(25), s(40), 100_000), s(45)),
            // 40 kB by 39 s: the average falls below 1000/s at 40 s.
            ((s(0), s(39), 40_000), s(40)),
        ];
        for ((since, elapsed, got), want) in table {
            assert_eq!(
                deadline(&p, since, elapsed, got),
                want,
                "{since:?} {elapsed:?} {got}"
            );
        }
        let no_rate = BodyPolicy { min_rate: 0, ..p };
        assert_eq!(deadline(&no_rate, s(0), s(100), 1), s(130));
    }

    /// Real time, short bounds (tokio's paused clock needs a feature the build does not have).
    #[tokio::test]
    async fn a_trickle_is_cut_and_a_steady_body_is_not() {
        use futures_util::StreamExt;
        use http_body_util::BodyExt;
        let p = BodyPolicy {
            timeout: Duration::from_millis(500),
            min_rate: 1000,
        };
        let trickle = futures_util::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((
                Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"x"))),
                n + 1,
            ))
        });
        let body = RateBody::new(http_body_util::StreamBody::new(Box::pin(trickle)), p);
        let started = Instant::now();
        let Err(err) = body.collect().await else {
            panic!("a trickle is cut")
        };
        assert!(is_too_slow(err.as_ref()));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(2),
            "{took:?}"
        );

        // 1000 bytes per 50 ms (20 kB/s) for a second: twice the timeout, never cut.
        let steady = futures_util::stream::iter(0..20).then(|_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![0u8; 1000])))
        });
        let body = RateBody::new(http_body_util::StreamBody::new(Box::pin(steady)), p);
        assert_eq!(body.collect().await.unwrap().to_bytes().len(), 20_000);
    }
}
