//! tokio's I/O traits seen as `futures-io`'s, for the SDK's loops written
//! once over `futures-io` (the stdio serve loop, the process client's
//! pumps).
//!
//! [`Compat`] forwards each poll to the tokio stream: a read goes straight
//! into the caller's buffer (through a `ReadBuf` over it: no copy, no
//! allocation), a close is tokio's shutdown. Nothing is buffered here.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::ReadBuf;

/// A tokio stream as a `futures-io` one.
#[derive(Debug)]
pub(crate) struct Compat<T>(pub(crate) T);

impl<T: tokio::io::AsyncRead + Unpin> futures_lite::io::AsyncRead for Compat<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        ready!(Pin::new(&mut self.0).poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> futures_lite::io::AsyncWrite for Compat<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
