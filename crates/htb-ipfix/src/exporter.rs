//! The exporting process's state for one Observation Domain (RFC 7011 §3.1, §8, §8.4,
//! §10.3.3): sequence numbers, when templates were last sent, and how records are packed into
//! messages no larger than the path takes.

use std::time::Duration;

use crate::record::FlowRecord;
use crate::template::{
    TEMPLATE_V4, TEMPLATE_V6, fields, record_len, template_len, write_record, write_template,
};
use crate::{HEADER_LEN, TEMPLATE_SET, VERSION};

/// How an [`Exporter`] sends: the header's domain, how often templates are repeated, and
/// how large a message may grow. [`Default`] is domain 1, 60 s, 1400 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExporterConfig {
    /// The Observation Domain ID in every header (§3.1): the collector keys templates and
    /// sequence numbers by it, so one exporter per domain.
    pub observation_domain: u32,
    /// Templates are sent again this long after they were last sent: over UDP a collector
    /// that restarted knows none, and discards data until it hears them (§8.4; nfcapd and
    /// pmacct learn them from any message).
    pub template_refresh: Duration,
    /// The largest message, in bytes (1400 fits a 1500-byte path with IPv6 and UDP headers,
    /// so no message is fragmented: §10.3.3 asks that it fit the path MTU). At least
    /// [`Exporter::smallest_message`] and at most 65 535, or [`Exporter::new`] refuses it.
    pub max_message: usize,
}

impl Default for ExporterConfig {
    fn default() -> Self {
        Self {
            observation_domain: 1,
            template_refresh: Duration::from_secs(60),
            max_message: 1400,
        }
    }
}

/// Why an exporter cannot be made: its configuration could not produce valid messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExporterError {
    /// `max_message` (the first number) cannot hold the templates and one IPv6 record (the
    /// second): refused rather than raised, so that no message outgrows the path it was
    /// sized for.
    #[error("max_message {0} is below {1} bytes: the templates and one IPv6 record must fit")]
    MessageTooSmall(usize, usize),
    /// `max_message` is above 65 535, the most the header's 16-bit Length can say (§3.1).
    #[error("max_message {0} is above 65535 bytes, the most a message header can say")]
    MessageTooLarge(usize),
}

/// Sans-IO IPFIX exporter for one Observation Domain: RFC 7011 §3.1 message header, §3.4
/// sets, §8 templates, §8.4 template refresh over UDP. It owns the domain's Sequence
/// Number and when templates were last sent; the caller owns the socket and the clock, so
/// every call takes the time (Unix ms) and returns bytes to send.
#[derive(Clone, Debug)]
pub struct Exporter {
    config: ExporterConfig,
    /// Data records sent so far (the next message's Sequence Number, mod 2^32).
    sent: u64,
    /// When templates went last (Unix ms).
    templates_at: Option<u64>,
}

/// The template set: both templates.
fn template_set() -> Vec<u8> {
    let (v4, v6) = (fields(false), fields(true));
    let len = 4 + template_len(v4) + template_len(v6);
    let mut set = Vec::with_capacity(len);
    set.extend_from_slice(&TEMPLATE_SET.to_be_bytes());
    set.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
    write_template(&mut set, TEMPLATE_V4, v4);
    write_template(&mut set, TEMPLATE_V6, v6);
    set
}

/// A message being filled.
struct Message {
    bytes: Vec<u8>,
    /// Where the open data set starts, and its template.
    open: Option<(usize, u16)>,
    records: u64,
}

impl Message {
    fn new(now_ms: u64, sequence: u64, domain: u32, capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity);
        bytes.extend_from_slice(&VERSION.to_be_bytes());
        bytes.extend_from_slice(&0u16.to_be_bytes()); // length, written at the end
        bytes.extend_from_slice(
            &u32::try_from(now_ms / 1000)
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        bytes.extend_from_slice(&(sequence as u32).to_be_bytes());
        bytes.extend_from_slice(&domain.to_be_bytes());
        Self {
            bytes,
            open: None,
            records: 0,
        }
    }

    /// Writes the open set's length.
    fn close_set(&mut self) {
        if let Some((start, _)) = self.open.take() {
            let len = u16::try_from(self.bytes.len() - start).unwrap_or(u16::MAX);
            self.bytes[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.close_set();
        let len = u16::try_from(self.bytes.len()).unwrap_or(u16::MAX);
        self.bytes[2..4].copy_from_slice(&len.to_be_bytes());
        self.bytes
    }
}

impl Exporter {
    /// An exporter that has sent nothing: its first message carries the templates.
    ///
    /// Fallible rather than clamping, so a misconfigured size is reported where it is set.
    ///
    /// # Errors
    /// [`ExporterError::MessageTooSmall`] when `max_message` cannot hold a message with the
    /// templates and one IPv6 record (every record must fit some message);
    /// [`ExporterError::MessageTooLarge`] when it is above the header's 65 535.
    pub fn new(config: ExporterConfig) -> Result<Self, ExporterError> {
        let least = Self::smallest_message();
        if config.max_message < least {
            return Err(ExporterError::MessageTooSmall(config.max_message, least));
        }
        if config.max_message > usize::from(u16::MAX) {
            return Err(ExporterError::MessageTooLarge(config.max_message));
        }
        Ok(Self {
            config,
            sent: 0,
            templates_at: None,
        })
    }

    /// The least `max_message` takes: header, both templates, and one IPv6 record in its
    /// data set, since a message whose templates are due must still carry a record.
    #[must_use]
    pub fn smallest_message() -> usize {
        HEADER_LEN + template_set().len() + 4 + record_len(fields(true))
    }

    /// Data records sent so far in this domain: the next message's Sequence Number is this
    /// mod 2^32 (§3.1), and the daemon counts exported records by it.
    #[must_use]
    pub fn records_sent(&self) -> u64 {
        self.sent
    }

    /// Sets the records sent, so a test can reach the Sequence Number's wrap.
    #[cfg(test)]
    pub(crate) fn set_records_sent(&mut self, sent: u64) {
        self.sent = sent;
    }

    fn due(&self, now_ms: u64) -> bool {
        let refresh = u64::try_from(self.config.template_refresh.as_millis()).unwrap_or(u64::MAX);
        self.templates_at
            .is_none_or(|at| now_ms.saturating_sub(at) >= refresh || now_ms < at)
    }

    /// A message of the templates alone, when they are due (the first call, every
    /// `template_refresh` since they were last sent, and after the clock stepped back): sent at
    /// start and on refresh when no records are waiting, so a collector that restarted learns
    /// them (§8.4). `None` when they are not due. Its Sequence Number is
    /// [`records_sent`](Self::records_sent), as templates are not data records (§3.1).
    pub fn templates_due(&mut self, now_ms: u64) -> Option<Vec<u8>> {
        if !self.due(now_ms) {
            return None;
        }
        self.templates_at = Some(now_ms);
        let mut m = Message::new(now_ms, self.sent, self.config.observation_domain, 512);
        m.bytes.extend_from_slice(&template_set());
        Some(m.finish())
    }

    /// The messages that carry `records` at `now_ms`: the templates first when due (as in
    /// [`templates_due`](Self::templates_due)), then the records in order, IPv4 ones in data
    /// sets of template 256 and IPv6 ones of 257 (§3.4.3), each message at most `max_message`
    /// bytes. Each message's Sequence Number counts the data records sent before it in this
    /// domain, mod 2^32 (§3.1); its Export Time is `now_ms` in seconds (held at `u32::MAX`
    /// past 2106). No messages for no records unless the templates are due.
    ///
    /// A record's addresses should be of one family: one IPv4 address beside an IPv6 one goes
    /// in template 257 as an IPv4-mapped IPv6 address.
    pub fn export(&mut self, now_ms: u64, records: &[FlowRecord]) -> Vec<Vec<u8>> {
        let (max, domain) = (self.config.max_message, self.config.observation_domain);
        let mut messages = Vec::new();
        let mut m = Message::new(now_ms, self.sent, domain, max);
        if self.due(now_ms) {
            self.templates_at = Some(now_ms);
            m.bytes.extend_from_slice(&template_set());
        }
        for r in records {
            let template = if r.is_ipv6() {
                TEMPLATE_V6
            } else {
                TEMPLATE_V4
            };
            let len = record_len(fields(r.is_ipv6()));
            let same_set = m.open.is_some_and(|(_, t)| t == template);
            let needs = len + if same_set { 0 } else { 4 };
            if m.bytes.len() + needs > max {
                self.sent += m.records;
                messages.push(m.finish());
                m = Message::new(now_ms, self.sent, domain, max);
            }
            if m.open.is_none_or(|(_, t)| t != template) {
                m.close_set();
                m.open = Some((m.bytes.len(), template));
                m.bytes.extend_from_slice(&template.to_be_bytes());
                m.bytes.extend_from_slice(&0u16.to_be_bytes());
            }
            write_record(&mut m.bytes, r);
            m.records += 1;
        }
        if m.records > 0 || m.bytes.len() > HEADER_LEN {
            self.sent += m.records;
            messages.push(m.finish());
        }
        messages
    }
}
