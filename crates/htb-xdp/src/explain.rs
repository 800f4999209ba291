//! "Why this class?": a packet made up from addresses, ports and a protocol, classified by a
//! port's own compiled classifier (the one its data plane runs, so the answer cannot differ
//! from what a real packet meets) and, when no filter matches, sent where HTB's default sends
//! it (`htb_classify`'s unclassified result, the kernel's `htb_classify` falling back to
//! `q->defcls`, or the direct queue when that class does not exist).

use std::net::IpAddr;

use htb_classify::{Classifier, Match};
use htb_core::ClassId;

/// A packet to explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (the same family as `src`).
    pub dst: IpAddr,
    /// IP protocol (6 TCP and 17 UDP get a header with the ports; others none).
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// Why a probe is not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// IPv4 and IPv6 mixed.
    #[error("{0} and {1} are of different address families")]
    Families(IpAddr, IpAddr),
}

impl Probe {
    /// The frame: Ethernet, IPv4 (no options) or IPv6, and a TCP or UDP header.
    ///
    /// # Errors
    /// [`ProbeError`]: the addresses' families differ.
    pub fn frame(&self) -> Result<Vec<u8>, ProbeError> {
        let l4: Vec<u8> = match self.proto {
            6 => {
                let mut tcp = vec![0u8; 20];
                tcp[..2].copy_from_slice(&self.sport.to_be_bytes());
                tcp[2..4].copy_from_slice(&self.dport.to_be_bytes());
                tcp[12] = 5 << 4; // data offset: 20 bytes
                tcp[13] = 0x10; // ACK
                tcp
            }
            17 => {
                let mut udp = vec![0u8; 8];
                udp[..2].copy_from_slice(&self.sport.to_be_bytes());
                udp[2..4].copy_from_slice(&self.dport.to_be_bytes());
                udp[4..6].copy_from_slice(&8u16.to_be_bytes());
                udp
            }
            _ => Vec::new(),
        };
        let mut frame = vec![0u8; 12];
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                frame.extend_from_slice(&0x0800u16.to_be_bytes());
                let total = u16::try_from(20 + l4.len()).unwrap_or(u16::MAX);
                let mut ip = vec![0x45, 0];
                ip.extend_from_slice(&total.to_be_bytes());
                ip.extend_from_slice(&[0, 0, 0x40, 0, 64, self.proto, 0, 0]);
                ip.extend_from_slice(&src.octets());
                ip.extend_from_slice(&dst.octets());
                frame.extend_from_slice(&ip);
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                frame.extend_from_slice(&0x86ddu16.to_be_bytes());
                let payload = u16::try_from(l4.len()).unwrap_or(u16::MAX);
                frame.extend_from_slice(&[0x60, 0, 0, 0]);
                frame.extend_from_slice(&payload.to_be_bytes());
                frame.extend_from_slice(&[self.proto, 64]);
                frame.extend_from_slice(&src.octets());
                frame.extend_from_slice(&dst.octets());
            }
            (a, b) => return Err(ProbeError::Families(a, b)),
        }
        frame.extend_from_slice(&l4);
        Ok(frame)
    }
}

/// Where a port sends a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classified {
    /// The first matching filter (position `index` in prio order).
    Filter {
        /// Its position.
        index: usize,
        /// Its prio.
        prio: u32,
        /// What it matches.
        matcher: Match,
        /// Its class.
        class: ClassId,
        /// It has a policer.
        policed: bool,
    },
    /// No filter: the tree's default class.
    Default(ClassId),
    /// No filter and no default class: the direct queue (unshaped).
    Direct,
    /// No filter under `mq`: each tree's default class (the TX queue's tree decides).
    MqDefault(Vec<ClassId>),
    /// No tree.
    Unshaped,
}

/// Classifies `frame` by `classifier` (general u32 keys read from its bytes; policers are not
/// run: their verdict depends on their bucket at that instant), falling back to the default
/// classes of the port's trees (`defaults`: each tree's default leaf, if it has one).
#[must_use]
pub fn classify(classifier: &Classifier, defaults: &[Option<ClassId>], frame: &[u8]) -> Classified {
    let parsed = crate::parse::parse(frame);
    if let Some(index) = classifier.classify_index_headers(&parsed.info, &parsed.headers(frame))
        && let Some(filter) = classifier.filter(index)
    {
        return Classified::Filter {
            index,
            prio: filter.prio,
            matcher: filter.matcher,
            class: filter.class,
            policed: filter.police.is_some(),
        };
    }
    match defaults {
        [] => Classified::Unshaped,
        [Some(class)] => Classified::Default(*class),
        [None] => Classified::Direct,
        several => Classified::MqDefault(several.iter().flatten().copied().collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_classify::{Filter, IpPrefix, Match};

    fn filter(prio: u32, matcher: Match, class: u32) -> Filter {
        Filter {
            prio,
            matcher,
            class: ClassId::new(1, class),
            police: None,
        }
    }

    fn probe(src: &str, dst: &str, proto: u8, dport: u16) -> Vec<u8> {
        Probe {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto,
            sport: 40000,
            dport,
        }
        .frame()
        .unwrap()
    }

    #[test]
    fn the_first_matching_filter_by_prio_else_the_default_else_direct() {
        let subscriber = Match {
            dst: IpPrefix::new("10.0.3.7".parse().unwrap(), 32),
            ..Match::default()
        };
        let web = Match {
            proto: Some(6),
            dport: Some(htb_classify::PortRange {
                first: 443,
                last: 443,
            }),
            ..Match::default()
        };
        let classifier = Classifier::new(vec![filter(2, subscriber, 10), filter(1, web, 30)]);
        let defaults = [Some(ClassId::new(1, 20))];
        let to = |proto, dport| {
            classify(
                &classifier,
                &defaults,
                &probe("192.0.2.1", "10.0.3.7", proto, dport),
            )
        };
        // prio 1 (HTTPS) before prio 2 (the subscriber), whatever the order they were given in.
        assert!(
            matches!(to(6, 443), Classified::Filter { prio: 1, class, .. } if class == ClassId::new(1, 30))
        );
        assert!(
            matches!(to(17, 443), Classified::Filter { prio: 2, index: 1, class, .. } if class == ClassId::new(1, 10))
        );
        let from = classify(
            &classifier,
            &defaults,
            &probe("10.0.3.7", "192.0.2.1", 17, 53),
        );
        assert_eq!(from, Classified::Default(ClassId::new(1, 20)));
        let direct = classify(
            &classifier,
            &[None],
            &probe("10.0.3.7", "192.0.2.1", 17, 53),
        );
        assert_eq!(direct, Classified::Direct);
        assert_eq!(
            classify(&classifier, &[], &probe("10.0.3.8", "192.0.2.1", 1, 0)),
            Classified::Unshaped
        );
        // IPv6 goes through the same parser.
        let v6 = Match {
            src: IpPrefix::new("2001:db8::7".parse().unwrap(), 128),
            ..Match::default()
        };
        let classifier = Classifier::new(vec![filter(1, v6, 40)]);
        assert!(matches!(
            classify(&classifier, &defaults, &probe("2001:db8::7", "2001:db8::1", 6, 80)),
            Classified::Filter { class, .. } if class == ClassId::new(1, 40)
        ));
        assert!(
            Probe {
                src: "10.0.0.1".parse().unwrap(),
                dst: "::1".parse().unwrap(),
                proto: 17,
                sport: 0,
                dport: 0
            }
            .frame()
            .is_err()
        );
    }
}
