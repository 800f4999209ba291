//! A received frame: the data plane's parser and classifier, and the CE marking it may do.
#![no_main]

use htb_config::filter::{Classifier, Family, Filter, Match};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = htb_xdp::parse::parse(data);
    let info = htb_xdp::parse::packet_info(data);
    assert_eq!(info, parsed.info);
    let class = |minor: u32| htb_core_class(minor);
    let classifier = Classifier::new(vec![
        Filter {
            prio: 1,
            matcher: Match {
                family: Some(Family::V6),
                proto: Some(17),
                ..Match::default()
            },
            class: class(0x10),
        },
        Filter {
            prio: 2,
            matcher: Match {
                family: Some(Family::V4),
                ..Match::default()
            },
            class: class(0x20),
        },
        Filter {
            prio: 3,
            matcher: Match::default(),
            class: class(0x30),
        },
    ]);
    assert!(classifier.classify(&info).is_some());
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
