//! Class identifiers as users write them: tc's `major:minor` handles.

use core::fmt;
use core::str::FromStr;

/// A class handle as the user writes it, `major:minor` in hexadecimal (`1:20` is minor 0x20).
///
/// tc limits the minor to 16 bits, so one kernel HTB holds at most 65 535 classes (LibreQoS
/// hits this wall, its issue #801). We parse tc's forms and additionally accept minors up to 32
/// bits (`1:1a2b3`), so a single tree can hold 100 000 subscribers. Minor 0 names the qdisc
/// itself (`1:`), never a class.
///
/// Not to be confused with the scheduler's internal arena slot: handles are what users see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId {
    major: u16,
    minor: u32,
}

/// Why a handle string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClassIdError {
    /// Not of the form `major:minor` with hexadecimal parts.
    Malformed,
    /// The major part is above `ffff`.
    MajorTooLarge,
    /// The minor part is above `ffffffff`.
    MinorTooLarge,
}

impl fmt::Display for ClassIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "expected a handle like 1:20 (hexadecimal major:minor)",
            Self::MajorTooLarge => "major handle above ffff",
            Self::MinorTooLarge => "minor handle above ffffffff",
        })
    }
}

impl core::error::Error for ClassIdError {}

impl ClassId {
    /// The handle `major:minor`.
    #[must_use]
    pub const fn new(major: u16, minor: u32) -> Self {
        Self { major, minor }
    }

    /// The major part (the qdisc's handle).
    #[must_use]
    pub const fn major(self) -> u16 {
        self.major
    }

    /// The minor part (the class within the qdisc).
    #[must_use]
    pub const fn minor(self) -> u32 {
        self.minor
    }

    /// Whether this is `major:0`, the qdisc itself (tc's "direct" target).
    #[must_use]
    pub const fn is_qdisc(self) -> bool {
        self.minor == 0
    }

    /// The kernel's 32-bit `TC_H_MAKE(major << 16, minor)`, as printed in its quantum warning
    /// (`10001` for `1:1`). `None` when the minor needs more than 16 bits.
    #[must_use]
    pub const fn kernel_handle(self) -> Option<u32> {
        if self.minor > 0xffff {
            None
        } else {
            Some(((self.major as u32) << 16) | self.minor)
        }
    }
}

/// One part of a class id: hex digits with an optional `0x` (tc reads each part with
/// `strtoul(…, 16)`, which takes the prefix: LibreQoS writes `parent 0x1:0x3`).
fn hex(s: &str) -> Result<u64, ClassIdError> {
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ClassIdError::Malformed);
    }
    u64::from_str_radix(s, 16).map_err(|_| ClassIdError::Malformed)
}

impl FromStr for ClassId {
    type Err = ClassIdError;

    /// Accepts tc's `get_tc_classid` forms: `1:20`, `1:` (minor 0), `:20` (major 0), a bare
    /// 32-bit kernel handle in hex (`10020` = `1:20`), each part with or without `0x`.
    fn from_str(s: &str) -> Result<Self, ClassIdError> {
        if let Some((major, minor)) = s.split_once(':') {
            let major = if major.is_empty() { 0 } else { hex(major)? };
            let minor = if minor.is_empty() { 0 } else { hex(minor)? };
            let major = u16::try_from(major).map_err(|_| ClassIdError::MajorTooLarge)?;
            let minor = u32::try_from(minor).map_err(|_| ClassIdError::MinorTooLarge)?;
            Ok(Self { major, minor })
        } else {
            let raw = u32::try_from(hex(s)?).map_err(|_| ClassIdError::Malformed)?;
            Ok(Self {
                major: (raw >> 16) as u16,
                minor: raw & 0xffff,
            })
        }
    }
}

impl fmt::Display for ClassId {
    /// `major:minor` in lowercase hex, as tc prints it (`1:20`; the qdisc is `1:`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.minor == 0 {
            write!(f, "{:x}:", self.major)
        } else {
            write!(f, "{:x}:{:x}", self.major, self.minor)
        }
    }
}

/// `0:0`, tc's `TC_H_UNSPEC`: no class given.
impl Default for ClassId {
    fn default() -> Self {
        Self::new(0, 0)
    }
}

/// On the wire a class id is tc's text, `"1:20"` (`"10:"` for a qdisc handle), checked when
/// it is read.
#[cfg(feature = "serde")]
impl serde::Serialize for ClassId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ClassId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ClassId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a class id such as \"1:20\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ClassId, E> {
                v.parse().map_err(|e| E::custom(format_args!("{v:?}: {e}")))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn parses_tc_forms() {
        assert_eq!("1:20".parse(), Ok(ClassId::new(1, 0x20)));
        assert_eq!("1:".parse(), Ok(ClassId::new(1, 0)));
        assert_eq!(":a".parse(), Ok(ClassId::new(0, 10)));
        assert_eq!("10020".parse(), Ok(ClassId::new(1, 0x20)));
        assert_eq!("ffff:ffff".parse(), Ok(ClassId::new(0xffff, 0xffff)));
        assert_eq!(
            "1:1a2b3".parse(),
            Ok(ClassId::new(1, 0x1a2b3)),
            "32-bit minors"
        );
        // strtoul(…, 16) takes 0x on each part: LibreQoS's `parent 0x1:0x3`, mq's `7FFF:0x1`.
        assert_eq!("0x1:0x3".parse(), Ok(ClassId::new(1, 3)));
        assert_eq!("7FFF:0x1".parse(), Ok(ClassId::new(0x7fff, 1)));
        assert_eq!("0x10020".parse(), Ok(ClassId::new(1, 0x20)));
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!("".parse::<ClassId>(), Err(ClassIdError::Malformed));
        assert_eq!("1:2:3".parse::<ClassId>(), Err(ClassIdError::Malformed));
        assert_eq!("x:1".parse::<ClassId>(), Err(ClassIdError::Malformed));
        assert_eq!(
            "10000:1".parse::<ClassId>(),
            Err(ClassIdError::MajorTooLarge)
        );
        assert_eq!(
            "1:100000000".parse::<ClassId>(),
            Err(ClassIdError::MinorTooLarge)
        );
        assert_eq!("1: 2".parse::<ClassId>(), Err(ClassIdError::Malformed));
        assert_eq!("0x:1".parse::<ClassId>(), Err(ClassIdError::Malformed));
        assert_eq!("1:0x0x2".parse::<ClassId>(), Err(ClassIdError::Malformed));
    }

    #[test]
    fn displays_like_tc() {
        assert_eq!(ClassId::new(1, 0x20).to_string(), "1:20");
        assert_eq!(ClassId::new(1, 0).to_string(), "1:");
        assert_eq!(ClassId::new(1, 1).kernel_handle(), Some(0x10001));
        assert_eq!(ClassId::new(1, 0x10000).kernel_handle(), None);
    }
}
