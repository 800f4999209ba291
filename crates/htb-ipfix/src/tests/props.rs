//! Properties over arbitrary records and bytes: exact round trips at any message size, and a
//! decoder that refuses or reads anything without panicking.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

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
    fn any_records_read_back_exactly(
        records in proptest::collection::vec(arbitrary_record(), 0..40),
        max in 0usize..3000,
    ) {
        let max = max.max(Exporter::smallest_message());
        let mut e = exporter(max);
        let mut c = Collector::new();
        let mut got = Vec::new();
        for m in e.export(NOW, &records) {
            prop_assert!(m.len() <= max);
            let d = c.decode(&m).unwrap();
            prop_assert_eq!(u64::from(d.sequence), got.len() as u64);
            got.extend(d.records);
        }
        prop_assert_eq!(&got, &records);
        prop_assert_eq!(e.records_sent(), records.len() as u64);
    }

    #[test]
    fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Collector::new().decode(&bytes);
    }

    /// Bytes changed in a valid message reach past the header checks, into sets and records.
    #[test]
    fn any_change_to_a_message_is_read_or_refused(
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut e = exporter(1400);
        let mut m = e
            .export(NOW, &[record("10.0.0.1", "10.0.0.2"), record("2001:db8::1", "2001:db8::2")])
            .remove(0);
        for (at, byte) in changes {
            let at = at.index(m.len());
            m[at] = byte;
        }
        let _ = Collector::new().decode(&m);
        // And cut short, with the header's length made to agree.
        m.truncate(cut.index(m.len()).max(16));
        let len = m.len() as u16;
        m[2..4].copy_from_slice(&len.to_be_bytes());
        let _ = Collector::new().decode(&m);
    }
}
