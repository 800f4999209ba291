//! A u32 filter handle as tc reads it (`get_u32_handle` in iproute2's `f_u32.c`): the one
//! parser of this concept, used by `htb-cli` for `handle`, `ht` and `link`, by the wire's
//! `htb_ipc::FilterHandle`, and by htbd for the handles of its config file.
//!
//! A handle is a 32-bit word: a hash table (12 bits), a bucket (8) and a node (12),
//! `TABLE:BUCKET:NODE` in hex, each part optional and each with or without `0x` (C's `strtoul`
//! in base 16), or, with no colon, the whole word written `0x…` (`handle 0x65`, as LibreQoS
//! v0.81 writes its subscriber filters). `800` alone is not a handle: tc refuses it.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

/// A u32 filter handle: `(table << 20) | (bucket << 12) | node`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct U32Handle(pub u32);

/// Why a text is not a u32 handle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum U32HandleError {
    /// No colon and no `0x`: tc reads neither as a handle.
    #[error(
        "{0:?} is not a u32 handle: write TABLE:BUCKET:NODE in hex (800::1) or 0x… (0x80000001)"
    )]
    Bare(String),
    /// A part that is not hexadecimal, or more than three parts.
    #[error("{0:?} is not a u32 handle: TABLE:BUCKET:NODE, each part hex")]
    Malformed(String),
    /// A part too large for its field.
    #[error("{text:?}: the {part} {value:#x} is too large (at most {max:#x})")]
    TooLarge {
        /// The handle as given.
        text: String,
        /// `table`, `bucket` or `node`.
        part: &'static str,
        /// Its value.
        value: u64,
        /// The field's largest value.
        max: u32,
    },
}

/// C's `strtoul(s, …, 16)` over a whole part: an optional `0x`, then hex digits.
fn hex(part: &str) -> Option<u64> {
    let digits = part
        .strip_prefix("0x")
        .or_else(|| part.strip_prefix("0X"))
        .unwrap_or(part);
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

impl U32Handle {
    /// The hash table (`TC_U32_USERHTID`).
    #[must_use]
    pub fn table(self) -> u32 {
        self.0 >> 20
    }

    /// The bucket (`TC_U32_HASH`).
    #[must_use]
    pub fn bucket(self) -> u32 {
        (self.0 >> 12) & 0xff
    }

    /// The node (`TC_U32_NODE`).
    #[must_use]
    pub fn node(self) -> u32 {
        self.0 & 0xfff
    }

    /// This handle's node in table `table`, bucket `bucket`, as the kernel's `u32_change`
    /// places a filter given `ht` and a handle (`htid | TC_U32_NODE(handle)`). `None` when the
    /// handle names another table or bucket (the kernel's "hash table address mismatch").
    #[must_use]
    pub fn in_bucket(self, table: u32, bucket: u32) -> Option<Self> {
        let place = (table << 20) | (bucket << 12);
        if self.0 & !0xfff != 0 && self.0 & !0xfff != place {
            return None;
        }
        Some(Self(place | self.node()))
    }
}

impl FromStr for U32Handle {
    type Err = U32HandleError;

    fn from_str(s: &str) -> Result<Self, U32HandleError> {
        let malformed = || U32HandleError::Malformed(s.to_owned());
        if !s.contains(':') {
            // get_u32_handle: `memcmp("0x", str, 2) == 0`, then the whole word.
            if !s.starts_with("0x") {
                return Err(U32HandleError::Bare(s.to_owned()));
            }
            return hex(s)
                .and_then(|v| u32::try_from(v).ok())
                .map(Self)
                .ok_or_else(malformed);
        }
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() > 3 {
            return Err(malformed());
        }
        let mut fields = [0u32; 3];
        for (i, (name, max)) in [("table", 0xfff), ("bucket", 0xff), ("node", 0xfff)]
            .into_iter()
            .enumerate()
        {
            let part = parts.get(i).copied().unwrap_or("");
            if part.is_empty() {
                continue;
            }
            let value = hex(part).ok_or_else(malformed)?;
            fields[i] = u32::try_from(value)
                .ok()
                .filter(|&v| v <= max)
                .ok_or_else(|| U32HandleError::TooLarge {
                    text: s.to_owned(),
                    part: name,
                    value,
                    max,
                })?;
        }
        Ok(Self(fields[0] << 20 | fields[1] << 12 | fields[2]))
    }
}

impl fmt::Display for U32Handle {
    /// As tc prints it (`sprint_u32_handle`): `800::800`, `3:2:65`, `1:`; `none` for 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        if self.table() != 0 {
            write!(f, "{:x}", self.table())?;
        }
        f.write_str(":")?;
        if self.bucket() != 0 {
            write!(f, "{:x}", self.bucket())?;
        }
        if self.node() != 0 {
            write!(f, ":{:x}", self.node())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    fn parse(s: &str) -> Result<u32, U32HandleError> {
        s.parse::<U32Handle>().map(|h| h.0)
    }

    #[test]
    fn the_forms_get_u32_handle_reads() {
        // TABLE:BUCKET:NODE, parts optional, with or without 0x.
        assert_eq!(parse("800::800"), Ok(0x8000_0800));
        assert_eq!(parse("800:"), Ok(0x8000_0000));
        assert_eq!(parse("1:"), Ok(0x0010_0000));
        assert_eq!(parse("3:2:65"), Ok(0x0030_2065));
        assert_eq!(parse("::1"), Ok(1));
        assert_eq!(parse(":2:"), Ok(0x2000));
        assert_eq!(parse("0x2:"), Ok(0x0020_0000));
        assert_eq!(parse("0x3:0x2:0x65"), Ok(0x0030_2065));
        // One word, only with 0x (LibreQoS v0.81's `handle 0x65`; the kernel's 0x80000800).
        assert_eq!(parse("0x65"), Ok(0x65));
        assert_eq!(parse("0x80000800"), Ok(0x8000_0800));
    }

    #[test]
    fn what_tc_refuses_is_refused_with_the_reason() {
        // `800` without a colon is not 800: (the bug of htbd's old parser).
        assert!(matches!(parse("800"), Err(U32HandleError::Bare(_))));
        assert!(matches!(parse("65"), Err(U32HandleError::Bare(_))));
        assert!(matches!(
            parse("1:2:3:4"),
            Err(U32HandleError::Malformed(_))
        ));
        assert!(matches!(parse("x:"), Err(U32HandleError::Malformed(_))));
        assert!(matches!(parse("0x"), Err(U32HandleError::Malformed(_))));
        assert!(matches!(
            parse("0x100000000"),
            Err(U32HandleError::Malformed(_))
        ));
        let err = parse("1000:").unwrap_err();
        assert!(
            matches!(err, U32HandleError::TooLarge { part: "table", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("at most 0xfff"), "{err}");
        assert!(matches!(
            parse("1:100:"),
            Err(U32HandleError::TooLarge { part: "bucket", .. })
        ));
        assert!(matches!(
            parse("1:2:1000"),
            Err(U32HandleError::TooLarge { part: "node", .. })
        ));
    }

    #[test]
    fn printed_as_tc_prints_it_and_read_back() {
        for (raw, text) in [
            (0x8000_0800, "800::800"),
            (0x8000_0000, "800:"),
            (0x0030_2065, "3:2:65"),
            (0x0000_0001, "::1"),
            (0, "none"),
        ] {
            assert_eq!(U32Handle(raw).to_string(), text);
            if raw != 0 {
                assert_eq!(parse(text), Ok(raw));
            }
        }
    }

    #[test]
    fn a_node_handle_lands_in_the_bucket_ht_names() {
        // `ht 3:2: handle 0x65`: the kernel's `htid | TC_U32_NODE(handle)`.
        assert_eq!(
            U32Handle(0x65).in_bucket(3, 2),
            Some(U32Handle(0x0030_2065))
        );
        assert_eq!(
            U32Handle(0x0030_2065).in_bucket(3, 2),
            Some(U32Handle(0x0030_2065))
        );
        // A handle of another table: the kernel's address mismatch.
        assert_eq!(U32Handle(0x0040_0065).in_bucket(3, 2), None);
    }
}
