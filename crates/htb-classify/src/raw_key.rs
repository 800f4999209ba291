//! u32's general keys (`struct tc_u32_key`, read by `u32_classify` in the kernel's
//! `cls_u32.c`): a 32-bit word of the packet at a byte offset, masked and compared. The
//! compiled classifier holds the keys that are header fields (addresses, protocol, DSCP,
//! ports); these are the rest, such as wondershaper's and the LARTC HOWTO's "small TCP ACK"
//! filter (`match u8 0x05 0x0f at 0` for a 20-byte IPv4 header, `match u16 0x0000 0xffc0 at 2`
//! for a total length under 64, `match u8 0x10 0xff at 33` for the ACK flag alone). A filter
//! with any is walked one by one, as port ranges are.

use alloc::borrow::ToOwned;
use core::fmt;
use core::str::FromStr;

use crate::parse_error::ParseError;

/// The most general keys one filter holds (a filter keeps them inline, so that a match stays
/// `Copy` and small for the 100 000-filter lists the compiled classifier holds).
pub const MAX_RAW_KEYS: usize = 4;

/// One key: the big-endian word at byte `at` of the network header (or, `nexthdr`, of the
/// transport header htbd found), `word & mask == value`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawKey {
    /// Byte offset of the word (16 bits: 12 bytes a key, so that four fit in a filter
    /// without doubling a subscriber list's memory).
    pub at: u16,
    /// From the transport header (tc's `at nexthdr+N`) rather than the network header.
    pub nexthdr: bool,
    /// The bits compared.
    pub mask: u32,
    /// Their value (within `mask`).
    pub value: u32,
}

/// The bytes keys read: from the network header on, and where the transport header starts in
/// them (`None`: no transport header, as in a later fragment).
#[derive(Clone, Copy, Debug, Default)]
pub struct Headers<'a> {
    /// The packet from its IPv4 or IPv6 header on.
    pub network: &'a [u8],
    /// The transport header's offset in `network`.
    pub transport: Option<usize>,
}

impl RawKey {
    /// Whether the packet's word matches (a word beyond the packet never does, as the
    /// kernel's `skb_header_pointer` fails there).
    #[must_use]
    pub fn matches(&self, h: &Headers<'_>) -> bool {
        let base = if self.nexthdr {
            match h.transport {
                Some(t) => t,
                None => return false,
            }
        } else {
            0
        };
        let at = base + usize::from(self.at);
        let Some(bytes) = h.network.get(at..at + 4) else {
            return false;
        };
        let word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        (word ^ self.value) & self.mask == 0
    }
}

impl fmt::Display for RawKey {
    /// As tc's `filter show` prints a key: `05000000/0f000000 at 0`, `… at nexthdr+0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}/{:08x} at {}{}",
            self.value,
            self.mask,
            if self.nexthdr { "nexthdr+" } else { "" },
            self.at
        )
    }
}

impl FromStr for RawKey {
    type Err = ParseError;

    /// Reads what [`Display`](fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let bad = || ParseError::RawKey(s.to_owned());
        let (word, at) = s.split_once(" at ").ok_or_else(bad)?;
        let (value, mask) = word.trim().split_once('/').ok_or_else(bad)?;
        let hex = |t: &str| u32::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| bad());
        let at = at.trim();
        let (nexthdr, at) = match at.strip_prefix("nexthdr+") {
            Some(rest) => (true, rest),
            None => (false, at),
        };
        let (value, mask) = (hex(value)?, hex(mask)?);
        Ok(Self {
            at: at.parse().map_err(|_| bad())?,
            nexthdr,
            mask,
            value: value & mask,
        })
    }
}

/// Up to [`MAX_RAW_KEYS`] keys, every one of which must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawKeys {
    keys: [RawKey; MAX_RAW_KEYS],
    len: u8,
}

impl RawKeys {
    /// These keys; `None` when there are more than [`MAX_RAW_KEYS`].
    #[must_use]
    pub fn new(keys: &[RawKey]) -> Option<Self> {
        let mut raw = Self::default();
        for k in keys {
            raw = raw.with(*k)?;
        }
        Some(raw)
    }

    /// These keys and `key` (a key with mask 0 matches every packet and is left out);
    /// `None` when that makes too many.
    #[must_use]
    pub fn with(mut self, key: RawKey) -> Option<Self> {
        if key.mask == 0 {
            return Some(self);
        }
        let slot = self.keys.get_mut(usize::from(self.len))?;
        *slot = key;
        self.len += 1;
        Some(self)
    }

    /// The keys.
    #[must_use]
    pub fn as_slice(&self) -> &[RawKey] {
        &self.keys[..usize::from(self.len)]
    }

    /// No key: matches every packet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every key matches.
    #[must_use]
    pub fn matches(&self, h: &Headers<'_>) -> bool {
        self.as_slice().iter().all(|k| k.matches(h))
    }

    /// Both lists' keys (a u32 `link` flattened: the linking filter's keys AND the linked
    /// one's); `None` when they are too many.
    #[must_use]
    pub fn and(&self, other: &Self) -> Option<Self> {
        other
            .as_slice()
            .iter()
            .try_fold(*self, |raw, &key| raw.with(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    /// An IPv4 + TCP packet from its IPv4 header: `total` bytes long, TCP flags `flags`.
    fn tcp(total: u16, flags: u8) -> Vec<u8> {
        let mut p = alloc::vec![0u8; usize::from(total).max(40)];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = 6;
        p[33] = flags;
        p
    }

    /// wondershaper's ACK filter as tc's `pack_key` builds its keys.
    fn small_ack() -> RawKeys {
        RawKeys::new(&[
            RawKey {
                at: 0,
                nexthdr: false,
                mask: 0x0f00_0000,
                value: 0x0500_0000,
            },
            RawKey {
                at: 0,
                nexthdr: false,
                mask: 0x0000_ffc0,
                value: 0,
            },
            RawKey {
                at: 32,
                nexthdr: false,
                mask: 0x00ff_0000,
                value: 0x0010_0000,
            },
        ])
        .unwrap()
    }

    #[test]
    fn the_small_ack_filter_matches_pure_acks_only() {
        let keys = small_ack();
        let h = |p: &[u8]| {
            keys.matches(&Headers {
                network: p,
                transport: Some(20),
            })
        };
        assert!(h(&tcp(40, 0x10)), "a pure ACK");
        assert!(h(&tcp(52, 0x10)), "an ACK with timestamps (52 bytes)");
        assert!(!h(&tcp(1500, 0x10)), "an ACK carrying data");
        assert!(!h(&tcp(40, 0x18)), "PSH+ACK");
        let mut options = tcp(44, 0x10);
        options[0] = 0x46;
        assert!(!h(&options), "an IPv4 header with options");
        assert!(
            !h(&[0x45, 0, 0, 40]),
            "a word beyond the packet never matches"
        );
    }

    #[test]
    fn nexthdr_keys_read_the_transport_header() {
        let key = RawKey {
            at: 0,
            nexthdr: true,
            mask: 0x0000_ffff,
            value: 80,
        };
        let mut p = tcp(40, 0x10);
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        assert!(key.matches(&Headers {
            network: &p,
            transport: Some(20)
        }));
        assert!(!key.matches(&Headers {
            network: &p,
            transport: None
        }));
    }

    #[test]
    fn keys_print_as_tc_and_read_back_and_at_most_four_fit() {
        let k = small_ack().as_slice()[2];
        assert_eq!(k.to_string(), "00100000/00ff0000 at 32");
        assert_eq!("00100000/00ff0000 at 32".parse(), Ok(k));
        let n: RawKey = "00000050/0000ffff at nexthdr+0".parse().unwrap();
        assert!(n.nexthdr && n.value == 0x50);
        assert!("x at 1".parse::<RawKey>().is_err());
        let full = small_ack().with(k).unwrap();
        assert_eq!(full.with(k), None, "a fifth key does not fit");
        assert_eq!(small_ack().and(&small_ack()), None);
        let zero = RawKey::default();
        assert_eq!(RawKeys::default().with(zero), Some(RawKeys::default()));
    }
}
