//! Values in tc's units, deserialized from TOML strings (`"100mbit"`) or bare integers (in
//! tc's bare unit: bit/s for rates, bytes for sizes, µs for times).

use std::fmt;

use htb_core::units::{parse_rate, parse_size, parse_time};
use htb_core::{ClassId, Duration, LinkLayer, Rate};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::ValueError;

/// Accepts a string or a non-negative integer and hands it to `parse` as text.
struct UnitVisitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, ValueError>,
}

impl<T> Visitor<'_> for UnitVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.parse)(&v.to_string()).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::custom(format!("{v} is negative")));
        }
        self.visit_u64(v.unsigned_abs())
    }
}

macro_rules! unit_value {
    ($(#[$doc:meta])* $name:ident($inner:ty), $expecting:literal, $parse:expr, $display:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(UnitVisitor { expecting: $expecting, parse: |s| $parse(s).map($name) })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&$display(self.0))
            }
        }
    };
}

fn rate(s: &str) -> Result<Rate, ValueError> {
    parse_rate(s).map_err(|source| ValueError::Rate {
        text: s.to_owned(),
        source,
    })
}

fn size(s: &str) -> Result<u64, ValueError> {
    parse_size(s).map_err(|source| ValueError::Size {
        text: s.to_owned(),
        source,
    })
}

fn time(s: &str) -> Result<Duration, ValueError> {
    parse_time(s).map_err(|source| ValueError::Time {
        text: s.to_owned(),
        source,
    })
}

fn class_id(s: &str) -> Result<ClassId, ValueError> {
    s.parse::<ClassId>().map_err(|source| ValueError::ClassId {
        text: s.to_owned(),
        source,
    })
}

fn size_text(bytes: u64) -> String {
    bytes.to_string()
}

unit_value!(
    /// A rate: `"100mbit"`, or an integer in bit/s.
    RateValue(Rate), "a rate such as \"100mbit\"", rate, |r: Rate| r.to_string()
);
unit_value!(
    /// A size: `"15k"`, or an integer in bytes.
    SizeValue(u64), "a size such as \"1600\" or \"15k\"", size, size_text
);
unit_value!(
    /// A time: `"250ms"`, or an integer in µs (tc's bare unit).
    TimeValue(Duration), "a time such as \"10s\"", time, |d: Duration| d.to_string()
);
unit_value!(
    /// A class id: `"1:20"` (hexadecimal, as in tc).
    ClassIdValue(ClassId), "a class id such as \"1:20\"", class_id, |c: ClassId| c.to_string()
);

/// A hexadecimal minor, as tc's `default 20` (= 0x20). Must be a string, since a TOML integer
/// `20` would be ambiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HexMinor(pub u32);

impl<'de> Deserialize<'de> for HexMinor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HexMinor;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a hexadecimal minor as a string, such as \"20\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HexMinor, E> {
                let digits = v.strip_prefix("0x").unwrap_or(v);
                let digits = digits.strip_prefix("1:").unwrap_or(digits);
                u32::from_str_radix(digits, 16).map(HexMinor).map_err(|_| {
                    E::custom(format!(
                        "invalid minor {v:?}: expected hexadecimal digits like \"20\""
                    ))
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<HexMinor, E> {
                Err(E::custom(format!(
                    "write the default class as a string of hex digits (tc's `default {v}` is \"{v}\" = 0x{v})"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for HexMinor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:x}", self.0))
    }
}

/// tc's `linklayer`: `ethernet`, `atm` or `adsl` (= atm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkLayerValue(pub LinkLayer);

impl<'de> Deserialize<'de> for LinkLayerValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.to_ascii_lowercase().as_str() {
            "ethernet" => Ok(Self(LinkLayer::Ethernet)),
            "atm" | "adsl" => Ok(Self(LinkLayer::Atm)),
            _ => Err(de::Error::custom(format!(
                "invalid linklayer {s:?}: expected ethernet, atm or adsl"
            ))),
        }
    }
}

impl Serialize for LinkLayerValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0 == LinkLayer::Atm {
            "atm"
        } else {
            "ethernet"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        rate: RateValue,
        size: SizeValue,
        time: TimeValue,
        id: ClassIdValue,
        minor: HexMinor,
    }

    #[test]
    fn parses_strings_and_integers() {
        let t: T = toml::from_str(
            "rate = \"10mbit\"\nsize = 1600\ntime = \"250ms\"\nid = \"1:20\"\nminor = \"20\"",
        )
        .unwrap();
        assert_eq!(t.rate.0, Rate::from_mbit(10));
        assert_eq!(t.size.0, 1600);
        assert_eq!(t.time.0, Duration::from_millis(250));
        assert_eq!(t.id.0, ClassId::new(1, 0x20));
        assert_eq!(t.minor.0, 0x20);
        let t: T = toml::from_str(
            "rate = 8000\nsize = \"15k\"\ntime = 100\nid = \"1:1\"\nminor = \"0x1f\"",
        )
        .unwrap();
        assert_eq!(t.rate.0, Rate::from_kbit(8));
        assert_eq!(t.size.0, 15 * 1024);
        assert_eq!(t.time.0, Duration::from_micros(100));
        assert_eq!(t.minor.0, 0x1f);
    }

    #[test]
    fn explains_bad_values() {
        let err = toml::from_str::<T>(
            "rate = \"10mbitx\"\nsize = 1\ntime = 1\nid = \"1:1\"\nminor = \"1\"",
        )
        .unwrap_err();
        assert!(
            err.message()
                .contains("invalid rate \"10mbitx\": unknown unit"),
            "{}",
            err.message()
        );
        let err = toml::from_str::<T>("rate = 1\nsize = 1\ntime = 1\nid = \"1:1\"\nminor = 20")
            .unwrap_err();
        assert!(err.message().contains("hex digits"), "{}", err.message());
        let err = toml::from_str::<T>("rate = -5\nsize = 1\ntime = 1\nid = \"1:1\"\nminor = \"1\"")
            .unwrap_err();
        assert!(err.message().contains("negative"), "{}", err.message());
    }
}
