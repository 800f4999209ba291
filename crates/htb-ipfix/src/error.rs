//! Why a message read by the [`Collector`](crate::Collector) was refused: the decoder meets
//! whatever arrives on a UDP port (and the fuzzer's bytes), so every way a message can break
//! RFC 7011's layout is a value here, never a panic.

/// Why a message was refused (nothing of it is kept: templates it defined are not learned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the 16-byte message header (RFC 7011 §3.1).
    #[error("{0} bytes: shorter than the 16-byte message header")]
    Short(usize),
    /// The header's Version Number is not 10: not IPFIX (NetFlow v9 is 9, §3.1).
    #[error("version {0}: IPFIX is version 10")]
    Version(u16),
    /// The header's Length is not the message's: a datagram cut short or padded (§3.1).
    #[error("the header says {said} bytes, the message has {has}")]
    Length {
        /// The header's Length field.
        said: usize,
        /// The bytes there are.
        has: usize,
    },
    /// A set's Length is below its own 4-byte header, or runs past the message (§3.3.2);
    /// fewer than 4 bytes left after the last set are a set header cut short.
    #[error("the set at byte {at} has length {len}")]
    SetLength {
        /// Where it starts in the message.
        at: usize,
        /// Its Length field (0 when fewer than 4 bytes were left for the set header).
        len: usize,
    },
    /// A Set ID that RFC 7011 reserves (0, 1, 4 to 255: §3.3.2).
    #[error("set id {0} is reserved")]
    ReservedSet(u16),
    /// A Template Record that runs past its set, or names a Template ID below 256 (§3.4.1)
    /// other than the all-templates withdrawal (ID 2, no fields: §8.1) or zero padding.
    #[error("a bad template record in the set at byte {0}")]
    Template(usize),
    /// A record of a known template that is not a flow record.
    #[error("a record of template {template} is not a flow record: {why}")]
    Record {
        /// The template.
        template: u16,
        /// What is wrong with it.
        #[source]
        why: RecordError,
    },
}

/// Why a Data Record of a known template is not a [`FlowRecord`](crate::FlowRecord).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Its template has no source or destination address element: a flow needs both.
    #[error("no source or destination address")]
    NoAddresses,
    /// A field's length does not suit its element (an address of 5 bytes, a counter of 9;
    /// §6.2 allows only shorter unsigned integers).
    #[error("element {0} has a length it cannot have")]
    FieldLength(u16),
    /// flowEndReason (IE 136) holds a value IANA has not assigned.
    #[error("flowEndReason {0} is not assigned")]
    EndReason(u8),
    /// The set ends inside a record: more bytes follow its last whole record than padding to
    /// an 8-byte boundary could take (7; §3.3.1).
    #[error("the set ends inside a record")]
    Truncated,
}
