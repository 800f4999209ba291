//! What every tc object's parser shares: tc's usage errors, its keyword matching, the argument
//! cursor (`NEXT_ARG()`), and its number, size, time and handle parsers.

use std::fmt;

use htb_core::units::{parse_size, parse_time};
use htb_core::{ClassId, Duration, LinkLayer};
use htb_ipc::InterfaceName;

/// A usage error: tc's wording, exit status 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A parse result.
pub type Result<T> = std::result::Result<T, UsageError>;

/// Fails with `message`.
pub fn usage<T>(message: impl Into<String>) -> Result<T> {
    Err(UsageError(message.into()))
}

/// tc's `Illegal "WHAT"`.
pub fn illegal<T>(what: &str) -> Result<T> {
    usage(format!("Illegal \"{what}\""))
}

/// tc's `matches()`: `word` is a non-empty prefix of `keyword`.
#[must_use]
pub fn matches(word: &str, keyword: &str) -> bool {
    !word.is_empty() && keyword.starts_with(word)
}

/// Arguments as a cursor, tc's `NEXT_ARG()` style.
#[derive(Debug)]
pub struct Args<'a> {
    words: &'a [String],
    at: usize,
}

impl<'a> Args<'a> {
    /// A cursor at the first of `words`.
    #[must_use]
    pub fn new(words: &'a [String]) -> Self {
        Self { words, at: 0 }
    }

    /// The value after a keyword (tc: `Command line is not complete. Try option "help"`).
    ///
    /// # Errors
    /// When the words ran out.
    pub fn value(&mut self) -> Result<&'a str> {
        self.next()
            .ok_or_else(|| UsageError("Command line is not complete. Try option \"help\"".into()))
    }

    /// The next word, left unread (for option lists that end at the first word they do not
    /// know, as tc's `parse_size_table` does).
    #[must_use]
    pub fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).map(String::as_str)
    }

    /// The words not read yet.
    #[must_use]
    pub fn rest(&self) -> &'a [String] {
        &self.words[self.at..]
    }
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a str;

    /// The next word.
    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.at)?;
        self.at += 1;
        Some(w.as_str())
    }
}

/// A class id (`1:20`), or tc's `Illegal "WHAT"`.
///
/// # Errors
/// Not a class id.
pub fn class_id(s: &str, what: &str) -> Result<ClassId> {
    s.parse().or_else(|_| illegal(what))
}

/// The `dev` word's value, read once into the wire's type: a name the kernel would refuse
/// (`dev_valid_name()`) fails here, with the rule it breaks, not at htbd as a missing device.
///
/// # Errors
/// `"x/y" is not a valid interface name: it may not hold '/'`, and the like.
pub fn interface(s: &str) -> Result<InterfaceName> {
    InterfaceName::new(s).or_else(|e| usage(e.to_string()))
}

/// The `dev` given so far, or tc's `Must specify device (dev DEV).` (for the options that a
/// kind reads once the device is known).
///
/// # Errors
/// No `dev` before the kind.
pub fn device(dev: Option<&InterfaceName>) -> Result<InterfaceName> {
    dev.cloned()
        .map_or_else(|| usage("Must specify device (dev DEV)."), Ok)
}

/// A qdisc handle, `1:`, `1`, `0x1:` or `0x2002:` (tc's `get_qdisc_handle`: the major in hex
/// through `strtoul(…, 16)`, which takes a `0x` prefix).
///
/// # Errors
/// Anything else.
pub fn qdisc_handle(s: &str) -> Result<ClassId> {
    let major = s.strip_suffix(':').unwrap_or(s);
    let digits = major
        .strip_prefix("0x")
        .or_else(|| major.strip_prefix("0X"))
        .unwrap_or(major);
    match u16::from_str_radix(digits, 16) {
        Ok(major) if major != 0 => Ok(ClassId::new(major, 0)),
        _ => usage(format!(
            "Illegal \"handle\" \"{s}\" (expected a qdisc handle like 1:)"
        )),
    }
}

/// A `u32` in `radix`, or with radix 0 as C's `strtoul(s, 0)` reads it (`0x` hex, leading 0
/// octal).
///
/// # Errors
/// tc's `Illegal "WHAT"`.
pub fn u32_arg(s: &str, what: &str, radix: u32) -> Result<u32> {
    let parsed = if radix == 0 {
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            u32::from_str_radix(hex, 16)
        } else if s.len() > 1 && s.starts_with('0') {
            u32::from_str_radix(&s[1..], 8)
        } else {
            s.parse()
        }
    } else {
        u32::from_str_radix(s, radix)
    };
    parsed.or_else(|_| illegal(what))
}

/// A `u16` in decimal.
///
/// # Errors
/// tc's `Illegal "WHAT"`.
pub fn u16_arg(s: &str, what: &str) -> Result<u16> {
    s.parse().or_else(|_| illegal(what))
}

/// A number as tc's `get_unsigned(…, 0)` reads it.
///
/// # Errors
/// tc's `Illegal "WHAT"`.
pub fn number(s: &str, what: &str) -> Result<u32> {
    u32_arg(s, what, 0)
}

/// A u32 match's mask: hex with or without `0x`, as f_u32.c reads every mask
/// (`get_u32(&mask, *argv, 16)`: `ffff`, `0xffff`, `FFFF`).
///
/// # Errors
/// tc's `Illegal "WHAT"`.
pub fn mask(s: &str, what: &str) -> Result<u32> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u32::from_str_radix(digits, 16).or_else(|_| illegal(what))
}

/// A size in bytes (`1514`, `32mb`, `64k`), as tc's `get_size`.
///
/// # Errors
/// tc's `Illegal "WHAT"`, also above 4 GiB (tc's sizes are 32-bit).
pub fn size_arg(s: &str, what: &str) -> Result<u32> {
    parse_size(s)
        .ok()
        .and_then(|b| u32::try_from(b).ok())
        .map_or_else(|| illegal(what), Ok)
}

/// A time (`5ms`, `100ms`, `2500us`; bare: µs), as tc's `get_time`.
///
/// # Errors
/// tc's `Illegal "WHAT"`.
pub fn time_arg(s: &str, what: &str) -> Result<Duration> {
    parse_time(s).or_else(|_| illegal(what))
}

/// A `linklayer` (tc's `get_linklayer`: `ethernet`, `atm`, or `adsl` for ATM, each matched by
/// prefix).
///
/// # Errors
/// tc's `Illegal "linklayer"`.
pub fn link_layer(s: &str) -> Result<LinkLayer> {
    if matches(s, "ethernet") {
        Ok(LinkLayer::Ethernet)
    } else if matches(s, "atm") || matches(s, "adsl") {
        Ok(LinkLayer::Atm)
    } else {
        usage(format!(
            "Illegal \"linklayer\" \"{s}\" (ethernet, atm or adsl)"
        ))
    }
}
