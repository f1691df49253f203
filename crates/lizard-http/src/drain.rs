//! Keep-alive for requests answered before their body was read.
//!
//! A handler that refuses a request early (a 401 before authentication reads anything, a 409 for a
//! paused sandbox, a 429) drops the request body unread. hyper then makes one attempt to read the
//! rest of the body, and if it has not all arrived yet — a client that writes its headers and its
//! body in two writes, on a busy machine — it closes the connection after the answer. A client that
//! sends its next request on that kept-alive connection sees "server disconnected without sending a
//! response", a failure the user never caused (a CI run of the Python SDK saw exactly that on the
//! request after a 409).
//!
//! [`DrainOnDrop`] wraps a request body; when it is dropped before its end, the rest is read and
//! discarded on a task of its own, at most [`DRAIN_BYTES`] and for at most [`DRAIN_TIME`], so the
//! connection stays usable. A client that sends more, or stalls, loses the connection as before:
//! draining never buffers, and its bounds hold whatever the client does.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::EXPECT;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

/// At most this much of an unread body is read and thrown away to keep its connection.
pub const DRAIN_BYTES: u64 = 1 << 20;
/// For at most this long.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// `req` with its body wrapped in a [`DrainOnDrop`]. A request that waits for `100 Continue` is not
/// drained: its client has not sent the body, and an answer has already gone out in place of the
/// `100` (hyper then closes the connection, which is right).
pub fn drain_unread_body<B>(req: Request<B>) -> Request<DrainOnDrop<B>>
where
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
{
    let drain = !req.headers().contains_key(EXPECT);
    req.map(|body| DrainOnDrop::new(body, drain))
}

/// A request body that, dropped before its end, is drained in the background (see the module docs).
pub struct DrainOnDrop<B>
where
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
{
    inner: Option<B>,
    drain: bool,
}

impl<B> DrainOnDrop<B>
where
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
{
    /// Wrap `body`; `drain: false` makes this a plain pass-through.
    pub fn new(body: B, drain: bool) -> Self {
        Self {
            inner: Some(body),
            drain,
        }
    }
}

impl<B> Body for DrainOnDrop<B>
where
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl<B> Drop for DrainOnDrop<B>
where
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
{
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if !self.drain || body.is_end_stream() || body.size_hint().lower() > DRAIN_BYTES {
            return;
        }
        // Dropped outside a runtime (only in tests of other code): nothing to drain on.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let _ = tokio::time::timeout(DRAIN_TIME, discard(body, DRAIN_BYTES)).await;
        });
    }
}

/// Read `body` to its end and throw it away, giving up after `limit` bytes; whether it ended.
async fn discard<B: Body + Unpin>(mut body: B, limit: u64) -> bool {
    use bytes::Buf;
    let mut seen = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return false;
        };
        if let Some(data) = frame.data_ref() {
            seen += data.remaining() as u64;
            if seen > limit {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{Full, StreamBody};

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_to_its_end_and_one_beyond_is_not() {
        assert!(discard(Full::new(Bytes::from(vec![0u8; 1000])), 1000).await);
        assert!(!discard(Full::new(Bytes::from(vec![0u8; 1001])), 1000).await);
    }

    #[tokio::test]
    async fn a_body_dropped_unread_is_drained_and_one_read_to_its_end_is_not() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        drop(DrainOnDrop::new(body, true));
        // The drain task holds the receiving end and reads what comes (a channel of one: each send
        // after the first waits for a read); it ends when the sender does.
        let sends = async {
            for _ in 0..4 {
                tx.send(Ok(Frame::data(Bytes::from_static(b"rest"))))
                    .await
                    .expect("the drain task holds the body");
            }
        };
        tokio::time::timeout(Duration::from_secs(60), sends)
            .await
            .expect("the drain task reads the body");
        drop(tx);

        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        drop(DrainOnDrop::new(body, false));
        assert!(
            tx.is_closed(),
            "a body not to be drained is dropped at once"
        );
    }

    #[test]
    fn a_request_waiting_for_100_continue_is_not_drained() {
        let req = Request::builder()
            .header(EXPECT, "100-continue")
            .body(Full::new(Bytes::new()))
            .expect("request");
        assert!(!drain_unread_body(req).into_body().drain);
        let req = Request::new(Full::new(Bytes::new()));
        assert!(drain_unread_body(req).into_body().drain);
    }
}
