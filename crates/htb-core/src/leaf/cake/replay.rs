//! Recorded runs that pin what `cake` does, packet by packet: seeded traffic through every
//! flow mode, tin mode and option, and a digest of what came out (the order and time of every
//! packet sent, its CE mark, every packet dropped, and the statistics `tc -s` prints). The
//! digests were taken before the hot path was restructured for speed; a change that moves
//! one packet, one mark or one counter changes them.

extern crate std;
use std::format;
use std::vec::Vec;

use super::tcp::tests::segment;
use super::tcp::{ACK, TcpAck};
use super::*;
use crate::leaf::{Leaf, LeafConfig, LeafStore};
use crate::rate::Rate;
use crate::time::{Duration, Instant};

/// A packet that says who it is.
#[derive(Clone, Debug)]
struct Pkt {
    id: u32,
    flow: u32,
    src: u32,
    dst: u32,
    dscp: u8,
    len: u32,
    ect: bool,
    ce: bool,
    tcp: Option<TcpAck>,
    /// Its flow hash falls in one of four sets of eight ways.
    narrow: bool,
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    fn flow_hash(&self) -> u32 {
        let hash = self.flow.wrapping_mul(0x9e37_79b9);
        if self.narrow { hash & !0x3e0 } else { hash }
    }
    fn set_ce(&mut self) -> bool {
        if self.ect {
            self.ce = true;
        }
        self.ect
    }
    fn dscp(&self) -> u8 {
        self.dscp
    }
    fn wash_dscp(&mut self) {
        self.dscp = 0;
    }
    fn host_hashes(&self) -> (u32, u32) {
        (
            self.src.wrapping_mul(0x85eb_ca6b),
            self.dst.wrapping_mul(0xc2b2_ae35),
        )
    }
    fn truesize(&self) -> u32 {
        self.len + 256
    }
    fn network_offset(&self) -> u32 {
        14
    }
    fn tcp_ack(&self) -> Option<&TcpAck> {
        self.tcp.as_ref()
    }
}

/// xorshift64*: the test's own seeded generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    fn below(&mut self, n: u32) -> u32 {
        self.next() % n
    }
}

/// FNV-1a over what the run produced.
struct Digest(u64);

impl Digest {
    fn add(&mut self, value: u64) {
        for b in value.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn add_str(&mut self, s: &str) {
        for b in s.bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// One recorded run: two leaves of `spec` sharing one store, fed seeded traffic from `flows`
/// flows over `hosts` hosts at a link of `link` byte/s (arrivals outpace it in bursts, so
/// queues stand and COBALT signals), with idle spells that let queues decay and be freed.
struct Scenario {
    name: &'static str,
    spec: CakeSpec,
    flows: u32,
    hosts: u32,
    link: u64,
    /// Flow hashes crowd into four sets: indirect hits and collisions.
    narrow: bool,
}

/// The digest of `steps` rounds of scenario `s`.
fn run(s: &Scenario, seed: u64, steps: u32) -> u64 {
    let (flows, hosts, link) = (s.flows, s.hosts, s.link);
    let config = LeafConfig::Cake(s.spec.apply(&CakeConfig::default()));
    let mut store: LeafStore<Pkt> = LeafStore {
        seed,
        ..LeafStore::default()
    };
    let mut leaves = [
        Leaf::new(&config, 3, seed, Instant::ZERO),
        Leaf::new(&config, 4, seed, Instant::ZERO),
    ];
    let mut rng = Rng(seed | 1);
    let mut digest = Digest(0xcbf2_9ce4_8422_2325);
    let (mut now, mut id, mut ack_seq) = (0u64, 0u32, 1000u32);
    let dscps = [0u8, 1, 8, 10, 18, 26, 34, 46, 48, 56, 4, 32];
    for step in 0..steps {
        // Mostly a packet time at the link's rate; now and then an idle spell (past the
        // decaying queues' rest, or a second: stale).
        now += match rng.below(100) {
            0 => 1_500_000_000,
            1..=3 => 150_000_000,
            4..=9 => u64::from(rng.below(20_000_000)),
            _ => u64::from(rng.below(3000)) * 1_000_000_000 / link,
        };
        let burst = match rng.below(10) {
            0..=3 => 0,
            4..=7 => 1,
            8 => 3,
            _ => 8,
        };
        for _ in 0..burst {
            let flow = rng.below(flows);
            let leaf = (flow & 1) as usize;
            let mut p = Pkt {
                id,
                flow,
                src: flow % hosts,
                dst: 1000 + (flow / 3) % hosts,
                dscp: dscps[(flow % dscps.len() as u32) as usize],
                len: match rng.below(4) {
                    0 => 64,
                    1 => 576,
                    _ => 1500,
                },
                ect: !flow.is_multiple_of(3),
                ce: false,
                tcp: None,
                narrow: s.narrow,
            };
            if flow.is_multiple_of(5) {
                // A pure ACK stream: the ACK filter's food.
                ack_seq = ack_seq.wrapping_add(1448);
                p.len = 66;
                p.tcp = TcpAck::parse(&segment(ACK, ack_seq, 0, &[]));
            }
            id += 1;
            if let Err(p) = leaves[leaf].enqueue(&mut store, p, Instant::from_nanos(now)) {
                digest.add(u64::from(p.id) | 1 << 40);
            }
        }
        for leaf in &mut leaves {
            for _ in 0..rng.below(3) {
                match leaf.dequeue(&mut store, Instant::from_nanos(now)) {
                    Some(p) => {
                        digest.add(u64::from(p.id) | u64::from(p.ce) << 32);
                        digest.add(now);
                    }
                    None => {
                        if let Leaf::Cake(c) = leaf {
                            digest.add(c.throttled_until().unwrap_or(1));
                        }
                        break;
                    }
                }
            }
        }
        for p in store.dropped.drain(..) {
            digest.add(u64::from(p.id) | 2 << 40);
        }
        if step % 64 == 0 {
            for leaf in &leaves {
                leaf.check(&store).unwrap();
            }
        }
    }
    for leaf in &mut leaves {
        leaf.check(&store).unwrap();
        let Leaf::Cake(c) = leaf else { unreachable!() };
        digest.add_str(&format!("{:?}", c.stats()));
        digest.add(u64::from(c.counts.len) ^ c.counts.backlog ^ c.counts.drops << 20);
        // What remains comes out in order.
        while let Some(p) = leaf.dequeue(&mut store, Instant::from_nanos(now)) {
            digest.add(u64::from(p.id) | u64::from(p.ce) << 32);
        }
        let mut out = Vec::new();
        leaf.purge(&mut store, |p| out.push(p.id));
        for id in out {
            digest.add(u64::from(id) | 3 << 40);
        }
    }
    digest.0
}

/// The scenarios: every flow mode, tin mode and option at least once.
fn scenarios() -> Vec<Scenario> {
    let mbit = |n| Some(Rate::from_mbit(n));
    let scenario = |name, spec, flows, hosts, link| Scenario {
        name,
        spec,
        flows,
        hosts,
        link,
        narrow: false,
    };
    std::vec![
        // LibreQoS's leaf: triple-isolate, diffserv3, unlimited.
        scenario("default", CakeSpec::default(), 40, 6, 12_500_000),
        Scenario {
            narrow: true,
            ..scenario(
                "flows, besteffort, crowded sets",
                CakeSpec {
                    flow_mode: Some(FlowMode::Flows),
                    diffserv: Some(DiffservMode::Besteffort),
                    ..CakeSpec::default()
                },
                300,
                40,
                12_500_000,
            )
        },
        scenario(
            "diffserv4, shaped, ingress, ptm",
            CakeSpec {
                bandwidth: mbit(10),
                diffserv: Some(DiffservMode::Diffserv4),
                ingress: Some(true),
                atm: Some(AtmMode::Ptm),
                overhead: Some(22),
                ..CakeSpec::default()
            },
            64,
            5,
            1_250_000,
        ),
        scenario(
            "diffserv8, dual-srchost, wash, atm, mpu, ack-filter",
            CakeSpec {
                diffserv: Some(DiffservMode::Diffserv8),
                flow_mode: Some(FlowMode::DualSrchost),
                wash: Some(true),
                atm: Some(AtmMode::Atm),
                overhead: Some(10),
                mpu: Some(96),
                ack_filter: Some(AckFilter::Filter),
                ..CakeSpec::default()
            },
            200,
            9,
            2_500_000,
        ),
        scenario(
            "precedence, dual-dsthost, shaped, memlimit, aggressive ack-filter",
            CakeSpec {
                bandwidth: mbit(4),
                diffserv: Some(DiffservMode::Precedence),
                flow_mode: Some(FlowMode::DualDsthost),
                memlimit: Some(40_000),
                ack_filter: Some(AckFilter::Aggressive),
                ..CakeSpec::default()
            },
            50,
            7,
            1_000_000,
        ),
        scenario(
            "hosts, autorate-ingress",
            CakeSpec {
                bandwidth: mbit(20),
                autorate_ingress: Some(true),
                flow_mode: Some(FlowMode::Hosts),
                ..CakeSpec::default()
            },
            30,
            4,
            2_500_000,
        ),
        scenario(
            "srchost, unlimited, memlimit",
            CakeSpec {
                flow_mode: Some(FlowMode::Srchost),
                diffserv: Some(DiffservMode::Diffserv4),
                memlimit: Some(20_000),
                ..CakeSpec::default()
            },
            40,
            6,
            1_000_000,
        ),
        scenario(
            "dsthost, ingress",
            CakeSpec {
                flow_mode: Some(FlowMode::Dsthost),
                ingress: Some(true),
                bandwidth: mbit(8),
                ..CakeSpec::default()
            },
            40,
            6,
            1_000_000,
        ),
        scenario(
            "flowblind, raw",
            CakeSpec {
                flow_mode: Some(FlowMode::Flowblind),
                raw: true,
                bandwidth: mbit(2),
                ..CakeSpec::default()
            },
            10,
            3,
            250_000,
        ),
        Scenario {
            narrow: true,
            ..scenario(
                "triple-isolate, shaped, crowded sets, short rtt",
                CakeSpec {
                    bandwidth: mbit(50),
                    rtt: Some(Duration::from_millis(10)),
                    target: Some(Duration::from_micros(500)),
                    ..CakeSpec::default()
                },
                400,
                60,
                6_250_000,
            )
        },
    ]
}

/// The digests of [`scenarios`], in order, as the code before the hot path's restructuring
/// produced them.
const PINNED: [u64; 10] = [
    0x703e_0629_23d1_393e,
    0x688d_b24b_9357_f4e8,
    0xfad2_0c24_dce6_3291,
    0xdd9e_7d4c_54d5_fef2,
    0x43f7_b39f_b5cc_02a5,
    0x3a36_4d12_1708_f724,
    0x43be_c78f_8103_5fe4,
    0x7b18_8e16_9e5d_24e1,
    0x5c78_78f8_6a9d_d0e3,
    0xd0ed_5384_ea43_f371,
];

#[test]
fn cake_sends_drops_and_marks_as_it_did_before_its_hot_path_was_restructured() {
    let scenarios = scenarios();
    let got: Vec<u64> = scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| run(s, 0x5eed + i as u64, 6000))
        .collect();
    for (s, got) in scenarios.iter().zip(&got) {
        std::println!("{}: {got:#018x}", s.name);
    }
    assert_eq!(got, PINNED);
}
