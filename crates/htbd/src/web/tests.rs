//! The listener's limits and the token, over real TCP, in-process: the control task is
//! replaced by one that answers status reads (the lab tests run the real daemon).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::server::{HEAD_TIMEOUT, MAX_CLIENTS, MAX_HEAD_BYTES};
use super::{Web, auth::Token};
use crate::control::{Call, Query};

const TOKEN: &str = "a-token-of-24-characters";

/// A listener on a free loopback port, with or without the token; its control task answers
/// status reads with an empty status.
async fn start(token: bool) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let (calls, mut asked) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(call) = asked.recv().await {
            if let Call::Query(Query::Status(reply)) = call {
                let _ = reply.send(Ok(htb_ipc::Status {
                    daemon: "test".into(),
                    ..htb_ipc::Status::default()
                }));
            }
        }
    });
    let web = Arc::new(Web {
        calls,
        requests: crate::metrics::requests::RequestMetrics::default(),
        liveness: Arc::new(|| Some(Duration::from_millis(2))),
        token: token.then(|| Token::new(TOKEN).unwrap()),
        generation: watch::channel(Some(htb_ipc::Generation(0x1234))).1,
        history: Arc::default(),
        rates: Mutex::default(),
        one_way: Mutex::default(),
    });
    let listener = super::server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(super::server::serve(listener, web, stopped));
    (addr, stop)
}

/// Sends `request` and reads until the server closes or a whole response with a
/// `Content-Length` arrived: the status code and the text.
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_response(&mut stream).await
}

async fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
            .await
            .expect("an answer within 20 s")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n")
            && let Some(len) = head.lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            && body.len() >= len.trim().parse::<usize>().unwrap()
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

#[tokio::test]
async fn health_and_the_page_need_no_token_data_does() {
    let (addr, _stop) = start(true).await;
    let (code, text) = exchange(addr, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(code, 200, "{text}");
    assert!(
        text.ends_with(
            "ok: every data-plane worker passed 2 ms ago\ngeneration 0000000000001234\n"
        ),
        "{text}"
    );
    let (code, text) = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        code == 200 && text.contains("<title>htbd</title>"),
        "{text}"
    );
    let (code, _) = exchange(
        addr,
        b"GET /assets/uplot.min.js HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(code, 200);
    for path in ["/api/v1/status", "/metrics", "/api/v1/overview"] {
        let (code, text) = exchange(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(code, 401, "{path}: {text}");
        assert!(
            text.contains("WWW-authenticate: Bearer")
                || text
                    .to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
            "{text}"
        );
        assert!(text.contains("send Authorization: Bearer TOKEN"), "{text}");
    }
    let wrong = b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a-token-of-24-characterz\r\n\r\n";
    let (code, text) = exchange(addr, wrong).await;
    assert!(code == 401 && text.contains("not this htbd's"), "{text}");
    let right =
        format!("GET /api/v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    let (code, text) = exchange(addr, right.as_bytes()).await;
    assert!(
        code == 200 && text.contains("\"daemon\":\"test\""),
        "{text}"
    );
}

#[tokio::test]
async fn without_a_token_data_is_served_and_unknown_paths_and_methods_are_refused() {
    let (addr, _stop) = start(false).await;
    let (code, text) = exchange(addr, b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        code == 200 && text.contains("\"daemon\":\"test\""),
        "{text}"
    );
    let (code, _) = exchange(addr, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(code, 404);
    let (code, text) = exchange(addr, b"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(code, 405, "{text}");
    let (code, _) = exchange(addr, b"GET /health SPDY/3\r\n\r\n").await;
    assert_eq!(code, 400);
    let (code, text) = exchange(
        addr,
        b"GET /api/v1/class/r2/1:x HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(code == 400 && text.contains("is not a class id"), "{text}");
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let (addr, _stop) = start(false).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for _ in 0..3 {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (code, text) = read_response(&mut stream).await;
        assert_eq!(code, 200, "{text}");
    }
}

#[tokio::test]
async fn an_oversized_head_gets_431_and_a_body_413() {
    let (addr, _stop) = start(false).await;
    let big = format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES)
    );
    let (code, text) = exchange(addr, big.as_bytes()).await;
    assert_eq!(code, 431, "{text}");
    let body = format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{}",
        "b".repeat(4096)
    );
    let (code, text) = exchange(addr, body.as_bytes()).await;
    assert!(
        code == 413 && text.contains("the console only reads"),
        "{text}"
    );
}

#[tokio::test]
async fn a_slow_client_is_cut_off_and_holds_nobody_up() {
    let (addr, _stop) = start(false).await;
    let started = Instant::now();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHo").await.unwrap();
    // Others are served meanwhile.
    let (code, _) = exchange(addr, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(code, 200);
    assert!(started.elapsed() < Duration::from_secs(1));
    // The slow one is closed once its head took longer than allowed.
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(HEAD_TIMEOUT + Duration::from_secs(5), slow.read(&mut buf))
        .await
        .expect("closed within the head timeout")
        .unwrap_or(0);
    let waited = started.elapsed();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        waited >= HEAD_TIMEOUT && waited < HEAD_TIMEOUT + Duration::from_secs(3),
        "closed after {waited:?}: {text}"
    );
    assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
}

#[tokio::test]
async fn clients_beyond_the_limit_get_503_until_a_place_frees() {
    let (addr, _stop) = start(false).await;
    let mut held = Vec::new();
    for _ in 0..MAX_CLIENTS {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.0, 200);
        held.push(s);
    }
    let (code, text) = exchange(addr, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(code == 503 && text.contains("too many clients"), "{text}");
    drop(held.pop());
    // The freed place is the server's once it has seen the close.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (code, _) = exchange(addr, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no place freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
