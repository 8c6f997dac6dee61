//! The fast path against hyper's path: the same bytes, sent to a gateway with its fast path
//! and to one without, must reach the instance as the same request, or be refused with a
//! 400, and never leave the instance reading a different request than the caller sent (a
//! desync, the ground of request smuggling). Ambiguous framing is the point of it.

use std::net::SocketAddr;

use super::tests::{gateway, instance, post, read_answer};
use super::*;

/// A call with the key, its head's extra lines and its body.
fn call(extra: &str, body: &str) -> String {
    format!(
        "POST /endpoints/e/x HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer k\r\n{extra}\r\n{body}"
    )
}

/// What happened to one request and the plain call sent after it on the same connection:
/// each answer as (status line, the request the instance echoed, normalised: its request
/// line, its header lines sorted and lowercased, less the instance's own `host`, and its
/// body), until the connection closed.
async fn outcome(gateway: SocketAddr, raw: &str) -> Vec<(String, String)> {
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gateway).await.unwrap());
    let follow = post("/after", "k", "next").replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n");
    tcp.get_mut()
        .write_all(format!("{raw}{follow}").as_bytes())
        .await
        .unwrap();
    let mut answers = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), maybe_answer(&mut tcp))
            .await
            .expect("an answer, or the end, within 10 s");
        let Ok(Some((head, body))) = next else { break };
        let status = head.lines().next().unwrap_or_default().to_owned();
        let echoed = if head.contains("\r\nx-instance: 1\r\n") {
            normalised(&body)
        } else {
            String::new()
        };
        answers.push((status, echoed));
        if head.to_ascii_lowercase().contains("connection: close") {
            break;
        }
    }
    answers
}

/// The next answer, or `Ok(None)` once the gateway closed the connection.
async fn maybe_answer(
    tcp: &mut tokio::io::BufReader<TcpStream>,
) -> Result<Option<(String, String)>, ()> {
    use tokio::io::AsyncBufReadExt as _;
    if tcp.fill_buf().await.map_err(drop)?.is_empty() {
        return Ok(None);
    }
    Ok(Some(read_answer(tcp).await))
}

fn normalised(echo: &str) -> String {
    let (head, body) = echo.split_once("\r\n\r\n").unwrap_or((echo, ""));
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut headers: Vec<String> = lines
        .map(str::to_ascii_lowercase)
        .filter(|l| !l.starts_with("host:"))
        .collect();
    headers.sort();
    format!("{request_line}\n{}\n\n{body}", headers.join("\n"))
}

#[tokio::test]
async fn ambiguous_requests_reach_the_instance_alike_on_both_paths_or_are_refused() {
    let (up, _) = instance().await;
    let (fast, plain) = (gateway(up, true).await, gateway(up, false).await);
    let requests = [
        // Both framings: the coding wins, or the request is refused.
        call(
            "content-length: 4\r\ntransfer-encoding: chunked\r\n",
            "2\r\nhi\r\n0\r\n\r\n",
        ),
        call(
            "transfer-encoding: chunked\r\ncontent-length: 40\r\n",
            "2\r\nhi\r\n0\r\n\r\n",
        ),
        // Lengths twice, alike and not.
        call("content-length: 2\r\ncontent-length: 2\r\n", "hi"),
        call("content-length: 2\r\ncontent-length: 3\r\n", "hi!"),
        call("content-length: 2, 2\r\n", "hi"),
        // Lengths that are not plain digits.
        call("content-length: +2\r\n", "hi"),
        call("content-length: 0x2\r\n", "hi"),
        call("content-length: -1\r\n", "hi"),
        call("content-length: 2 2\r\n", "hi"),
        call("content-length : 2\r\n", "hi"),
        call("content-length: 99999999999999999999999\r\n", "hi"),
        // Codings other than chunked, or chunked not last.
        call(
            "transfer-encoding: chunked, identity\r\n",
            "2\r\nhi\r\n0\r\n\r\n",
        ),
        call("transfer-encoding: identity\r\ncontent-length: 2\r\n", "hi"),
        call(
            "transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n",
            "2\r\nhi\r\n0\r\n\r\n",
        ),
        call("transfer-encoding:\tchunked\r\n", "2\r\nhi\r\n0\r\n\r\n"),
        // Chunks that lie about their size, or carry extensions and trailers.
        call("transfer-encoding: chunked\r\n", "5\r\nhi\r\n0\r\n\r\n"),
        call(
            "transfer-encoding: chunked\r\n",
            "2;x=y\r\nhi\r\n0\r\nx-t: 1\r\n\r\n",
        ),
        // An obsolete line folding, a bare LF, a header without a name.
        call("x-a: 1\r\n folded\r\ncontent-length: 2\r\n", "hi"),
        "POST /endpoints/e/x HTTP/1.1\nhost: gw\nauthorization: Bearer k\ncontent-length: 2\n\nhi"
            .to_owned(),
        call(": 1\r\ncontent-length: 2\r\n", "hi"),
        // Underscored look-alikes of the framing headers.
        call("content_length: 5\r\ncontent-length: 2\r\n", "hi"),
        call("transfer_encoding: chunked\r\ncontent-length: 2\r\n", "hi"),
    ];
    for raw in &requests {
        let (a, b) = (outcome(fast, raw).await, outcome(plain, raw).await);
        assert_eq!(a, b, "the paths differ on {raw:?}");
        // The request was refused, or the instance got it with the body the caller sent;
        // no header reached it with an underscore.
        let (status, echoed) = &a[0];
        assert!(
            status.starts_with("HTTP/1.1 400") || echoed.ends_with("\n\nhi"),
            "{raw:?}: {a:?}"
        );
        let head = echoed.split_once("\n\n").map_or("", |(head, _)| head);
        assert!(!head.contains('_'), "{raw:?}: {echoed}");
        // The plain call after it was read as a call of its own, or the connection was
        // closed before it; nothing else reached the instance.
        match &a[1..] {
            [] => {}
            [(status, next)] => assert!(
                status.starts_with("HTTP/1.1 200") && next.starts_with("POST /after "),
                "{raw:?}: {a:?}"
            ),
            _ => panic!("{raw:?}: more answers than calls: {a:?}"),
        }
    }
}

#[tokio::test]
async fn an_http2_preface_after_an_http1_call_is_refused_on_both_paths() {
    let (up, _) = instance().await;
    for fast_path in [true, false] {
        let gw = gateway(up, fast_path).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        tcp.get_mut()
            .write_all(post("/a", "k", "one").as_bytes())
            .await
            .unwrap();
        let (head, _) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tcp.get_mut()
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest))
            .await
            .expect("the connection is closed")
            .unwrap();
        let rest = String::from_utf8_lossy(&rest);
        // The fast path answers 400 as nginx does; hyper closes without a word. Neither
        // speaks HTTP/2 (a SETTINGS frame) on it.
        if fast_path {
            assert!(rest.starts_with("HTTP/1.1 400 "), "{rest}");
            assert!(rest.contains("\r\nconnection: close\r\n"), "{rest}");
        } else {
            assert!(
                rest.is_empty() || rest.starts_with("HTTP/1.1 400 "),
                "{rest}"
            );
        }
    }
}

#[tokio::test]
async fn an_answer_with_both_a_length_and_a_coding_reaches_the_caller_framed_once() {
    let (up, _) = instance().await;
    for fast_path in [true, false] {
        let gw = gateway(up, fast_path).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        for _ in 0..2 {
            tcp.get_mut()
                .write_all(post("/both-framings", "k", "").as_bytes())
                .await
                .unwrap();
            let (head, body) = read_answer(&mut tcp).await;
            let lower = head.to_ascii_lowercase();
            assert!(!lower.contains("content-length"), "{fast_path}: {head}");
            assert!(
                lower.contains("transfer-encoding: chunked"),
                "{fast_path}: {head}"
            );
            assert_eq!(body, "3\r\nabc\r\n0\r\n\r\n", "{fast_path}");
        }
    }
}

#[tokio::test]
async fn header_names_with_underscores_do_not_reach_the_instance_on_both_paths() {
    let (up, _) = instance().await;
    for fast_path in [true, false] {
        let gw = gateway(up, fast_path).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        let raw = call("x_custom: 1\r\nx-kept: 2\r\ncontent-length: 2\r\n", "hi");
        tcp.get_mut().write_all(raw.as_bytes()).await.unwrap();
        let (head, echo) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(!echo.contains("x_custom"), "{fast_path}: {echo}");
        assert!(echo.contains("\r\nx-kept: 2\r\n"), "{fast_path}: {echo}");
    }
}
