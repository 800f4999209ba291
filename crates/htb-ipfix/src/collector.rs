//! The collecting side (RFC 7011 §8, §9): templates learned per Observation Domain, data
//! records decoded by them. The lab's tests read htbd's messages with it, and the fuzzer
//! feeds it anything: every malformed message is an error, never a panic.

use std::collections::HashMap;

use crate::error::{DecodeError, RecordError};
use crate::record::FlowRecord;
use crate::template::{Field, read_fields, read_record, record_len};
use crate::{HEADER_LEN, OPTIONS_TEMPLATE_SET, TEMPLATE_SET, VERSION};

/// One message read: its header (§3.1) and the flow records its data sets carried, so a test
/// can check what was exported, and in which message, without its own parser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Its Observation Domain ID.
    pub domain: u32,
    /// Its Sequence Number: data records the domain sent before this message, mod 2^32.
    pub sequence: u32,
    /// Its Export Time (Unix seconds).
    pub export_time: u32,
    /// Template records it held: templates defined, and withdrawals (§8.1).
    pub templates: usize,
    /// The flow records of its data sets whose templates were known.
    pub records: Vec<FlowRecord>,
    /// Data sets skipped: their template is unknown (not yet heard, as after a collector
    /// restart) or has a variable-length field.
    pub unknown_sets: usize,
}

/// An IPFIX decoder for one transport session: the templates learned so far, keyed by
/// Observation Domain and Template ID (§8), since a data set can only be read by a template
/// heard earlier. Withdrawals (§8.1) are honoured, one template or all of a domain's;
/// options templates (Set ID 3) are read past, so their data sets count as unknown.
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

    /// How many templates it knows, over all domains (a test's proof that templates arrived
    /// or were withdrawn).
    #[must_use]
    pub fn known_templates(&self) -> usize {
        self.templates.len()
    }

    /// Reads one message: learns its templates, decodes its data sets in order. Data sets of
    /// templates it does not know (not yet heard, as after a collector restart) are counted
    /// and skipped, as §9.3 allows. A message refused teaches nothing, as §9.1 asks that a
    /// malformed message be discarded whole.
    ///
    /// # Errors
    /// [`DecodeError`]: the message is malformed: shorter than its header, not version 10,
    /// a Length that is not its size, a set whose length is below 4 or past the message, a
    /// reserved Set ID, a bad template record, or a record of a known template that is cut
    /// short or not a flow record.
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
/// is malformed. Bytes too few for a record header are padding (§3.3.1; §9.1: padding that
/// is not zeros is no reason to refuse a message), as are zeros after the last record.
fn read_templates(
    mut body: &[u8],
    domain: u32,
    templates: &mut HashMap<(u32, u16), Vec<Field>>,
) -> Option<usize> {
    let mut n = 0;
    while body.len() >= 4 {
        let id = u16::from_be_bytes([body[0], body[1]]);
        let count = usize::from(u16::from_be_bytes([body[2], body[3]]));
        if id == TEMPLATE_SET && count == 0 {
            // All Data Templates of the domain withdrawn (§8.1).
            templates.retain(|&(d, _), _| d != domain);
            body = &body[4..];
        } else if id < FIRST_DATA_SET {
            // Padding is zeros; anything else below 256 is not a template id.
            return body.iter().all(|&b| b == 0).then_some(n);
        } else if count == 0 {
            // One template withdrawn (§8.1).
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

/// The most padding a set can need: enough to align the next set on 8 bytes (§3.3.1).
const MAX_PADDING: usize = 7;

/// Reads a data set's records. Bytes after the last whole record are padding when there are
/// at most [`MAX_PADDING`] of them, whatever they hold (§9.1); more are a record cut short.
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
    let error = |why| DecodeError::Record { template, why };
    let chunks = body.chunks_exact(len);
    if chunks.remainder().len() > MAX_PADDING {
        return Err(error(RecordError::Truncated));
    }
    for record in chunks {
        records.push(read_record(fields, record).map_err(error)?);
    }
    Ok(())
}
