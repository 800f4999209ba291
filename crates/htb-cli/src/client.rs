//! The client side of the control socket.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use htb_ipc::{
    DEFAULT_SOCKET, FrameError, IpcError, ReplyBody, Request, RequestBody, Response, SOCKET_ENV,
    read_frame, write_frame,
};

/// Why a request did not get an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing answers on the socket.
    #[error(
        "cannot reach htbd at {path}: {source} (is htbd running? pass --socket PATH or set {SOCKET_ENV})",
        path = path.display()
    )]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection broke, or the answer was malformed.
    #[error("lost the connection to htbd: {0}")]
    Frame(#[from] FrameError),
    /// htbd refused the request.
    #[error("{}", .0.message)]
    Daemon(IpcError),
    /// htbd answered with the wrong kind of reply.
    #[error("htbd answered something unexpected")]
    Unexpected,
}

/// Where the daemon listens: `--socket`, else `$HTBD_SOCKET`, else `/run/htbd.sock`.
#[must_use]
pub fn socket_path(option: Option<&str>) -> PathBuf {
    option
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// A connection to htbd.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connects to the socket at `path`.
    ///
    /// # Errors
    /// [`ClientError::Connect`].
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self { stream })
    }

    /// Sends one request and waits for its answer.
    ///
    /// # Errors
    /// [`ClientError`]; a refusal is [`ClientError::Daemon`].
    pub fn call(&mut self, request: RequestBody) -> Result<ReplyBody, ClientError> {
        if let Err(sent) = write_frame(&mut self.stream, &Request::new(request)) {
            // htbd may refuse a peer (permissions, too many clients) and close the socket
            // before the request is written: its answer is then waiting to be read, and it
            // says more than "broken pipe".
            return match read_frame::<Response>(&mut self.stream) {
                Ok(response) => response.result.map_err(ClientError::Daemon),
                Err(_) => Err(sent.into()),
            };
        }
        let response: Response = read_frame(&mut self.stream)?;
        response.result.map_err(ClientError::Daemon)
    }
}
