//! Filter commands: u32 and flower, their actions, their deletion.

use super::*;

fn police() -> BoxedStrategy<PoliceConfig> {
    let verdict = select(vec![
        ControlAction::Ok,
        ControlAction::Pipe,
        ControlAction::Continue,
        ControlAction::Drop,
        ControlAction::Reclassify,
    ]);
    // A bucket (rate and burst, a peakrate with an mtu) or an mtu alone.
    let buckets = prop_oneof![
        (
            rate(),
            nonzero(),
            any::<u32>(),
            proptest::option::of((rate(), nonzero()))
        )
            .prop_map(|(r, burst, mtu, peak)| match peak {
                Some((p, m)) => (Some(r), burst, m, Some(p)),
                None => (Some(r), burst, mtu, None),
            }),
        nonzero().prop_map(|mtu| (None, 0, mtu, None)),
    ];
    (
        buckets,
        any::<u16>(),
        any::<u16>(),
        link_layer(),
        verdict.clone(),
        verdict,
    )
        .prop_map(
            |((rate, burst, mtu, peakrate), overhead, mpu, link_layer, exceed, conform)| {
                PoliceConfig {
                    rate,
                    burst,
                    mtu,
                    peakrate,
                    adjust: LengthAdjust {
                        overhead,
                        mpu,
                        link_layer,
                    },
                    exceed,
                    conform,
                }
            },
        )
        .boxed()
}

/// A port range u32 can match: a block of `2^k` ports, aligned.
fn port_block() -> impl Strategy<Value = PortRange> {
    (any::<u16>(), 0u32..=16).prop_map(|(port, k)| {
        let span = 1u32 << k;
        let first = (u32::from(port) & !(span - 1)) as u16;
        PortRange {
            first,
            last: (u32::from(first) + span - 1) as u16,
        }
    })
}

fn port_range() -> impl Strategy<Value = PortRange> {
    (any::<u16>(), any::<u16>()).prop_map(|(a, b)| PortRange {
        first: a.min(b),
        last: a.max(b),
    })
}

/// u32's general keys that stay general (words past the transport header's ports), one per
/// word (the parser merges keys on one word, as tc's `pack_key`), each with a nonzero mask
/// (a zero mask matches every packet and is no key).
fn raw_keys() -> BoxedStrategy<htb_classify::RawKeys> {
    proptest::sample::subsequence(vec![4u16, 8, 12], 0..=3)
        .prop_flat_map(|offsets| {
            let n = offsets.len();
            proptest::collection::vec((nonzero(), any::<u32>()), n).prop_map(move |masks| {
                let keys: Vec<htb_classify::RawKey> = offsets
                    .iter()
                    .zip(masks)
                    .map(|(&at, (mask, value))| htb_classify::RawKey {
                        at,
                        nexthdr: true,
                        mask,
                        value: value & mask,
                    })
                    .collect();
                htb_classify::RawKeys::new(&keys).expect("at most three keys")
            })
        })
        .boxed()
}

/// A u32 filter's typed fields for an IPv4 or IPv6 filter: an `ip`/`ip6` match makes a
/// filter of protocol `all` one of that family, so the protocol is the family.
fn u32_match(v6: bool) -> BoxedStrategy<Match> {
    (
        proptest::option::of(prefix(v6)),
        proptest::option::of(prefix(v6)),
        proptest::option::of(port_block()),
        proptest::option::of(port_block()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(0u8..64),
        raw_keys(),
    )
        .prop_map(|(src, dst, sport, dport, proto, dscp, raw)| Match {
            src,
            dst,
            sport,
            dport,
            proto,
            dscp,
            raw,
            ..Match::default()
        })
        .boxed()
}

fn u32_filter() -> BoxedStrategy<FilterSpec> {
    let table = (1u32..=0xfff, 0u32..=0xff);
    let hashing = (
        proptest::option::of(table),
        proptest::option::of(1u32..=0xfff),
        proptest::option::of((nonzero(), (0u32..=15).prop_map(|w| w * 4))),
    );
    // A hash table (`divisor`): no match, no class, a handle naming the table.
    let hash_table =
        (dev(), select(vec![1u32, 2, 16, 256]), 1u32..=0xfff).prop_map(|(dev, divisor, table)| {
            FilterSpec {
                kind: FilterKind::U32,
                protocol: Protocol::Ip,
                handle: Some(FilterHandle(table << 20)),
                hashing: U32Hashing {
                    divisor: Some(divisor),
                    ..U32Hashing::default()
                },
                ..FilterSpec::new(dev)
            }
        });
    let matching = (
        dev(),
        proptest::option::of(qdisc_handle()),
        any::<bool>(),
        proptest::option::of(any::<u32>()),
        (any::<bool>(), 1u32..=0xfff, 0u32..=0xff, 0u32..=0xfff),
        hashing,
        class_id(),
        proptest::option::of(police()),
        proptest::option::of(dev()),
    )
        .prop_flat_map(
            |(dev, parent, v6, prio, handle, (table, link, hashkey), class, police, redirect)| {
                u32_match(v6).prop_map(move |matcher| {
                    // A handle given with `ht` is placed in that table's bucket.
                    let (given, t, b, node) = handle;
                    let (t, b) = table.unwrap_or((t, b));
                    FilterSpec {
                        dev: dev.clone(),
                        parent,
                        protocol: if v6 { Protocol::Ipv6 } else { Protocol::Ip },
                        prio,
                        kind: FilterKind::U32,
                        handle: given.then_some(FilterHandle((t << 20) | (b << 12) | node)),
                        matcher,
                        class: Some(class),
                        hashing: U32Hashing {
                            divisor: None,
                            table,
                            link,
                            hashkey: hashkey.map(|(mask, at)| HashKey { mask, at }),
                        },
                        police: police.map(Box::new),
                        redirect: redirect.clone(),
                    }
                })
            },
        );
    prop_oneof![1 => hash_table, 4 => matching].boxed()
}

fn flower_filter() -> BoxedStrategy<FilterSpec> {
    // flower's keys: addresses of the protocol's family, ports after a transport protocol
    // (tc refuses them before one), a VLAN id on an 802.1Q filter only.
    let ip = (
        any::<bool>(),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        prop_oneof![
            Just(None),
            select(vec![6u8, 17, 132]).prop_map(Some),
            any::<u8>().prop_map(Some)
        ],
        proptest::option::of(port_range()),
        proptest::option::of(port_range()),
        proptest::option::of(0u8..64),
        any::<(u128, u128)>(),
    )
        .prop_map(|(v6, src, dst, proto, sport, dport, dscp, (a, b))| {
            let addr = |bits: u128, len: bool| {
                let (addr, len) = if v6 {
                    (IpAddr::V6(Ipv6Addr::from(bits)), if len { 64 } else { 128 })
                } else {
                    (
                        IpAddr::V4(Ipv4Addr::from(bits as u32)),
                        if len { 24 } else { 32 },
                    )
                };
                IpPrefix::new(addr, len).expect("fits")
            };
            let ports = matches!(proto, Some(6 | 17 | 132));
            let matcher = Match {
                src: src.map(|l| addr(a, l)),
                dst: dst.map(|l| addr(b, l)),
                proto,
                sport: sport.filter(|_| ports),
                dport: dport.filter(|_| ports),
                dscp,
                ..Match::default()
            };
            (if v6 { Protocol::Ipv6 } else { Protocol::Ip }, matcher)
        });
    let vlan = (0u16..=Match::MAX_VLAN).prop_map(|v| {
        (
            Protocol::Dot1q,
            Match {
                vlan: Some(v),
                ..Match::default()
            },
        )
    });
    (
        dev(),
        proptest::option::of(qdisc_handle()),
        prop_oneof![3 => ip, 1 => vlan],
        proptest::option::of(any::<u32>()),
        proptest::option::of(nonzero()),
        class_id(),
        proptest::option::of(police()),
        proptest::option::of(dev()),
    )
        .prop_map(
            |(dev, parent, (protocol, matcher), prio, handle, class, police, redirect)| {
                FilterSpec {
                    dev,
                    parent,
                    protocol,
                    prio,
                    kind: FilterKind::Flower,
                    handle: handle.map(FilterHandle),
                    matcher,
                    class: Some(class),
                    hashing: U32Hashing::default(),
                    police: police.map(Box::new),
                    redirect,
                }
            },
        )
        .boxed()
}

pub(super) fn filter_command() -> BoxedStrategy<Command> {
    let spec = prop_oneof![u32_filter(), flower_filter()].boxed();
    // `filter change` names the filter: its pref and handle.
    let named = (spec.clone(), any::<u32>(), 1u32..=0xfff).prop_map(|(mut f, prio, node)| {
        f.prio = f.prio.or(Some(prio));
        // In the bucket `ht` names, as u32 places it; else in the prio's root table.
        let (t, b) = f.hashing.table.unwrap_or((0x800, 0));
        f.handle = f
            .handle
            .or(Some(FilterHandle((t << 20) | (b << 12) | node)));
        f
    });
    prop_oneof![
        spec.clone().prop_map(|s| Command::FilterAdd(Box::new(s))),
        named.prop_map(|s| Command::FilterChange(Box::new(s))),
        spec.prop_map(|s| Command::FilterReplace(Box::new(s))),
        (
            dev(),
            proptest::option::of(qdisc_handle()),
            proptest::option::of((any::<u32>(), proptest::option::of(nonzero())))
        )
            .prop_map(|(dev, parent, named)| Command::FilterDelete(FilterDelete {
                dev,
                parent,
                prio: named.map(|n| n.0),
                handle: named.and_then(|n| n.1).map(FilterHandle),
            })),
    ]
    .boxed()
}
