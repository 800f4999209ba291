//! A received frame: the data plane's parser and classifier, and the CE marking it may do.
#![no_main]

use htb_config::filter::{
    Classifier, ControlAction, Family, Filter, Match, Police, PoliceConfig, RawKey, RawKeys,
    Verdict,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = htb_xdp::parse::parse(data);
    let info = htb_xdp::parse::packet_info(data);
    assert_eq!(info, parsed.info);
    // The IP header lies at or after the network header (behind PPPoE or MPLS, after it), and
    // only an IP packet has an encapsulation.
    if let Some(l3) = parsed.l3 {
        assert!(l3 >= parsed.network && l3 + 20 <= data.len(), "{parsed:?}");
        assert_eq!(
            l3 > parsed.network,
            parsed.encapsulation != htb_xdp::parse::Encapsulation::None
        );
    } else {
        assert_eq!(parsed.encapsulation, htb_xdp::parse::Encapsulation::None);
    }
    let class = |minor: u32| htb_core_class(minor);
    let classifier = Classifier::new(vec![
        // u32's general keys: a word of the transport header and one of the network header
        // (read from the packet's bytes, wherever the parser put the headers).
        Filter {
            prio: 0,
            matcher: Match {
                raw: RawKeys::new(&[
                    RawKey {
                        at: 0,
                        nexthdr: true,
                        mask: 0xffff,
                        value: 53,
                    },
                    RawKey {
                        at: 36,
                        nexthdr: false,
                        mask: 0xff00_0000,
                        value: 0x1000_0000,
                    },
                ])
                .unwrap_or_default(),
                ..Match::default()
            },
            class: class(0x5),
            police: None,
        },
        Filter {
            prio: 1,
            matcher: Match {
                family: Some(Family::V6),
                proto: Some(17),
                ..Match::default()
            },
            class: class(0x10),
            // A policer that hands what exceeds it on to the filters below.
            police: Some(Police::new(PoliceConfig {
                rate: Some(htb_core::Rate::from_kbit(8)),
                burst: 1500,
                exceed: ControlAction::Continue,
                ..PoliceConfig::default()
            })),
        },
        Filter {
            prio: 2,
            matcher: Match {
                family: Some(Family::V4),
                ..Match::default()
            },
            class: class(0x20),
            police: None,
        },
        // ARP frames (`protocol arp`).
        Filter {
            prio: 2,
            matcher: Match {
                arp: true,
                ..Match::default()
            },
            class: class(0x25),
            police: None,
        },
        Filter {
            prio: 3,
            matcher: Match::default(),
            class: class(0x30),
            police: None,
        },
    ]);
    assert!(classifier.classify(&info).is_some());
    assert!(
        classifier
            .classify_index_headers(&info, &parsed.headers(data))
            .is_some()
    );
    // Through the policer: the catch-all below it always takes what it passes on.
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    for now in [0, 1_000] {
        let verdict = classifier.classify_policed(
            &info,
            &parsed.headers(data),
            htb_core::Instant::from_nanos(now),
            len,
        );
        assert!(matches!(verdict, Verdict::Filter(_)), "{verdict:?}");
    }
    // CE marking where the engine does it (the parsed header), and at arbitrary offsets.
    let mut frame = data.to_vec();
    if let Some(l3) = parsed.l3 {
        let _ = htb_xdp::parse::set_ce(&mut frame, l3, parsed.ipv6);
        let again = htb_xdp::parse::parse(&frame);
        assert_eq!(again.l3, parsed.l3);
    }
    if let Some(&at) = data.first() {
        let _ = htb_xdp::parse::set_ce(&mut frame, usize::from(at), at % 2 == 0);
    }
});

fn htb_core_class(minor: u32) -> htb_core::ClassId {
    format!("1:{minor:x}").parse().unwrap()
}
