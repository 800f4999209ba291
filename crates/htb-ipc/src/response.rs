//! The daemon's message: its envelope (the protocol version, an answer or an error as data) and
//! the answers.

use serde::{Deserialize, Serialize};

use crate::{Explanation, FlowList, IpcError, PROTOCOL_VERSION, Shown, Status, Warning, tagged};

/// The daemon's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`PROTOCOL_VERSION`] of the daemon.
    pub version: u32,
    /// The answer (a page of `show` read without serde's buffering: `tagged`).
    #[serde(deserialize_with = "tagged::reply_result")]
    pub result: Result<ReplyBody, IpcError>,
}

impl Response {
    /// A response at this crate's protocol version.
    #[must_use]
    pub fn new(result: Result<ReplyBody, IpcError>) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            result,
        }
    }
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplyBody {
    /// To [`RequestBody::Ping`](crate::RequestBody::Ping).
    Pong {
        /// The daemon's version.
        daemon: String,
        /// Its process id.
        pid: u32,
    },
    /// To [`RequestBody::Show`](crate::RequestBody::Show).
    Shown(Shown),
    /// To [`RequestBody::Apply`](crate::RequestBody::Apply): one result per command.
    Applied {
        /// In command order.
        results: Vec<CommandResult>,
    },
    /// To [`RequestBody::Status`](crate::RequestBody::Status).
    Status(Status),
    /// To [`RequestBody::Explain`](crate::RequestBody::Explain).
    Explained(Explanation),
    /// To [`RequestBody::Flows`](crate::RequestBody::Flows).
    Flows(FlowList),
    /// To [`RequestBody::Stage`](crate::RequestBody::Stage).
    Staged {
        /// Commands staged on this connection so far.
        commands: u64,
    },
}

/// What a command did besides succeeding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// Warnings about accepted parameters (quantum clamped, ceil below rate, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Packets the command dropped from queues (a deleted class's backlog, a leaf that became
    /// an inner class, a deleted qdisc).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_packets: u64,
}

/// A result without warnings nor drops is `{}`: 2 000 000 of them fit a message.
fn is_zero(n: &u64) -> bool {
    *n == 0
}
