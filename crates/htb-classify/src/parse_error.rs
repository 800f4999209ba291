//! Why a filter key's text (a prefix, a port or range, a u32 key) does not parse: one error for
//! every key's parser, the matcher's and the raw keys'.

use alloc::string::String;
use core::fmt;

/// A prefix, port or range that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Not an IPv4 or IPv6 address.
    Address(String),
    /// Not a number up to the address's width.
    PrefixLength(String),
    /// Not a port number.
    Port(String),
    /// A range whose first port is above its last.
    EmptyRange(String),
    /// Not a u32 key as `filter show` prints one (`VALUE/MASK at [nexthdr+]OFFSET`).
    RawKey(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address(s) => write!(f, "invalid address {s:?}"),
            Self::PrefixLength(s) => write!(f, "invalid prefix length {s:?}"),
            Self::Port(s) => write!(f, "invalid port {s:?}"),
            Self::EmptyRange(s) => write!(f, "port range {s:?} is empty"),
            Self::RawKey(s) => write!(
                f,
                "invalid u32 key {s:?}: VALUE/MASK at [nexthdr+]OFFSET, in hex"
            ),
        }
    }
}

impl core::error::Error for ParseError {}
