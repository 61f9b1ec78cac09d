//! A request body that passes gRPC frames through untouched while reading only their 5-byte
//! headers, so a message larger than the limit is refused the moment its header arrives —
//! never buffered. apid never decodes the messages it relays.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A message was larger than the limit.
#[derive(Debug, thiserror::Error)]
#[error("request message of {size} bytes exceeds the limit of {limit} bytes")]
pub struct TooLarge {
    pub size: u64,
    pub limit: u64,
}

/// Where the reader is inside the gRPC length-prefixed stream.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// Collecting the 5-byte header: how many bytes of it were seen, and the length so far.
    Header { seen: u8, length: u64 },
    /// Inside a message body: bytes still to pass.
    Body { remaining: u64 },
}

/// The framing scanner, separate from the body so it can be tested on byte slices.
#[derive(Debug, Clone, Copy)]
pub struct FrameScanner {
    position: Position,
    limit: u64,
}

impl FrameScanner {
    pub fn new(limit: u64) -> Self {
        FrameScanner { position: Position::Header { seen: 0, length: 0 }, limit }
    }

    /// Advances over `chunk`; fails on the first message header announcing more than the limit.
    pub fn scan(&mut self, mut chunk: &[u8]) -> Result<(), TooLarge> {
        while !chunk.is_empty() {
            match &mut self.position {
                Position::Body { remaining } => {
                    let n = (*remaining).min(chunk.len() as u64);
                    *remaining -= n;
                    chunk = &chunk[n as usize..];
                    if *remaining == 0 {
                        self.position = Position::Header { seen: 0, length: 0 };
                    }
                }
                Position::Header { seen, length } => {
                    // Byte 0 is the compressed flag; bytes 1..5 the big-endian length.
                    if *seen > 0 {
                        *length = (*length << 8) | u64::from(chunk[0]);
                    }
                    *seen += 1;
                    chunk = &chunk[1..];
                    if *seen == 5 {
                        let size = *length;
                        if size > self.limit {
                            return Err(TooLarge { size, limit: self.limit });
                        }
                        self.position = if size == 0 {
                            Position::Header { seen: 0, length: 0 }
                        } else {
                            Position::Body { remaining: size }
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

/// `inner` with every data frame scanned; the first oversized message ends the body with
/// [`TooLarge`] and raises `exceeded`.
pub struct GuardedBody<B> {
    inner: B,
    scanner: FrameScanner,
    exceeded: Arc<AtomicBool>,
}

impl<B> GuardedBody<B> {
    pub fn new(inner: B, limit: u64, exceeded: Arc<AtomicBool>) -> Self {
        GuardedBody { inner, scanner: FrameScanner::new(limit), exceeded }
    }
}

impl<B> Body for GuardedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(e) = this.scanner.scan(data)
                {
                    this.exceeded.store(true, Ordering::SeqCst);
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
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

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    #[test]
    fn passes_messages_within_the_limit_in_any_chunking() {
        let mut stream = message(10);
        stream.extend(message(0));
        stream.extend(message(100));
        for chunk in [1, 2, 3, 5, 7, 64, 1000] {
            let mut s = FrameScanner::new(100);
            for part in stream.chunks(chunk) {
                s.scan(part).unwrap();
            }
        }
    }

    #[test]
    fn refuses_at_the_header_of_an_oversized_message() {
        let mut stream = message(3);
        // Only the header of the big one: the refusal must not wait for its body.
        stream.extend_from_slice(&[0, 0, 0, 0x10, 0x01]);
        for chunk in [1, 4, 9] {
            let mut s = FrameScanner::new(4096);
            let err = stream.chunks(chunk).map(|p| s.scan(p)).find(|r| r.is_err()).expect("refused").unwrap_err();
            assert_eq!((err.size, err.limit), (4097, 4096));
        }
    }
}
