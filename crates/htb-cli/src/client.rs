//! The client side of the control socket.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use htb_ipc::{
    Command, DEFAULT_SOCKET, FrameError, IpcError, Object, Page, ReplyBody, Request, RequestBody,
    Response, SOCKET_ENV, Show, Shown, read_frame, write_frame,
};

/// Commands per message of a large batch (some 20 MB, a third of the message limit).
pub const STAGE_CHUNK: usize = 100_000;

/// What a message of a large batch may weigh ([`weight`]): a third of the message limit.
const STAGE_BYTES: usize = 20 << 20;

/// About what `command` takes in a message: a label its texts and addresses, any other command
/// under 200 bytes (tc's words typed).
fn weight(command: &Command) -> usize {
    match command {
        Command::ClassLabel(l) => {
            200 + l.label.as_ref().map_or(0, htb_ipc::ClassLabel::encoded_len)
        }
        _ => 200,
    }
}

/// How many of `commands` go in the next message: at most [`STAGE_CHUNK`] and
/// some 20 MB of estimated weight (at least one).
#[must_use]
pub fn chunk_len(commands: &[Command]) -> usize {
    let mut bytes = 0;
    commands
        .iter()
        .take(STAGE_CHUNK)
        .take_while(|c| {
            bytes += weight(c);
            bytes <= STAGE_BYTES
        })
        .count()
        .max(1)
}

/// Classes or filters per page of a show: a class with statistics is under 1 kB of the
/// answer and its label under 2 kB more (`htb_config::label::LABEL_MAX_BYTES`), so a page stays
/// far below the 64 MiB message limit.
pub const SHOW_PAGE: u32 = 10_000;

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
    /// htbd did not answer in time.
    #[error(
        "htbd did not answer within {}s (is it hung? see journalctl -u htbd; a change sent may \
         still be applied, check with show; pass --timeout SECS to wait longer)",
        .0.as_secs_f64()
    )]
    Timeout(Duration),
}

/// How long `htb-cli` waits for an answer unless `--timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection idle longer than this is opened again before the next request: htbd closes
/// connections idle for `IDLE_TIMEOUT` (60 s), and `monitor` may wait up to an hour between two.
const RECONNECT_AFTER: Duration = Duration::from_secs(30);

/// Where the daemon listens: `--socket`, else `$HTBD_SOCKET`, else `/run/htbd/htbd.sock`.
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
    path: PathBuf,
    timeout: Duration,
    last_used: Instant,
    /// A batch failed after messages of it were staged: the connection holds them (and
    /// perhaps answers not read), so the next request opens a new one.
    stale: bool,
}

fn open(path: &Path, timeout: Duration) -> Result<UnixStream, ClientError> {
    let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
        path: path.to_owned(),
        source,
    })?;
    let set = stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)));
    set.map_err(|source| ClientError::Connect {
        path: path.to_owned(),
        source,
    })?;
    Ok(stream)
}

impl Client {
    /// Connects to the socket at `path`; every request then waits at most `timeout` for
    /// its answer.
    ///
    /// # Errors
    /// [`ClientError::Connect`].
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            stream: open(path, timeout)?,
            path: path.to_owned(),
            timeout,
            last_used: Instant::now(),
            stale: false,
        })
    }

    /// Sends one request and waits for its answer.
    ///
    /// # Errors
    /// [`ClientError`]; a refusal is [`ClientError::Daemon`], no answer in time
    /// [`ClientError::Timeout`].
    pub fn call(&mut self, request: RequestBody) -> Result<ReplyBody, ClientError> {
        self.fresh()?;
        self.call_here(request)
    }

    /// Opens the connection again if it idled long enough for htbd to close it, or a batch
    /// left it [`stale`](Self::stale).
    fn fresh(&mut self) -> Result<(), ClientError> {
        if self.stale || self.last_used.elapsed() > RECONNECT_AFTER {
            self.stream = open(&self.path, self.timeout)?;
            self.stale = false;
        }
        Ok(())
    }

    /// An I/O error that is the read or write timeout, as [`ClientError::Timeout`].
    fn timed_out(&self, e: ClientError) -> ClientError {
        match e {
            ClientError::Frame(FrameError::Io(io))
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                ClientError::Timeout(self.timeout)
            }
            other => other,
        }
    }

    /// [`call`](Self::call) on this connection, whatever its age: what it staged lives there.
    fn call_here(&mut self, request: RequestBody) -> Result<ReplyBody, ClientError> {
        let answer = self.exchange(request);
        self.last_used = Instant::now();
        answer.map_err(|e| self.timed_out(e))
    }

    /// Applies `commands` as one atomic batch. A batch over [`STAGE_CHUNK`] commands (or some
    /// 20 MB) goes in several messages: all but the last are staged on this connection
    /// ([`RequestBody::Stage`]), and the last one's `Apply` runs them all.
    ///
    /// The staged messages are written one after the other without waiting for their
    /// answers, so that htb-cli writes the next while htbd reads the last (each took seconds
    /// of a million-subscriber import, one after the other); the `Apply` is written only once
    /// every staged message's answer said it was staged. If one was refused, nothing is
    /// applied: the error is returned and the connection, with what it staged, is dropped
    /// before the next request.
    ///
    /// # Errors
    /// As [`call`](Self::call); a refusal's command index counts over the whole batch.
    pub fn apply(&mut self, commands: Vec<Command>) -> Result<ReplyBody, ClientError> {
        self.fresh()?;
        let applied = self.apply_here(commands);
        self.last_used = Instant::now();
        applied.map_err(|e| self.timed_out(e))
    }

    fn apply_here(&mut self, commands: Vec<Command>) -> Result<ReplyBody, ClientError> {
        // Stale until an answer to the `Apply` is read: before it, the connection may hold
        // staged commands or answers not read.
        self.stale = true;
        // Messages written whose answers are not read yet.
        let mut unanswered = 0;
        // Chunks taken off the front of one iterator: each command moves once. (`split_off`
        // copied the whole rest of the list per message: quadratic, 3 million commands moved
        // some 30 times over at a 1 000 000-subscriber import.)
        let mut rest = commands.into_iter();
        loop {
            let n = chunk_len(rest.as_slice());
            if rest.len() <= n {
                break;
            }
            let chunk: Vec<Command> = rest.by_ref().take(n).collect();
            let frame = htb_ipc::encode(&Request::new(RequestBody::Stage { commands: chunk }))?;
            if let Err(sent) = self.write(&frame) {
                // htbd may have refused one and closed the connection: its answer says why.
                return Err(match self.staged(unanswered + 1) {
                    Err(e @ (ClientError::Daemon(_) | ClientError::Unexpected)) => e,
                    _ => sent,
                });
            }
            unanswered += 1;
        }
        let last = htb_ipc::encode(&Request::new(RequestBody::Apply {
            commands: rest.collect(),
        }))?;
        self.staged(unanswered)?;
        if let Err(sent) = self.write(&last) {
            let response = read_frame::<Response>(&mut self.stream).map_err(|_| sent)?;
            return response.result.map_err(ClientError::Daemon);
        }
        let response: Response = read_frame(&mut self.stream)?;
        self.stale = false;
        response.result.map_err(ClientError::Daemon)
    }

    /// Writes one encoded frame.
    fn write(&mut self, frame: &[u8]) -> Result<(), ClientError> {
        use std::io::Write as _;
        self.stream
            .write_all(frame)
            .and_then(|()| self.stream.flush())
            .map_err(|e| ClientError::Frame(e.into()))
    }

    /// Reads the answers of `count` staged messages: each must say it was staged.
    fn staged(&mut self, count: usize) -> Result<(), ClientError> {
        for _ in 0..count {
            let response: Response = read_frame(&mut self.stream)?;
            match response.result.map_err(ClientError::Daemon)? {
                ReplyBody::Staged { .. } => {}
                _ => return Err(ClientError::Unexpected),
            }
        }
        Ok(())
    }

    /// A `show`, whole: a `class show` or `filter show` (not `filter get`) comes in pages of
    /// [`SHOW_PAGE`] items, so that no answer of a large tree reaches the message limit; the
    /// pages are joined in order.
    ///
    /// # Errors
    /// As [`call`](Self::call); [`ClientError::Unexpected`] for another answer than the
    /// show's, or a page that does not advance.
    pub fn show(&mut self, mut show: Show) -> Result<Shown, ClientError> {
        let one = show.prio.is_some() && show.handle.is_some();
        if one || !matches!(show.object, Some(Object::Class | Object::Filter)) {
            return match self.call(RequestBody::Show(show))? {
                ReplyBody::Shown(shown) => Ok(shown),
                _ => Err(ClientError::Unexpected),
            };
        }
        let mut all = Shown::default();
        let mut from = 0;
        loop {
            show.page = Some(Page {
                from,
                limit: SHOW_PAGE,
            });
            let ReplyBody::Shown(page) = self.call(RequestBody::Show(show.clone()))? else {
                return Err(ClientError::Unexpected);
            };
            all.classes.extend(page.classes);
            all.filters.extend(page.filters);
            all.mq.extend(page.mq);
            match page.next {
                None => return Ok(all),
                Some(next) if next > from => from = next,
                Some(_) => return Err(ClientError::Unexpected),
            }
        }
    }

    fn exchange(&mut self, request: RequestBody) -> Result<ReplyBody, ClientError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn label(name_len: usize) -> Command {
        let name = "n".repeat(name_len);
        let label: htb_ipc::ClassLabel =
            serde_json::from_value(serde_json::json!({ "name": name })).unwrap();
        Command::ClassLabel(Box::new(htb_ipc::LabelSpec {
            dev: "eth0".parse().unwrap(),
            id: htb_ipc::ClassId::new(1, 1),
            label: Some(label),
        }))
    }

    /// A message of a staged batch holds at most 100 000 commands and about 20 MB, whatever
    /// its labels weigh (each staged message is checked against its real size too).
    #[test]
    fn batches_are_cut_by_count_and_by_weight() {
        let delete = Command::ClassDelete(htb_ipc::ClassDelete {
            dev: "eth0".parse().unwrap(),
            id: htb_ipc::ClassId::new(1, 1),
        });
        assert_eq!(chunk_len(&vec![delete; 250_000]), STAGE_CHUNK);
        let heavy = vec![label(250); 100_000];
        let n = chunk_len(&heavy);
        assert!(n < STAGE_CHUNK && n > 10_000, "{n}");
        let json = serde_json::to_vec(&heavy[..n]).unwrap();
        assert!(json.len() <= STAGE_BYTES, "{} bytes", json.len());
        assert!(
            json.len() * 3 > STAGE_BYTES,
            "the estimate is not far off: {} bytes",
            json.len()
        );
    }

    /// A batch over one message goes as staged messages and an `Apply` on one connection, each
    /// command once and in order (a fake htbd on a socket in a temporary directory records them).
    #[test]
    fn a_long_batch_arrives_whole_and_in_order_over_one_connection() {
        use std::os::unix::net::UnixListener;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("htbd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut messages = Vec::new();
            loop {
                let request: Request = read_frame(&mut stream).unwrap();
                let (ids, last) = match request.request {
                    RequestBody::Stage { commands } => (commands, false),
                    RequestBody::Apply { commands } => (commands, true),
                    other => panic!("unexpected {other:?}"),
                };
                let ids: Vec<u32> = ids
                    .iter()
                    .map(|c| match c {
                        Command::ClassDelete(d) => d.id.minor(),
                        other => panic!("unexpected {other:?}"),
                    })
                    .collect();
                messages.push(ids);
                let reply = if last {
                    ReplyBody::Applied {
                        results: Vec::new(),
                    }
                } else {
                    ReplyBody::Staged { commands: 0 }
                };
                write_frame(&mut stream, &Response::new(Ok(reply))).unwrap();
                if last {
                    return messages;
                }
            }
        });
        let n = 2 * STAGE_CHUNK + 7;
        let batch = (0..n)
            .map(|i| {
                Command::ClassDelete(htb_ipc::ClassDelete {
                    dev: "eth0".parse().unwrap(),
                    id: htb_ipc::ClassId::new(1, u32::try_from(i).unwrap()),
                })
            })
            .collect();
        let mut client = Client::connect(&path, DEFAULT_TIMEOUT).unwrap();
        assert!(matches!(
            client.apply(batch).unwrap(),
            ReplyBody::Applied { .. }
        ));
        let messages = server.join().unwrap();
        let sizes: Vec<usize> = messages.iter().map(Vec::len).collect();
        assert_eq!(sizes, [STAGE_CHUNK, STAGE_CHUNK, 7]);
        let all: Vec<u32> = messages.concat();
        assert!(all.iter().copied().eq(0..u32::try_from(n).unwrap()));
    }

    /// A staged message refused (htbd's staging limit, say) fails the batch and nothing is
    /// applied: the staged messages were written without waiting for their answers, but the
    /// `Apply` waits for all of them. The next request goes on a new connection.
    #[test]
    fn a_refused_staged_message_applies_nothing() {
        fn kind(request: &RequestBody) -> &'static str {
            match request {
                RequestBody::Stage { .. } => "stage",
                RequestBody::Apply { .. } => "apply",
                _ => "other",
            }
        }
        use std::os::unix::net::UnixListener;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("htbd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut seen = Vec::new();
            loop {
                let request: Request = match read_frame(&mut stream) {
                    Ok(request) => request,
                    Err(FrameError::Closed) => break,
                    Err(e) => panic!("{e}"),
                };
                let reply = match request.request {
                    RequestBody::Stage { .. } if seen.len() == 1 => Err(IpcError::new(
                        htb_ipc::ErrorCode::TooLarge,
                        "above what a connection may stage",
                    )),
                    RequestBody::Stage { .. } => Ok(ReplyBody::Staged { commands: 0 }),
                    RequestBody::Apply { .. } => Ok(ReplyBody::Applied {
                        results: Vec::new(),
                    }),
                    other => panic!("unexpected {other:?}"),
                };
                seen.push(kind(&request.request));
                // The client may have gone at the refusal, before the later answers.
                let _ = write_frame(&mut stream, &Response::new(reply));
            }
            // The client's next request, on a new connection.
            let (mut again, _) = listener.accept().unwrap();
            let next: Request = read_frame(&mut again).unwrap();
            write_frame(
                &mut again,
                &Response::new(Ok(ReplyBody::Staged { commands: 0 })),
            )
            .unwrap();
            (seen, kind(&next.request))
        });
        let n = 3 * STAGE_CHUNK + 7;
        let batch = (0..n)
            .map(|i| {
                Command::ClassDelete(htb_ipc::ClassDelete {
                    dev: "eth0".parse().unwrap(),
                    id: htb_ipc::ClassId::new(1, u32::try_from(i).unwrap()),
                })
            })
            .collect();
        let mut client = Client::connect(&path, DEFAULT_TIMEOUT).unwrap();
        match client.apply(batch) {
            Err(ClientError::Daemon(e)) => assert_eq!(e.code, htb_ipc::ErrorCode::TooLarge),
            other => panic!("{other:?}"),
        }
        // Its staged messages go with the connection.
        let staged = client.call(RequestBody::Stage {
            commands: Vec::new(),
        });
        assert!(matches!(staged, Ok(ReplyBody::Staged { .. })), "{staged:?}");
        drop(client);
        let (seen, next) = server.join().unwrap();
        assert_eq!(seen, ["stage"; 3], "no apply");
        assert_eq!(next, "stage");
    }
}
