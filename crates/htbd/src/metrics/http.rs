//! The `/metrics` and `/health` endpoints: a minimal HTTP/1.x server on tokio, enough for
//! Prometheus, `curl` and a health checker (one request per connection, `Connection: close`).
//! Clients are bounded like the control socket's: at most [`MAX_CLIENTS`] at once, a request
//! head of at most [`MAX_HEAD_BYTES`] within [`HEAD_TIMEOUT`]; anything else gets a 4xx and is
//! closed.
//!
//! `/health` answers 200 while every data-plane worker keeps passing (seen within
//! [`STALE_AFTER`]) and 503 otherwise (a hung worker, a job holding the data plane, a start
//! not finished), for a BGP speaker or keepalived to withdraw the box; a killed htbd answers
//! nothing, which checkers count as down too. It never waits on the data plane: it reads the
//! time of the last pass the engine noted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use htb_xdp::EngineHandle;

use super::exposition;
use super::requests::RequestMetrics;
use crate::control::Call;

/// Scrapers served at once.
pub const MAX_CLIENTS: usize = 8;
/// Largest request head read.
pub const MAX_HEAD_BYTES: usize = 8192;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A data plane none of whose passes covered every worker for this long is down: with the
/// default liveness timeout each worker passes every 5 ms, and a control job longer than this
/// holds the forwarding of every port.
pub const STALE_AFTER: Duration = Duration::from_millis(500);

/// `/health`'s status and text for a data plane last seen passing `since` ago.
fn health(since: Option<Duration>) -> (u16, String) {
    match since {
        None => (
            503,
            "starting: the data plane has not passed yet
"
            .into(),
        ),
        Some(age) if age > STALE_AFTER => (
            503,
            format!(
                "down: the data-plane workers have not all passed for {} ms
",
                age.as_millis()
            ),
        ),
        Some(age) => (
            200,
            format!(
                "ok: every data-plane worker passed {} ms ago
",
                age.as_millis()
            ),
        ),
    }
}

/// Binds the metrics address (before the daemon reports ready, so a taken port fails start-up).
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves scrapes until `shutdown` turns true.
///
/// # Errors
/// The listener cannot be handed to tokio.
pub async fn serve(
    listener: std::net::TcpListener,
    calls: mpsc::Sender<Call>,
    requests: RequestMetrics,
    engine: EngineHandle,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (mut stream, _) = match accepted {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::warn!("metrics: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&clients).try_acquire_owned() else {
                    tokio::spawn(async move {
                        let _ = respond(&mut stream, 503, "text/plain", b"too many scrapers\n").await;
                    });
                    continue;
                };
                let (calls, requests, engine) = (calls.clone(), requests.clone(), engine.clone());
                tokio::spawn(async move {
                    client(stream, &calls, &requests, &engine).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// What the request line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics { head: bool },
    Health { head: bool },
    Index { head: bool },
    NotFound,
    BadMethod,
    Malformed,
}

/// Reads the request line of `head` (the bytes up to the blank line).
fn route(head: &[u8]) -> Route {
    let Some(line) = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
    else {
        return Route::Malformed;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Malformed;
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::BadMethod,
    };
    match target.split('?').next().unwrap_or_default() {
        "/metrics" => Route::Metrics { head },
        "/health" => Route::Health { head },
        "/" => Route::Index { head },
        _ => Route::NotFound,
    }
}

async fn client(
    mut stream: TcpStream,
    calls: &mpsc::Sender<Call>,
    requests: &RequestMetrics,
    engine: &EngineHandle,
) {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            head.extend_from_slice(&buf[..n]);
            if head.len() > MAX_HEAD_BYTES {
                return Ok(false);
            }
        }
        Ok::<bool, std::io::Error>(true)
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            let _ = respond(&mut stream, 431, "text/plain", b"request head too large\n").await;
            return;
        }
        Ok(Err(_)) => return,
        Err(_) => {
            let _ = respond(
                &mut stream,
                408,
                "text/plain",
                b"request head not complete\n",
            )
            .await;
            return;
        }
    }
    let result = match route(&head) {
        Route::Metrics { head } => match scrape(calls, requests).await {
            Ok(body) => respond_body(&mut stream, 200, CONTENT_TYPE, body.as_bytes(), head).await,
            Err(why) => {
                tracing::warn!("metrics: scrape failed: {why}");
                respond(
                    &mut stream,
                    503,
                    "text/plain",
                    format!("{why}\n").as_bytes(),
                )
                .await
            }
        },
        Route::Health { head } => {
            let (status, body) = health(engine.since_all_workers_passed());
            respond_body(
                &mut stream,
                status,
                "text/plain; charset=utf-8",
                body.as_bytes(),
                head,
            )
            .await
        }
        Route::Index { head } => {
            let body = b"htbd: metrics at /metrics, health at /health\n";
            respond_body(&mut stream, 200, "text/plain; charset=utf-8", body, head).await
        }
        Route::NotFound => {
            respond(
                &mut stream,
                404,
                "text/plain",
                b"not found: try /metrics or /health\n",
            )
            .await
        }
        Route::BadMethod => respond(&mut stream, 405, "text/plain", b"only GET and HEAD\n").await,
        Route::Malformed => respond(&mut stream, 400, "text/plain", b"malformed request\n").await,
    };
    if let Err(e) = result {
        tracing::debug!("metrics: client went away: {e}");
    }
}

/// Why a scrape produced no page.
#[derive(Debug, thiserror::Error)]
enum ScrapeError {
    /// The control task is gone.
    #[error("htbd is stopping")]
    Stopping,
    /// Gathering the counters failed.
    #[error("{0}")]
    Gather(#[source] htb_ipc::IpcError),
    /// The encoder thread panicked.
    #[error("the encoder failed: {0}")]
    EncoderPanicked(#[source] tokio::task::JoinError),
    /// Encoding failed.
    #[error("the encoder failed: {0}")]
    Encode(#[source] std::fmt::Error),
}

/// Gathers through the control task, then encodes on a blocking thread (100 000 classes are
/// tens of MB of text; the control runtime keeps serving meanwhile).
async fn scrape(
    calls: &mpsc::Sender<Call>,
    requests: &RequestMetrics,
) -> Result<String, ScrapeError> {
    let (tx, rx) = oneshot::channel();
    calls
        .send(Call::Metrics(tx))
        .await
        .map_err(|_| ScrapeError::Stopping)?;
    let gathered = rx
        .await
        .map_err(|_| ScrapeError::Stopping)?
        .map_err(ScrapeError::Gather)?;
    let requests = requests.clone();
    tokio::task::spawn_blocking(move || exposition::encode(gathered, &requests))
        .await
        .map_err(ScrapeError::EncoderPanicked)?
        .map_err(ScrapeError::Encode)
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    respond_body(stream, status, content_type, body, false).await
}

async fn respond_body(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let header = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    if !head_only {
        stream.write_all(body).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_route_as_http_says() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            r("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head: true }
        );
        assert_eq!(r("GET / HTTP/1.1\r\n\r\n"), Route::Index { head: false });
        assert_eq!(
            r("GET /health HTTP/1.1\r\n\r\n"),
            Route::Health { head: false }
        );
        assert_eq!(r("GET /other HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(r("POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(r("GET /metrics\r\n\r\n"), Route::Malformed);
        assert_eq!(r("GET /metrics SPDY/3\r\n\r\n"), Route::Malformed);
        assert_eq!(r("GET  /metrics HTTP/1.1\r\n\r\n"), Route::Malformed);
        assert_eq!(
            route(b"\xff\xfe /metrics HTTP/1.1\r\n\r\n"),
            Route::Malformed
        );
    }

    #[test]
    fn health_is_200_only_while_the_workers_keep_passing() {
        assert_eq!(health(None).0, 503);
        let (status, text) = health(Some(Duration::from_millis(3)));
        assert_eq!(
            (status, text.as_str()),
            (200, "ok: every data-plane worker passed 3 ms ago\n")
        );
        assert_eq!(health(Some(STALE_AFTER)).0, 200);
        let (status, text) = health(Some(Duration::from_millis(1200)));
        assert_eq!(status, 503);
        assert!(text.contains("not all passed for 1200 ms"), "{text}");
    }
}
