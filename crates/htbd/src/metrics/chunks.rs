//! The exposition sent as it is encoded, in chunks, instead of as one text.
//!
//! A scrape of 1 000 000 classes is 589 MB of text, which was the scrape's largest
//! allocation. Here the encoder (on a blocking thread) writes [`CHUNK`]-byte pieces into a
//! channel of [`IN_FLIGHT`] that the response's body reads from, so at most a few hundred kB
//! of text exist at once, and a slow client slows the encoder instead of growing a buffer.
//! What a scrape left resident fell less than the text's size (htbd locks its memory, and the
//! mmapped text was given back when freed): 430 → 405 MB after a scrape of 200 000 classes
//! (`htb-lab scale`, one worker); the rest was the gathered records (see `Control::scrape`).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::sync::mpsc;

/// Bytes of text per chunk.
pub const CHUNK: usize = 64 * 1024;

/// Chunks encoded ahead of the client.
pub const IN_FLIGHT: usize = 4;

/// Why the exposition stopped before its end: the response is cut (the client sees an
/// incomplete body and the scrape fails, rather than a partial exposition read as whole).
#[derive(Debug, thiserror::Error)]
#[error("the metrics encoder failed before the end of the exposition")]
pub struct Cut;

/// A chunk of the exposition, or the end of a cut one.
type Piece = Result<Bytes, Cut>;

/// The encoder's side: a [`fmt::Write`] that sends each full chunk.
#[derive(Debug)]
pub struct ChunkWriter {
    buf: String,
    tx: mpsc::Sender<Piece>,
}

/// The body's side: the chunks as a stream, ending when the encoder is done.
#[derive(Debug)]
pub struct ChunkStream(mpsc::Receiver<Piece>);

/// A writer and the stream that carries what it writes.
#[must_use]
pub fn channel() -> (ChunkWriter, ChunkStream) {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    (
        ChunkWriter {
            buf: String::with_capacity(CHUNK),
            tx,
        },
        ChunkStream(rx),
    )
}

impl ChunkWriter {
    /// Sends what is buffered (blocking while [`IN_FLIGHT`] chunks wait: call it from a
    /// blocking thread).
    fn send(&mut self) -> fmt::Result {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, String::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| fmt::Error)
    }

    /// Ends the exposition: sends the rest after `encoded` succeeded, or cuts the body.
    pub fn finish(mut self, encoded: fmt::Result) {
        let ended = encoded.and_then(|()| self.send());
        if ended.is_err() {
            // The client may be gone already; then nobody reads the cut either.
            let _ = self.tx.blocking_send(Err(Cut));
        }
    }
}

impl fmt::Write for ChunkWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.buf.push_str(s);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }
}

impl futures_core::Stream for ChunkStream {
    type Item = Piece;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    /// Everything the stream yields until it ends, and whether it was cut.
    async fn drain(mut stream: ChunkStream) -> (Vec<Bytes>, bool) {
        let mut chunks = Vec::new();
        while let Some(piece) = stream.0.recv().await {
            match piece {
                Ok(chunk) => chunks.push(chunk),
                Err(Cut) => return (chunks, true),
            }
        }
        (chunks, false)
    }

    #[tokio::test]
    async fn the_text_arrives_whole_in_chunks_of_at_most_a_chunk_and_a_write() {
        let (mut writer, stream) = channel();
        let line = "htb_class_bytes_total{dev=\"r2\",class=\"1:10\"} 123456789\n";
        let lines = 10_000;
        let encoder = tokio::task::spawn_blocking(move || {
            let written = (0..lines).try_for_each(|_| writer.write_str(line));
            writer.finish(written);
        });
        let (chunks, cut) = drain(stream).await;
        encoder.await.unwrap();
        assert!(!cut);
        assert!(chunks.len() > 1, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() < CHUNK + line.len()));
        let text: Vec<u8> = chunks.concat();
        assert_eq!(text, line.repeat(lines).into_bytes());
    }

    #[tokio::test]
    async fn a_failed_encoding_cuts_the_body() {
        let (mut writer, stream) = channel();
        let encoder = tokio::task::spawn_blocking(move || {
            let written = writer.write_str("# HELP half an exposition\n");
            writer.finish(written.and(Err(fmt::Error)));
        });
        let (chunks, cut) = drain(stream).await;
        encoder.await.unwrap();
        assert!(cut);
        assert!(chunks.is_empty());
    }

    #[tokio::test]
    async fn a_client_gone_stops_the_encoder() {
        let (mut writer, stream) = channel();
        drop(stream);
        let written = tokio::task::spawn_blocking(move || {
            (0..1_000_000).try_for_each(|_| writer.write_str("x".repeat(1024).as_str()))
        })
        .await
        .unwrap();
        assert!(written.is_err());
    }
}
