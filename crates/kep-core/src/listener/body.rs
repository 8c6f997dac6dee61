//! Request bodies as a listener reads them: charged to the listener's body memory, and
//! watched for their end.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;

/// The memory a listener's request bodies share, in KiB permits.
#[derive(Clone)]
pub(super) struct BodyMemory {
    pub(super) kib: Arc<Semaphore>,
    /// The most one request counts, in KiB: a body streamed to disk (an upload of
    /// gigabytes) must not wait for more than there is.
    most: u32,
}

/// What each body may hold before it counts: about what hyper buffers per connection.
const UNCOUNTED_BYTES: u64 = 64 * 1024;

impl BodyMemory {
    pub(super) fn new(bytes: u64) -> Option<Self> {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX);
        (kib > 0).then(|| BodyMemory {
            kib: Arc::new(Semaphore::new(kib as usize)),
            most: (kib / 4).max(1),
        })
    }

    /// `body`, charged for what it will hold past its uncounted bytes: its `declared`
    /// length, or, with none, as much as one body may count.
    pub(super) fn charge(&self, body: Body, declared: Option<u64>) -> Charged {
        let due = match declared {
            Some(len) => u32::try_from(len.saturating_sub(UNCOUNTED_BYTES).div_ceil(1024))
                .unwrap_or(u32::MAX)
                .min(self.most),
            None => self.most,
        };
        Charged {
            body,
            memory: PollSemaphore::new(Arc::clone(&self.kib)),
            due,
            received: 0,
            held: None,
            unpaid: None,
        }
    }
}

/// A request body that takes its share of the listener's body memory once, whole, when it
/// passes its uncounted bytes, and holds it until it is dropped (read whole, or
/// abandoned). A body that finds the memory spent waits with the piece that passed, and
/// hyper reads no more from its connection meanwhile. Since no body holds part of a share
/// while it waits for the rest, bodies cannot block each other for good: every holder is
/// being read, and so ends within the body timeout.
pub(super) struct Charged {
    body: Body,
    memory: PollSemaphore,
    /// The KiB to take when the body passes its uncounted bytes.
    due: u32,
    received: u64,
    held: Option<OwnedSemaphorePermit>,
    /// The piece that passed the uncounted bytes, until the share is taken.
    unpaid: Option<http_body::Frame<axum::body::Bytes>>,
}

impl http_body::Body for Charged {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.unpaid.take() {
            match this.memory.poll_acquire_many(cx, this.due) {
                Poll::Pending => {
                    this.unpaid = Some(frame);
                    return Poll::Pending;
                }
                Poll::Ready(share) => this.held = share,
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match std::task::ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            Some(Ok(frame)) => {
                this.received += frame.data_ref().map_or(0, |d| d.len() as u64);
                if this.received > UNCOUNTED_BYTES && this.due > 0 && this.held.is_none() {
                    this.unpaid = Some(frame);
                    return self.poll_frame(cx);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            end => Poll::Ready(end),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.unpaid.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.unpaid {
            None => self.body.size_hint(),
            Some(_) => http_body::SizeHint::default(),
        }
    }
}

/// A request body that records when it has been read to its end.
pub(super) struct Tracked {
    pub(super) body: Body,
    pub(super) ended: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() || self.body.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
