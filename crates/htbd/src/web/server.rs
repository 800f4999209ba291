//! The listener: hyper's HTTP/1.1 with keep-alive, its clients bounded like the control
//! socket's. At most [`MAX_CLIENTS`] connections at once (another gets 503 and is closed), a
//! request head of at most [`MAX_HEAD_BYTES`] (hyper answers 431) within [`HEAD_TIMEOUT`]
//! (then the connection is closed), a body of at most [`MAX_BODY_BYTES`] (413: the console
//! only reads), and a connection lives [`CONNECTION_LIFETIME`] at most, so that idle
//! keep-alive connections cannot hold every place.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::Web;

/// Connections served at once: a browser opens up to six, Prometheus one, health checkers
/// one each.
pub const MAX_CLIENTS: usize = 32;
/// Largest request head (hyper's smallest read buffer).
pub const MAX_HEAD_BYTES: usize = 8192;
/// Time a client has to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body.
pub const MAX_BODY_BYTES: u64 = 1024;
/// Longest a connection is kept; it is then closed after its request in progress.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// Binds the listener (before the daemon reports ready, so a taken port fails start-up).
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves until `shutdown` turns true.
///
/// # Errors
/// The listener cannot be handed to tokio.
pub async fn serve(
    listener: std::net::TcpListener,
    web: Arc<Web>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    let app = super::router(web);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::warn!("http: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&clients).try_acquire_owned() else {
                    tokio::spawn(refuse(stream));
                    continue;
                };
                let app = app.clone();
                tokio::spawn(async move {
                    connection(stream, app).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

async fn connection(stream: TcpStream, app: Router) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                tracing::debug!("http: connection ended: {e}");
            }
        }
        () = tokio::time::sleep(CONNECTION_LIFETIME) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(HEAD_TIMEOUT, conn).await;
        }
    }
}

/// Answers a connection over [`MAX_CLIENTS`] and closes it.
async fn refuse(mut stream: TcpStream) {
    let body = "too many clients: at most 32 connections at once\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(HEAD_TIMEOUT, async {
        stream.write_all(head.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// Refuses a request body over [`MAX_BODY_BYTES`] (or one of unknown length) before anything
/// reads it.
pub async fn limit_body(request: Request, next: Next) -> Response {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if request.headers().contains_key(header::TRANSFER_ENCODING)
        || length.is_some_and(|n| n > MAX_BODY_BYTES)
    {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large: the console only reads\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// Anything else.
pub async fn not_found() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        "not found: try /, /health, /metrics or /api/v1/overview\n",
    )
}
