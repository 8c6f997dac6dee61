//! A connection's byte stream: the socket itself, or TLS over it ([`secure`]). A plain-HTTP
//! request sent to a TLS listener is answered in plain HTTP, a 400 in the listener's API's
//! shape, as nginx answers one (its 497), rather than with a TLS alert no HTTP client can
//! read.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::connection::Connection;
use super::unrouted::Unrouted;

/// What a connection reads and writes.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The socket under it, for the lingering close.
    pub(super) fn into_tcp(self) -> TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.into_inner().0,
        }
    }
}

/// TLS's first record is a handshake (type 22); an HTTP request starts with its method's
/// capital letters.
const HANDSHAKE_RECORD: u8 = 0x16;

/// Turns `io` into a TLS connection within `within` (the listener's head timeout); `None`
/// when the handshake failed or the client spoke plain HTTP, then refused.
pub(super) async fn secure(
    mut io: Connection,
    acceptor: &TlsAcceptor,
    within: Option<Duration>,
    unrouted: Unrouted,
) -> Option<Connection> {
    let Some(Stream::Plain(tcp)) = io.stream.take() else {
        unreachable!("a connection is secured once, as it is accepted")
    };
    let mut first = [0u8; 1];
    match timed(within, tcp.peek(&mut first)).await {
        Some(Ok(1)) if first[0] != HANDSHAKE_RECORD => {
            if first[0].is_ascii_uppercase() {
                io.stream = Some(Stream::Plain(refuse_plain_http(tcp, unrouted).await));
            }
            return None;
        }
        Some(Ok(1)) => {}
        _ => return None,
    }
    match timed(within, acceptor.accept(tcp)).await {
        Some(Ok(tls)) => {
            io.stream = Some(Stream::Tls(Box::new(tls)));
            Some(io)
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        None => None,
    }
}

/// `f`'s output, unless `within` runs out first.
async fn timed<F: Future>(within: Option<Duration>, f: F) -> Option<F::Output> {
    match within {
        Some(t) => tokio::time::timeout(t, f).await.ok(),
        None => Some(f.await),
    }
}

/// Answers a plain-HTTP request with a 400 that says the listener speaks HTTPS; the
/// connection then closes, lingering as every refused one does.
async fn refuse_plain_http(mut tcp: TcpStream, unrouted: Unrouted) -> TcpStream {
    let body = unrouted(
        StatusCode::BAD_REQUEST,
        "this listener speaks HTTPS: a plain HTTP request was sent to it (use https://)",
    )
    .to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(answer.as_bytes()).await;
    tcp
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
