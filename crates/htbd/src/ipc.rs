//! The control socket: a Unix stream socket speaking [`htb_ipc`] frames.
//!
//! Who may connect: the socket file is mode 0660, owned by root and `socket_group`; on top of
//! that every connection's peer credentials (`SO_PEERCRED`) are checked — root, htbd's own
//! user, or a member of `socket_group`. Nothing a client does reaches the data plane except
//! through the control task's bounded queue: a slow client only slows itself (a started frame,
//! header included, must arrive within [`FRAME_TIMEOUT`]; a connection idle for
//! [`IDLE_TIMEOUT`] is closed), a hostile one gets an error and is dropped, at most
//! [`MAX_CLIENTS`] are served at once, and request bodies being read take at most
//! [`MAX_BUFFERED_BYTES`] together (each at most `htb_ipc::MAX_MESSAGE_BYTES`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use htb_ipc::{
    ErrorCode, FrameError, Incoming, IpcError, RawCommands, ReplyBody, Request, RequestBody,
    Response,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::control::{Call, Peer};

/// Clients served at once; more get [`ErrorCode::Busy`].
pub const MAX_CLIENTS: usize = 64;
/// Time a client has to finish a frame it started (header and body).
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a connection may stay open without a request (`htb-cli` reconnects after 30 s idle).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Request bytes being read at once, all clients together.
pub const MAX_BUFFERED_BYTES: u32 = 256 << 20;

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// `/etc/group` could not be read to look `socket_group` up.
    #[error("cannot read /etc/group: {0}")]
    GroupFile(#[source] std::io::Error),
    /// `socket_group` names no group.
    #[error("socket_group {0:?} is not a group in /etc/group")]
    NoSuchGroup(String),
    /// A live daemon answers on the path.
    #[error("another htbd is listening on {} (stop it, or set [daemon] socket)", .0.display())]
    InUse(PathBuf),
    /// A file-system step failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// The step: `create`, `remove the stale`, `listen on`, `chmod`.
        what: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The socket could not be given to `socket_group`.
    #[error("cannot give {} to group {gid}: {source}", path.display())]
    Chown {
        /// The socket.
        path: PathBuf,
        /// The group's id.
        gid: u32,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Why a client was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    /// Neither root, htbd's user, nor in the configured group.
    #[error("uid {uid} is not root, htbd's user, nor in group {group}")]
    NotInGroup { uid: u32, group: String },
    /// No group is configured, and the peer is neither root nor htbd's user.
    #[error("uid {uid} is not root nor htbd's user (set [daemon] socket_group to let a group in)")]
    NotOwner { uid: u32 },
}

/// Who may use the socket.
#[derive(Clone, Debug)]
pub struct PeerPolicy {
    owner: u32,
    group: Option<(String, u32)>,
}

impl PeerPolicy {
    /// Root, this process's user, and members of `group` (a name from `/etc/group`, or a
    /// number).
    ///
    /// # Errors
    /// An unknown group.
    pub fn new(group: Option<&str>) -> Result<Self, SocketError> {
        let owner = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
        let group = match group {
            None => None,
            Some(name) => Some((name.to_owned(), group_id(name)?)),
        };
        Ok(Self { owner, group })
    }

    /// The group's id, if one is configured.
    #[must_use]
    pub fn gid(&self) -> Option<u32> {
        self.group.as_ref().map(|(_, gid)| *gid)
    }

    /// Whether the peer may send requests; `Err` says why not.
    fn check(&self, uid: u32, gid: u32, pid: Option<i32>) -> Result<(), Refusal> {
        if uid == 0 || uid == self.owner {
            return Ok(());
        }
        if let Some((name, wanted)) = &self.group {
            if gid == *wanted || pid.is_some_and(|pid| supplementary_groups(pid).contains(wanted)) {
                return Ok(());
            }
            return Err(Refusal::NotInGroup {
                uid,
                group: name.clone(),
            });
        }
        Err(Refusal::NotOwner { uid })
    }
}

/// A group's id from `/etc/group` (or a numeric id).
fn group_id(name: &str) -> Result<u32, SocketError> {
    if let Ok(gid) = name.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").map_err(SocketError::GroupFile)?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(n, _)| *n == name)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| SocketError::NoSuchGroup(name.to_owned()))
}

/// The supplementary groups of process `pid` (`Groups:` in `/proc/PID/status`).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// A bound control socket; removed when dropped.
#[derive(Debug)]
pub struct Socket {
    listener: Option<std::os::unix::net::UnixListener>,
    path: PathBuf,
}

impl Socket {
    /// Binds `path` (mode 0660, group `gid`), replacing a stale socket file but refusing to
    /// steal one a live daemon answers on.
    ///
    /// # Errors
    /// Another daemon listens there, or binding fails.
    pub fn bind(path: &Path, gid: Option<u32>) -> Result<Self, SocketError> {
        let io = |what: &'static str, at: &Path| {
            let path = at.to_owned();
            move |source| SocketError::Io { what, path, source }
        };
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(io("remove the stale", path))?;
        }
        let listener =
            std::os::unix::net::UnixListener::bind(path).map_err(io("listen on", path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(io("chmod", path))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|source| {
                SocketError::Chown {
                    path: path.to_owned(),
                    gid,
                    source,
                }
            })?;
        }
        Ok(Self {
            listener: Some(listener),
            path: path.to_owned(),
        })
    }

    fn take(&mut self) -> Option<std::os::unix::net::UnixListener> {
        self.listener.take()
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accepts clients until `shutdown` turns true; each gets its own task.
pub async fn serve(
    socket: &mut Socket,
    policy: Arc<PeerPolicy>,
    calls: mpsc::Sender<Call>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let Some(listener) = socket.take() else {
        return Ok(());
    };
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    let memory = Arc::new(Semaphore::new(MAX_BUFFERED_BYTES as usize));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::warn!("control socket: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&clients).try_acquire_owned() else {
                    tokio::spawn(refuse(stream, IpcError::new(
                        ErrorCode::Busy,
                        format!("{MAX_CLIENTS} clients are connected; try again"),
                    )));
                    continue;
                };
                let (policy, calls) = (Arc::clone(&policy), calls.clone());
                let memory = Arc::clone(&memory);
                tokio::spawn(async move {
                    client(stream, &policy, &calls, &memory).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

async fn send(stream: &mut UnixStream, response: &Response) -> bool {
    match htb_ipc::encode(response) {
        Ok(frame) => stream.write_all(&frame).await.is_ok(),
        // A reply over the frame limit (a `show -s` of some 150 000 classes): the client gets
        // the reason, not a closed connection.
        Err(FrameError::TooLarge(bytes)) => {
            let error = IpcError::new(
                ErrorCode::TooLarge,
                format!(
                    "the reply is {bytes} bytes, above the {}-byte limit of one message: ask \
                     for less (one class with classid, the filters of one prio, without -s)",
                    htb_ipc::MAX_MESSAGE_BYTES
                ),
            );
            match htb_ipc::encode(&Response::new(Err(error))) {
                Ok(frame) => stream.write_all(&frame).await.is_ok(),
                Err(_) => false,
            }
        }
        Err(e) => {
            tracing::error!("cannot encode a response: {e}");
            false
        }
    }
}

async fn refuse(mut stream: UnixStream, error: IpcError) {
    let _ = send(&mut stream, &Response::new(Err(error))).await;
}

/// Serves one client: frames in, one response per frame out, until it hangs up or misbehaves.
async fn client(
    mut stream: UnixStream,
    policy: &PeerPolicy,
    calls: &mpsc::Sender<Call>,
    memory: &Semaphore,
) {
    let peer = match stream.peer_cred() {
        Ok(cred) => {
            if let Err(why) = policy.check(cred.uid(), cred.gid(), cred.pid()) {
                tracing::warn!("control socket: refused pid {:?}: {why}", cred.pid());
                refuse(
                    stream,
                    IpcError::new(ErrorCode::PermissionDenied, why.to_string()),
                )
                .await;
                return;
            }
            Peer {
                uid: cred.uid(),
                pid: cred.pid(),
            }
        }
        Err(e) => {
            tracing::warn!("control socket: no peer credentials: {e}");
            return;
        }
    };
    // Commands staged for this connection's next batch (`RequestBody::Stage`).
    let mut staged = Staged::default();
    loop {
        let mut header = [0u8; 4];
        // Between frames a client may idle (htb-cli monitor does), up to IDLE_TIMEOUT.
        match tokio::time::timeout(IDLE_TIMEOUT, stream.read_exact(&mut header[..1])).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                tracing::debug!("control socket: closing a connection idle for {IDLE_TIMEOUT:?}");
                return;
            }
        }
        // From its first byte, the whole frame must arrive within FRAME_TIMEOUT.
        let deadline = tokio::time::Instant::now() + FRAME_TIMEOUT;
        let late = || {
            IpcError::new(
                ErrorCode::BadRequest,
                format!("message not complete within {FRAME_TIMEOUT:?}"),
            )
        };
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut header[1..])).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                refuse(stream, late()).await;
                return;
            }
        }
        let len = match htb_ipc::body_len(header) {
            Ok(len) => len,
            Err(e) => {
                tracing::debug!("control socket: {e}");
                let code = match e {
                    FrameError::TooLarge(_) => ErrorCode::TooLarge,
                    _ => ErrorCode::BadRequest,
                };
                refuse(stream, IpcError::new(code, e.to_string())).await;
                return;
            }
        };
        // The announced size is reserved against the total, then read as it arrives (no
        // allocation of the announced size up front).
        let Ok(reserved) = memory.try_acquire_many(u32::try_from(len).unwrap_or(u32::MAX)) else {
            refuse(
                stream,
                IpcError::new(
                    ErrorCode::Busy,
                    format!("{MAX_BUFFERED_BYTES} bytes of requests are being read; try again"),
                ),
            )
            .await;
            return;
        };
        let mut body = Vec::new();
        let mut limited = (&mut stream).take(len as u64);
        let read = limited.read_to_end(&mut body);
        match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(n)) if n == len => {}
            Ok(_) => return,
            Err(_) => {
                refuse(stream, late()).await;
                return;
            }
        }
        // A batch keeps the text of its commands (for the journal): the body's bytes, counted
        // against the reserve no longer.
        let parsed = htb_ipc::read_incoming(body);
        drop(reserved);
        let incoming = match parsed {
            Ok(incoming) => incoming,
            Err(e) => {
                // What was staged was meant for a batch this client can no longer be sure of.
                staged = Staged::default();
                let error = IpcError::new(ErrorCode::BadRequest, format!("malformed request: {e}"));
                if send(&mut stream, &Response::new(Err(error))).await {
                    continue;
                }
                return;
            }
        };
        let (request, received) = match stage(&mut staged, incoming) {
            Staging::Answer(response) => {
                if send(&mut stream, &response).await {
                    continue;
                }
                return;
            }
            Staging::Forward(request, received) => (request, received),
        };
        let (tx, rx) = oneshot::channel();
        let call = Call::Client {
            request,
            received,
            peer,
            reply: tx,
        };
        if calls.send(call).await.is_err() {
            refuse(
                stream,
                IpcError::new(ErrorCode::ShuttingDown, "htbd is stopping"),
            )
            .await;
            return;
        }
        let Ok(response) = rx.await else {
            return;
        };
        if !send(&mut stream, &response).await {
            return;
        }
    }
}

/// Commands one connection may stage: a million subscribers' classes and filters, twice over
/// (each staged command holds some hundreds of bytes of htbd's memory until its batch runs).
pub const MAX_STAGED_COMMANDS: usize = 4_000_000;

/// What a connection does with a request: answer it itself (a stage), or forward it (with
/// the text of a batch's commands, when every message of it had theirs).
enum Staging {
    /// Boxed: a response is several times a request's size.
    Answer(Box<Response>),
    Forward(Request, Option<Vec<RawCommands>>),
}

/// The commands staged for a connection's next batch, and the text of each message's, as
/// long as every message kept it.
#[derive(Debug)]
struct Staged {
    commands: Vec<htb_ipc::Command>,
    received: Option<Vec<RawCommands>>,
}

impl Default for Staged {
    fn default() -> Self {
        Self {
            commands: Vec::new(),
            received: Some(Vec::new()),
        }
    }
}

impl Staged {
    /// Adds one message's commands and text.
    fn push(&mut self, commands: Vec<htb_ipc::Command>, raw: Option<RawCommands>) {
        if self.commands.is_empty() {
            // Moved, not copied: an unstaged batch is one message.
            self.commands = commands;
        } else {
            self.commands.extend(commands);
        }
        match (&mut self.received, raw) {
            (Some(all), Some(raw)) => all.push(raw),
            (received, _) => *received = None,
        }
    }
}

/// Keeps a [`RequestBody::Stage`]'s commands in `staged`; puts them in front of the next
/// [`RequestBody::Apply`]'s, which then runs them all as one batch.
fn stage(staged: &mut Staged, incoming: Incoming) -> Staging {
    let Incoming { request, raw } = incoming;
    let Request { version, request } = request;
    match request {
        RequestBody::Stage { commands } => {
            if version != htb_ipc::PROTOCOL_VERSION {
                // The control plane's check answers it, as for any request.
                return Staging::Forward(
                    Request {
                        version,
                        request: RequestBody::Stage { commands },
                    },
                    None,
                );
            }
            let staged_len = staged.commands.len();
            if staged_len + commands.len() > MAX_STAGED_COMMANDS {
                return Staging::Answer(Box::new(Response::new(Err(IpcError::new(
                    ErrorCode::TooLarge,
                    format!(
                        "{} commands staged and {} more: above the {MAX_STAGED_COMMANDS} a \
                         connection may stage (the staged ones are kept)",
                        staged_len,
                        commands.len()
                    ),
                )))));
            }
            staged.push(commands, raw);
            Staging::Answer(Box::new(Response::new(Ok(ReplyBody::Staged {
                commands: staged.commands.len() as u64,
            }))))
        }
        RequestBody::Apply { commands } => {
            let mut all = std::mem::take(staged);
            all.push(commands, raw);
            Staging::Forward(
                Request {
                    version,
                    request: RequestBody::Apply {
                        commands: all.commands,
                    },
                },
                all.received,
            )
        }
        request => Staging::Forward(Request { version, request }, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(minor: u32) -> htb_ipc::Command {
        htb_ipc::Command::ClassDelete(htb_ipc::ClassDelete {
            dev: "r2".parse().unwrap(),
            id: htb_core::ClassId::new(1, minor),
        })
    }

    /// A request as the connection reads it off the wire.
    fn incoming(body: RequestBody) -> Incoming {
        htb_ipc::read_incoming(serde_json::to_vec(&Request::new(body)).unwrap()).unwrap()
    }

    /// What an apply of `commands` forwards to the control plane.
    fn apply(
        staged: &mut Staged,
        incoming: Incoming,
    ) -> (Vec<htb_ipc::Command>, Option<Vec<RawCommands>>) {
        match stage(staged, incoming) {
            Staging::Forward(
                Request {
                    request: RequestBody::Apply { commands },
                    ..
                },
                received,
            ) => (commands, received),
            _ => panic!("the apply goes on"),
        }
    }

    /// The items of each message's text, joined as the journal writes them.
    fn joined(received: &[RawCommands]) -> Vec<htb_ipc::Command> {
        let items: Vec<&[u8]> = received
            .iter()
            .map(RawCommands::items)
            .filter(|t| !t.is_empty())
            .collect();
        let list = [b"[".as_slice(), &items.join(&b","[..]), b"]"].concat();
        let mut d = serde_json::Deserializer::from_slice(&list);
        htb_ipc::deserialize_commands(&mut d).unwrap()
    }

    /// Staged commands go in front of the next batch's, in order, once, with the text each
    /// message brought; a stage over the cap is refused and keeps what was staged.
    #[test]
    fn staged_commands_lead_the_next_batch() {
        let mut staged = Staged::default();
        for (minors, total) in [(vec![1, 2], 2), (vec![3], 3)] {
            let commands = minors.into_iter().map(delete).collect();
            let Staging::Answer(response) =
                stage(&mut staged, incoming(RequestBody::Stage { commands }))
            else {
                panic!("a stage is answered by the connection");
            };
            assert_eq!(response.result, Ok(ReplyBody::Staged { commands: total }));
        }
        let too_many = Incoming {
            request: Request::new(RequestBody::Stage {
                commands: vec![delete(9); MAX_STAGED_COMMANDS],
            }),
            raw: None,
        };
        let Staging::Answer(response) = stage(&mut staged, too_many) else {
            panic!("refused by the connection");
        };
        assert_eq!(
            response.result.map_err(|e| e.code),
            Err(ErrorCode::TooLarge)
        );
        let (commands, received) = apply(
            &mut staged,
            incoming(RequestBody::Apply {
                commands: vec![delete(4)],
            }),
        );
        assert_eq!(commands, (1..=4).map(delete).collect::<Vec<_>>());
        assert_eq!(
            joined(&received.expect("every message had its text")),
            commands
        );
        assert!(staged.commands.is_empty());
        let (commands, received) = apply(
            &mut staged,
            incoming(RequestBody::Apply {
                commands: vec![delete(5)],
            }),
        );
        assert_eq!(commands, [delete(5)], "staged once");
        assert_eq!(joined(&received.unwrap()), commands);
    }

    /// One message without its text (a list over several lines), and the batch has none: the
    /// journal encodes it.
    #[test]
    fn a_message_without_its_text_leaves_the_batch_without() {
        let mut staged = Staged::default();
        let lines = serde_json::to_vec_pretty(&Request::new(RequestBody::Stage {
            commands: vec![delete(1)],
        }))
        .unwrap();
        let _ = stage(&mut staged, htb_ipc::read_incoming(lines).unwrap());
        let _ = stage(
            &mut staged,
            incoming(RequestBody::Stage {
                commands: vec![delete(2)],
            }),
        );
        let (commands, received) = apply(
            &mut staged,
            incoming(RequestBody::Apply {
                commands: vec![delete(3)],
            }),
        );
        assert_eq!(commands, (1..=3).map(delete).collect::<Vec<_>>());
        assert!(received.is_none());
        // The next batch starts afresh.
        let (_, received) = apply(
            &mut staged,
            incoming(RequestBody::Apply {
                commands: vec![delete(4)],
            }),
        );
        assert!(received.is_some());
    }

    #[test]
    fn policy_lets_root_and_the_group_in() {
        let policy = PeerPolicy {
            owner: 1000,
            group: Some(("netadmin".into(), 4242)),
        };
        assert!(policy.check(0, 0, None).is_ok());
        assert!(policy.check(1000, 1000, None).is_ok());
        assert!(policy.check(2000, 4242, None).is_ok());
        let e = policy.check(65534, 65534, None).unwrap_err().to_string();
        assert!(e.contains("not root") && e.contains("netadmin"), "{e}");
        let no_group = PeerPolicy {
            owner: 0,
            group: None,
        };
        assert!(
            no_group
                .check(65534, 65534, None)
                .unwrap_err()
                .to_string()
                .contains("socket_group")
        );
        assert_eq!(group_id("0").ok(), Some(0));
        assert_eq!(group_id("root").ok(), Some(0));
        assert!(group_id("no-such-group-here").is_err());
    }
}
