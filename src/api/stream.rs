//! Server streams that end when their client does.
//!
//! Every server-streaming RPC answers with [`produce`] (or [`produce_blocking`]): a producer
//! feeds a bounded channel from a task of its own, and that task races the producer against
//! the receiver being dropped. tonic drops the response body when the client goes (the stream
//! reset, the connection closed), so the producer is dropped at once, whatever it waits on: a
//! resource nobody changes, a log that never grows, a quiet kernel. A producer that noticed a
//! gone client only when a send failed would live forever on a quiet source, in machined,
//! which is PID 1. Never spawn a stream's producer any other way.
//!
//! Work that must outlive its client (an upgrade) is spawned by the handler on its own; the
//! producer only relays its progress.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use tokio::sync::mpsc;
use tonic::Status;

/// A server stream's body as tonic takes it.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The client is gone: the producer should stop (it is dropped at its next await anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client of this stream is gone")]
pub struct Gone;

/// The producer's end of one stream.
pub struct Sink<T> {
    tx: mpsc::Sender<Result<T, Status>>,
}

impl<T> Sink<T> {
    /// Sends one item, waiting for room in the buffer.
    pub async fn send(&self, item: Result<T, Status>) -> Result<(), Gone> {
        self.tx.send(item).await.map_err(|_| Gone)
    }

    /// Sends one item from a blocking producer (never from async code).
    pub fn blocking_send(&self, item: Result<T, Status>) -> Result<(), Gone> {
        self.tx.blocking_send(item).map_err(|_| Gone)
    }
}

/// A stream of what `producer` sends, `capacity` items buffered ahead of the client. The
/// stream ends when the producer returns; the producer is dropped as soon as the stream is.
pub fn produce<T, F, Fut>(capacity: usize, producer: F) -> BoxStream<T>
where
    T: Send + 'static,
    F: FnOnce(Sink<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let gone = tx.clone();
    let work = producer(Sink { tx });
    tokio::spawn(async move {
        tokio::select! {
            biased;
            () = gone.closed() => {}
            () = work => {}
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// [`produce`] for a producer that blocks (a directory walk): it runs on the blocking pool, so
/// it cannot be dropped mid-way; it must send often, and stop at the first [`Gone`].
pub fn produce_blocking<T, F>(capacity: usize, producer: F) -> BoxStream<T>
where
    T: Send + 'static,
    F: FnOnce(Sink<T>) + Send + 'static,
{
    let (tx, rx) = mpsc::channel(capacity.max(1));
    tokio::task::spawn_blocking(move || producer(Sink { tx }));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;

    /// Waits (up to 10 s) for the runtime's live tasks to come down to `want`.
    async fn alive_back_to(want: usize) -> usize {
        let metrics = tokio::runtime::Handle::current().metrics();
        for _ in 0..1000 {
            if metrics.num_alive_tasks() <= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        metrics.num_alive_tasks()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_streams_leave_no_task_behind_whatever_their_producer_waits_on() {
        let start = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        // A source that never speaks (a quiet resource), one that is never closed either.
        let (_quiet_tx, quiet) = tokio::sync::watch::channel(0u32);
        let mut streams = Vec::new();
        for i in 0..5000u32 {
            let mut quiet = quiet.clone();
            streams.push(produce(4, move |sink: Sink<u32>| async move {
                if sink.send(Ok(i)).await.is_err() {
                    return;
                }
                // Waits on the source only: no send would ever fail to tell it.
                let _ = quiet.changed().await;
                let _ = sink.send(Ok(u32::MAX)).await;
            }));
        }
        // Half of them are read from first, as a client would.
        for (i, s) in streams.iter_mut().enumerate().step_by(2) {
            assert_eq!(s.next().await.map(Result::unwrap), Some(i as u32));
        }
        let running = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        assert!(running >= start + 5000, "{running} tasks alive with 5000 open streams (start {start})");
        drop(streams);
        let after = alive_back_to(start).await;
        println!("alive tasks: {start} at start, {running} with 5000 streams open, {after} after they closed");
        assert_eq!(after, start, "tasks left behind by 5000 closed streams");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_ends_when_its_producer_does() {
        let start = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let items: Vec<u32> = produce(1, |sink| async move {
            for i in 0..10 {
                if sink.send(Ok(i)).await.is_err() {
                    return;
                }
            }
        })
        .map(Result::unwrap)
        .collect()
        .await;
        assert_eq!(items, (0..10).collect::<Vec<_>>());
        let err = produce::<u32, _, _>(1, |sink| async move {
            let _ = sink.send(Err(Status::internal("reading: broken"))).await;
        })
        .collect::<Vec<_>>()
        .await;
        assert_eq!(err.len(), 1);
        assert_eq!(alive_back_to(start).await, start);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blocking_producer_stops_at_its_first_send_after_the_client_left() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut stream = produce_blocking(1, move |sink| {
            let mut sent = 0u64;
            while sink.blocking_send(Ok(sent)).is_ok() {
                sent += 1;
            }
            let _ = done_tx.send(sent);
        });
        assert_eq!(stream.next().await.map(Result::unwrap), Some(0));
        drop(stream);
        let sent = tokio::task::spawn_blocking(move || done_rx.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap()
            .expect("the blocking producer never stopped");
        assert!(sent < 10, "{sent} items produced for a client that read one");
    }
}
