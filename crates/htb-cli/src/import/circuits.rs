//! From device rows to circuits, and from circuits to one tc batch: per circuit an HTB class
//! (`rate` = min, `ceil` = max) under its node's class in each direction, and one u32 filter
//! per address: `dst` on the download port (traffic towards the subscriber), `src` on the
//! upload port. The batch is tc text, parsed by the same code as `htb-cli -b`, so an import is
//! exactly the script an operator could have written (`--print` shows it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use htb_config::filter::{Family, IpPrefix};
use htb_core::{ClassId, LeafSpec};

use htb_config::InterfaceName;
use htb_config::label::{self, ClassLabel, Device, LabelFields, LabelText};

use super::shaped_devices::{CircuitRates, ShapedDevice};

/// Why the devices do not make a consistent set of circuits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CircuitError {
    /// Two devices of one circuit disagree on something that belongs to the circuit.
    #[error(
        "line {line}: device \"{device}\" of circuit \"{circuit}\" has another \"{what}\" than \
         the circuit's first device on line {first_line} (devices of one circuit share its \
         plan and parent node)"
    )]
    Mismatch {
        /// The later device's line.
        line: u64,
        /// Its device id.
        device: String,
        /// The circuit.
        circuit: String,
        /// Which column disagrees.
        what: &'static str,
        /// The circuit's first line.
        first_line: u64,
    },
    /// Addresses of two circuits overlap: a packet would be counted to whichever came first.
    #[error(
        "line {line}: {address} overlaps {other} of circuit \"{other_circuit}\" on line \
         {other_line} (each address may belong to one circuit)"
    )]
    Overlap {
        /// The line of one address.
        line: u64,
        /// The address.
        address: IpPrefix,
        /// The line of the other.
        other_line: u64,
        /// The other address.
        other: IpPrefix,
        /// The other address's circuit.
        other_circuit: String,
    },
    /// No free class id is left below `ffffffff`.
    #[error("no free class minor left for {count} circuits from {first:x}")]
    NoMinor {
        /// Circuits to place.
        count: usize,
        /// Where allocation started.
        first: u32,
    },
    /// The file held no device.
    #[error("the file lists no device")]
    Empty,
}

/// A subscriber's circuit: one class per direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circuit {
    /// `Circuit ID` (a device without one gets `device:ID`).
    pub id: String,
    /// `Circuit Name`.
    pub name: String,
    /// `Parent Node`.
    pub node: String,
    /// The plan.
    pub rates: CircuitRates,
    /// Every device's addresses, duplicates removed, in file order.
    pub addresses: Vec<(IpPrefix, u64)>,
    /// The line of its first device.
    pub line: u64,
    /// Its leaf qdisc as tc's words (the `sqm` column); empty: htbd's default.
    pub sqm: String,
    /// `sqm`'s leaf, as its devices' rows read it; `None`: htbd's default.
    pub leaf: Option<LeafSpec>,
    /// Its label's parts: names, devices with their MACs and addresses, comment.
    pub label: LabelFields,
}

impl Circuit {
    /// Its label, as both its classes carry it (the file's texts made valid ones, and as
    /// many devices and addresses as a label holds: the label names the circuit, its filters
    /// shape every address).
    #[must_use]
    pub fn label(&self) -> Option<ClassLabel> {
        let fits = self.label.devices.len() <= label::DEVICES_MAX
            && self
                .label
                .devices
                .iter()
                .all(|d| d.addresses.len() <= label::ADDRESSES_MAX);
        if fits {
            // Most labels fit as they are: one copy of the fields, not one per try (a million
            // circuits' labels copied twice were a tenth of the import's batch).
            match ClassLabel::new(self.label.clone()) {
                Ok(label) => return Some(label),
                Err(label::LabelError::TooBig(_)) => {}
                Err(_) => return None,
            }
        }
        let mut fields = self.label.clone();
        fields.devices.truncate(label::DEVICES_MAX);
        for d in &mut fields.devices {
            d.addresses.truncate(label::ADDRESSES_MAX);
        }
        loop {
            match ClassLabel::new(fields.clone()) {
                Ok(label) => return Some(label),
                Err(label::LabelError::TooBig(_)) if !fields.devices.is_empty() => {
                    // The last device's addresses first, then the device.
                    let last = fields.devices.len() - 1;
                    if fields.devices[last].addresses.pop().is_none() {
                        fields.devices.pop();
                    }
                }
                Err(_) => return None,
            }
        }
    }
}

/// [`LabelText::lossy`], without its copy character by character when the text is a label's
/// text as it stands (most of a file's are: a million circuits' texts went through it).
fn lossy(text: &str) -> Option<LabelText> {
    let clean = !text.is_empty()
        && text.len() <= label::TEXT_MAX
        && text.trim().len() == text.len()
        && !text.chars().any(char::is_control);
    if clean {
        text.parse().ok()
    } else {
        LabelText::lossy(text)
    }
}

/// A device row's part of its circuit's label (a device without an id is known by its name,
/// else by its line).
fn label_device(d: &ShapedDevice) -> Option<Device> {
    let id = lossy(&d.device_id)
        .or_else(|| lossy(&d.device_name))
        .or_else(|| lossy(&format!("line {}", d.line)))?;
    Some(Device {
        id,
        name: lossy(&d.device_name),
        mac: d.mac,
        addresses: d.addresses.clone(),
    })
}

/// Groups devices into circuits, in the order circuits first appear.
///
/// # Errors
/// Devices of one circuit that disagree on the plan or parent node; addresses that overlap
/// across circuits; no device.
pub fn group(devices: Vec<ShapedDevice>) -> Result<Vec<Circuit>, CircuitError> {
    let mut circuits: Vec<Circuit> = Vec::with_capacity(devices.len());
    let mut index: HashMap<String, usize> = HashMap::with_capacity(devices.len());
    for d in devices {
        // The label's parts first: the rest of the row moves into its circuit.
        let (device, comment) = (label_device(&d), lossy(&d.comment));
        let circuit = lossy(&d.circuit_id);
        let id = if d.circuit_id.is_empty() {
            format!("device:{}", d.device_id)
        } else {
            d.circuit_id
        };
        let at = match index.get(&id) {
            Some(&at) => {
                let c = &circuits[at];
                let mismatch = |what| CircuitError::Mismatch {
                    line: d.line,
                    device: d.device_id.clone(),
                    circuit: c.id.clone(),
                    what,
                    first_line: c.line,
                };
                if c.rates != d.rates {
                    return Err(mismatch("Download/Upload Min/Max Mbps"));
                }
                if c.sqm != d.sqm {
                    return Err(mismatch("sqm"));
                }
                if c.node != d.parent_node {
                    return Err(mismatch("Parent Node"));
                }
                at
            }
            None => {
                // A new circuit takes the device's fields (a million-circuit file copied each).
                index.insert(id.clone(), circuits.len());
                let label = LabelFields {
                    name: lossy(&d.circuit_name),
                    circuit,
                    comment: None,
                    devices: Vec::new(),
                };
                circuits.push(Circuit {
                    id,
                    label,
                    name: d.circuit_name,
                    node: d.parent_node,
                    rates: d.rates,
                    addresses: Vec::with_capacity(d.addresses.len()),
                    line: d.line,
                    sqm: d.sqm,
                    leaf: d.leaf,
                });
                circuits.len() - 1
            }
        };
        let c = &mut circuits[at];
        if c.label.comment.is_none() {
            c.label.comment = comment;
        }
        c.label.devices.extend(device);
        for a in d.addresses {
            if !c.addresses.iter().any(|(b, _)| *b == a) {
                c.addresses.push((a, d.line));
            }
        }
    }
    if circuits.is_empty() {
        return Err(CircuitError::Empty);
    }
    check_overlaps(&circuits)?;
    Ok(circuits)
}

/// Prefixes nest or are disjoint, so after sorting by (family, first address, length) an
/// overlap is always with the widest prefix still open: one sweep, O(n log n).
fn check_overlaps(circuits: &[Circuit]) -> Result<(), CircuitError> {
    let mut all: Vec<(Family, u128, u128, usize, IpPrefix, u64)> =
        Vec::with_capacity(circuits.iter().map(|c| c.addresses.len()).sum());
    for (i, c) in circuits.iter().enumerate() {
        for &(p, line) in &c.addresses {
            let host_bits = u32::from(p.family().bits() - p.prefix_len());
            let last =
                p.network_bits() | u128::MAX.checked_shl(host_bits).map_or(u128::MAX, |m| !m);
            all.push((p.family(), p.network_bits(), last, i, p, line));
        }
    }
    all.sort_by_key(|&(f, first, last, ..)| (f == Family::V6, first, std::cmp::Reverse(last)));
    let mut open: Option<&(Family, u128, u128, usize, IpPrefix, u64)> = None;
    for entry in &all {
        let (family, first, last, circuit, address, line) = *entry;
        if let Some(&(of, _, olast, ocircuit, other, oline)) = open
            && of == family
            && first <= olast
        {
            if ocircuit != circuit {
                return Err(CircuitError::Overlap {
                    line,
                    address,
                    other_line: oline,
                    other,
                    other_circuit: circuits[ocircuit].id.clone(),
                });
            }
            if last <= olast {
                continue;
            }
        }
        open = Some(entry);
    }
    Ok(())
}

/// Where the circuits go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The port towards the subscribers (download tree, filters on `dst`).
    pub download_dev: Option<InterfaceName>,
    /// The port towards the upstream (upload tree, filters on `src`).
    pub upload_dev: Option<InterfaceName>,
    /// The class circuits hang under unless their node is mapped.
    pub parent: ClassId,
    /// `Parent Node` name → class, the same id in both trees.
    pub nodes: BTreeMap<String, ClassId>,
    /// The IPv4 filters' prio; IPv6 filters take the next one (tc keeps one protocol per prio).
    pub prio: u32,
}

impl Placement {
    /// The class a circuit's class hangs under.
    #[must_use]
    pub fn parent_of(&self, circuit: &Circuit) -> ClassId {
        self.nodes
            .get(&circuit.node)
            .copied()
            .unwrap_or(self.parent)
    }

    /// The ports, download first.
    pub fn devs(&self) -> impl Iterator<Item = (&InterfaceName, Direction)> {
        self.download_dev
            .as_ref()
            .map(|d| (d, Direction::Download))
            .into_iter()
            .chain(self.upload_dev.as_ref().map(|d| (d, Direction::Upload)))
    }
}

/// Which tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Towards the subscriber: `Download * Mbps`, filters on the destination.
    Download,
    /// From the subscriber: `Upload * Mbps`, filters on the source.
    Upload,
}

/// Gives each circuit the lowest free minor at or above `first` under `major` (the same id in
/// both trees, so circuit N is one class id everywhere).
///
/// # Errors
/// The minors run out.
pub fn allocate(
    count: usize,
    major: u16,
    first: u32,
    used: &BTreeSet<u32>,
) -> Result<Vec<ClassId>, CircuitError> {
    let mut ids = Vec::with_capacity(count);
    let mut minor = first.max(1);
    while ids.len() < count {
        if !used.contains(&minor) {
            ids.push(ClassId::new(major, minor));
        }
        minor = minor
            .checked_add(1)
            .ok_or(CircuitError::NoMinor { count, first })?;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::super::shaped_devices::read;
    use super::*;

    const HEADER: &str = concat!(super::super::shaped_devices::libreqos_header!(), "\n");

    fn circuits(rows: &str) -> Result<Vec<Circuit>, CircuitError> {
        group(read(&format!("{HEADER}{rows}")).unwrap())
    }

    /// The shortcut for clean texts makes what `LabelText::lossy` makes, clean or not.
    #[test]
    fn label_texts_are_made_as_lossy_makes_them() {
        let long = "é".repeat(200);
        for text in [
            "",
            " ",
            "Ann",
            " Ann ",
            "Ann\tO'Neil",
            "a\nb",
            "\u{85}x",
            "x\u{3000}",
            "\"quoted\" 'both'",
            &"a".repeat(256),
            &"a".repeat(257),
            &long,
        ] {
            assert_eq!(lossy(text), LabelText::lossy(text), "{text:?}");
        }
        assert!(lossy("Ann").is_some() && lossy(" \t").is_none());
    }

    #[test]
    fn devices_of_a_circuit_share_its_class() {
        let c = circuits(
            "2794,Littleton,5,D5,AP_11,,100.64.0.5,fd00:5::/56,1,1,105,18,\n\
             7,Peg Shop,9,D9,AP_7,,100.64.0.9,,1,1,105,18,\n\
             2794,Littleton,6,D6,AP_11,,\"100.64.0.6, 100.64.0.5\",,1,1,105,18,\n\
             ,No circuit,11,D11,,,100.64.0.11,,1,1,10,10,\n",
        )
        .unwrap();
        let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["2794", "7", "device:11"]);
        let addrs: Vec<(String, u64)> = c[0]
            .addresses
            .iter()
            .map(|(a, l)| (a.to_string(), *l))
            .collect();
        assert_eq!(
            addrs,
            [
                ("100.64.0.5/32".into(), 2),
                ("fd00:5::/56".into(), 2),
                ("100.64.0.6/32".into(), 4)
            ]
        );
    }

    #[test]
    fn inconsistent_circuits_and_overlaps_are_refused_with_both_lines() {
        let e = circuits(
            "1,A,1,D1,AP,,10.0.0.1,,1,1,10,10,\n\
             1,A,2,D2,AP,,10.0.0.2,,1,1,20,10,\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "line 3: device \"2\" of circuit \"1\" has another \
                 \"Download/Upload Min/Max Mbps\" than the circuit's first device on line 2"
            ),
            "{e}"
        );
        let e = circuits(
            "1,A,1,D1,AP,,10.0.0.1,,1,1,10,10,\n\
             1,A,2,D2,AP2,,10.0.0.2,,1,1,10,10,\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"Parent Node\""), "{e}");
        let e = circuits(
            "1,A,1,D1,,,10.0.0.0/29,,1,1,10,10,\n\
             2,B,2,D2,,,10.0.1.1,,1,1,10,10,\n\
             3,C,3,D3,,,10.0.0.6,,1,1,10,10,\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: 10.0.0.6/32 overlaps 10.0.0.0/29 of circuit \"1\" on line 2 (each address \
             may belong to one circuit)"
        );
        let e = circuits(
            "1,A,1,D1,,,,fd00::/56,1,1,10,10,\n\
             2,B,2,D2,,,,fd00:0:0:ff::1,1,1,10,10,\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("overlaps fd00::/56"), "{e}");
        // The same numbers in two families, and a circuit's own nested addresses, are fine.
        circuits(
            "1,A,1,D1,,,10.0.0.0/29,::a00:1,1,1,10,10,\n\
             1,A,2,D2,,,10.0.0.1,,1,1,10,10,\n\
             2,B,3,D3,,,10.0.0.8,,1,1,10,10,\n",
        )
        .unwrap();
        assert_eq!(group(Vec::new()), Err(CircuitError::Empty));
    }

    #[test]
    fn minors_skip_those_in_use() {
        let used = BTreeSet::from([1, 2, 4]);
        let ids = allocate(3, 1, 1, &used).unwrap();
        assert_eq!(
            ids,
            [ClassId::new(1, 3), ClassId::new(1, 5), ClassId::new(1, 6)]
        );
        assert!(allocate(2, 1, u32::MAX, &BTreeSet::new()).is_err());
    }
}
