//! The data plane on a simulated UMEM, without root: the fixtures the other test modules share
//! (port b's tree, frames, planes of one or several workers, the drain that checks every frame
//! came back), and shaping at rates from 1 Mbit/s to 1 Gbit/s. The random sequences are in
//! `sequences`.

use htb_classify::{Classifier, Filter, Match};
use htb_core::{ClassDef, LeafDef, PortTree, TreeSpec};
use htb_core::{
    ClassId, ClassSpec, Duration, FqCodelConfig, Instant, LeafConfig, Rate, Scheduler,
    SchedulerConfig,
};

use super::sim::{SimParcel, SimRings};
use super::{Dataplane, Mode, PortSetup, Progress};
use crate::crew::{Bell, Crew};
use crate::frame::Frame;
use crate::plane_op::PlaneOp;
use crate::rings::Rings;
use std::sync::Arc;

pub(super) const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
pub(super) const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
pub(super) const STRANGER: [u8; 6] = [2, 0, 0, 0, 0, 0xee];
pub(super) const FRAME_SIZE: usize = 2048;
/// Port a has two RX queues (channels 0 and 1), port b one (channel 2).
pub(super) const QUEUES: [usize; 2] = [2, 1];
pub(super) const A: usize = 0;
pub(super) const B: usize = 1;

pub(super) fn class(minor: u32) -> ClassId {
    ClassId::new(1, minor)
}

/// An Ethernet + IPv4 + UDP frame of `size` bytes from `src_mac` (router mode: the egress port's
/// MAC, as the XDP program writes it) with the given ECN bits and ports.
pub(super) fn udp_frame(size: usize, src_mac: [u8; 6], ecn: u8, sport: u16, dport: u16) -> Vec<u8> {
    let size = size.max(42);
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[15] = ecn & 3;
    f[16..18].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 1, 1]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    let sum = super::sim::ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&(!sum).to_be_bytes());
    f
}

/// Port b's tree, as each worker builds it from [`tree_b_spec`].
fn tree_b(fq_limit: u32) -> Scheduler<Frame> {
    tree_b_spec(fq_limit).tree.build(Instant::ZERO).unwrap()
}

/// Port b's tree as htbd sends one, each worker building its own: 1:1 at 10 Mbit/s; 1:10
/// (6 Mbit/s, fq_codel, what goes to UDP port 5001) and 1:20 (4 Mbit/s, pfifo 20, the
/// default), both borrowing up to 10 Mbit/s.
pub(super) fn tree_b_spec(fq_limit: u32) -> PortTree {
    let ten = Rate::from_mbit(10);
    let def = |minor, parent: Option<u32>, spec, leaf: Option<LeafConfig>| ClassDef {
        id: class(minor),
        parent: parent.map(class),
        spec,
        leaf: leaf.map(|config| LeafDef {
            handle: None,
            config,
        }),
    };
    PortTree {
        tree: TreeSpec {
            config: SchedulerConfig {
                default_minor: 0x20,
                direct_qlen: 16,
                ..SchedulerConfig::default()
            },
            classes: vec![
                def(1, None, ClassSpec::new(ten), None),
                def(
                    0x10,
                    Some(1),
                    ClassSpec::new(Rate::from_mbit(6)).with_ceil(ten),
                    Some(fq_codel(fq_limit)),
                ),
                def(
                    0x20,
                    Some(1),
                    ClassSpec::new(Rate::from_mbit(4)).with_ceil(ten),
                    Some(LeafConfig::Pfifo { limit: 20 }),
                ),
            ],
            warnings: Vec::new(),
        },
        mq_minor: None,
        split: std::collections::BTreeMap::new(),
    }
}

/// A change to a tree that holds no packets yet.
pub(super) fn built(change: Result<htb_core::Change<Frame>, htb_core::ClassError>) {
    assert!(change.unwrap().purged.is_empty());
}

pub(super) fn fq_codel(limit: u32) -> LeafConfig {
    LeafConfig::FqCodel(FqCodelConfig {
        limit,
        ..FqCodelConfig::default()
    })
}

pub(super) fn to_5001() -> Vec<Filter> {
    vec![Filter {
        police: None,
        prio: 1,
        matcher: Match {
            dport: Some("5001".parse().unwrap()),
            ..Match::default()
        },
        class: class(0x10),
    }]
}

fn plane(mode: Mode, frames: u32, ring: usize, batch: usize) -> Dataplane<SimRings> {
    plane_with_chains(mode, frames, ring, batch, 1)
}

/// As [`plane`], receiving packets larger than a frame as chains of up to `max_chain` frames
/// (multi-buffer).
fn plane_with_chains(
    mode: Mode,
    frames: u32,
    ring: usize,
    batch: usize,
    max_chain: u32,
) -> Dataplane<SimRings> {
    planes(mode, frames, ring, batch, max_chain, 1)
        .pop()
        .expect("one worker")
}

/// The data planes of `workers` workers on one simulated UMEM of `frames` frames, linked by
/// their crews. One worker has [`QUEUES`]; several have a queue each on both ports (each
/// worker sends through its own socket on every port, as the engine requires).
pub(super) fn planes(
    mode: Mode,
    frames: u32,
    ring: usize,
    batch: usize,
    max_chain: u32,
    workers: usize,
) -> Vec<Dataplane<SimRings>> {
    let (peer_a, peer_b) = match mode {
        Mode::Bridge => (Some(B), Some(A)),
        Mode::Router => (None, None),
    };
    let ports = || {
        vec![
            bare_port("a", MAC_A, peer_a),
            PortSetup {
                trees: vec![(tree_b(64), None)],
                classifier: Arc::new(Classifier::new(to_5001())),
                ..bare_port("b", MAC_B, peer_b)
            },
        ]
    };
    let queues = if workers == 1 {
        QUEUES.to_vec()
    } else {
        vec![workers; 2]
    };
    let shares = SimRings::shares(frames, FRAME_SIZE, ring, &queues, max_chain, workers);
    shares
        .into_iter()
        .zip(crews(workers))
        .map(|(rings, crew)| Dataplane::new(rings, mode, ports(), batch, FRAME_SIZE as u32, crew))
        .collect()
}

/// A port with nothing set up: no tree, no filters, no round trips, no ingress.
pub(super) fn bare_port(name: &str, mac: [u8; 6], peer: Option<usize>) -> PortSetup {
    PortSetup {
        name: name.into(),
        mac,
        peer,
        trees: Vec::new(),
        classifier: Arc::new(Classifier::default()),
        rtt: false,
        ifb: false,
        ingress: None,
    }
}

/// The planes as the fleet takes them.
pub(super) fn refs(planes: &mut [Dataplane<SimRings>]) -> Vec<&mut Dataplane<SimRings>> {
    planes.iter_mut().collect()
}

/// Puts `htb` on `port` in place of its tree with the same major, at the root (`mq_minor`
/// `None`) or under that `mq` class.
pub(super) fn set_tree(port: &str, htb: Scheduler<Frame>, mq_minor: Option<u16>) -> PlaneOp {
    let config = *htb.config();
    PlaneOp::SetTree {
        port: port.into(),
        major: config.major,
        tree: Some(PortTree {
            tree: TreeSpec {
                config,
                classes: Vec::new(),
                warnings: Vec::new(),
            },
            mq_minor,
            split: std::collections::BTreeMap::new(),
        }),
        schedulers: vec![htb],
    }
}

/// The crews of `n` workers, one per worker (their bells ring into sockets nobody reads).
pub(super) fn crews(n: usize) -> Vec<Crew<SimParcel>> {
    let bells: Vec<Arc<Bell>> = (0..n)
        .map(|_| {
            let (bell, _) = std::os::unix::net::UnixStream::pair().unwrap();
            bell.set_nonblocking(true).unwrap();
            Arc::new(Bell::new(bell))
        })
        .collect();
    Crew::new_set(&bells)
}

/// The crew of a data plane that is the only worker.
pub(super) fn solo_crew() -> Crew<SimParcel> {
    crews(1).remove(0)
}

/// Links up, rings open: passes and sends until nothing is queued or in flight, then checks
/// that every frame is back and every packet received was sent or counted as dropped.
pub(super) fn drain(dp: &mut Dataplane<SimRings>, now: Instant) {
    drain_all(std::slice::from_mut(dp), now);
}

/// [`drain`] for several workers: each passes and sends in turn, and every frame must end in
/// its home worker's pool or fill rings.
pub(super) fn drain_all(planes: &mut [Dataplane<SimRings>], mut now: Instant) {
    for port in [A, B] {
        planes[0].rings_mut().set_link(port, true);
        planes[0].rings_mut().limit_tx(port, None);
    }
    let busy = |planes: &[Dataplane<SimRings>]| {
        planes[0].rings().in_transit() > 0
            || planes.iter().any(|dp| {
                dp.queued() > 0
                    || dp.rings().in_flight() > 0
                    || dp.rings().rx_len() > 0
                    || dp.rings().counts().with_caller > 0
                    || dp.crew().has_inbound()
            })
    };
    let mut passes = 0;
    while busy(planes) {
        passes += 1;
        assert!(passes < 100_000, "the queues never drained");
        now += Duration::from_millis(20);
        for dp in planes.iter_mut() {
            dp.poll(now);
            for port in [A, B] {
                dp.rings_mut().send(port, usize::MAX);
            }
            dp.poll(now);
            dp.rings().check();
        }
    }
    // Frames another worker freed last are on their way home: one more pass takes them in.
    for dp in planes.iter_mut() {
        dp.poll(now);
    }
    for (w, dp) in planes.iter().enumerate() {
        let counts = dp.frames();
        assert_eq!(counts.with_caller, 0, "worker {w}: {counts:?}");
        assert_eq!(counts.in_tx, 0, "worker {w}: {counts:?}");
        assert_eq!(
            counts.free + counts.in_fill,
            counts.total,
            "worker {w}: every frame of its home back: {counts:?}"
        );
    }

    let stats: Vec<_> = planes.iter().flat_map(Dataplane::port_stats).collect();
    let wire: Vec<_> = [A, B].map(|port| planes[0].rings().wire(port)).to_vec();
    let delivered: u64 = wire.iter().map(|w| w.delivered).sum();
    let sent: u64 = wire.iter().map(|w| w.sent).sum();
    let received: u64 = stats.iter().map(|s| s.rx_packets).sum();
    let transmitted: u64 = stats.iter().map(|s| s.tx_packets).sum();
    let dropped: u64 = stats
        .iter()
        .map(|s| s.drops_queue + s.drops_pool + s.drops_police + s.drops_purged + s.drops_no_egress)
        .sum();
    assert_eq!(received, delivered, "frames received");
    assert_eq!(transmitted, sent, "frames sent");
    assert_eq!(
        sent + dropped,
        delivered,
        "every frame sent or counted as dropped"
    );
}

/// Saturating traffic into one class of port b (bridge mode) for one simulated second: what
/// leaves port b from 0.2 s to 1 s is the class's rate within 1 %, at rates from 1 Mbit/s to
/// 1 Gbit/s and packet sizes from 64 to 9014 bytes (jumbo frames as chains of frames).
fn shaped_rate(rate: Rate, size: usize) -> f64 {
    let chain = size.div_ceil(FRAME_SIZE) as u32;
    let mut dp = plane_with_chains(Mode::Bridge, 8192 * chain, 512, 512, chain);
    let mut htb = Scheduler::new(SchedulerConfig {
        default_minor: 1,
        ..SchedulerConfig::default()
    });
    built(htb.add_class(Instant::ZERO, class(1), None, &ClassSpec::new(rate)));
    let op = set_tree("b", htb, None);
    assert_eq!(dp.apply(Instant::ZERO, vec![op]).0, [Ok(0)]);
    let frame = udp_frame(size, MAC_B, 0, 1000, 80);
    let step = Duration::from_micros(500);
    // Offer 1.5 times the rate, at least one frame per step.
    let per_step = ((rate.bytes_per_sec() as f64 * 1.5 * 0.0005) / size as f64).ceil() as usize;
    let mut now = Instant::ZERO;
    let mut start_bytes = 0;
    for i in 0..2000 {
        for n in 0..per_step {
            dp.rings_mut().deliver(n % 2, &frame);
        }
        now += step;
        while dp.poll(now) == Progress::Moved {
            dp.rings_mut().send(B, usize::MAX);
            dp.rings_mut().send(A, usize::MAX);
        }
        if i == 399 {
            start_bytes = dp.rings().wire(B).sent_bytes;
        }
    }
    let stats = &dp.port_stats()[B];
    assert!(
        stats.drops_queue > 0,
        "premise: the class was saturated (it dropped)"
    );
    let bytes = dp.rings().wire(B).sent_bytes - start_bytes;
    bytes as f64 * 8.0 / 0.8
}

#[test]
fn shapes_within_one_percent_from_1_mbit_to_1_gbit() {
    for (mbit, size) in [
        (1, 64),
        (1, 1500),
        (10, 1500),
        (100, 64),
        (100, 1500),
        (1000, 1500),
        // Jumbo frames, chains of five 2048-byte frames: charged whole.
        (100, 9014),
        (1000, 9014),
    ] {
        let rate = Rate::from_mbit(mbit);
        let got = shaped_rate(rate, size);
        let want = rate.bits_per_sec() as f64;
        let error = (got - want) / want;
        assert!(
            error.abs() < 0.01,
            "{mbit} Mbit/s with {size}-byte frames: {got:.0} bit/s ({:+.2} %)",
            error * 100.0
        );
    }
}

#[test]
fn a_link_down_holds_frames_and_nothing_spins_or_leaks() {
    let mut dp = plane(Mode::Bridge, 512, 32, 16);
    dp.rings_mut().set_link(B, false);
    let mut now = Instant::ZERO;
    for _ in 0..20 {
        for n in 0..8 {
            dp.rings_mut()
                .deliver(n % 2, &udp_frame(1000, MAC_B, 0, 1000 + n as u16, 80));
        }
        now += Duration::from_millis(5);
        dp.poll(now);
    }
    // The TX ring is full of frames the kernel will not send; the next passes report it
    // rather than "moved" (the engine backs off on TxStuck instead of spinning).
    now += Duration::from_millis(100);
    let mut progress = dp.poll(now);
    for _ in 0..3 {
        progress = dp.poll(now);
    }
    assert_eq!(progress, Progress::TxStuck);
    assert!(dp.rings().in_flight() > 0);
    dp.rings().check();
    drain(&mut dp, now);
}

#[test]
fn ce_marks_reach_the_wire_with_a_valid_checksum() {
    // ECT(0) frames at 12 Mbit/s into 1:10 (fq_codel, 10 Mbit/s with what it borrows) for
    // 0.3 s: a standing queue builds (sojourn above 5 ms from ~25 ms on, so CoDel acts from
    // ~125 ms) but stays below the 64-packet limit: CoDel marks, nothing is dropped.
    let mut dp = plane(Mode::Bridge, 2048, 64, 64);
    let mut now = Instant::ZERO;
    for i in 0..150 {
        for _ in 0..2 {
            dp.rings_mut()
                .deliver(i % 2, &udp_frame(1500, MAC_B, 2, 1000, 5001));
        }
        now += Duration::from_millis(2);
        dp.poll(now);
        dp.rings_mut().send(B, usize::MAX);
    }
    let wire = dp.rings().wire(B);
    assert!(wire.sent_ce > 0, "CoDel marked nothing: {wire:?}");
    assert_eq!(wire.sent_bad_checksum, 0, "{wire:?}");
    assert_eq!(
        dp.port_stats()[B].drops_queue,
        0,
        "ECT frames are marked, not dropped"
    );
    drain(&mut dp, now);
}

#[test]
fn router_mode_follows_a_port_whose_mac_changed() {
    let mut dp = plane(Mode::Router, 512, 32, 16);
    let new_b = [2, 0, 0, 0, 0, 0xbb];
    dp.set_mac(B, new_b);
    let mut now = Instant::ZERO;
    for mac in [new_b, MAC_B] {
        for n in 0..4 {
            dp.rings_mut()
                .deliver(0, &udp_frame(200, mac, 0, 1000 + n, 80));
        }
    }
    for _ in 0..10 {
        now += Duration::from_millis(10);
        dp.poll(now);
        dp.rings_mut().send(B, usize::MAX);
    }
    let stats = dp.port_stats();
    assert_eq!(
        stats[B].tx_packets, 4,
        "frames with the new source MAC go out of b"
    );
    assert_eq!(stats[A].drops_no_egress, 4, "the old MAC is nobody's now");
    drain(&mut dp, now);
}

/// A batch stops at its first failing operation: the later ones are not applied.
#[test]
fn a_batch_stops_at_its_first_failure() {
    let mut dp = plane(Mode::Bridge, 64, 16, 16);
    let tree = set_tree("b", Scheduler::new(SchedulerConfig::default()), None);
    assert_eq!(dp.apply(Instant::ZERO, vec![tree]).0, [Ok(0)]);
    let add = |minor| PlaneOp::AddClass {
        port: "b".into(),
        id: class(minor),
        parent: None,
        spec: ClassSpec::new(Rate::from_bits_per_sec(1_000_000)),
    };
    let missing = PlaneOp::DeleteClass {
        port: "b".into(),
        id: class(99),
    };
    let (results, _) = dp.apply(Instant::ZERO, vec![add(1), missing, add(2)]);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].is_ok() && results[1].is_err());
    let htb = dp.scheduler("b", 1).unwrap();
    assert!(htb.class_info(class(1)).is_some());
    assert!(
        htb.class_info(class(2)).is_none(),
        "applied after a failure"
    );
}

/// Replaced filters come back with the results, to be freed by the caller (off the data-plane
/// thread), and the data plane keeps no reference to them.
#[test]
fn replaced_filters_are_handed_back() {
    let mut dp = plane(Mode::Bridge, 64, 16, 16);
    let first = Arc::new(Classifier::new(to_5001()));
    let set = |classifier: &Arc<Classifier>| PlaneOp::SetFilters {
        port: "b".into(),
        filters: Arc::clone(classifier),
    };
    let (results, retired) = dp.apply(Instant::ZERO, vec![set(&first)]);
    assert_eq!(results, [Ok(0)]);
    drop(retired);
    assert_eq!(
        Arc::strong_count(&first),
        2,
        "the data plane holds the new filters"
    );
    let second = Arc::new(Classifier::default());
    let (results, retired) = dp.apply(Instant::ZERO, vec![set(&second)]);
    assert_eq!(results, [Ok(0)]);
    assert!(!retired.is_empty());
    assert_eq!(Arc::strong_count(&first), 2, "handed back, not yet freed");
    drop(retired);
    assert_eq!(
        Arc::strong_count(&first),
        1,
        "only the test holds the old filters"
    );
}
