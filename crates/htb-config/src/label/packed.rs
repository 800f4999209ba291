//! A label packed into bytes: what a daemon holding a million labels keeps instead of a
//! [`ClassLabel`], whose texts and lists are eight small allocations of their own (a
//! LibreQoS circuit's label took 265 bytes in six allocations, plus the allocator's headers;
//! packed it is about 45 bytes in none).
//!
//! The packing is canonical (one label, one packing), so two packed labels are equal exactly
//! when the labels are. Layout, texts as a length byte (length − 1: a text is 1 to 256 bytes)
//! then UTF-8:
//!
//! ```text
//! flags (1 name, 2 circuit, 4 comment) · [name] [circuit] [comment] · device count
//! per device: flags (1 name, 2 mac) · id · [name] · [mac: 6 bytes] · address count
//!             per address: 4 or 6 · prefix length · 4 or 16 address bytes
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_classify::IpPrefix;

use super::{ClassLabel, Device, LabelFields, LabelText, MacAddr, mentions_of, title_of};

const NAME: u8 = 1;
const CIRCUIT: u8 = 2;
const COMMENT: u8 = 4;
const DEVICE_NAME: u8 = 1;
const DEVICE_MAC: u8 = 2;

impl ClassLabel {
    /// Appends the label, packed, to `out` ([`PackedLabel::read`] reads it back).
    pub fn pack(&self, out: &mut Vec<u8>) {
        let f = &self.0;
        let flag = |t: &Option<LabelText>, bit: u8| if t.is_some() { bit } else { 0 };
        out.push(flag(&f.name, NAME) | flag(&f.circuit, CIRCUIT) | flag(&f.comment, COMMENT));
        for text in [&f.name, &f.circuit, &f.comment].into_iter().flatten() {
            put_text(out, text);
        }
        // At most DEVICES_MAX (64) devices of ADDRESSES_MAX (64) addresses: `new` checked.
        out.push(f.devices.len() as u8);
        for d in &f.devices {
            let mac = if d.mac.is_some() { DEVICE_MAC } else { 0 };
            out.push(flag(&d.name, DEVICE_NAME) | mac);
            put_text(out, &d.id);
            if let Some(name) = &d.name {
                put_text(out, name);
            }
            if let Some(mac) = d.mac {
                out.extend_from_slice(&mac.0);
            }
            out.push(d.addresses.len() as u8);
            for a in &d.addresses {
                match a.addr() {
                    IpAddr::V4(v4) => {
                        out.extend_from_slice(&[4, a.prefix_len()]);
                        out.extend_from_slice(&v4.octets());
                    }
                    IpAddr::V6(v6) => {
                        out.extend_from_slice(&[6, a.prefix_len()]);
                        out.extend_from_slice(&v6.octets());
                    }
                }
            }
        }
    }
}

/// A text as its length less one (a label's text is 1 to `TEXT_MAX` = 256 bytes) and its bytes.
fn put_text(out: &mut Vec<u8>, text: &LabelText) {
    let bytes = text.as_str().as_bytes();
    out.push(bytes.len().saturating_sub(1) as u8);
    out.extend_from_slice(bytes);
}

/// A label as [`ClassLabel::pack`] wrote it, borrowed: searched and titled where it lies,
/// unpacked when a whole label is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedLabel<'a> {
    bytes: &'a [u8],
}

impl<'a> PackedLabel<'a> {
    /// The label packed at the start of `bytes` (which may go on past it), checked whole;
    /// `None` when they do not start with one.
    #[must_use]
    pub fn read(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader { bytes, at: 0 };
        let top = r.top()?;
        let mut devices = Devices {
            r,
            left: top.devices,
        };
        // Each device read goes past its addresses, checking them.
        for _ in 0..top.devices {
            devices.next()?;
        }
        let label = Self {
            bytes: bytes.get(..devices.r.at)?,
        };
        // Nothing in it is no label (`ClassLabel::new` refuses it).
        let empty = top.name.is_none()
            && top.circuit.is_none()
            && top.comment.is_none()
            && top.devices == 0;
        (!empty).then_some(label)
    }

    /// Its bytes: as many as it takes.
    #[must_use]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Its top texts and where its devices start (`read` checked them, so this is `Some`).
    fn top(&self) -> Option<(Top<'a>, Devices<'a>)> {
        let mut r = Reader {
            bytes: self.bytes,
            at: 0,
        };
        let top = r.top()?;
        let left = top.devices;
        Some((top, Devices { r, left }))
    }

    /// The label (`None` only for bytes that `read` did not check, which cannot be made).
    #[must_use]
    pub fn unpack(&self) -> Option<ClassLabel> {
        let (top, devices) = self.top()?;
        let text = |t: Option<&str>| t.map(|t| LabelText(t.into()));
        let mut list = Vec::with_capacity(usize::from(top.devices));
        for mut d in devices {
            let addresses = (0..d.addresses)
                .map(|_| d.r.address())
                .collect::<Option<Vec<_>>>()?;
            list.push(Device {
                id: LabelText(d.id.into()),
                name: text(d.name),
                mac: d.mac,
                addresses,
            });
        }
        // Checked when it was packed: it is a label still.
        Some(ClassLabel(LabelFields {
            name: text(top.name),
            circuit: text(top.circuit),
            comment: text(top.comment),
            devices: list,
        }))
    }

    /// As [`ClassLabel::title`].
    #[must_use]
    pub fn title(&self) -> &'a str {
        let Some((top, mut devices)) = self.top() else {
            return "";
        };
        let first = devices.next().map(|d| (d.id, d.name));
        title_of(top.name, top.circuit, first, top.comment)
    }

    /// As [`ClassLabel::mentions`].
    #[must_use]
    pub fn mentions(&self, query: &str) -> bool {
        let Some((top, devices)) = self.top() else {
            return false;
        };
        let texts = [top.name, top.circuit, top.comment]
            .into_iter()
            .flatten()
            .chain(
                devices
                    .clone()
                    .flat_map(|d| [Some(d.id), d.name].into_iter().flatten()),
            );
        mentions_of(texts, devices.filter_map(|d| d.mac), query)
    }
}

/// A packed label's texts, and how many devices follow.
struct Top<'a> {
    name: Option<&'a str>,
    circuit: Option<&'a str>,
    comment: Option<&'a str>,
    devices: u8,
}

/// One device, its addresses still to read from `r`.
struct DeviceParts<'a> {
    id: &'a str,
    name: Option<&'a str>,
    mac: Option<MacAddr>,
    addresses: u8,
    r: Reader<'a>,
}

/// The devices of a packed label, in order.
#[derive(Clone)]
struct Devices<'a> {
    r: Reader<'a>,
    left: u8,
}

impl<'a> Iterator for Devices<'a> {
    type Item = DeviceParts<'a>;

    fn next(&mut self) -> Option<DeviceParts<'a>> {
        self.left = self.left.checked_sub(1)?;
        let flags = self.r.byte()?;
        let id = self.r.text()?;
        let name = self.r.text_if(flags & DEVICE_NAME != 0)?;
        let mac = if flags & DEVICE_MAC != 0 {
            let b = self.r.take(6)?;
            Some(MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]]))
        } else {
            None
        };
        let addresses = self.r.byte()?;
        let device = DeviceParts {
            id,
            name,
            mac,
            addresses,
            r: self.r.clone(),
        };
        // Past its addresses.
        for _ in 0..addresses {
            self.r.address()?;
        }
        Some(device)
    }
}

/// Reads packed bytes from `at` on; every read is `None` past the end or on what `pack`
/// does not write.
#[derive(Clone)]
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(b)
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::from(self.byte()?) + 1;
        std::str::from_utf8(self.take(len)?).ok()
    }

    /// A text when `present` (`Some(None)` when not).
    fn text_if(&mut self, present: bool) -> Option<Option<&'a str>> {
        if present {
            self.text().map(Some)
        } else {
            Some(None)
        }
    }

    fn top(&mut self) -> Option<Top<'a>> {
        let flags = self.byte()?;
        if flags & !(NAME | CIRCUIT | COMMENT) != 0 {
            return None;
        }
        Some(Top {
            name: self.text_if(flags & NAME != 0)?,
            circuit: self.text_if(flags & CIRCUIT != 0)?,
            comment: self.text_if(flags & COMMENT != 0)?,
            devices: self.byte()?,
        })
    }

    fn address(&mut self) -> Option<IpPrefix> {
        let (family, len) = (self.byte()?, self.byte()?);
        let addr = match family {
            4 => {
                let b: [u8; 4] = self.take(4)?.try_into().ok()?;
                IpAddr::V4(Ipv4Addr::from(b))
            }
            6 => {
                let b: [u8; 16] = self.take(16)?.try_into().ok()?;
                IpAddr::V6(Ipv6Addr::from(b))
            }
            _ => return None,
        };
        IpPrefix::new(addr, len)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::ann;
    use super::*;

    fn packed(label: &ClassLabel) -> Vec<u8> {
        let mut out = Vec::new();
        label.pack(&mut out);
        out
    }

    fn label(json: &str) -> ClassLabel {
        serde_json::from_str(json).unwrap()
    }

    /// Every part comes back; the packing is short, canonical and read from a longer buffer.
    #[test]
    fn unpacks_to_the_same_label() {
        let labels = [
            ann(),
            label(r#"{"name":"uplink"}"#),
            label(r#"{"comment":"x"}"#),
            label(r#"{"devices":[{"id":"d"}]}"#),
            label(&format!(
                r#"{{"name":"{}","circuit":"17","devices":[{{"id":"a","mac":"00:11:22:33:44:55","addresses":["10.0.0.1/32","2001:db8::/48"]}},{{"id":"b","name":"Zoë"}}]}}"#,
                "n".repeat(256)
            )),
        ];
        for l in &labels {
            let bytes = packed(l);
            assert!(bytes.len() <= l.encoded_len(), "{l:?}");
            let mut longer = bytes.clone();
            longer.extend_from_slice(&packed(&ann()));
            let p = PackedLabel::read(&longer).unwrap();
            assert_eq!(p.as_bytes(), &bytes[..]);
            assert_eq!(p.unpack().as_ref(), Some(l));
            assert_eq!(p.title(), l.title());
        }
        // A LibreQoS circuit's label, as the import gives it.
        let circuit = label(
            r#"{"name":"Subscriber 123456","circuit":"123456","devices":[{"id":"123456","name":"cpe","addresses":["100.65.226.64/32"]}]}"#,
        );
        assert_eq!(packed(&circuit).len(), 46);
        assert_ne!(packed(&labels[1]), packed(&labels[2]));
    }

    #[test]
    fn searches_as_the_label_does() {
        let l = ann();
        let bytes = packed(&l);
        let p = PackedLabel::read(&bytes).unwrap();
        for q in [
            "ann o",
            "c-17",
            "d-1",
            "router",
            "00:1a:2b:3c:4d:5e",
            "bob",
            "10.0",
        ] {
            assert_eq!(p.mentions(q), l.mentions(q), "{q}");
        }
        assert!(p.mentions("router") && !p.mentions("bob"));
    }

    #[test]
    fn what_pack_does_not_write_is_not_read() {
        let bytes = packed(&ann());
        for cut in 0..bytes.len() {
            assert_eq!(PackedLabel::read(&bytes[..cut]), None, "cut at {cut}");
        }
        // No texts and no devices: nothing in it.
        assert_eq!(PackedLabel::read(&[0, 0]), None);
        // An unknown flag, an invalid text.
        assert_eq!(PackedLabel::read(&[8, 0]), None);
        assert_eq!(PackedLabel::read(&[NAME, 0, 0xff, 0]), None);
    }
}
