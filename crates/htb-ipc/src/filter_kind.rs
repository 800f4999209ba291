//! A filter's kind, as tc names it (`u32`, `flower`), typed on the wire.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a filter is presented (`u32` or `flower`); both classify the same way in htbd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FilterKind {
    /// `u32`, handles like `800::800`.
    #[default]
    U32,
    /// `flower`, handles like `0x1`.
    Flower,
}

/// A filter kind htbd does not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("filter kind {0:?} is not supported: use u32 or flower")]
pub struct UnknownFilterKind(pub String);

impl FilterKind {
    /// Parses `u32` or `flower`.
    ///
    /// # Errors
    /// Anything else.
    pub fn parse(s: &str) -> Result<Self, UnknownFilterKind> {
        match s {
            "u32" => Ok(Self::U32),
            "flower" => Ok(Self::Flower),
            _ => Err(UnknownFilterKind(s.to_owned())),
        }
    }

    /// The name tc prints.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::U32 => "u32",
            Self::Flower => "flower",
        }
    }
}

impl fmt::Display for FilterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// As its name, the form older versions wrote.
impl Serialize for FilterKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for FilterKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}
