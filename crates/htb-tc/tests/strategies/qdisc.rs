//! Qdisc commands: htb, mq, ingress, the leaf kinds.

use super::*;

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

pub(super) fn qdisc_command() -> BoxedStrategy<Command> {
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
        htb_qdisc().prop_map(|s| Command::QdiscAdd(Box::new(s))),
        htb_qdisc().prop_map(|s| Command::QdiscChange(Box::new(s))),
        htb_qdisc().prop_map(|s| Command::QdiscReplace(Box::new(s))),
        mq.clone().prop_map(Command::MqAdd),
        mq.prop_map(Command::MqReplace),
        dev().prop_map(|dev| Command::QdiscDelete { dev }),
        dev().prop_map(|dev| Command::IngressAdd { dev }),
        dev().prop_map(|dev| Command::IngressDelete { dev }),
        leaf_qdisc().prop_map(|s| Command::LeafAdd(Box::new(s))),
        leaf_qdisc().prop_map(|s| Command::LeafChange(Box::new(s))),
        leaf_qdisc().prop_map(|s| Command::LeafReplace(Box::new(s))),
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
