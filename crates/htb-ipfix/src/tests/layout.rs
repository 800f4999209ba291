//! Whole messages compared byte for byte with RFC 7011's layout, written out by hand.

use super::*;

/// The Field Specifiers both templates share after the addresses (§3.2): IANA's elements as
/// id and length, then htbd's with the enterprise bit, the length and PEN 32473 (0x7ed9).
const COMMON_SPECIFIERS: [u8; 92] = [
    0x00, 0x04, 0x00, 0x01, // protocolIdentifier (4), 1 byte
    0x00, 0x07, 0x00, 0x02, // sourceTransportPort (7), 2
    0x00, 0x0b, 0x00, 0x02, // destinationTransportPort (11), 2
    0x00, 0x06, 0x00, 0x01, // tcpControlBits (6), 1
    0x00, 0x3a, 0x00, 0x02, // vlanId (58), 2
    0x00, 0x01, 0x00, 0x08, // octetDeltaCount (1), 8
    0x00, 0x02, 0x00, 0x08, // packetDeltaCount (2), 8
    0x00, 0x98, 0x00, 0x08, // flowStartMilliseconds (152), 8
    0x00, 0x99, 0x00, 0x08, // flowEndMilliseconds (153), 8
    0x00, 0x88, 0x00, 0x01, // flowEndReason (136), 1
    0x00, 0x0a, 0x00, 0x04, // ingressInterface (10), 4
    0x00, 0x0e, 0x00, 0x04, // egressInterface (14), 4
    0x00, 0x22, 0x00, 0x04, // samplingInterval (34), 4
    0x80, 0x01, 0x00, 0x08, 0x00, 0x00, 0x7e, 0xd9, // htbClass (E1), 8, PEN 32473
    0x80, 0x02, 0x00, 0x04, 0x00, 0x00, 0x7e, 0xd9, // htbRttMinMicroseconds (E2), 4
    0x80, 0x03, 0x00, 0x04, 0x00, 0x00, 0x7e, 0xd9, // htbRttMedianMicroseconds (E3), 4
    0x80, 0x04, 0x00, 0x04, 0x00, 0x00, 0x7e, 0xd9, // htbRetransmits (E4), 4
    0x80, 0x05, 0x00, 0x08, 0x00, 0x00, 0x7e, 0xd9, // htbLeafDrops (E5), 8
];

/// The Template Set with templates 256 and 257 (§3.3.2, §3.4.1), as `export` sends it.
fn template_set() -> Vec<u8> {
    let mut t = vec![
        0x00, 0x02, 0x00, 0xd4, // Set ID 2 (templates), length 212
        0x01, 0x00, 0x00, 0x14, // Template ID 256, 20 fields
        0x00, 0x08, 0x00, 0x04, // sourceIPv4Address (8), 4
        0x00, 0x0c, 0x00, 0x04, // destinationIPv4Address (12), 4
    ];
    t.extend_from_slice(&COMMON_SPECIFIERS);
    t.extend_from_slice(&[
        0x01, 0x01, 0x00, 0x14, // Template ID 257, 20 fields
        0x00, 0x1b, 0x00, 0x10, // sourceIPv6Address (27), 16
        0x00, 0x1c, 0x00, 0x10, // destinationIPv6Address (28), 16
    ]);
    t.extend_from_slice(&COMMON_SPECIFIERS);
    assert_eq!(t.len(), 212);
    t
}

#[test]
fn a_message_with_templates_and_one_ipv4_record_is_byte_exact() {
    let mut e = exporter(1400);
    let messages = e.export(NOW, &[record("10.0.0.1", "10.0.0.2")]);
    let mut want = vec![
        // Message header (§3.1): version 10, length 16 + 212 + 93 = 321.
        0x00, 0x0a, 0x01, 0x41,
        // Export Time: 1 700 000 005 s (NOW is 1 700 000 005 123 ms).
        0x65, 0x53, 0xf1, 0x05, // Sequence Number: no data record sent before.
        0x00, 0x00, 0x00, 0x00, // Observation Domain ID 7.
        0x00, 0x00, 0x00, 0x07,
    ];
    want.extend_from_slice(&template_set());
    want.extend_from_slice(&[
        0x01, 0x00, 0x00, 0x5d, // Set ID 256 (a data set of template 256), length 4 + 89
        10, 0, 0, 1, // sourceIPv4Address
        10, 0, 0, 2,  // destinationIPv4Address
        17, // protocolIdentifier: UDP
        0x9c, 0x40, // sourceTransportPort 40000
        0x14, 0x51, // destinationTransportPort 5201
        0x00, // tcpControlBits
        0x00, 0x64, // vlanId 100
        0, 0, 0, 0, 0, 0x0f, 0x42, 0x40, // octetDeltaCount 1 000 000
        0, 0, 0, 0, 0, 0, 0x03, 0xe8, // packetDeltaCount 1000
        0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // flowStartMilliseconds 1 700 000 000 000
        0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x77, 0xa0, // flowEndMilliseconds 1 700 000 004 000
        0x01, // flowEndReason: idle timeout
        0, 0, 0, 3, // ingressInterface 3
        0, 0, 0, 4, // egressInterface 4
        0, 0, 0, 1, // samplingPacketInterval 1
        0, 0, 0, 1, 0, 0, 0, 0x10, // htbClass 1:10: major, then minor
        0, 0, 0x01, 0xa4, // htbRttMinMicroseconds 420
        0, 0, 0x04, 0xe2, // htbRttMedianMicroseconds 1250
        0, 0, 0, 2, // htbRetransmits 2
        0, 0, 0, 0, 0, 0, 0, 7, // htbLeafDrops 7
    ]);
    assert_eq!(want.len(), 321);
    assert_eq!(messages, [want]);
    assert_eq!(e.records_sent(), 1);
}

#[test]
fn the_templates_alone_are_a_header_and_the_template_set() {
    let mut e = exporter(1400);
    let mut want = vec![
        0x00, 0x0a, 0x00, 0xe4, // version 10, length 16 + 212 = 228
        0x65, 0x53, 0xf1, 0x05, // Export Time
        0x00, 0x00, 0x00, 0x00, // Sequence Number 0
        0x00, 0x00, 0x00, 0x07, // domain 7
    ];
    want.extend_from_slice(&template_set());
    assert_eq!(e.templates_due(NOW), Some(want));
}

#[test]
fn an_ipv6_record_carries_16_byte_addresses_in_a_set_of_template_257() {
    let mut e = exporter(1400);
    e.templates_due(NOW);
    let mut r = record("2001:db8::1", "2001:db8::2");
    r.class = None;
    r.rtt_min_us = None;
    r.rtt_median_us = None;
    r.vlan = None;
    let m = e.export(NOW + 1000, &[r]).remove(0);
    // Header (length 16 + 4 + 113 = 133, sequence 0) and one data set of 257, nothing else.
    assert_eq!(&m[..4], &[0x00, 0x0a, 0x00, 0x85]);
    assert_eq!(&m[16..20], &[0x01, 0x01, 0x00, 0x75]);
    let d = &m[20..];
    assert_eq!(d.len(), 113);
    let mut addresses = [0u8; 32];
    addresses[..2].copy_from_slice(&[0x20, 0x01]);
    addresses[2..4].copy_from_slice(&[0x0d, 0xb8]);
    addresses[15] = 1;
    addresses[16..18].copy_from_slice(&[0x20, 0x01]);
    addresses[18..20].copy_from_slice(&[0x0d, 0xb8]);
    addresses[31] = 2;
    assert_eq!(&d[..32], &addresses);
    // vlanId 0 for none; htbClass and both round trips 0 for none.
    assert_eq!(&d[32 + 6..32 + 8], &[0, 0]);
    let enterprise = 32 + 1 + 2 + 2 + 1 + 2 + 8 + 8 + 8 + 8 + 1 + 4 + 4 + 4;
    assert_eq!(&d[enterprise..enterprise + 16], &[0; 16]);
    assert_eq!(&d[enterprise + 16..], &[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7]);
}

#[test]
fn the_template_table_matches_the_fields() {
    let v4 = fields(false);
    let v6 = fields(true);
    assert_eq!(v4.len(), 20);
    assert_eq!(
        v4[..2],
        [
            Field {
                id: 8,
                pen: None,
                len: 4
            },
            Field {
                id: 12,
                pen: None,
                len: 4
            }
        ]
    );
    assert_eq!(
        v6[..2],
        [
            Field {
                id: 27,
                pen: None,
                len: 16
            },
            Field {
                id: 28,
                pen: None,
                len: 16
            }
        ]
    );
    assert_eq!(v4[2..], v6[2..]);
    // Standard elements first, then the enterprise ones, all under PEN 32473.
    let enterprise: Vec<_> = v4
        .iter()
        .filter_map(|f| f.pen.map(|p| (f.id, p, f.len)))
        .collect();
    assert_eq!(
        enterprise,
        [
            (1, 32473, 8),
            (2, 32473, 4),
            (3, 32473, 4),
            (4, 32473, 4),
            (5, 32473, 8)
        ]
    );
    assert!(v4[..15].iter().all(|f| f.pen.is_none()));
    assert_eq!(PEN, 32473);
    let len = |f: &[Field]| f.iter().map(|f| usize::from(f.len)).sum::<usize>();
    assert_eq!((len(v4), len(v6)), (89, 113));
}
