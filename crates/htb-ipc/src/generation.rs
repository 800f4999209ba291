//! A box's config generation: a hash of the state it runs (every port's trees, leaves, filters
//! and labels, as the saved state writes them), so that boxes holding the same subscribers can
//! be compared (`htb-cli --socket A --socket B status`, `/health`'s body, a metric). Two boxes
//! that reached the same state by different routes (a restart, another order of changes) have
//! the same generation; a change anywhere gives another.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The hash (64-bit FNV-1a of the canonical state text), written as 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation of a state's canonical text.
    #[must_use]
    pub fn of_text(text: &str) -> Self {
        let mut hasher = GenerationHasher::default();
        hasher.add(text);
        hasher.finish()
    }
}

/// The generation of a text written to it piece by piece (`write!`), never held whole: a
/// million subscribers' state is hundreds of megabytes of text, which htbd hashed after every
/// change from a string built for the purpose.
#[derive(Clone, Copy, Debug)]
pub struct GenerationHasher(u64);

impl Default for GenerationHasher {
    fn default() -> Self {
        // FNV-1a 64's offset basis.
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl GenerationHasher {
    fn add(&mut self, text: &str) {
        for b in text.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The generation of everything written.
    #[must_use]
    pub fn finish(self) -> Generation {
        Generation(self.0)
    }
}

impl fmt::Write for GenerationHasher {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.add(s);
        Ok(())
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A generation that is not 16 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a generation is 16 hex digits, not {0:?}")]
pub struct BadGeneration(pub String);

impl FromStr for Generation {
    type Err = BadGeneration;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadGeneration(s.to_owned()));
        }
        u64::from_str_radix(s, 16)
            .map(Self)
            .map_err(|_| BadGeneration(s.to_owned()))
    }
}

impl Serialize for Generation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Generation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_hashed_in_pieces_has_the_generation_of_the_whole() {
        use std::fmt::Write as _;
        let text = "[[interface]]\nname = \"r2\"\nrate = 1000000\n";
        for cut in 0..text.len() {
            let mut h = GenerationHasher::default();
            write!(h, "{}", &text[..cut]).unwrap();
            h.write_str(&text[cut..]).unwrap();
            assert_eq!(h.finish(), Generation::of_text(text), "cut at {cut}");
        }
        assert_ne!(Generation::of_text(text), Generation::of_text(&text[1..]));
    }

    #[test]
    fn a_generation_is_16_hex_digits_both_ways() {
        let g = Generation::of_text("a");
        // FNV-1a 64 of "a".
        assert_eq!(g.to_string(), "af63dc4c8601ec8c");
        assert_eq!("af63dc4c8601ec8c".parse::<Generation>(), Ok(g));
        assert_eq!(serde_json::to_string(&g).unwrap(), "\"af63dc4c8601ec8c\"");
        assert_eq!(
            serde_json::from_str::<Generation>("\"af63dc4c8601ec8c\"").unwrap(),
            g
        );
        assert_eq!(Generation(1).to_string(), "0000000000000001");
        for bad in [
            "",
            "af63",
            "af63dc4c8601ec8g",
            "+f63dc4c8601ec8c",
            "af63dc4c8601ec8c0",
        ] {
            assert!(bad.parse::<Generation>().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<Generation>("\"xyz\"").is_err());
        assert_ne!(Generation::of_text("a"), Generation::of_text("b"));
    }
}
