//! An interface's name (`eth0`, `ifb0`, `bond0.100`), checked once, as it is read: by the
//! config file, the control socket's messages, the saved state and htb-cli's `dev` word.
//!
//! The rules are the kernel's `dev_valid_name()` (net/core/dev.c), which `register_netdevice`
//! and `dev_change_name` apply: a name the kernel could never give an interface is refused
//! where it is first read, with the rule it breaks, not later as "no such device". It lives
//! here, below htb-ipc, because the config file names interfaces too (`name`, `peer`,
//! `redirect`) and htb-ipc already depends on this crate.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kernel's `IFNAMSIZ` (include/uapi/linux/if.h): a name's buffer, its NUL included.
pub const IFNAMSIZ: usize = 16;

/// The longest name, in bytes (`IFNAMSIZ - 1`: the kernel keeps room for the NUL).
pub const IFNAME_MAX: usize = IFNAMSIZ - 1;

/// Why a text is not an interface name; each variant is one test of `dev_valid_name()`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InterfaceNameError {
    /// `*name == '\0'`.
    #[error("an interface name may not be empty")]
    Empty,
    /// `strnlen(name, IFNAMSIZ) == IFNAMSIZ`.
    #[error(
        "{name:?} is not a valid interface name: {len} bytes, at most {IFNAME_MAX} (IFNAMSIZ - 1)"
    )]
    TooLong {
        /// The name refused.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// `.` or `..`, which would name a directory in sysfs and procfs.
    #[error("{name:?} is not a valid interface name: \".\" and \"..\" name directories")]
    Dots {
        /// The name refused.
        name: String,
    },
    /// A `/` (a path separator in sysfs and procfs), a `:` (an alias's separator, `eth0:1`),
    /// or a space as the kernel's `isspace()` counts them.
    #[error("{name:?} is not a valid interface name: it may not hold {byte}")]
    Forbidden {
        /// The name refused.
        name: String,
        /// The first forbidden byte, described (`'/'`, `':'`, `a space`, …).
        byte: ForbiddenByte,
    },
}

/// A byte `dev_valid_name()` refuses inside a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForbiddenByte {
    /// `/`.
    Slash,
    /// `:`.
    Colon,
    /// A byte the kernel's `isspace()` (lib/ctype.c) counts: `\t \n \v \f \r`, space, and
    /// 0xa0 (Latin-1's no-break space, a byte of some UTF-8 characters).
    Space(u8),
    /// A NUL: the kernel reads names as C strings, so it would cut the name there.
    Nul,
}

impl fmt::Display for ForbiddenByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Slash => f.write_str("'/'"),
            Self::Colon => f.write_str("':'"),
            Self::Space(b) => write!(f, "white space (byte {b:#04x})"),
            Self::Nul => f.write_str("a NUL byte"),
        }
    }
}

impl ForbiddenByte {
    /// `b` if `dev_valid_name()`'s loop refuses it (or the C string would end there).
    fn of(b: u8) -> Option<Self> {
        match b {
            b'/' => Some(Self::Slash),
            b':' => Some(Self::Colon),
            // lib/ctype.c's _S bytes: 0x09..=0x0d, 0x20 and 0xa0.
            b'\t'..=b'\r' | b' ' | 0xa0 => Some(Self::Space(b)),
            0 => Some(Self::Nul),
            _ => None,
        }
    }
}

/// An interface's name as the kernel would accept it (`dev_valid_name()`): 1 to 15 bytes, not
/// `.` or `..`, no `/`, `:` or white space. Made only by [`InterfaceName::new`] (or
/// [`FromStr`], [`TryFrom`], serde), so one that exists is valid; on the wire and in files it
/// is the plain string it always was.
///
/// Held inline, as the kernel's `char name[IFNAMSIZ]` is: its length and up to
/// [`IFNAME_MAX`] bytes, 16 bytes in all, no allocation (a million subscribers' batch names
/// the port in each of its three million commands, read, checked and cloned each time).
#[derive(Clone)]
pub struct InterfaceName {
    len: u8,
    bytes: [u8; IFNAME_MAX],
}

impl InterfaceName {
    /// Checks `name` as `dev_valid_name()` does.
    ///
    /// # Errors
    /// The first rule it breaks, with the name.
    pub fn new(name: impl AsRef<str>) -> Result<Self, InterfaceNameError> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(InterfaceNameError::Empty);
        }
        if name.len() > IFNAME_MAX {
            let len = name.len();
            return Err(InterfaceNameError::TooLong {
                name: name.to_owned(),
                len,
            });
        }
        if name == "." || name == ".." {
            return Err(InterfaceNameError::Dots {
                name: name.to_owned(),
            });
        }
        if let Some(byte) = name.bytes().find_map(ForbiddenByte::of) {
            return Err(InterfaceNameError::Forbidden {
                name: name.to_owned(),
                byte,
            });
        }
        let mut bytes = [0; IFNAME_MAX];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(Self {
            // At most IFNAME_MAX, checked above.
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // The bytes are a whole `str`'s, copied by `new`: never the empty default.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// The name, as a `String`.
    #[must_use]
    pub fn into_string(self) -> String {
        self.as_str().to_owned()
    }
}

/// As the name's `str` (what [`Borrow<str>`] needs: maps keyed by name are looked up with a
/// `&str`).
impl PartialEq for InterfaceName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for InterfaceName {}

impl PartialOrd for InterfaceName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InterfaceName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for InterfaceName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InterfaceName")
            .field(&self.as_str())
            .finish()
    }
}

impl FromStr for InterfaceName {
    type Err = InterfaceNameError;

    fn from_str(name: &str) -> Result<Self, InterfaceNameError> {
        Self::new(name)
    }
}

impl TryFrom<String> for InterfaceName {
    type Error = InterfaceNameError;

    fn try_from(name: String) -> Result<Self, InterfaceNameError> {
        Self::new(name)
    }
}

impl TryFrom<&str> for InterfaceName {
    type Error = InterfaceNameError;

    fn try_from(name: &str) -> Result<Self, InterfaceNameError> {
        Self::new(name)
    }
}

impl From<InterfaceName> for String {
    fn from(name: InterfaceName) -> Self {
        name.into_string()
    }
}

impl fmt::Display for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, not `write_str`: tables align names with `{:<16}`.
        f.pad(self.as_str())
    }
}

impl Deref for InterfaceName {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for InterfaceName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Maps keyed by name are looked up with a `&str` (`Eq`, `Ord` and `Hash` are `str`'s).
impl Borrow<str> for InterfaceName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for InterfaceName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for InterfaceName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for InterfaceName {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<InterfaceName> for str {
    fn eq(&self, other: &InterfaceName) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<InterfaceName> for &str {
    fn eq(&self, other: &InterfaceName) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<InterfaceName> for String {
    fn eq(&self, other: &InterfaceName) -> bool {
        *self == other.as_str()
    }
}

/// A plain string, as the name always was on the wire and in files.
impl Serialize for InterfaceName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Checked as it is read: a message or file with a bad name fails to parse, with the rule.
/// Read from the message's own bytes where the format lends them (no `String` in between).
impl<'de> Deserialize<'de> for InterfaceName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = InterfaceName;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an interface name")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<InterfaceName, E> {
                InterfaceName::new(name).map_err(E::custom)
            }
        }
        d.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(name: &str) -> InterfaceNameError {
        InterfaceName::new(name).unwrap_err()
    }

    #[test]
    fn names_operators_use_are_accepted() {
        for name in [
            "eth0",
            "enp3s0f1",
            "veth-a",
            "ifb0",
            "wg0",
            "bond0.100",
            "acc0",
            "lo",
            "br_lan",
            "eth0@if2x",
            "r",
            "wlp0s20f3-mon15", // 15 bytes, the most
            "ñandú0",          // UTF-8 with no 0xa0 byte
        ] {
            let n = InterfaceName::new(name).unwrap();
            assert_eq!(n.as_str(), name);
            assert_eq!(n.to_string(), name);
            assert_eq!(&*n, name);
            assert_eq!(name.parse::<InterfaceName>().unwrap(), n);
        }
        assert_eq!("wlp0s20f3-mon15".len(), IFNAME_MAX);
    }

    #[test]
    fn empty_is_refused() {
        assert_eq!(refused(""), InterfaceNameError::Empty);
    }

    #[test]
    fn sixteen_bytes_are_refused() {
        let name = "wlp0s20f3-mon150";
        assert_eq!(name.len(), IFNAMSIZ);
        assert_eq!(
            refused(name),
            InterfaceNameError::TooLong {
                name: name.into(),
                len: 16
            }
        );
        // Bytes, not characters: 8 two-byte characters are 16 bytes.
        assert!(matches!(
            refused("éééééééé"),
            InterfaceNameError::TooLong { len: 16, .. }
        ));
    }

    #[test]
    fn dot_and_dot_dot_are_refused_but_dots_inside_are_not() {
        for name in [".", ".."] {
            assert_eq!(
                refused(name),
                InterfaceNameError::Dots { name: name.into() }
            );
        }
        assert!(InterfaceName::new("...").is_ok());
        assert!(InterfaceName::new(".a").is_ok());
    }

    #[test]
    fn slash_colon_space_and_nul_are_refused() {
        for (name, byte) in [
            ("x/y", ForbiddenByte::Slash),
            ("eth0:1", ForbiddenByte::Colon),
            ("eth 0", ForbiddenByte::Space(b' ')),
            ("eth0\t", ForbiddenByte::Space(b'\t')),
            ("eth0\n", ForbiddenByte::Space(b'\n')),
            ("\u{b}eth0", ForbiddenByte::Space(0x0b)),
            ("eth\u{c}0", ForbiddenByte::Space(0x0c)),
            ("eth\r0", ForbiddenByte::Space(b'\r')),
            // U+00A0 is c2 a0 in UTF-8; the kernel's isspace() refuses the a0.
            ("eth\u{a0}0", ForbiddenByte::Space(0xa0)),
            ("eth\u{0}0", ForbiddenByte::Nul),
        ] {
            assert_eq!(
                refused(name),
                InterfaceNameError::Forbidden {
                    name: name.into(),
                    byte
                },
                "{name:?}"
            );
        }
    }

    #[test]
    fn errors_name_the_name_and_the_rule() {
        assert_eq!(
            refused("x/y").to_string(),
            "\"x/y\" is not a valid interface name: it may not hold '/'"
        );
        assert_eq!(
            refused("eth0:1").to_string(),
            "\"eth0:1\" is not a valid interface name: it may not hold ':'"
        );
        assert_eq!(
            refused("a-very-long-name0").to_string(),
            "\"a-very-long-name0\" is not a valid interface name: 17 bytes, at most 15 (IFNAMSIZ - 1)"
        );
    }

    #[test]
    fn serde_is_a_plain_string_checked_as_it_is_read() {
        let n: InterfaceName = serde_json::from_str("\"eth0\"").unwrap();
        assert_eq!(n, "eth0");
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"eth0\"");
        let e = serde_json::from_str::<InterfaceName>("\"x/y\"").unwrap_err();
        assert!(e.to_string().contains("not a valid interface name"), "{e}");
        assert!(serde_json::from_str::<InterfaceName>("7").is_err());
    }

    /// Inline: the kernel's IFNAMSIZ bytes, whatever the name.
    #[test]
    fn a_name_is_sixteen_bytes_inline() {
        assert_eq!(size_of::<InterfaceName>(), IFNAMSIZ);
        let long = InterfaceName::new("wlp0s20f3-mon15").unwrap();
        let moved = long.clone();
        assert_eq!(moved.as_str(), "wlp0s20f3-mon15");
        assert_eq!(String::from(moved), "wlp0s20f3-mon15");
    }

    /// Order, equality and hashes are the names' as `str`s, as `Borrow<str>` requires.
    #[test]
    fn names_compare_and_hash_as_their_text() {
        use std::hash::BuildHasher;
        let names = ["eth0", "eth", "eth10", "a", "ñandú0", "wlp0s20f3-mon15"];
        for a in names {
            for b in names {
                let (na, nb) = (
                    InterfaceName::new(a).unwrap(),
                    InterfaceName::new(b).unwrap(),
                );
                assert_eq!(na.cmp(&nb), a.cmp(b), "{a} {b}");
                assert_eq!(na == nb, a == b, "{a} {b}");
            }
            let hasher = std::collections::hash_map::RandomState::new();
            assert_eq!(
                hasher.hash_one(InterfaceName::new(a).unwrap()),
                hasher.hash_one(a),
                "{a}"
            );
        }
        let mut set = std::collections::HashSet::new();
        set.insert(InterfaceName::new("eth0").unwrap());
        assert!(set.contains("eth0"));
        assert_eq!(
            format!("{:?}", InterfaceName::new("eth0").unwrap()),
            "InterfaceName(\"eth0\")"
        );
    }

    /// Read from TOML too (whose strings serde hands over owned).
    #[test]
    fn read_from_toml_and_checked() {
        #[derive(Deserialize)]
        struct File {
            name: InterfaceName,
        }
        let f: File = toml::from_str("name = \"bond0.100\"").unwrap();
        assert_eq!(f.name, "bond0.100");
        assert!(toml::from_str::<File>("name = \"eth0:1\"").is_err());
    }

    #[test]
    fn maps_keyed_by_name_are_looked_up_by_str() {
        let mut map = std::collections::BTreeMap::new();
        map.insert(InterfaceName::new("eth0").unwrap(), 1);
        assert_eq!(map.get("eth0"), Some(&1));
    }
}
