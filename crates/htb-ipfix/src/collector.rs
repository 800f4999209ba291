//! The collecting side (RFC 7011 §8, §10): templates learned per Observation Domain, data
//! records decoded by them. The lab's tests read htbd's messages with it, and the fuzzer
//! feeds it anything: every malformed message is an error, never a panic.

use std::collections::HashMap;

use crate::record::FlowRecord;
use crate::template::{Field, RecordError, read_fields, read_record, record_len};
use crate::{HEADER_LEN, OPTIONS_TEMPLATE_SET, TEMPLATE_SET, VERSION};

/// Why a message was refused (nothing of it is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than a message header.
    #[error("{0} bytes: shorter than the 16-byte message header")]
    Short(usize),
    /// Not IPFIX.
    #[error("version {0}: IPFIX is version 10")]
    Version(u16),
    /// The header's length is not the message's.
    #[error("the header says {said} bytes, the message has {has}")]
    Length {
        /// The header's length field.
        said: usize,
        /// The bytes there are.
        has: usize,
    },
    /// A set's length is below its header or beyond the message.
    #[error("the set at byte {at} has length {len}")]
    SetLength {
        /// Where it starts.
        at: usize,
        /// Its length field.
        len: usize,
    },
    /// A Set ID that RFC 7011 reserves (0, 1, 4 to 255).
    #[error("set id {0} is reserved")]
    ReservedSet(u16),
    /// A template record that runs past its set, or names a template id below 256.
    #[error("a bad template record in the set at byte {0}")]
    Template(usize),
    /// A record of a known template that is not a flow record.
    #[error("a record of template {template} is not a flow record ({why})")]
    Record {
        /// The template.
        template: u16,
        /// What is wrong.
        why: &'static str,
    },
}

/// One message read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Its Observation Domain.
    pub domain: u32,
    /// Its Sequence Number.
    pub sequence: u32,
    /// Its Export Time (Unix seconds).
    pub export_time: u32,
    /// Templates it defined (or withdrew).
    pub templates: usize,
    /// The flow records of its data sets whose templates were known.
    pub records: Vec<FlowRecord>,
    /// Data sets skipped: their template is unknown (not yet heard, as after a collector
    /// restart) or has a variable-length field.
    pub unknown_sets: usize,
}

/// Templates learned so far, per Observation Domain.
#[derive(Clone, Debug, Default)]
pub struct Collector {
    templates: HashMap<(u32, u16), Vec<Field>>,
}

/// The Set IDs a data set may have.
const FIRST_DATA_SET: u16 = 256;

/// The length field of a variable-length element (§7).
const VARIABLE: u16 = u16::MAX;

impl Collector {
    /// A collector that knows no template.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many templates it knows.
    #[must_use]
    pub fn known_templates(&self) -> usize {
        self.templates.len()
    }

    /// Reads one message: learns its templates, decodes its data sets. A message refused
    /// teaches nothing.
    ///
    /// # Errors
    /// [`DecodeError`]: the message is malformed.
    pub fn decode(&mut self, message: &[u8]) -> Result<Decoded, DecodeError> {
        if message.len() < HEADER_LEN {
            return Err(DecodeError::Short(message.len()));
        }
        let u16_at = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]);
        let u32_at = |at: usize| {
            u32::from_be_bytes([
                message[at],
                message[at + 1],
                message[at + 2],
                message[at + 3],
            ])
        };
        let version = u16_at(0);
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let said = usize::from(u16_at(2));
        if said != message.len() {
            return Err(DecodeError::Length {
                said,
                has: message.len(),
            });
        }
        let mut out = Decoded {
            export_time: u32_at(4),
            sequence: u32_at(8),
            domain: u32_at(12),
            ..Decoded::default()
        };
        // Templates learned in this message apply from their set on (§8), but only once the
        // whole message is accepted.
        let mut learned = self.templates.clone();
        let mut at = HEADER_LEN;
        while at < message.len() {
            if message.len() - at < 4 {
                return Err(DecodeError::SetLength { at, len: 0 });
            }
            let (id, len) = (u16_at(at), usize::from(u16_at(at + 2)));
            if len < 4 || at + len > message.len() {
                return Err(DecodeError::SetLength { at, len });
            }
            let body = &message[at + 4..at + len];
            match id {
                TEMPLATE_SET => {
                    out.templates += read_templates(body, out.domain, &mut learned)
                        .ok_or(DecodeError::Template(at))?;
                }
                OPTIONS_TEMPLATE_SET => {}
                FIRST_DATA_SET.. => match learned.get(&(out.domain, id)) {
                    Some(fields) if fields.iter().all(|f| f.len != VARIABLE) => {
                        read_data(body, id, fields, &mut out.records)?;
                    }
                    _ => out.unknown_sets += 1,
                },
                reserved => return Err(DecodeError::ReservedSet(reserved)),
            }
            at += len;
        }
        self.templates = learned;
        Ok(out)
    }
}

/// Reads a template set's records into `templates`; returns how many, or `None` when one
/// is malformed. Trailing bytes too few for a record header are padding (§3.3.1).
fn read_templates(
    mut body: &[u8],
    domain: u32,
    templates: &mut HashMap<(u32, u16), Vec<Field>>,
) -> Option<usize> {
    let mut n = 0;
    while body.len() >= 4 {
        let id = u16::from_be_bytes([body[0], body[1]]);
        let count = usize::from(u16::from_be_bytes([body[2], body[3]]));
        if id < FIRST_DATA_SET {
            // Padding is zeros; anything else below 256 is not a template id.
            return body.iter().all(|&b| b == 0).then_some(n);
        }
        if count == 0 {
            // A withdrawal (§8.1).
            templates.remove(&(domain, id));
            body = &body[4..];
        } else {
            let (fields, used) = read_fields(&body[4..], count)?;
            templates.insert((domain, id), fields);
            body = &body[4 + used..];
        }
        n += 1;
    }
    Some(n)
}

/// Reads a data set's records; trailing bytes fewer than a record are padding.
fn read_data(
    body: &[u8],
    template: u16,
    fields: &[Field],
    records: &mut Vec<FlowRecord>,
) -> Result<(), DecodeError> {
    let len = record_len(fields);
    if len == 0 {
        return Ok(());
    }
    for record in body.chunks_exact(len) {
        let r = read_record(fields, record).map_err(|e| DecodeError::Record {
            template,
            why: match e {
                RecordError::NoAddresses => "no source or destination address",
                RecordError::FieldLength(_) => "a field of a length its element cannot have",
                RecordError::EndReason(_) => "an unassigned flowEndReason",
                RecordError::Truncated => "it ends early",
            },
        })?;
        records.push(r);
    }
    Ok(())
}
