use std::net::IpAddr;
use std::time::Duration;

use proptest::prelude::*;

use crate::*;

fn record(src: &str, dst: &str) -> FlowRecord {
    FlowRecord {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto: 17,
        src_port: 40000,
        dst_port: 5201,
        vlan: Some(100),
        tcp_flags: 0,
        octets: 1_000_000,
        packets: 1000,
        start_ms: 1_700_000_000_000,
        end_ms: 1_700_000_004_000,
        end_reason: EndReason::IdleTimeout,
        ingress_if: 3,
        egress_if: 4,
        class: Some(ClassId::new(1, 0x10)),
        rtt_min_us: Some(420),
        rtt_median_us: Some(1250),
        retransmits: 2,
        leaf_drops: 7,
        sampling_interval: 1,
    }
}

fn exporter(max_message: usize) -> Exporter {
    Exporter::new(ExporterConfig {
        observation_domain: 7,
        template_refresh: Duration::from_secs(60),
        max_message,
    })
    .unwrap()
}

const NOW: u64 = 1_700_000_005_123;

#[test]
fn a_message_is_laid_out_as_rfc_7011_says() {
    let mut e = exporter(1400);
    let m = e.export(NOW, &[record("10.0.0.1", "10.0.0.2")]);
    assert_eq!(m.len(), 1);
    let m = &m[0];
    // Header (§3.1): version 10, length, export time in s, sequence 0, domain 7.
    let template_set = 4 + 2 * (4 + 2 * 4 + 13 * 4 + 5 * 8);
    let v4_record = 4 + 4 + 1 + 2 + 2 + 1 + 2 + 8 + 8 + 8 + 8 + 1 + 4 + 4 + 4 + 8 + 4 + 4 + 4 + 8;
    assert_eq!(v4_record, 89);
    assert_eq!(m.len(), 16 + template_set + 4 + v4_record);
    assert_eq!(&m[0..2], &[0, 10]);
    assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
    assert_eq!(
        u32::from_be_bytes(m[4..8].try_into().unwrap()),
        1_700_000_005
    );
    assert_eq!(&m[8..12], &[0, 0, 0, 0]);
    assert_eq!(&m[12..16], &[0, 0, 0, 7]);
    // Template set (§3.4.1): id 2, its length, template 256 with 20 fields, the first
    // sourceIPv4Address (8) of 4 bytes ...
    let t = &m[16..];
    assert_eq!(&t[0..2], &[0, 2]);
    assert_eq!(usize::from(u16::from_be_bytes([t[2], t[3]])), template_set);
    assert_eq!(&t[4..8], &[1, 0, 0, 20]);
    assert_eq!(&t[8..12], &[0, 8, 0, 4]);
    assert_eq!(&t[12..16], &[0, 12, 0, 4]);
    // ... htbClass: the enterprise bit, id 1, 8 bytes, PEN 32473 (0x7ed9).
    let class_spec = 8 + 2 * 4 + 13 * 4;
    assert_eq!(
        &t[class_spec..class_spec + 8],
        &[0x80, 1, 0, 8, 0, 0, 0x7e, 0xd9]
    );
    // The data set: id 256, its length, then the record: addresses, protocol 17, ports.
    let d = &m[16 + template_set..];
    assert_eq!(&d[0..4], &[1, 0, 0, 4 + 89]);
    assert_eq!(&d[4..12], &[10, 0, 0, 1, 10, 0, 0, 2]);
    assert_eq!(d[12], 17);
    assert_eq!(&d[13..17], &[0x9c, 0x40, 0x14, 0x51]);
    // tcpControlBits, vlanId 100, octets 1 000 000.
    assert_eq!(&d[17..20], &[0, 0, 100]);
    assert_eq!(&d[20..28], &1_000_000u64.to_be_bytes());
    // htbClass 1:10 is major 1 in the high word, minor 0x10 in the low.
    let class_at = 4 + 4 + 4 + 1 + 2 + 2 + 1 + 2 + 8 + 8 + 8 + 8 + 1 + 4 + 4 + 4;
    assert_eq!(&d[class_at..class_at + 8], &[0, 0, 0, 1, 0, 0, 0, 0x10]);
    assert_eq!(e.records_sent(), 1);
}

#[test]
fn records_of_both_families_read_back_as_they_were_sent() {
    let mut e = exporter(1400);
    let mut v6 = record("2001:db8::1", "2001:db8::2");
    v6.class = None;
    v6.rtt_min_us = None;
    v6.rtt_median_us = None;
    v6.vlan = None;
    v6.end_reason = EndReason::LackOfResources;
    let sent = vec![
        record("10.0.0.1", "10.0.0.2"),
        v6,
        record("192.0.2.1", "192.0.2.9"),
    ];
    let mut c = Collector::new();
    let got: Vec<FlowRecord> = e
        .export(NOW, &sent)
        .iter()
        .flat_map(|m| c.decode(m).unwrap().records)
        .collect();
    assert_eq!(got, sent);
    assert_eq!(c.known_templates(), 2);
}

#[test]
fn small_messages_carry_every_record_once_with_counted_sequence_numbers() {
    let smallest = Exporter::smallest_message();
    let mut e = exporter(smallest);
    let sent: Vec<FlowRecord> = (0..25u16)
        .map(|i| {
            let mut r = if i % 3 == 0 {
                record("2001:db8::1", "2001:db8::2")
            } else {
                record("10.0.0.1", "10.0.0.2")
            };
            r.src_port = i;
            r
        })
        .collect();
    let messages = e.export(NOW, &sent);
    assert!(messages.len() > 3, "{} messages", messages.len());
    let mut c = Collector::new();
    let mut got = Vec::new();
    for m in &messages {
        assert!(m.len() <= smallest, "{} bytes", m.len());
        let d = c.decode(m).unwrap();
        assert_eq!(
            u64::from(d.sequence),
            got.len() as u64,
            "records before this message"
        );
        got.extend(d.records);
    }
    assert_eq!(got, sent);
    // The next call goes on counting.
    let next = e.export(NOW + 1, &[record("10.0.0.1", "10.0.0.2")]);
    assert_eq!(c.decode(&next[0]).unwrap().sequence, 25);
    assert!(matches!(
        Exporter::new(ExporterConfig {
            max_message: smallest - 1,
            ..ExporterConfig::default()
        }),
        Err(ExporterError::MessageTooSmall(..))
    ));
}

#[test]
fn templates_go_first_and_again_after_the_refresh() {
    let mut e = exporter(1400);
    let first = e
        .templates_due(NOW)
        .expect("the first call sends templates");
    assert_eq!(Collector::new().decode(&first).unwrap().templates, 2);
    assert_eq!(e.templates_due(NOW + 59_999), None);
    // Data without templates: a collector that restarted cannot read it ...
    let data = e.export(NOW + 30_000, &[record("10.0.0.1", "10.0.0.2")]);
    let mut restarted = Collector::new();
    let d = restarted.decode(&data[0]).unwrap();
    assert_eq!((d.records.len(), d.unknown_sets), (0, 1));
    // ... until the refresh, which comes with the next data or alone.
    let data = e.export(NOW + 60_000, &[record("10.0.0.1", "10.0.0.2")]);
    assert_eq!(restarted.decode(&data[0]).unwrap().records.len(), 1);
    assert_eq!(e.templates_due(NOW + 60_001), None);
    assert!(e.templates_due(NOW + 120_000).is_some());
    // A clock stepped back sends them too.
    assert!(e.templates_due(NOW).is_some());
}

#[test]
fn every_malformed_message_is_refused_and_teaches_nothing() {
    let mut e = exporter(1400);
    let good = e.export(NOW, &[record("10.0.0.1", "10.0.0.2")]).remove(0);
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = good.clone();
        f(&mut m);
        m
    };
    let set_len = |m: &mut Vec<u8>, at: usize, len: u16| {
        m[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    };
    let data_at = good.len() - 93;
    let cases: Vec<(Vec<u8>, DecodeError)> = vec![
        (good[..10].to_vec(), DecodeError::Short(10)),
        (with(&|m| m[1] = 9), DecodeError::Version(9)),
        (
            with(&|m| m.push(0)),
            DecodeError::Length {
                said: good.len(),
                has: good.len() + 1,
            },
        ),
        (
            with(&|m| set_len(m, 16, 3)),
            DecodeError::SetLength { at: 16, len: 3 },
        ),
        (
            with(&|m| set_len(m, data_at, 2000)),
            DecodeError::SetLength {
                at: data_at,
                len: 2000,
            },
        ),
        (
            with(&|m| m[data_at..data_at + 2].copy_from_slice(&[0, 5])),
            DecodeError::ReservedSet(5),
        ),
        // Template 256's field count beyond its set.
        (with(&|m| m[23] = 200), DecodeError::Template(16)),
        // flowEndReason 9.
        (
            with(&|m| m[data_at + 4 + 4 + 4 + 1 + 2 + 2 + 1 + 2 + 32] = 9),
            DecodeError::Record {
                template: 256,
                why: "an unassigned flowEndReason",
            },
        ),
    ];
    for (message, want) in cases {
        let mut c = Collector::new();
        assert_eq!(c.decode(&message), Err(want));
        assert_eq!(c.known_templates(), 0, "{want}");
    }
    // Trailing bytes in a header-less tail are a set too short.
    let mut tail = good.clone();
    tail.extend_from_slice(&[0, 0]);
    let len = tail.len() as u16;
    tail[2..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        Collector::new().decode(&tail),
        Err(DecodeError::SetLength { .. })
    ));
}

#[test]
fn a_template_withdrawn_is_forgotten_and_unknown_data_is_skipped() {
    let mut e = exporter(1400);
    let mut c = Collector::new();
    c.decode(&e.templates_due(NOW).unwrap()).unwrap();
    // A withdrawal of 256 (§8.1): template set with id 256, count 0.
    let mut m = vec![0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    m.extend_from_slice(&[0, 2, 0, 8, 1, 0, 0, 0]);
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
    assert_eq!(c.decode(&m).unwrap().templates, 1);
    assert_eq!(c.known_templates(), 1);
    let data = e.export(NOW + 1, &[record("10.0.0.1", "10.0.0.2")]);
    assert_eq!(c.decode(&data[0]).unwrap().unknown_sets, 1);
}

fn arbitrary_record() -> impl Strategy<Value = FlowRecord> {
    (
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<(u8, u16, u16, u8, u16)>(),
        any::<(u64, u64, u64, u64)>(),
        (1u8..=5, any::<u32>(), any::<u32>(), any::<(u16, u32)>()),
        any::<(u32, u32, u32, u64, u32)>(),
    )
        .prop_map(
            |(
                v6,
                a,
                b,
                (proto, sp, dp, flags, vlan),
                (o, p, s, e),
                (reason, i, eg, class),
                (rmin, rmed, rt, drops, samp),
            )| {
                let addr = |x: [u8; 16]| {
                    if v6 {
                        IpAddr::from(x)
                    } else {
                        IpAddr::from([x[0], x[1], x[2], x[3]])
                    }
                };
                FlowRecord {
                    src: addr(a),
                    dst: addr(b),
                    proto,
                    src_port: sp,
                    dst_port: dp,
                    vlan: Some(vlan).filter(|&v| v != 0),
                    tcp_flags: flags,
                    octets: o,
                    packets: p,
                    start_ms: s,
                    end_ms: e,
                    end_reason: EndReason::from_code(reason).unwrap(),
                    ingress_if: i,
                    egress_if: eg,
                    class: Some(ClassId::new(class.0, class.1)).filter(|_| class != (0, 0)),
                    rtt_min_us: Some(rmin).filter(|&v| v != 0),
                    rtt_median_us: Some(rmed).filter(|&v| v != 0),
                    retransmits: rt,
                    leaf_drops: drops,
                    sampling_interval: samp,
                }
            },
        )
}

proptest! {
    #[test]
    fn any_records_read_back_exactly(records in proptest::collection::vec(arbitrary_record(), 0..40), max in 341usize..3000) {
        let mut e = exporter(max.max(Exporter::smallest_message()));
        let mut c = Collector::new();
        let mut got = Vec::new();
        for m in e.export(NOW, &records) {
            let d = c.decode(&m).unwrap();
            prop_assert_eq!(u64::from(d.sequence), got.len() as u64);
            got.extend(d.records);
        }
        prop_assert_eq!(got, records);
    }

    #[test]
    fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Collector::new().decode(&bytes);
    }
}
