//! The listener's limits and closing, on real sockets.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use tokio::net::TcpStream;

use super::body::{BodyMemory, Charged};
use super::*;

#[test]
fn operator_token_is_generated_once_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (t1, generated) = operator_token(dir.path(), None).unwrap();
    assert!(generated);
    let mode = std::fs::metadata(dir.path().join("admin-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (t2, generated) = operator_token(dir.path(), None).unwrap();
    assert!(!generated);
    assert_eq!(t1, t2);
    let (t3, _) = operator_token(dir.path(), Some("configured")).unwrap();
    assert_eq!(t3, "configured");
}

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A server of `POST /` (the body's length) on port 0 with `limits`; its address.
async fn server(limits: Limits) -> (SocketAddr, CancellationToken) {
    let router = Router::new().route(
        "/",
        axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }),
    );
    let bound = bind("test", "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = bound.addr;
    let stop = CancellationToken::new();
    tokio::spawn(serve(bound, router, limits, stop.clone()));
    (addr, stop)
}

/// Whatever the server sends until it closes the connection (a minute at most: a
/// server that never closes fails the test).
async fn until_closed(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut got));
    // A reset (the server closed with unread bytes) also ends the connection.
    let _ = read.await.expect("the server closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

const POST: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi";

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_or_not_at_all_is_cut_off() {
    let (addr, _stop) = server(Limits {
        header_read_timeout_s: 1,
        ..Limits::default()
    })
    .await;
    // Nothing at all: not even the bytes that tell HTTP/1 from HTTP/2.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // The head a byte at a time, never finished (slowloris).
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let trickle = async {
        for b in b"POST / HTTP/1.1\r\nhost: x\r\nx-a: ".iter().cycle() {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), trickle)
        .await
        .expect("the server stops the trickle");
    until_closed(&mut slow).await;
    assert_eq!(until_closed(&mut silent).await, "");
    // A client that sends its request in time is served.
    let mut prompt = TcpStream::connect(addr).await.unwrap();
    prompt.write_all(POST).await.unwrap();
    let answer = until_closed(&mut prompt).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n2"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_body_is_read_reaches_a_client_still_sending() {
    let (addr, _stop) = server(Limits::default()).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut rx, mut tx) = tcp.into_split();
    // Over axum's 2 MB body limit: refused with a 413 before the body is read.
    tx.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 52428800\r\n\r\n")
        .await
        .unwrap();
    // A client such as hyper's sends its body whole before it reads the answer, and
    // gives up on a write that fails.
    let sending = tokio::spawn(async move {
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..128 {
            tx.write_all(&chunk).await?;
        }
        std::io::Result::Ok(())
    });
    sending
        .await
        .unwrap()
        .expect("the body is taken while the answer waits");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match rx.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the answer was lost: {e}"),
        }
    }
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // The client is told not to send another request down this connection.
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
}

#[tokio::test]
async fn a_call_whose_body_was_read_whole_keeps_the_connection() {
    let (addr, _stop) = server(Limits::default()).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..2 {
        tcp.write_all(POST).await.unwrap();
        got.clear();
        while !got.ends_with(b"\r\n\r\n2") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        let answer = String::from_utf8_lossy(&got);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(!answer.contains("connection: close"), "{answer}");
    }
}

#[tokio::test]
async fn a_body_that_stops_is_cut_off() {
    let (addr, _stop) = server(Limits {
        body_read_timeout_s: 1,
        ..Limits::default()
    })
    .await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nfive!")
        .await
        .unwrap();
    let answer = until_closed(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test]
async fn past_max_connections_a_connection_waits_for_a_slot() {
    let (addr, _stop) = server(Limits {
        max_connections: 2,
        header_read_timeout_s: 0,
        ..Limits::default()
    })
    .await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    // The kernel completes the third connection, but the server takes it only when a
    // slot is free.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(POST).await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut byte)).await;
    assert!(early.is_err(), "answered while two connections were open");
    first.write_all(POST).await.unwrap();
    first.shutdown().await.unwrap();
    until_closed(&mut first).await;
    drop(first);
    third.shutdown().await.unwrap();
    let answer = until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_head_over_its_limit_is_a_431() {
    let (addr, _stop) = server(Limits {
        max_header_bytes: 8192,
        ..Limits::default()
    })
    .await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let fat = "x-fat: 0123456789abcdef0123456789abcdef\r\n".repeat(256);
    tcp.write_all(format!("POST / HTTP/1.1\r\nhost: x\r\n{fat}").as_bytes())
        .await
        .unwrap();
    let answer = until_closed(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // With a body in the listener's error shape, as every refusal made before routing.
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("content-type: application/json"), "{head}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], "header_too_large", "{body}");
    assert_eq!(
        body["error"]["message"],
        "the request head is over 8192 bytes"
    );
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nbad header\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut tcp).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], "bad_request", "{body}");
}

/// A body whose first piece is `len` bytes and that then never ends.
fn endless(len: usize) -> Body {
    let first = futures_util::stream::iter([Ok::<_, std::io::Error>(vec![0u8; len])]);
    Body::from_stream(futures_util::StreamExt::chain(
        first,
        futures_util::stream::pending(),
    ))
}

fn poll(
    body: &mut Charged,
) -> Poll<Option<Result<http_body::Frame<axum::body::Bytes>, axum::Error>>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    http_body::Body::poll_frame(Pin::new(body), &mut cx)
}

#[tokio::test]
async fn bodies_past_the_listeners_body_memory_wait_for_it() {
    const KIB: usize = 1024;
    // 256 KiB in all; one body counts at most 64 KiB, past its first 64 KiB.
    let memory = BodyMemory::new(256 * 1024).unwrap();
    let mut held: Vec<Charged> = (0..4)
        .map(|_| memory.charge(endless(192 * KIB), None))
        .collect();
    for body in &mut held {
        assert!(matches!(poll(body), Poll::Ready(Some(Ok(_)))));
    }
    // The memory is spent: a body past its uncounted 64 KiB waits, a small one does not.
    let mut big = memory.charge(endless(100 * KIB), None);
    assert!(poll(&mut big).is_pending());
    let mut small = memory.charge(endless(60 * KIB), None);
    assert!(matches!(poll(&mut small), Poll::Ready(Some(Ok(_)))));
    // A body done with gives its share back.
    held.pop();
    let frame = http_body_util::BodyExt::frame(&mut big)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frame.into_data().unwrap().len(), 100 * KIB);
    // A body of a declared length takes only what it will hold: 100 KiB is 36 KiB past
    // the uncounted 64.
    drop((big, held));
    let mut declared = memory.charge(Body::from(vec![0u8; 100 * KIB]), Some(100 * 1024));
    assert!(matches!(poll(&mut declared), Poll::Ready(Some(Ok(_)))));
    assert_eq!(memory.kib.available_permits(), 256 - 36);
}

#[tokio::test]
async fn a_worker_accepts_only_while_it_has_the_fewest_connections() {
    use futures_util::FutureExt as _;
    let share = Arc::new(Share {
        open: (0..2).map(|_| AtomicUsize::new(0)).collect(),
        changed: Notify::new(),
    });
    let first = share.add(0);
    assert!(share.my_turn(1).now_or_never().is_some());
    let mut second = Box::pin(share.my_turn(0));
    assert!((&mut second).now_or_never().is_none(), "worker 0 has more");
    // The other worker's next connection, or the end of this one, gives it its turn.
    let other = share.add(1);
    second.await;
    drop(other);
    assert!(share.my_turn(0).now_or_never().is_none());
    drop(first);
    assert!(share.my_turn(0).now_or_never().is_some());
}

#[test]
fn public_url_defaults_to_the_listener() {
    let addr: SocketAddr = "127.0.0.1:9000".parse().unwrap();
    assert_eq!(public_url(None, addr, false), "http://127.0.0.1:9000");
    assert_eq!(public_url(None, addr, true), "https://127.0.0.1:9000");
    // A proxy in front decides its own scheme.
    assert_eq!(
        public_url(Some("http://live.example/"), addr, true),
        "http://live.example"
    );
}
