//! A filter's handle, typed on the wire: the kernel's 32-bit word (`tcm_handle`), whatever the
//! kind. tc writes it differently per kind — u32 as `TABLE:BUCKET:NODE` (`get_u32_handle`),
//! flower as a number (`get_u32`, decimal or `0x` hex) — so htb-cli reads it once, knowing the
//! kind, and htbd never parses it again.

use std::fmt;

use htb_classify::{U32Handle, U32HandleError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::FilterKind;

/// A filter's handle: the word the kernel keys filters by within a priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FilterHandle(pub u32);

/// Why a text is not a handle of the kind it was given for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterHandleError {
    /// Not a u32 handle as tc writes one.
    #[error("invalid u32 handle: {0}")]
    U32(#[source] U32HandleError),
    /// Not a flower handle (a nonzero number, decimal or `0x` hex).
    #[error("invalid flower handle {0:?}")]
    Flower(String),
    /// Neither form (a handle given without its filter's kind).
    #[error("invalid filter handle {0:?}: 800::800 (u32), 0x1 or 1 (flower)")]
    Unknown(String),
}

impl FilterHandle {
    /// Reads `text` as tc reads a handle of `kind`: `800::800` or `0x80000800` for u32,
    /// `1` or `0x1` for flower. With no kind (`filter del … handle H` without one), either
    /// form: the two grammars never give one text two different words (u32's single-word form
    /// needs `0x`, which flower reads to the same number).
    ///
    /// # Errors
    /// A text that kind's grammar refuses.
    pub fn parse(kind: Option<FilterKind>, text: &str) -> Result<Self, FilterHandleError> {
        let flower = || {
            match text.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16),
                None => text.parse(),
            }
            .ok()
            .filter(|&h| h != 0)
            .map(Self)
        };
        match kind {
            Some(FilterKind::U32) => text
                .parse::<U32Handle>()
                .map(|h| Self(h.0))
                .map_err(FilterHandleError::U32),
            Some(FilterKind::Flower) => {
                flower().ok_or_else(|| FilterHandleError::Flower(text.to_owned()))
            }
            None => text
                .parse::<U32Handle>()
                .ok()
                .map(|h| Self(h.0))
                .or_else(flower)
                .ok_or_else(|| FilterHandleError::Unknown(text.to_owned())),
        }
    }

    /// The handle as tc prints it for `kind` (`sprint_u32_handle`'s `800::800`, flower's
    /// `0x1`).
    #[must_use]
    pub fn display(self, kind: FilterKind) -> impl fmt::Display {
        struct Shown(FilterHandle, FilterKind);
        impl fmt::Display for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.1 {
                    FilterKind::U32 => U32Handle(self.0.0).fmt(f),
                    FilterKind::Flower => write!(f, "{:#x}", self.0.0),
                }
            }
        }
        Shown(self, kind)
    }

    /// The u32 handle it is, for the parts of a u32 filter's handle.
    #[must_use]
    pub fn u32(self) -> U32Handle {
        U32Handle(self.0)
    }
}

/// As text (`"0x80000800"`), which every kind's grammar reads to the same word; read back from
/// any form a journal of an older version holds (`"800::800"`, `"0x1"`, `"1"`).
impl Serialize for FilterHandle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for FilterHandle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(None, &text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_its_own_forms_and_refuses_the_other() {
        let u32 = Some(FilterKind::U32);
        let flower = Some(FilterKind::Flower);
        assert_eq!(
            FilterHandle::parse(u32, "800::800"),
            Ok(FilterHandle(0x8000_0800))
        );
        assert_eq!(
            FilterHandle::parse(u32, "0x80000800"),
            Ok(FilterHandle(0x8000_0800))
        );
        assert_eq!(
            FilterHandle::parse(u32, "801:"),
            Ok(FilterHandle(0x8010_0000))
        );
        assert_eq!(
            FilterHandle::parse(u32, "0x2:"),
            Ok(FilterHandle(0x20_0000))
        );
        assert!(matches!(
            FilterHandle::parse(u32, "1000::1"),
            Err(FilterHandleError::U32(U32HandleError::TooLarge { .. }))
        ));
        assert!(matches!(
            FilterHandle::parse(u32, "800"),
            Err(FilterHandleError::U32(U32HandleError::Bare(_)))
        ));
        assert_eq!(FilterHandle::parse(flower, "7"), Ok(FilterHandle(7)));
        assert_eq!(FilterHandle::parse(flower, "0x1f"), Ok(FilterHandle(0x1f)));
        for bad in ["0", "800::800", "x"] {
            assert_eq!(
                FilterHandle::parse(flower, bad),
                Err(FilterHandleError::Flower(bad.to_owned()))
            );
        }
        // Without a kind: both grammars, one word per text.
        assert_eq!(
            FilterHandle::parse(None, "800::800"),
            Ok(FilterHandle(0x8000_0800))
        );
        assert_eq!(FilterHandle::parse(None, "12"), Ok(FilterHandle(12)));
        assert_eq!(FilterHandle::parse(None, "0x12"), Ok(FilterHandle(0x12)));
        assert!(matches!(
            FilterHandle::parse(None, "1:2:3:4"),
            Err(FilterHandleError::Unknown(_))
        ));
    }

    #[test]
    fn printed_per_kind_and_carried_as_one_word() {
        let h = FilterHandle(0x8000_0800);
        assert_eq!(h.display(FilterKind::U32).to_string(), "800::800");
        assert_eq!(
            FilterHandle(0x8000_0000)
                .display(FilterKind::U32)
                .to_string(),
            "800:"
        );
        assert_eq!(
            FilterHandle(1).display(FilterKind::Flower).to_string(),
            "0x1"
        );
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"0x80000800\"");
        // What journals of older versions hold: the text as the operator wrote it.
        for (old, word) in [("\"800::800\"", 0x8000_0800), ("\"0x1\"", 1), ("\"5\"", 5)] {
            let back: FilterHandle = serde_json::from_str(old).unwrap();
            assert_eq!(back, FilterHandle(word), "{old}");
            let again: FilterHandle =
                serde_json::from_str(&serde_json::to_string(&back).unwrap()).unwrap();
            assert_eq!(again, back);
        }
    }
}
