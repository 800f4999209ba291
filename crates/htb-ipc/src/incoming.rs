//! A request as htbd reads it off the socket: typed, and for a batch (`stage`, `apply`) with
//! the JSON text its commands came in, which the journal writes as it is instead of encoding
//! a million subscribers' commands a second time.

use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{Request, RequestBody};

/// The commands of one batch message as they came: the JSON text of their list's items
/// (`{…},{…}`, without the brackets), kept in the message's own bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct RawCommands {
    body: Vec<u8>,
    items: Range<usize>,
}

impl RawCommands {
    /// The items' text, comma-separated, empty for an empty list; never holds a newline (a
    /// list written over several lines is not kept: see [`read_incoming`]).
    #[must_use]
    pub fn items(&self) -> &[u8] {
        &self.body[self.items.clone()]
    }
}

/// Its size, not its text (hundreds of MB for a million subscribers).
impl fmt::Debug for RawCommands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawCommands")
            .field("bytes", &self.items.len())
            .finish_non_exhaustive()
    }
}

/// A request read off the wire.
#[derive(Debug)]
pub struct Incoming {
    /// The request, typed and checked.
    pub request: Request,
    /// For a `stage` or `apply` whose list of commands is on one line (every writer of this
    /// crate writes it so), that list's text.
    pub raw: Option<RawCommands>,
}

/// Reads a frame's `body` as a [`Request`]; for a batch, keeps the text of its commands too.
/// What is accepted and refused is exactly what `serde_json::from_slice::<Request>` accepts
/// and refuses.
///
/// # Errors
/// The body is not a request.
pub fn read_incoming(body: Vec<u8>) -> Result<Incoming, serde_json::Error> {
    let request: Request = serde_json::from_slice(&body)?;
    if !matches!(
        request.request,
        RequestBody::Stage { .. } | RequestBody::Apply { .. }
    ) {
        return Ok(Incoming { request, raw: None });
    }
    let raw = items_of(&body)?.map(|items| RawCommands { body, items });
    Ok(Incoming { request, raw })
}

/// The request's fields that matter here; the others (`version`, `type`) are skipped, having
/// been checked by the typed read.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    request: BatchText<'a>,
}

#[derive(Deserialize)]
struct BatchText<'a> {
    #[serde(borrow)]
    commands: &'a RawValue,
}

/// Where the items of the batch's list lie in `body`; `None` if the list spans lines (a
/// journal line must be one line).
fn items_of(body: &[u8]) -> Result<Option<Range<usize>>, serde_json::Error> {
    let envelope: Envelope<'_> = serde_json::from_slice(body)?;
    let text = envelope.request.commands.get().as_bytes();
    if text.contains(&b'\n') {
        return Ok(None);
    }
    // A list, checked by the typed read: `[`, the items, `]`, perhaps with spaces inside.
    let (Some(b'['), Some(b']')) = (text.first(), text.last()) else {
        return Ok(None);
    };
    let start = text.as_ptr() as usize - body.as_ptr() as usize;
    let mut items = start + 1..start + text.len() - 1;
    while items.start < items.end && body[items.start].is_ascii_whitespace() {
        items.start += 1;
    }
    while items.end > items.start && body[items.end - 1].is_ascii_whitespace() {
        items.end -= 1;
    }
    Ok(Some(items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClassDelete, ClassId, Command, deserialize_commands};

    fn delete(minor: u32) -> Command {
        Command::ClassDelete(ClassDelete {
            dev: "eth0".parse().unwrap(),
            id: ClassId::new(1, minor),
        })
    }

    /// The items' text, read back as a list, is the request's commands.
    fn read_back(raw: &RawCommands) -> Vec<Command> {
        let mut list = b"[".to_vec();
        list.extend_from_slice(raw.items());
        list.push(b']');
        let mut d = serde_json::Deserializer::from_slice(&list);
        deserialize_commands(&mut d).unwrap()
    }

    #[test]
    fn a_batch_keeps_its_commands_text() {
        for body in [
            RequestBody::Stage {
                commands: vec![delete(1), delete(2)],
            },
            RequestBody::Apply {
                commands: vec![delete(3)],
            },
        ] {
            let wire = serde_json::to_vec(&Request::new(body.clone())).unwrap();
            let incoming = read_incoming(wire).unwrap();
            assert_eq!(incoming.request, Request::new(body.clone()));
            let raw = incoming.raw.expect("kept");
            let (RequestBody::Stage { commands } | RequestBody::Apply { commands }) = body else {
                unreachable!()
            };
            assert_eq!(read_back(&raw), commands);
        }
    }

    #[test]
    fn an_empty_list_has_no_items_and_spaces_are_trimmed() {
        let body = br#"{"version":1,"request":{"type":"apply","commands":[ ]}}"#.to_vec();
        assert_eq!(read_incoming(body).unwrap().raw.unwrap().items(), b"");
        let body = br#"{"version":1,"request":{"commands": [ {"op":"class_delete","dev":"eth0","id":"1:5"} ] ,"type":"stage"}}"#;
        let incoming = read_incoming(body.to_vec()).unwrap();
        let raw = incoming.raw.unwrap();
        assert_eq!(raw.items()[0], b'{');
        assert_eq!(raw.items().last(), Some(&b'}'));
        assert_eq!(read_back(&raw), [delete(5)]);
    }

    /// A list over several lines is read, but its text is not kept (the journal encodes it).
    #[test]
    fn a_list_over_lines_is_not_kept() {
        let body = serde_json::to_vec_pretty(&Request::new(RequestBody::Apply {
            commands: vec![delete(1)],
        }))
        .unwrap();
        let incoming = read_incoming(body).unwrap();
        assert!(incoming.raw.is_none());
        assert!(matches!(
            incoming.request.request,
            RequestBody::Apply { .. }
        ));
    }

    /// Other requests keep nothing; what the typed read refuses is refused.
    #[test]
    fn other_requests_and_bad_bodies() {
        let ping = serde_json::to_vec(&Request::new(RequestBody::Ping {})).unwrap();
        assert!(read_incoming(ping).unwrap().raw.is_none());
        for bad in [
            &br#"{"version":1,"request":{"type":"apply","commands":[{"op":"nope"}]}}"#[..],
            br#"{"version":1,"request":{"type":"apply","commands":[],"x":1}}"#,
            br#"{"version":1,"request":{"type":"apply","commands":[]"#,
            b"",
        ] {
            assert!(
                read_incoming(bad.to_vec()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
