use alloc::vec;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use crate::matcher::{IpPrefix, PortRange};
use crate::raw_key::{Headers, RawKey, RawKeys};

fn packet() -> PacketInfo {
    PacketInfo {
        src: Some(Ipv4Addr::new(10, 201, 1, 2).into()),
        dst: Some(Ipv4Addr::new(10, 201, 2, 2).into()),
        proto: Some(17),
        sport: Some(40000),
        dport: Some(5201),
        dscp: Some(46),
        ..PacketInfo::default()
    }
}

/// The definition: the first filter, in evaluation order, whose every key matches (without
/// the packet's bytes, a filter with general keys never does).
fn linear(c: &Classifier, p: &PacketInfo) -> Option<usize> {
    c.filters()
        .iter()
        .position(|f| f.matcher.raw.is_empty() && f.matcher.matches(p))
}

/// The same with the packet's bytes.
fn linear_headers(c: &Classifier, p: &PacketInfo, h: &Headers<'_>) -> Option<usize> {
    c.filters()
        .iter()
        .position(|f| f.matcher.matches_headers(p, h))
}

#[test]
fn prefixes_and_ports() {
    let p: IpPrefix = "10.201.2.0/24".parse().unwrap();
    assert!(p.contains("10.201.2.99".parse().unwrap()));
    assert!(!p.contains("10.201.3.1".parse().unwrap()));
    assert!(!p.contains("::1".parse().unwrap()));
    let p6: IpPrefix = "2001:db8::/32".parse().unwrap();
    assert!(p6.contains("2001:db8:1::5".parse().unwrap()));
    let all: IpPrefix = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains("1.2.3.4".parse().unwrap()));
    assert!(
        !all.contains("::".parse().unwrap()),
        "never across families"
    );
    assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
    assert_eq!(
        "5000-5100".parse::<PortRange>().unwrap(),
        PortRange {
            first: 5000,
            last: 5100
        }
    );
    assert!("5100-5000".parse::<PortRange>().is_err());
    let host: IpPrefix = "10.0.0.42".parse().unwrap();
    assert_eq!(p.intersect(host), None);
    let net16: IpPrefix = "10.0.0.0/16".parse().unwrap();
    assert_eq!(net16.intersect(host), Some(host));
    assert_eq!(host.intersect(net16), Some(host));
}

#[test]
fn first_matching_filter_by_prio_wins() {
    let m = |dport: &str| Match {
        dport: Some(dport.parse().unwrap()),
        ..Match::default()
    };
    let c = Classifier::new(vec![
        Filter {
            police: None,
            prio: 5,
            matcher: Match::default(),
            class: ClassId::new(1, 0x99),
        },
        Filter {
            police: None,
            prio: 1,
            matcher: m("5201"),
            class: ClassId::new(1, 0x10),
        },
        Filter {
            police: None,
            prio: 1,
            matcher: m("5200-5300"),
            class: ClassId::new(1, 0x11),
        },
    ]);
    assert_eq!(c.classify(&packet()), Some(ClassId::new(1, 0x10)));
    let other = PacketInfo {
        dport: Some(5250),
        ..packet()
    };
    assert_eq!(c.classify(&other), Some(ClassId::new(1, 0x11)));
    let not_ip = PacketInfo::default();
    assert_eq!(
        c.classify(&not_ip),
        Some(ClassId::new(1, 0x99)),
        "the catch-all"
    );
    let dscp = Match {
        dscp: Some(46),
        vlan: Some(7),
        ..Match::default()
    };
    assert!(!dscp.matches(&packet()), "no vlan tag: no match");
    assert_eq!(c.cost(), (2, 1), "two shapes (dport, all) and one range");
}

#[test]
fn many_subscribers_share_one_table() {
    let filters: Vec<Filter> = (0..10_000u32)
        .map(|i| Filter {
            police: None,
            prio: 5,
            matcher: Match {
                dst: Some(IpPrefix::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 32).unwrap()),
                ..Match::default()
            },
            class: ClassId::new(1, i + 1),
        })
        .collect();
    let c = Classifier::new(filters);
    assert_eq!(c.cost(), (1, 0));
    let to = |i: u32| PacketInfo {
        dst: Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))),
        src: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
        ..PacketInfo::default()
    };
    assert_eq!(c.classify(&to(4321)), Some(ClassId::new(1, 4322)));
    assert_eq!(c.classify(&to(10_000)), None);
}

#[test]
fn disagreeing_keys_match_nothing_and_intersections_meet() {
    let v4: IpPrefix = "10.0.0.0/8".parse().unwrap();
    let v6: IpPrefix = "2001:db8::/32".parse().unwrap();
    let never = Match {
        src: Some(v4),
        dst: Some(v6),
        ..Match::default()
    };
    let c = Classifier::new(vec![Filter {
        police: None,
        prio: 1,
        matcher: never,
        class: ClassId::new(1, 1),
    }]);
    assert_eq!(c.cost(), (0, 0));
    let link = Match {
        family: Some(Family::V4),
        dst: Some("10.0.0.0/16".parse().unwrap()),
        ..Match::default()
    };
    let leaf = Match {
        dst: Some("10.0.0.42/32".parse().unwrap()),
        dport: Some("80-90".parse().unwrap()),
        ..Match::default()
    };
    let both = link.intersect(&leaf).unwrap();
    assert_eq!(both.dst, leaf.dst);
    assert_eq!(both.family, Some(Family::V4));
    let elsewhere = Match {
        dst: Some("10.1.0.42/32".parse().unwrap()),
        ..Match::default()
    };
    assert_eq!(link.intersect(&elsewhere), None);
    let v6_leaf = Match {
        dst: Some(v6),
        ..Match::default()
    };
    assert_eq!(
        link.intersect(&v6_leaf),
        None,
        "protocol ip cannot hold a v6 prefix"
    );
}

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u32..6).prop_map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, (i / 3) as u8, (i % 3) as u8))),
        (0u16..3).prop_map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))),
    ]
}

fn prefix() -> impl Strategy<Value = IpPrefix> {
    (
        address(),
        prop::sample::select(vec![0u8, 8, 23, 24, 31, 32, 64, 127, 128]),
    )
        .prop_map(|(a, len)| IpPrefix::new(a, len.min(Family::of(a).bits())).unwrap())
}

fn ports() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        prop::sample::select(vec![53u16, 80, 5201]).prop_map(|p| PortRange { first: p, last: p }),
        Just(PortRange {
            first: 50,
            last: 90
        }),
        Just(PortRange {
            first: 0,
            last: 65535
        }),
    ]
}

fn matcher() -> impl Strategy<Value = Match> {
    (
        prop::option::weighted(0.2, prop::sample::select(vec![Family::V4, Family::V6])),
        prop::option::weighted(0.3, prefix()),
        prop::option::weighted(0.5, prefix()),
        prop::option::weighted(0.3, prop::sample::select(vec![6u8, 17])),
        prop::option::weighted(0.2, ports()),
        prop::option::weighted(0.3, ports()),
        prop::option::weighted(0.2, prop::sample::select(vec![0u8, 46])),
        prop::option::weighted(0.1, Just(7u16)),
        prop::option::weighted(0.2, prop::sample::select(vec![0x45u32, 0x46])),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(family, src, dst, proto, sport, dport, dscp, vlan, first_byte, arp)| Match {
                family,
                src,
                dst,
                proto,
                sport,
                dport,
                dscp,
                vlan,
                arp,
                // A general key on the header's first byte (version and IHL).
                raw: first_byte
                    .and_then(|b| {
                        RawKeys::new(&[RawKey {
                            at: 0,
                            nexthdr: false,
                            mask: 0xff00_0000,
                            value: b << 24,
                        }])
                    })
                    .unwrap_or_default(),
            },
        )
}

fn packet_info() -> impl Strategy<Value = PacketInfo> {
    let ip = (address(), 0u8..3).prop_map(|(src, dst)| {
        let dst = match src {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(10, 0, dst / 2, dst % 3)),
            IpAddr::V6(_) => {
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(dst)))
            }
        };
        (src, dst)
    });
    (
        prop::option::weighted(0.9, ip),
        prop::option::weighted(0.8, prop::sample::select(vec![6u8, 17, 1])),
        prop::option::of(prop::sample::select(vec![53u16, 80, 85, 5201, 9999])),
        prop::option::of(prop::sample::select(vec![53u16, 80, 85, 5201, 9999])),
        prop::option::of(prop::sample::select(vec![0u8, 46])),
        prop::option::weighted(0.2, Just(7u16)),
        prop::bool::ANY,
    )
        .prop_map(|(ip, proto, sport, dport, dscp, vlan, arp)| PacketInfo {
            vlan,
            // Frames without IP: ARP or something else.
            arp: ip.is_none() && arp,
            src: ip.map(|(s, _)| s),
            dst: ip.map(|(_, d)| d),
            proto: ip.and(proto),
            sport: ip.and(sport),
            dport: ip.and(dport),
            dscp: ip.and(dscp),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The compiled lookup finds exactly the filter the walk of the list finds.
    #[test]
    fn compiled_equals_first_match_walk(
        filters in prop::collection::vec((1u32..4, matcher()), 0..40),
        packets in prop::collection::vec(packet_info(), 1..40),
    ) {
        let filters = filters
            .into_iter()
            .enumerate()
            .map(|(i, (prio, matcher))| Filter { prio, matcher, class: ClassId::new(1, i as u32 + 1), police: None })
            .collect();
        let c = Classifier::new(filters);
        for (i, p) in packets.iter().enumerate() {
            prop_assert_eq!(c.classify_index(p), linear(&c, p), "{:?}", p);
            let network = [if i % 2 == 0 { 0x45u8 } else { 0x46 }, 0, 0, 40];
            let h = Headers { network: &network, transport: None };
            prop_assert_eq!(c.classify_index_headers(p, &h), linear_headers(&c, p, &h), "{:?}", p);
        }
    }

    /// An intersection matches exactly the packets both match.
    #[test]
    fn intersection_is_conjunction(a in matcher(), b in matcher(), packets in prop::collection::vec(packet_info(), 1..30)) {
        let both = a.intersect(&b);
        for p in &packets {
            let want = a.matches(p) && b.matches(p);
            prop_assert_eq!(both.is_some_and(|m| m.matches(p)), want, "{:?} & {:?} on {:?}", a, b, p);
        }
    }
}

#[test]
fn protocol_arp_filters_see_only_arp_frames() {
    // LARTC-style: ARP to its own class at prio 1, everything else below.
    let arp = Match {
        arp: true,
        ..Match::default()
    };
    let c = Classifier::new(vec![
        Filter {
            police: None,
            prio: 1,
            matcher: arp,
            class: ClassId::new(1, 1),
        },
        Filter {
            police: None,
            prio: 2,
            matcher: Match::default(),
            class: ClassId::new(1, 2),
        },
    ]);
    let arp_frame = PacketInfo {
        arp: true,
        ..PacketInfo::default()
    };
    assert_eq!(c.classify(&arp_frame), Some(ClassId::new(1, 1)));
    assert_eq!(c.classify(&packet()), Some(ClassId::new(1, 2)));
    // An ARP frame has no addresses: an ARP match with one matches nothing.
    let never = Match {
        arp: true,
        dst: Some("10.0.0.0/8".parse().unwrap()),
        ..Match::default()
    };
    assert_eq!(never.fixed_family(), Err(()));
}

#[test]
fn a_policer_passes_drops_or_hands_on_to_the_next_filter() {
    use crate::police::{ControlAction, Police, PoliceConfig};
    use htb_core::{Instant, Rate};
    let police = |exceed| {
        Some(Police::new(PoliceConfig {
            rate: Some(Rate::from_mbit(1)),
            burst: 1500,
            exceed,
            ..PoliceConfig::default()
        }))
    };
    let to_5201 = Match {
        dport: Some("5201".parse().unwrap()),
        ..Match::default()
    };
    let build = |exceed| {
        Classifier::new(vec![
            Filter {
                prio: 1,
                matcher: to_5201,
                class: ClassId::new(1, 10),
                police: police(exceed),
            },
            Filter {
                prio: 2,
                matcher: Match::default(),
                class: ClassId::new(1, 20),
                police: None,
            },
        ])
    };
    let p = packet();
    let h = Headers::default();
    let now = Instant::from_nanos(1_000_000);
    // Within the bucket: the filter's class; over it: dropped, or the next filter's.
    let c = build(ControlAction::Drop);
    assert_eq!(c.classify_policed(&p, &h, now, 1500), Verdict::Filter(0));
    assert_eq!(c.classify_policed(&p, &h, now, 1500), Verdict::Drop);
    let c = build(ControlAction::Continue);
    assert_eq!(c.classify_policed(&p, &h, now, 1500), Verdict::Filter(0));
    assert_eq!(c.classify_policed(&p, &h, now, 1500), Verdict::Filter(1));
    // The counters are the policer's, shared by every copy of the filter.
    let copy = c.clone();
    assert_eq!(copy.classify_policed(&p, &h, now, 1500), Verdict::Filter(1));
    let stats = c.filters()[0].police.as_ref().unwrap().stats();
    assert_eq!((stats.packets, stats.overlimits, stats.drops), (3, 2, 0));
    // Nothing after a continuing filter: unclassified.
    let alone = Classifier::new(vec![Filter {
        prio: 1,
        matcher: to_5201,
        class: ClassId::new(1, 10),
        police: police(ControlAction::Continue),
    }]);
    assert_eq!(
        alone.classify_policed(&p, &h, now, 1500),
        Verdict::Filter(0)
    );
    assert_eq!(
        alone.classify_policed(&p, &h, now, 1500),
        Verdict::Unclassified
    );
}
