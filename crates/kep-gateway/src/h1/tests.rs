//! The fast path on real sockets: a gateway in front of an instance that answers by path.

use super::*;

use std::net::SocketAddr;

use tokio::io::AsyncBufReadExt as _;

use crate::GatewaySettings;

/// An instance that answers by its path, over kept-alive connections: `/chunked`,
/// `/both-framings` (a length and a transfer coding), `/until-close`, `/garbage`, `/drop`
/// (closes unanswered), else 200 with the body and the head it got. It counts the connections it accepted.
pub(super) async fn instance() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut tcp = tokio::io::BufReader::new(tcp);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if tcp.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse().unwrap());
                    let mut body = vec![0u8; len];
                    tcp.read_exact(&mut body).await.unwrap();
                    let path = head.split(' ').nth(1).unwrap().to_owned();
                    let answer = match path.as_str() {
                        "/chunked" => "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                                       3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                            .to_owned(),
                        "/both-framings" => "HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\
                                             transfer-encoding: chunked\r\n\r\n\
                                             3\r\nabc\r\n0\r\n\r\n"
                            .to_owned(),
                        "/until-close" => "HTTP/1.1 200 OK\r\n\r\nall of it".to_owned(),
                        "/garbage" => "NOT HTTP\r\n\r\n".to_owned(),
                        "/drop" => return,
                        _ => {
                            let got = format!("{head}{}", String::from_utf8(body).unwrap());
                            format!(
                                "HTTP/1.1 200 OK\r\nx-instance: 1\r\ncontent-length: {}\r\n\r\n{got}",
                                got.len()
                            )
                        }
                    };
                    tcp.get_mut().write_all(answer.as_bytes()).await.unwrap();
                    if path == "/until-close" {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// A gateway listener on port 0 with endpoint `e` (key `k`) on one instance, its fast path
/// on or off.
pub(super) async fn gateway(instance: SocketAddr, fast_path: bool) -> SocketAddr {
    let dir = tempfile::tempdir().unwrap();
    let settings = GatewaySettings {
        fast_path,
        ..GatewaySettings::default()
    };
    let gateway =
        crate::tests::one_endpoint(&settings, &dir.keep(), ("e", false), vec![instance]).await;
    let bound = kep_core::listener::bind("gateway", "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.addr;
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(kep_core::listener::serve(
        bound,
        gateway.app(),
        kep_core::limits::Limits::default(),
        stop,
    ));
    addr
}

/// Reads one answer (its head, and its body by its length, its chunks or to the end).
pub(super) async fn read_answer(tcp: &mut tokio::io::BufReader<TcpStream>) -> (String, String) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(
            tcp.read_line(&mut line).await.unwrap() > 0,
            "closed in {head:?}"
        );
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(len) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
    {
        body.resize(len.parse().unwrap(), 0);
        tcp.read_exact(&mut body).await.unwrap();
    } else if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut line = String::new();
            tcp.read_line(&mut line).await.unwrap();
            body.extend_from_slice(line.as_bytes());
            if line == "\r\n" && body.ends_with(b"0\r\n\r\n") {
                break;
            }
        }
    } else if !head.starts_with("HTTP/1.1 204") {
        tcp.read_to_end(&mut body).await.unwrap();
    }
    (head, String::from_utf8(body).unwrap())
}

pub(super) fn post(path: &str, key: &str, body: &str) -> String {
    format!(
        "POST /endpoints/e{path} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn pipelined_calls_are_forwarded_in_order_over_one_instance_connection() {
    let (up, accepted) = instance().await;
    let gw = gateway(up, true).await;
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
    let calls = format!("{}{}", post("/a?x=1", "k", "one"), post("/b", "k", "two"));
    tcp.get_mut().write_all(calls.as_bytes()).await.unwrap();
    for (path, body) in [("/a?x=1", "one"), ("/b", "two")] {
        let (head, got) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("\r\nx-instance: 1\r\n") && head.contains("\r\ndate: "),
            "{head}"
        );
        assert_eq!(
            got,
            format!(
                "POST {path} HTTP/1.1\r\nhost: {up}\r\nx-forwarded-for: 127.0.0.1\r\n\
                 content-length: 3\r\n\r\n{body}"
            )
        );
    }
    for _ in 0..5 {
        tcp.get_mut()
            .write_all(post("/c", "k", "").as_bytes())
            .await
            .unwrap();
        read_answer(&mut tcp).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn chunked_and_until_close_answers_are_passed_on_whole() {
    let (up, _) = instance().await;
    let gw = gateway(up, true).await;
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
    tcp.get_mut()
        .write_all(post("/chunked", "k", "").as_bytes())
        .await
        .unwrap();
    let (head, body) = read_answer(&mut tcp).await;
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(body, "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    // The same connection goes on, and then ends with an answer only its end delimits.
    tcp.get_mut()
        .write_all(post("/until-close", "k", "").as_bytes())
        .await
        .unwrap();
    let (head, body) = read_answer(&mut tcp).await;
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert_eq!(body, "all of it");
}

#[tokio::test]
async fn an_instance_that_breaks_off_is_a_502_and_the_connection_goes_on() {
    let (up, _) = instance().await;
    let gw = gateway(up, true).await;
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
    for path in ["/garbage", "/drop"] {
        tcp.get_mut()
            .write_all(post(path, "k", "x").as_bytes())
            .await
            .unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("deployment d"),
            "{v}"
        );
    }
    tcp.get_mut()
        .write_all(post("/ok", "k", "").as_bytes())
        .await
        .unwrap();
    assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_call_the_fast_path_does_not_take_is_answered_by_hyper_on_the_same_connection() {
    let (up, _) = instance().await;
    let gw = gateway(up, true).await;
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
    tcp.get_mut()
        .write_all(post("/fast", "k", "1").as_bytes())
        .await
        .unwrap();
    assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
    // A wrong key, then a chunked body, then a plain call again: all after the handover.
    tcp.get_mut()
        .write_all(post("/x", "wrong", "").as_bytes())
        .await
        .unwrap();
    let (head, body) = read_answer(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(body.contains("unauthorized"), "{body}");
    let chunked = "POST /endpoints/e/c HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer k\r\n\
                   transfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
    tcp.get_mut().write_all(chunked.as_bytes()).await.unwrap();
    let (head, body) = read_answer(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        body.contains("content-length: 2\r\n") && body.ends_with("\r\n\r\nhi"),
        "{body}"
    );
    tcp.get_mut()
        .write_all(post("/again", "k", "").as_bytes())
        .await
        .unwrap();
    assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_head_call_gets_the_head_only_and_connection_close_ends_the_connection() {
    let (up, _) = instance().await;
    let gw = gateway(up, true).await;
    let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
    let head_call = "HEAD /endpoints/e/h HTTP/1.1\r\nauthorization: Bearer k\r\n\r\n";
    tcp.get_mut().write_all(head_call.as_bytes()).await.unwrap();
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        tcp.read_line(&mut head).await.unwrap();
    }
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("content-length: "),
        "{head}"
    );
    let close =
        "GET /endpoints/e/c HTTP/1.1\r\nauthorization: Bearer k\r\nconnection: close\r\n\r\n";
    tcp.get_mut().write_all(close.as_bytes()).await.unwrap();
    let (head, body) = read_answer(&mut tcp).await;
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert!(
        body.starts_with("GET /c HTTP/1.1\r\n"),
        "the HEAD left no body behind: {body}"
    );
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

/// Forwarding headers a caller forged never reach the instance, on either path: it gets
/// `X-Forwarded-For` with the caller's own address only.
#[tokio::test]
async fn the_instance_gets_the_callers_address_and_no_forged_forwarding_headers() {
    let (up, _) = instance().await;
    for fast_path in [true, false] {
        let gw = gateway(up, fast_path).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        let forged = "POST /endpoints/e/f HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer k\r\n\
                      X-Forwarded-For: 6.6.6.6\r\nx-forwarded-for: 7.7.7.7\r\n\
                      Forwarded: for=6.6.6.6;host=evil.example\r\n\
                      X-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\n\
                      X-Real-IP: 6.6.6.6\r\ncontent-length: 0\r\n\r\n";
        tcp.get_mut().write_all(forged.as_bytes()).await.unwrap();
        let (head, got) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let got = got.to_ascii_lowercase();
        let forwarding: Vec<&str> = got
            .lines()
            .filter(|l| l.contains("forwarded") || l.contains("real-ip"))
            .collect();
        assert_eq!(
            forwarding,
            ["x-forwarded-for: 127.0.0.1"],
            "fast path {fast_path}: {got}"
        );
    }
}
