//! The writer and the parser agree: every command the grammar can say is written as words that
//! parse back to it (`parse(print(x)) == x`), for arbitrary valid commands of every variant,
//! and a few written out in full.
//!
//! The strategies make commands in the form the parser makes them (canonical): where the
//! grammar gives one value two spellings, or sets two fields with one word, a command that the
//! parser would never produce has no words of its own, and is not generated. Each such place
//! says why.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_core::{
    AckFilter, AtmMode, CakeSpec, ClassId, DiffservMode, Duration, FlowMode, FqCodelSpec, LeafKind,
    LeafSpec, LengthAdjust, LinkLayer, Rate, SfqSpec, SizeSpec, TbfSpec,
};
use htb_ipc::{
    ClassDelete, ClassLabel, ClassSpec, Command, ControlAction, Device, FilterDelete, FilterHandle,
    FilterKind, FilterSpec, HashKey, IpPrefix, LabelFields, LabelSpec, LabelText, LeafQdiscSpec,
    MacAddr, Match, MqSpec, PoliceConfig, PortRange, Protocol, QdiscSpec, U32Hashing,
};
use htb_tc::parse::{Action, parse_command, split_line};
use htb_tc::write::{WriteError, command_line};
use proptest::prelude::*;
use proptest::sample::select;

/// Writes `c`, reads the line back, and says what came back.
fn round_trip(c: &Command) -> Result<Command, String> {
    let line = command_line(c).map_err(|e| format!("not written: {e}"))?;
    match parse_command(&split_line(&line)) {
        Ok(Action::Change(back)) => Ok(back),
        Ok(other) => Err(format!("{line}\n  read as {other:?}")),
        Err(e) => Err(format!("{line}\n  refused: {e}")),
    }
}

// ---- values ----

fn dev() -> impl Strategy<Value = String> {
    // Plain names, and names that need quotes (a space, a `"`, a leading `'`, a `#`).
    prop_oneof![
        4 => "[a-z][a-z0-9]{0,7}",
        1 => "[a-z]{1,3} [a-z0-9]{1,3}",
        1 => "[a-z]{1,3}\"[a-z]{1,3}",
        1 => "'[a-z]{1,3}",
        1 => "[a-z]{1,3}#[a-z]{1,3}",
    ]
}

fn class_id() -> impl Strategy<Value = ClassId> {
    (1u16..=0xffff, 1u32..=0xffff).prop_map(|(major, minor)| ClassId::new(major, minor))
}

/// A qdisc handle: tc's `get_qdisc_handle` reads a major only.
fn qdisc_handle() -> impl Strategy<Value = ClassId> {
    (1u16..=0xffff).prop_map(|major| ClassId::new(major, 0))
}

fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        (1u64..=100_000_000_000).prop_map(Rate::from_bits_per_sec),
        (1u64..=100_000).prop_map(Rate::from_mbit),
    ]
}

/// A time in whole nanoseconds, nonzero (the leaf kinds read 0 as "not given").
fn time() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..=10_000_000_000).prop_map(Duration::from_nanos),
        (1u64..=10_000).prop_map(|ms| Duration::from_nanos(ms * 1_000_000)),
    ]
}

fn nonzero() -> impl Strategy<Value = u32> {
    1u32..=u32::MAX
}

fn link_layer() -> impl Strategy<Value = LinkLayer> {
    select(vec![LinkLayer::Ethernet, LinkLayer::Atm])
}

fn prefix(v6: bool) -> impl Strategy<Value = IpPrefix> {
    (any::<u128>(), 0u8..=128).prop_map(move |(bits, len)| {
        let (addr, len) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(bits)), len)
        } else {
            (IpAddr::V4(Ipv4Addr::from(bits as u32)), len % 33)
        };
        IpPrefix::new(addr, len).expect("the length fits the family")
    })
}

/// A size table the kernel takes: one of overhead, mpu and linklayer at least (tc refuses a
/// table that changes nothing), 0 meaning "not given" as `tc_stab.c` reads it.
fn stab() -> BoxedStrategy<SizeSpec> {
    (
        -100i32..=100,
        0u32..=200,
        select(vec![0u32, 2047]),
        select(vec![0u32, 512]),
        proptest::option::of(link_layer()),
    )
        .prop_map(|(overhead, mpu, mtu, tsize, link_layer)| SizeSpec {
            overhead,
            mpu,
            mtu,
            tsize,
            link_layer,
        })
        .prop_filter("a table that adjusts something", |s| {
            (s.overhead != 0 || s.mpu != 0 || s.link_layer.is_some()) && s.table().is_ok()
        })
        .boxed()
}

// ---- qdiscs ----

fn htb_qdisc() -> BoxedStrategy<QdiscSpec> {
    (
        dev(),
        proptest::option::of(class_id()),
        proptest::option::of(qdisc_handle()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(stab()),
    )
        .prop_map(
            |(dev, parent, handle, default_minor, r2q, direct_qlen, stab)| QdiscSpec {
                dev,
                parent,
                handle,
                default_minor,
                r2q,
                direct_qlen,
                stab,
            },
        )
        .boxed()
}

fn sfq() -> BoxedStrategy<SfqSpec> {
    // `sfq_parse_opt` reads 0 as "not given" for all but perturb, and a limit below 2 is
    // refused.
    (
        proptest::option::of(2u32..=100_000),
        proptest::option::of(nonzero()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(nonzero()),
        proptest::option::of(nonzero()),
        proptest::option::of(nonzero()),
        any::<bool>(),
    )
        .prop_map(
            |(limit, quantum, perturb, divisor, flows, depth, headdrop)| SfqSpec {
                limit,
                quantum,
                perturb,
                divisor,
                flows,
                depth,
                headdrop,
            },
        )
        .boxed()
}

fn fq_codel() -> BoxedStrategy<FqCodelSpec> {
    (
        (
            proptest::option::of(nonzero()),
            proptest::option::of(nonzero()),
            proptest::option::of(time()),
            proptest::option::of(time()),
            proptest::option::of(nonzero()),
        ),
        (
            proptest::option::of(any::<bool>()),
            proptest::option::of(prop_oneof![Just(Duration::ZERO), time()]),
            proptest::option::of(any::<u32>()),
            proptest::option::of(nonzero()),
        ),
    )
        .prop_map(
            |(
                (limit, flows, target, interval, quantum),
                (ecn, ce_threshold, memory_limit, drop_batch),
            )| FqCodelSpec {
                limit,
                flows,
                target,
                interval,
                quantum,
                ecn,
                ce_threshold,
                memory_limit,
                drop_batch,
            },
        )
        .boxed()
}

fn tbf() -> BoxedStrategy<TbfSpec> {
    // tc wants rate and burst, a limit or a latency (not both), and an mtu with a peakrate.
    (
        rate(),
        nonzero(),
        prop_oneof![
            nonzero().prop_map(|l| (Some(l), None)),
            time().prop_map(|t| (None, Some(t))),
        ],
        proptest::option::of((rate(), nonzero())),
        proptest::option::of(nonzero()),
    )
        .prop_map(|(rate, burst, (limit, latency), peak, mtu)| TbfSpec {
            rate: Some(rate),
            burst: Some(burst),
            limit,
            latency,
            peakrate: peak.map(|p| p.0),
            mtu: peak.map(|p| p.1).or(mtu),
        })
        .boxed()
}

/// cake's presets (`presets[]`): RTT and target in µs.
const PRESETS: [(u64, u64); 8] = [
    (100, 5),
    (1000, 50),
    (10_000, 500),
    (30_000, 1500),
    (100_000, 5000),
    (300_000, 15_000),
    (1_000_000, 50_000),
    (1_000_000_000, 50_000_000),
];

fn cake() -> BoxedStrategy<CakeSpec> {
    let us = Duration::from_micros;
    // `bandwidth` and `unlimited` set autorate-ingress off, which nothing else says; the
    // target is set with the RTT (a preset's, or a twentieth of `rtt`, in whole µs);
    // diffserv3 is the default cake_parse_opt leaves out; a zero mpu or memlimit is not sent;
    // `raw` sets the ATM mode and the overhead.
    let shaper = prop_oneof![
        Just((None, None)),
        Just((None, Some(true))),
        (prop_oneof![Just(Rate::ZERO), rate()], any::<bool>())
            .prop_map(|(r, a)| (Some(r), Some(a))),
    ];
    let rtt = prop_oneof![
        Just((None, None)),
        select(PRESETS.to_vec()).prop_map(move |(r, t)| (Some(us(r)), Some(us(t)))),
        (1u64..=10_000_000).prop_map(move |r| (Some(us(r)), Some(us((r / 20).max(1))))),
    ];
    let diffserv = proptest::option::of(select(vec![
        DiffservMode::Besteffort,
        DiffservMode::Diffserv4,
        DiffservMode::Diffserv8,
        DiffservMode::Precedence,
    ]));
    let flow_mode = proptest::option::of(select(vec![
        FlowMode::Flowblind,
        FlowMode::Srchost,
        FlowMode::Dsthost,
        FlowMode::Hosts,
        FlowMode::Flows,
        FlowMode::DualSrchost,
        FlowMode::DualDsthost,
        FlowMode::TripleIsolate,
    ]));
    let flags = proptest::array::uniform4(proptest::option::of(any::<bool>()));
    let ack = proptest::option::of(select(vec![
        AckFilter::Off,
        AckFilter::Filter,
        AckFilter::Aggressive,
    ]));
    let framing = prop_oneof![
        (
            proptest::option::of(select(vec![AtmMode::None, AtmMode::Atm, AtmMode::Ptm])),
            proptest::option::of(-64i32..=256)
        )
            .prop_map(|(atm, overhead)| (false, atm, overhead)),
        (
            select(vec![AtmMode::None, AtmMode::Atm, AtmMode::Ptm]),
            -64i32..=256
        )
            .prop_map(|(atm, overhead)| (true, Some(atm), Some(overhead))),
    ];
    (
        shaper,
        rtt,
        diffserv,
        flow_mode,
        flags,
        ack,
        proptest::option::of(nonzero()),
        proptest::option::of(any::<u32>()),
        framing,
        proptest::option::of(1u32..=256),
    )
        .prop_map(
            |(
                (bandwidth, autorate_ingress),
                (rtt, target),
                diffserv,
                flow_mode,
                [nat, wash, split_gso, ingress],
                ack_filter,
                memlimit,
                fwmark,
                (raw, atm, overhead),
                mpu,
            )| CakeSpec {
                bandwidth,
                autorate_ingress,
                diffserv,
                flow_mode,
                nat,
                wash,
                split_gso,
                ingress,
                ack_filter,
                memlimit,
                atm,
                overhead,
                raw,
                mpu,
                rtt,
                target,
                fwmark,
            },
        )
        .boxed()
}

fn leaf() -> BoxedStrategy<LeafSpec> {
    prop_oneof![
        proptest::option::of(any::<u32>()).prop_map(|limit| LeafSpec::Pfifo { limit }),
        proptest::option::of(any::<u32>()).prop_map(|limit| LeafSpec::Bfifo { limit }),
        sfq().prop_map(LeafSpec::Sfq),
        fq_codel().prop_map(LeafSpec::FqCodel),
        cake().prop_map(LeafSpec::Cake),
        tbf().prop_map(LeafSpec::Tbf),
    ]
    .boxed()
}

fn leaf_qdisc() -> BoxedStrategy<LeafQdiscSpec> {
    // A size table goes on a qdisc at the root only.
    (
        dev(),
        proptest::option::of(class_id()),
        proptest::option::of(qdisc_handle()),
        leaf(),
        proptest::option::of(stab()),
    )
        .prop_map(|(dev, parent, handle, leaf, stab)| LeafQdiscSpec {
            dev,
            parent,
            handle,
            leaf,
            stab: stab.filter(|_| parent.is_none()),
        })
        .boxed()
}

fn qdisc_command() -> BoxedStrategy<Command> {
    let mq = (dev(), proptest::option::of(qdisc_handle()))
        .prop_map(|(dev, handle)| MqSpec { dev, handle })
        .boxed();
    // tbf has no defaults: `qdisc del … tbf` is refused, as tc refuses it.
    let kind = select(
        LeafKind::ALL
            .into_iter()
            .filter(|k| *k != LeafKind::Tbf)
            .collect::<Vec<_>>(),
    );
    prop_oneof![
        htb_qdisc().prop_map(Command::QdiscAdd),
        htb_qdisc().prop_map(Command::QdiscChange),
        htb_qdisc().prop_map(Command::QdiscReplace),
        mq.clone().prop_map(Command::MqAdd),
        mq.prop_map(Command::MqReplace),
        dev().prop_map(|dev| Command::QdiscDelete { dev }),
        dev().prop_map(|dev| Command::IngressAdd { dev }),
        dev().prop_map(|dev| Command::IngressDelete { dev }),
        leaf_qdisc().prop_map(Command::LeafAdd),
        leaf_qdisc().prop_map(Command::LeafChange),
        leaf_qdisc().prop_map(Command::LeafReplace),
        (
            dev(),
            class_id(),
            proptest::option::of(qdisc_handle()),
            proptest::option::of(kind)
        )
            .prop_map(|(dev, parent, handle, kind)| Command::LeafDelete {
                dev,
                parent,
                handle,
                kind,
            }),
    ]
    .boxed()
}

// ---- classes ----

fn class_spec() -> BoxedStrategy<ClassSpec> {
    (
        (
            dev(),
            class_id(),
            proptest::option::of(class_id()),
            rate(),
            proptest::option::of(rate()),
            proptest::option::of(0u64..=u64::from(u32::MAX)),
            proptest::option::of(0u64..=u64::from(u32::MAX)),
        ),
        (
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(link_layer()),
        ),
    )
        .prop_map(
            |(
                (dev, id, parent, rate, ceil, burst, cburst),
                (prio, quantum, mtu, overhead, mpu, linklayer),
            )| ClassSpec {
                dev,
                id,
                parent,
                rate,
                ceil,
                burst,
                cburst,
                prio,
                quantum,
                mtu,
                overhead,
                mpu,
                linklayer,
            },
        )
        .boxed()
}

fn text() -> BoxedStrategy<LabelText> {
    // Texts with either kind of quote (not both: a tc line cannot carry that).
    prop_oneof![
        "[A-Za-z0-9 .-]{1,12}",
        "[A-Za-z' ]{1,8}",
        "[A-Za-z\" ]{1,8}"
    ]
    .prop_filter_map("a label text", |s| s.parse().ok())
    .boxed()
}

fn label() -> BoxedStrategy<Option<ClassLabel>> {
    let device = (
        text(),
        proptest::option::of(text()),
        proptest::option::of(any::<[u8; 6]>()),
        proptest::collection::vec(prop_oneof![prefix(false), prefix(true)], 0..3),
    )
        .prop_map(|(id, name, mac, addresses)| Device {
            id,
            name,
            mac: mac.map(|m| {
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
                    .parse::<MacAddr>()
                    .expect("six bytes are a MAC")
            }),
            addresses,
        });
    (
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::collection::vec(device, 0..3),
    )
        .prop_map(|(name, circuit, comment, devices)| {
            ClassLabel::new(LabelFields {
                name,
                circuit,
                comment,
                devices,
            })
            .ok()
        })
        .boxed()
}

fn class_command() -> BoxedStrategy<Command> {
    prop_oneof![
        class_spec().prop_map(Command::ClassAdd),
        class_spec().prop_map(Command::ClassChange),
        class_spec().prop_map(Command::ClassReplace),
        (dev(), class_id()).prop_map(|(dev, id)| Command::ClassDelete(ClassDelete { dev, id })),
        (dev(), class_id(), label()).prop_map(|(dev, id, label)| Command::ClassLabel(LabelSpec {
            dev,
            id,
            label
        })),
    ]
    .boxed()
}

// ---- filters ----

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
                dev,
                kind: FilterKind::U32,
                protocol: Protocol::Ip,
                handle: Some(FilterHandle(table << 20)),
                hashing: U32Hashing {
                    divisor: Some(divisor),
                    ..U32Hashing::default()
                },
                ..FilterSpec::default()
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

fn filter_command() -> BoxedStrategy<Command> {
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
        spec.clone().prop_map(Command::FilterAdd),
        named.prop_map(Command::FilterChange),
        spec.prop_map(Command::FilterReplace),
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

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![qdisc_command(), class_command(), filter_command()]
}

/// Run on a thread of its own with a large stack: a command's strategy nests deeply, and a
/// debug build's frames for it outgrow the test harness's 2 MiB.
#[test]
fn every_command_reads_back_as_itself() {
    let run = || {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
        runner
            .run(&command(), |c| {
                prop_assert_eq!(round_trip(&c), Ok(c));
                Ok(())
            })
            .map_err(|e| e.to_string())
    };
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(run)
        .expect("a thread")
        .join()
        .expect("no panic");
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

// ---- examples ----

#[test]
fn the_words_are_tcs() {
    let cases: [(Command, &str); 6] = [
        (
            Command::QdiscAdd(QdiscSpec {
                dev: "eth0".into(),
                handle: Some(ClassId::new(1, 0)),
                default_minor: Some(0x20),
                ..QdiscSpec::default()
            }),
            "qdisc add dev eth0 root handle 1: htb default 20",
        ),
        (
            Command::ClassAdd(ClassSpec {
                dev: "eth0".into(),
                id: ClassId::new(1, 0x20),
                parent: Some(ClassId::new(1, 1)),
                rate: Rate::from_kbit(1500),
                ceil: Some(Rate::from_bits_per_sec(1_234_567)),
                burst: Some(15 * 1024),
                ..ClassSpec::default()
            }),
            "class add dev eth0 parent 1:1 classid 1:20 htb rate 1500kbit ceil 1234567bit burst 15360",
        ),
        (
            Command::LeafAdd(LeafQdiscSpec {
                dev: "eth0".into(),
                parent: Some(ClassId::new(1, 0x10)),
                handle: Some(ClassId::new(0x10, 0)),
                leaf: LeafSpec::Sfq(SfqSpec {
                    perturb: Some(10),
                    ..SfqSpec::default()
                }),
                stab: None,
            }),
            "qdisc add dev eth0 parent 1:10 handle 10: sfq perturb 10",
        ),
        (
            Command::FilterAdd(FilterSpec {
                dev: "eth0".into(),
                parent: Some(ClassId::new(1, 0)),
                protocol: Protocol::Ip,
                prio: Some(1),
                kind: FilterKind::U32,
                matcher: Match {
                    dst: Some("10.0.0.0/24".parse().unwrap()),
                    dport: Some(PortRange {
                        first: 5200,
                        last: 5215,
                    }),
                    proto: Some(17),
                    ..Match::default()
                },
                class: Some(ClassId::new(1, 0x10)),
                ..FilterSpec::default()
            }),
            "filter add dev eth0 parent 1: protocol ip pref 1 u32 match ip dst 10.0.0.0/24 match ip dport 5200 0xfff0 match ip protocol 17 0xff classid 1:10",
        ),
        (
            Command::FilterAdd(FilterSpec {
                dev: "eth0".into(),
                parent: Some(ClassId::new(0xffff, 0)),
                protocol: Protocol::Ip,
                kind: FilterKind::Flower,
                matcher: Match {
                    proto: Some(6),
                    dport: Some(PortRange {
                        first: 80,
                        last: 90,
                    }),
                    ..Match::default()
                },
                redirect: Some("ifb0".into()),
                ..FilterSpec::default()
            }),
            "filter add dev eth0 parent ffff: protocol ip flower ip_proto tcp dst_port 80-90 action mirred egress redirect dev ifb0",
        ),
        (
            Command::ClassDelete(ClassDelete {
                dev: "my dev".into(),
                id: ClassId::new(1, 0x20),
            }),
            "class del dev \"my dev\" classid 1:20",
        ),
    ];
    for (c, text) in cases {
        assert_eq!(command_line(&c).as_deref(), Ok(text));
        assert_eq!(round_trip(&c), Ok(c));
    }
}

#[test]
fn what_the_grammar_cannot_say_is_refused_saying_why() {
    let u32_ports = Command::FilterAdd(FilterSpec {
        dev: "eth0".into(),
        protocol: Protocol::Ip,
        kind: FilterKind::U32,
        matcher: Match {
            dport: Some(PortRange {
                first: 80,
                last: 90,
            }),
            ..Match::default()
        },
        class: Some(ClassId::new(1, 1)),
        ..FilterSpec::default()
    });
    assert!(matches!(
        command_line(&u32_ports),
        Err(WriteError::PortRange(_))
    ));
    let mut flower_keys = FilterSpec {
        kind: FilterKind::Flower,
        hashing: U32Hashing {
            link: Some(2),
            ..U32Hashing::default()
        },
        ..FilterSpec::default()
    };
    flower_keys.dev = "eth0".into();
    assert!(matches!(
        command_line(&Command::FilterAdd(flower_keys)),
        Err(WriteError::NotInKind { kind: "flower", .. })
    ));
    // A leading `'` is quoted by `"`, a `"` by `'`; a text with both has no words.
    for (dev, written) in [("'ab", "\"'ab\""), ("a\"b", "'a\"b'"), ("a#b", "\"a#b\"")] {
        let c = Command::QdiscDelete { dev: dev.into() };
        assert_eq!(
            command_line(&c).as_deref(),
            Ok(format!("qdisc del dev {written} root").as_str())
        );
        assert_eq!(round_trip(&c), Ok(c));
    }
    let unquotable = Command::QdiscDelete {
        dev: "a'b\"c".into(),
    };
    assert!(matches!(
        command_line(&unquotable),
        Err(WriteError::Unquotable(_))
    ));
}
