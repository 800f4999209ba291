//! Errors as data: what the daemon answers when it refuses a request ([`IpcError`]: a code and
//! a message).

use serde::{Deserialize, Serialize};

/// An error, as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct IpcError {
    /// What kind.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
    /// In an `Apply`, the index of the command that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<usize>,
}

impl IpcError {
    /// An error not tied to a command.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            command: None,
        }
    }
}

/// Error kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed frame or JSON, or a request the daemon cannot make sense of.
    BadRequest,
    /// Protocol versions differ.
    Version,
    /// The frame is larger than [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES).
    TooLarge,
    /// The peer is not allowed to use the socket.
    PermissionDenied,
    /// Too many clients or requests at once; try again.
    Busy,
    /// No such interface (or htbd does not forward on it).
    NoDevice,
    /// The object exists already.
    Exists,
    /// No such object.
    NotFound,
    /// The object is in use (a class with children or filters).
    InUse,
    /// Invalid parameters.
    Invalid,
    /// The change could not be persisted; nothing was changed.
    Persist,
    /// The daemon is stopping.
    ShuttingDown,
    /// A bug.
    Internal,
    /// A code from a newer daemon.
    #[serde(other)]
    Unknown,
}
