//! A class's label: who it shapes. A subscriber's circuit as LibreQoS's `ShapedDevices.csv`
//! lists it (circuit id and name, each device's id, name, MAC and addresses, a comment), or
//! just a name for a class an operator made by hand ("uplink", "voip"). tc has no such thing;
//! htbd keeps it with the class (the config's `label = { … }`, `htb-cli class label`) so that
//! the console and `class show -d` can say whose class it is, and a search can find it.
//!
//! One type for the config file, the wire and the state file: each text is checked once, as it
//! is read (length, no control characters), so a label that exists is a valid one.

mod packed;

use std::fmt;

use htb_classify::IpPrefix;
use serde::{Deserialize, Serialize};

pub use self::packed::PackedLabel;

/// The longest text a label holds (a name, an id, a comment), in bytes.
pub const TEXT_MAX: usize = 256;
/// The most devices a label lists.
pub const DEVICES_MAX: usize = 64;
/// The most addresses a device lists.
pub const ADDRESSES_MAX: usize = 64;
/// The most a label may weigh on the wire ([`ClassLabel::encoded_len`]), so that a page of a
/// `class show` (20 000 classes) and a staged batch stay far below the 64 MiB message limit.
pub const LABEL_MAX_BYTES: usize = 2048;

/// Why a label's part is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LabelError {
    /// A text past [`TEXT_MAX`] bytes.
    #[error("{len} bytes is too long for a label's text (at most {TEXT_MAX})")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A text with a control character (a newline, say).
    #[error("a label's text may not hold control characters ({0:?})")]
    Control(String),
    /// An empty text.
    #[error("a label's text may not be empty")]
    Empty,
    /// Not `aa:bb:cc:dd:ee:ff`.
    #[error("{0:?} is not a MAC address (aa:bb:cc:dd:ee:ff)")]
    Mac(String),
    /// Too many devices or addresses.
    #[error("a label lists at most {DEVICES_MAX} devices of {ADDRESSES_MAX} addresses each")]
    TooMany,
    /// Too much in all.
    #[error("a label may hold at most {LABEL_MAX_BYTES} bytes of texts and addresses ({0})")]
    TooBig(usize),
    /// Nothing in it.
    #[error("a label needs a name, a circuit, a comment or a device")]
    Nothing,
}

/// A label's text: 1 to [`TEXT_MAX`] bytes, no control characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LabelText(Box<str>);

impl LabelText {
    /// `text` made a label's text, for files that may hold anything (a CSV's free text):
    /// control characters become spaces, the ends are trimmed, and a text past [`TEXT_MAX`]
    /// is cut at a character's edge. `None` when nothing is left.
    #[must_use]
    pub fn lossy(text: &str) -> Option<Self> {
        let mut out: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let mut end = out.trim_end().len().min(TEXT_MAX);
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        let out = out.trim();
        (!out.is_empty()).then(|| Self(out.into()))
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for LabelText {
    type Error = LabelError;

    fn try_from(text: String) -> Result<Self, LabelError> {
        if text.is_empty() {
            return Err(LabelError::Empty);
        }
        if text.len() > TEXT_MAX {
            return Err(LabelError::TooLong { len: text.len() });
        }
        if text.chars().any(char::is_control) {
            return Err(LabelError::Control(text));
        }
        Ok(Self(text.into_boxed_str()))
    }
}

impl std::str::FromStr for LabelText {
    type Err = LabelError;

    fn from_str(text: &str) -> Result<Self, LabelError> {
        Self::try_from(text.to_owned())
    }
}

impl From<LabelText> for String {
    fn from(text: LabelText) -> Self {
        text.0.into()
    }
}

impl fmt::Display for LabelText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A MAC address, written `aa:bb:cc:dd:ee:ff`; read also with `-`, in Cisco's `aabb.ccdd.eeff`
/// and as 12 bare hex digits, as operators' files have them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MacAddr(pub [u8; 6]);

impl std::str::FromStr for MacAddr {
    type Err = LabelError;

    fn from_str(text: &str) -> Result<Self, LabelError> {
        let bad = || LabelError::Mac(text.to_owned());
        // Only hex digits and separators (`from_str_radix` would take a sign).
        if !text
            .chars()
            .all(|c| c.is_ascii_hexdigit() || ":-.".contains(c))
        {
            return Err(bad());
        }
        let mut out = [0u8; 6];
        let digits: String = text.chars().filter(|c| *c != '.').collect();
        let dotted = text.len() == 14 && text.split('.').all(|p| p.len() == 4);
        if dotted || (text.len() == 12 && !text.contains([':', '-'])) {
            let digits = if dotted { digits.as_str() } else { text };
            for (i, byte) in out.iter_mut().enumerate() {
                let pair = digits.get(2 * i..2 * i + 2).ok_or_else(bad)?;
                *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
            }
            return Ok(Self(out));
        }
        let mut parts = text.split([':', '-']);
        for byte in &mut out {
            let part = parts.next().ok_or_else(bad)?;
            if part.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(out))
    }
}

impl TryFrom<String> for MacAddr {
    type Error = LabelError;

    fn try_from(text: String) -> Result<Self, LabelError> {
        text.parse()
    }
}

impl From<MacAddr> for String {
    fn from(mac: MacAddr) -> Self {
        mac.to_string()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// One device of a circuit (a row of `ShapedDevices.csv`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// `Device ID`.
    pub id: LabelText,
    /// `Device Name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<LabelText>,
    /// `MAC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// `IPv4` and `IPv6`: its addresses and prefixes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<IpPrefix>,
}

/// Who a class shapes (see the module's text). Built checked: [`ClassLabel::new`], or read
/// from the config, the wire or the state file, which refuse what `new` refuses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LabelFields", into = "LabelFields")]
pub struct ClassLabel(LabelFields);

/// A label's parts, unchecked as a whole (each text is checked).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelFields {
    /// A subscriber's name (`Circuit Name`), or what a hand-made class is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<LabelText>,
    /// `Circuit ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<LabelText>,
    /// `Comment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<LabelText>,
    /// The circuit's devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

impl LabelFields {
    /// Every text it holds: name, circuit id, comment, then each device's id and name.
    pub fn texts(&self) -> impl Iterator<Item = &LabelText> {
        [&self.name, &self.circuit, &self.comment]
            .into_iter()
            .flatten()
            .chain(
                self.devices
                    .iter()
                    .flat_map(|d| std::iter::once(&d.id).chain(&d.name)),
            )
    }
}

impl TryFrom<LabelFields> for ClassLabel {
    type Error = LabelError;

    fn try_from(fields: LabelFields) -> Result<Self, LabelError> {
        Self::new(fields)
    }
}

impl From<ClassLabel> for LabelFields {
    fn from(label: ClassLabel) -> Self {
        label.0
    }
}

impl ClassLabel {
    /// A label of these parts.
    ///
    /// # Errors
    /// Nothing in it, or too many devices or addresses.
    pub fn new(fields: LabelFields) -> Result<Self, LabelError> {
        let empty = fields.name.is_none()
            && fields.circuit.is_none()
            && fields.comment.is_none()
            && fields.devices.is_empty();
        if empty {
            return Err(LabelError::Nothing);
        }
        let too_many = fields.devices.len() > DEVICES_MAX
            || fields
                .devices
                .iter()
                .any(|d| d.addresses.len() > ADDRESSES_MAX);
        if too_many {
            return Err(LabelError::TooMany);
        }
        let label = Self(fields);
        match label.encoded_len() {
            n if n > LABEL_MAX_BYTES => Err(LabelError::TooBig(n)),
            _ => Ok(label),
        }
    }

    /// About what it takes as JSON, at most (texts, addresses, keys and quotes).
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        let f = &self.0;
        let text = |t: &Option<LabelText>| t.as_ref().map_or(0, |t| t.as_str().len() * 2 + 16);
        text(&f.name)
            + text(&f.circuit)
            + text(&f.comment)
            + f.devices
                .iter()
                .map(|d| d.id.as_str().len() * 2 + 16 + text(&d.name) + 32 + 48 * d.addresses.len())
                .sum::<usize>()
    }

    /// Its parts.
    #[must_use]
    pub fn fields(&self) -> &LabelFields {
        &self.0
    }

    /// The name, else the circuit id, else the first device's name or id: what a page shows.
    #[must_use]
    pub fn title(&self) -> &str {
        let f = &self.0;
        let first = f
            .devices
            .first()
            .map(|d| (d.id.as_str(), d.name.as_ref().map(LabelText::as_str)));
        title_of(
            f.name.as_ref().map(LabelText::as_str),
            f.circuit.as_ref().map(LabelText::as_str),
            first,
            f.comment.as_ref().map(LabelText::as_str),
        )
    }

    /// Whether `query` (already lower case) is part of its name, circuit id, comment, a
    /// device's id or name, or is a device's MAC address.
    #[must_use]
    pub fn mentions(&self, query: &str) -> bool {
        let f = &self.0;
        let texts = f.texts().map(LabelText::as_str);
        mentions_of(texts, f.devices.iter().filter_map(|d| d.mac), query)
    }

    /// As the words of `htb-cli class label` take it (`name "Ann" circuit "17" device "a"
    /// mac … address …`), each text quoted; `None` when a text holds both kinds of quote,
    /// which tc's batch line cannot carry.
    #[must_use]
    pub fn words(&self) -> Option<String> {
        use fmt::Write as _;
        let f = &self.0;
        let mut out = String::new();
        let text = |out: &mut String, key: &str, t: &LabelText| -> Option<()> {
            let t = t.as_str();
            let quote = if !t.contains('"') {
                '"'
            } else if !t.contains('\'') {
                '\''
            } else {
                return None;
            };
            let _ = write!(out, " {key} {quote}{t}{quote}");
            Some(())
        };
        for (key, t) in [("name", &f.name), ("circuit", &f.circuit)] {
            if let Some(t) = t {
                text(&mut out, key, t)?;
            }
        }
        if let Some(t) = &f.comment {
            text(&mut out, "comment", t)?;
        }
        for d in &f.devices {
            text(&mut out, "device", &d.id)?;
            if let Some(n) = &d.name {
                text(&mut out, "name", n)?;
            }
            if let Some(mac) = d.mac {
                let _ = write!(out, " mac {mac}");
            }
            for a in &d.addresses {
                let _ = write!(out, " address {a}");
            }
        }
        Some(out.trim_start().to_owned())
    }
}

impl ClassLabel {
    /// The label as a batch line can carry it: itself when [`words`](Self::words) can write it,
    /// else with each `"` of a text holding both kinds of quote written as `'`; `None` if that
    /// is no label (it cannot happen for a label that was valid: the texts keep their lengths).
    #[must_use]
    pub fn quotable(&self) -> Option<Self> {
        if self.words().is_some() {
            return Some(self.clone());
        }
        let fix = |t: &LabelText| {
            let s = t.as_str();
            if s.contains('"') && s.contains('\'') {
                LabelText::lossy(&s.replace('"', "'"))
            } else {
                Some(t.clone())
            }
        };
        let f = &self.0;
        let fields = LabelFields {
            name: f.name.as_ref().and_then(fix),
            circuit: f.circuit.as_ref().and_then(fix),
            comment: f.comment.as_ref().and_then(fix),
            devices: f
                .devices
                .iter()
                .map(|d| Device {
                    id: fix(&d.id).unwrap_or_else(|| d.id.clone()),
                    name: d.name.as_ref().and_then(fix),
                    ..d.clone()
                })
                .collect(),
        };
        Self::new(fields).ok()
    }
}

/// What a page shows of a label (its packed form's and its own): the name, else the circuit id,
/// else the first device's name or id, else the comment.
fn title_of<'a>(
    name: Option<&'a str>,
    circuit: Option<&'a str>,
    first_device: Option<(&'a str, Option<&'a str>)>,
    comment: Option<&'a str>,
) -> &'a str {
    name.or(circuit)
        .or_else(|| first_device.map(|(id, name)| name.unwrap_or(id)))
        .or(comment)
        .unwrap_or("")
}

/// Whether `query` (lower case) is part of one of `texts`, or is one of `macs`.
fn mentions_of<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    macs: impl IntoIterator<Item = MacAddr>,
    query: &str,
) -> bool {
    if texts.into_iter().any(|t| folded_contains(t, query)) {
        return true;
    }
    let Ok(mac) = query.parse::<MacAddr>() else {
        return false;
    };
    macs.into_iter().any(|m| m == mac)
}

/// Whether `needle` (lower case) is in `hay`, ignoring case: without allocating when the
/// needle is ASCII (a search runs over every label of 100 000 subscribers).
fn folded_contains(hay: &str, needle: &str) -> bool {
    if needle.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle.as_bytes());
        n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    } else {
        hay.to_lowercase().contains(needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> LabelText {
        s.parse().unwrap()
    }

    pub(super) fn ann() -> ClassLabel {
        ClassLabel::new(LabelFields {
            name: Some(text("Ann O'Neil")),
            circuit: Some(text("C-17")),
            comment: None,
            devices: vec![Device {
                id: text("D-1"),
                name: Some(text("Ann's router")),
                mac: Some("00:1A:2b:3c:4d:5e".parse().unwrap()),
                addresses: vec![
                    "10.0.3.7".parse().unwrap(),
                    "2001:db8::/64".parse().unwrap(),
                ],
            }],
        })
        .unwrap()
    }

    #[test]
    fn texts_and_macs_are_checked_as_read() {
        assert_eq!(
            serde_json::from_str::<LabelText>("\"a\\nb\"")
                .unwrap_err()
                .to_string(),
            "a label's text may not hold control characters (\"a\\nb\")"
        );
        assert!(serde_json::from_str::<LabelText>("\"\"").is_err());
        let long = format!("\"{}\"", "x".repeat(TEXT_MAX + 1));
        assert!(serde_json::from_str::<LabelText>(&long).is_err());
        for written in ["00-1a-2B-3c-4d-5e", "001a.2b3c.4d5e", "001A2B3C4D5E"] {
            assert_eq!(
                written.parse::<MacAddr>().unwrap().to_string(),
                "00:1a:2b:3c:4d:5e",
                "{written}"
            );
        }
        for bad in [
            "001a.2b3c.4d5",
            "001a2b3c4d5g",
            "001a2b3c4d5e7f",
            "+1a2b3c4d5e6",
            "+1:1a:2b:3c:4d:5e",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        for bad in [
            "00:1a:2b:3c:4d",
            "00:1a:2b:3c:4d:5e:6f",
            "0:1a:2b:3c:4d:5e",
            "zz:1a:2b:3c:4d:5e",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        let empty = serde_json::from_str::<ClassLabel>("{}").unwrap_err();
        assert!(empty.to_string().contains("needs a name"), "{empty}");
        assert!(serde_json::from_str::<ClassLabel>(r#"{"name":"a","size":1}"#).is_err());
        // Sixteen devices of long texts weigh too much.
        let device = format!(
            r#"{{"id":"{}","name":"{}"}}"#,
            "d".repeat(60),
            "n".repeat(60)
        );
        let heavy = format!(r#"{{"devices":[{}]}}"#, vec![device; 16].join(","));
        let e = serde_json::from_str::<ClassLabel>(&heavy).unwrap_err();
        assert!(e.to_string().contains("at most 2048 bytes"), "{e}");
    }

    #[test]
    fn lossy_texts_are_valid_ones() {
        assert_eq!(
            LabelText::lossy(" Two\nlines ").unwrap().as_str(),
            "Two lines"
        );
        assert_eq!(LabelText::lossy(" \t "), None);
        let long = "é".repeat(TEXT_MAX);
        let cut = LabelText::lossy(&long).unwrap();
        assert!(cut.as_str().len() <= TEXT_MAX);
        assert_eq!(cut.as_str().parse::<LabelText>().unwrap(), cut);
    }

    #[test]
    fn round_trips_through_json_and_toml() {
        let label = ann();
        let json = serde_json::to_string(&label).unwrap();
        assert_eq!(serde_json::from_str::<ClassLabel>(&json).unwrap(), label);
        #[derive(Serialize, Deserialize)]
        struct Doc {
            label: ClassLabel,
        }
        let toml_text = toml::to_string(&Doc {
            label: label.clone(),
        })
        .unwrap();
        assert_eq!(
            toml::from_str::<Doc>(&toml_text).unwrap().label,
            label,
            "{toml_text}"
        );
    }

    #[test]
    fn searches_and_words() {
        let label = ann();
        assert_eq!(label.title(), "Ann O'Neil");
        for q in ["ann o", "c-17", "d-1", "router", "00:1a:2b:3c:4d:5e"] {
            assert!(label.mentions(q), "{q}");
        }
        assert!(!label.mentions("bob"));
        assert!(folded_contains("Zoë Müller", "zoë m") && !folded_contains("ab", "abc"));
        assert_eq!(
            label.words().unwrap(),
            "name \"Ann O'Neil\" circuit \"C-17\" device \"D-1\" name \"Ann's router\" \
             mac 00:1a:2b:3c:4d:5e address 10.0.3.7/32 address 2001:db8::/64"
        );
        let both = ClassLabel::new(LabelFields {
            name: Some(text("say \"it's\"")),
            ..LabelFields::default()
        })
        .unwrap();
        assert_eq!(both.words(), None);
        // A batch line carries it with the `"` written as `'`; other texts stay as they are.
        let quotable = both.quotable().unwrap();
        assert!(quotable.words().is_some());
        assert!(!quotable.title().contains('"'), "{}", quotable.title());
        assert_eq!(quotable.title().len(), both.title().len());
        let single = ClassLabel::new(LabelFields {
            name: Some(text("the \"big\" one")),
            ..LabelFields::default()
        })
        .unwrap();
        assert_eq!(single.words().unwrap(), "name 'the \"big\" one'");
    }
}

/// `label` as the config's inline table (the state file writes it so).
#[must_use]
pub fn label_toml(label: &ClassLabel) -> String {
    // A label is strings and arrays of them: it always has a TOML form.
    toml::Value::try_from(label).map_or_else(|_| "{}".into(), |v| v.to_string())
}

#[cfg(test)]
mod toml_tests {
    use super::*;

    #[test]
    fn the_inline_table_reads_back() {
        let label: ClassLabel = serde_json::from_str(
            r#"{"name":"Ann \"A\"","circuit":"C-17","devices":[{"id":"D-1","mac":"00:1a:2b:3c:4d:5e","addresses":["10.0.3.7/32"]},{"id":"D-2"}]}"#,
        )
        .unwrap();
        let text = label_toml(&label);
        assert!(!text.contains('\n'), "{text}");
        #[derive(Deserialize)]
        struct Doc {
            label: ClassLabel,
        }
        let doc: Doc = toml::from_str(&format!("label = {text}\n")).unwrap();
        assert_eq!(doc.label, label, "{text}");
    }
}
