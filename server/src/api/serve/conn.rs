//! One connection's request accounting, for the idle rule: HTTP/1 keep-alive is bounded by
//! hyper's header-read timeout, but an HTTP/2 connection with no stream open has no such bound,
//! so the connection task closes any connection (gracefully: GOAWAY for h2) once no request has
//! been in flight for the idle timeout. A request counts as in flight until its response body
//! has ended or been dropped, so a long token stream is never idle.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

/// Shared by a connection's requests and its task.
#[derive(Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    changed: Notify,
}

impl Activity {
    /// Marks a request in flight until the returned guard drops.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        InFlight(self.clone())
    }

    /// Resolves once no request has been in flight for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                if tokio::time::timeout(idle, changed.as_mut()).await.is_err() {
                    return;
                }
            } else {
                changed.await;
            }
        }
    }
}

/// A request in flight on its connection.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A response body that keeps its request in flight until it ends.
pub struct Tracked<B> {
    inner: B,
    guard: Option<InFlight>,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, guard: InFlight) -> Tracked<B> {
        Tracked {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_only_counts_without_requests() {
        let a = Arc::new(Activity::default());
        let guard = a.begin();
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.idle_for(Duration::from_millis(200)).await }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!waiter.is_finished(), "busy is never idle");
        let released = tokio::time::Instant::now();
        drop(guard);
        waiter.await.unwrap();
        let took = released.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
