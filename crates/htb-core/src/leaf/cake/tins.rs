//! `cake`'s tins: the DSCP → tin tables, each tin's share of the bandwidth and its DRR weight
//! (`cake_config_besteffort`, `_precedence`, `_diffserv8`, `_diffserv4`, `_diffserv3`), and
//! the rate arithmetic of `cake_set_rate`.

use super::cobalt::CobaltParams;
use super::hash::CakeFlowState;
use super::spec::{CakeConfig, DiffservMode};
use crate::leaf::flows::{FlowList, FlowTable, ListTag};

/// `CAKE_MAX_TINS`.
pub(crate) const MAX_TINS: usize = 8;

/// `precedence[]`: the DSCP's top three bits.
const PRECEDENCE: [u8; 64] = {
    let mut t = [0; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (i >> 3) as u8;
        i += 1;
    }
    t
};

/// `diffserv8[]`.
const DIFFSERV8: [u8; 64] = [
    2, 0, 1, 2, 4, 2, 2, 2, 1, 2, 1, 2, 1, 2, 1, 2, 5, 2, 4, 2, 4, 2, 4, 2, 3, 2, 3, 2, 3, 2, 3, 2,
    6, 2, 3, 2, 3, 2, 3, 2, 6, 2, 2, 2, 6, 2, 6, 2, 7, 2, 2, 2, 2, 2, 2, 2, 7, 2, 2, 2, 2, 2, 2, 2,
];

/// `diffserv4[]`: 0 Best Effort, 1 Bulk, 2 Video, 3 Voice.
const DIFFSERV4: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0,
    3, 0, 2, 0, 2, 0, 2, 0, 3, 0, 0, 0, 3, 0, 3, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
];

/// `diffserv3[]`: 0 Best Effort, 1 Bulk, 2 Voice.
const DIFFSERV3: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
];

/// `normal_order[]`: the order `tc -s` lists tins in.
const NORMAL_ORDER: [u8; MAX_TINS] = [0, 1, 2, 3, 4, 5, 6, 7];
/// `bulk_order[]`: Bulk first (diffserv3 and diffserv4).
const BULK_ORDER: [u8; MAX_TINS] = [1, 0, 2, 3, 4, 5, 6, 7];

/// The tin `dscp` goes to under `mode`.
pub(crate) fn tin_of(mode: DiffservMode, dscp: u8) -> usize {
    let dscp = usize::from(dscp & 63);
    usize::from(match mode {
        DiffservMode::Besteffort => 0,
        DiffservMode::Precedence => PRECEDENCE[dscp],
        DiffservMode::Diffserv8 => DIFFSERV8[dscp],
        DiffservMode::Diffserv4 => DIFFSERV4[dscp],
        DiffservMode::Diffserv3 => DIFFSERV3[dscp],
    })
}

/// The order of the tins in statistics (`tin_order`), and for `fwmark`: mark `m` selects
/// tin `order[m - 1]`.
pub(crate) fn order(mode: DiffservMode) -> &'static [u8; MAX_TINS] {
    match mode {
        DiffservMode::Diffserv3 | DiffservMode::Diffserv4 => &BULK_ORDER,
        _ => &NORMAL_ORDER,
    }
}

/// A tin's rate as `cake_set_rate` keeps it: time per byte, `ns_per_byte << shift`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RateNs {
    /// Bytes per second (0: unlimited).
    pub(crate) bytes_per_sec: u64,
    pub(crate) ns: u64,
    pub(crate) shift: u8,
}

impl RateNs {
    /// `cake_set_rate`'s conversion: never below 64 byte/s, so that it always unwedges.
    pub(crate) fn new(bytes_per_sec: u64) -> Self {
        if bytes_per_sec == 0 {
            return Self::default();
        }
        let mut shift = 34u8;
        let mut ns = (1_000_000_000u64 << shift) / bytes_per_sec.max(64);
        while ns >> 34 != 0 {
            ns >>= 1;
            shift -= 1;
        }
        Self {
            bytes_per_sec,
            ns,
            shift,
        }
    }

    /// Time `len` bytes take, ns (0 when unlimited).
    pub(crate) fn duration(self, len: u32) -> u64 {
        duration(len, self.ns, self.shift)
    }
}

/// Time `len` bytes take at `ns >> shift` ns per byte (`cake_advance_shaper`'s
/// `(len * rate_ns) >> rate_shft`).
#[inline]
pub(crate) fn duration(len: u32, ns: u64, shift: u8) -> u64 {
    ((u128::from(len) * u128::from(ns)) >> shift) as u64
}

/// One tin (`struct cake_tin_data` without its flow arrays, which live in the flow table).
/// 192 bytes on a cache line's start: a packet reads and writes all three of its lines, and
/// unaligned (a `Vec`'s 16-byte alignment) they spanned four.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Tin {
    pub(crate) new_flows: FlowList,
    pub(crate) old_flows: FlowList,
    pub(crate) decaying_flows: FlowList,
    pub(crate) cparams: CobaltParams,
    pub(crate) rate: RateNs,
    /// When this tin may next send within its threshold rate (ns).
    pub(crate) time_next_packet: u64,
    /// DRR quantum of one flow, before host fairness divides it.
    pub(crate) flow_quantum: u16,
    /// DRR weight among tins when the bandwidth is unlimited.
    pub(crate) tin_quantum: u16,
    pub(crate) tin_deficit: i32,
    pub(crate) bulk_flow_count: u16,
    pub(crate) sparse_flow_count: u16,
    pub(crate) decaying_flow_count: u16,
    pub(crate) unresponsive_flow_count: u16,
    pub(crate) tin_backlog: u32,
    pub(crate) max_skblen: u32,
    pub(crate) packets: u32,
    pub(crate) bytes: u64,
    pub(crate) tin_dropped: u32,
    pub(crate) tin_ecn_mark: u32,
    pub(crate) ack_drops: u32,
    pub(crate) drop_overlimit: u32,
    /// Delay EWMAs (ns): average, peak, base.
    pub(crate) avge_delay: u64,
    pub(crate) peak_delay: u64,
    pub(crate) base_delay: u64,
    pub(crate) way_hits: u32,
    pub(crate) way_misses: u32,
    pub(crate) way_collisions: u32,
}

impl Tin {
    pub(crate) fn new() -> Self {
        Self {
            new_flows: FlowList::new(ListTag::New),
            old_flows: FlowList::new(ListTag::Old),
            decaying_flows: FlowList::new(ListTag::Dormant),
            cparams: CobaltParams::default(),
            rate: RateNs::default(),
            time_next_packet: 0,
            flow_quantum: 1514,
            tin_quantum: 0,
            tin_deficit: 0,
            bulk_flow_count: 0,
            sparse_flow_count: 0,
            decaying_flow_count: 0,
            unresponsive_flow_count: 0,
            tin_backlog: 0,
            max_skblen: 0,
            packets: 0,
            bytes: 0,
            tin_dropped: 0,
            tin_ecn_mark: 0,
            ack_drops: 0,
            drop_overlimit: 0,
            avge_delay: 0,
            peak_delay: 0,
            base_delay: 0,
            way_hits: 0,
            way_misses: 0,
            way_collisions: 0,
        }
    }

    /// The list of this tin that `tag` names.
    #[inline]
    fn list(&mut self, tag: ListTag) -> Option<&mut FlowList> {
        match tag {
            ListTag::New => Some(&mut self.new_flows),
            ListTag::Old => Some(&mut self.old_flows),
            ListTag::Dormant => Some(&mut self.decaying_flows),
            ListTag::Unlinked => None,
        }
    }

    /// `list_del_init`: queue `idx` of this tin leaves whichever list it is on.
    #[inline]
    pub(crate) fn unlink(&mut self, flows: &mut FlowTable<CakeFlowState>, idx: u32) {
        if let Some(list) = self.list(flows.get(idx).list) {
            list.remove(flows, idx);
        }
    }

    /// `list_move_tail`: queue `idx` of this tin goes to the tail of the list `to` names.
    #[inline]
    pub(crate) fn move_to(&mut self, flows: &mut FlowTable<CakeFlowState>, idx: u32, to: ListTag) {
        self.unlink(flows, idx);
        if let Some(list) = self.list(to) {
            list.push_back(flows, idx);
        }
    }

    /// Flows with packets or waiting to (sparse and bulk).
    pub(crate) fn busy(&self) -> bool {
        self.sparse_flow_count + self.bulk_flow_count > 0
    }

    /// `cake_set_rate`: the tin's threshold rate, and COBALT's parameters scaled to it (a
    /// target of at least 1.5 MTU times, an interval of at least two targets).
    pub(crate) fn set_rate(&mut self, bytes_per_sec: u64, mtu: u32, target_ns: u64, rtt_ns: u64) {
        self.flow_quantum = if bytes_per_sec == 0 {
            1514
        } else {
            (bytes_per_sec >> 12).clamp(300, 1514) as u16
        };
        self.rate = RateNs::new(bytes_per_sec);
        let byte_target_ns = self.rate.duration(mtu);
        self.cparams.target = (byte_target_ns * 3 / 2).max(target_ns);
        self.cparams.interval =
            (rtt_ns + self.cparams.target - target_ns).max(self.cparams.target * 2);
        self.cparams.mtu_time = byte_target_ns;
    }
}

/// `cake_config_*`: sets every tin's rate, COBALT parameters and weight for `config` at
/// `bytes_per_sec`.
pub(crate) fn configure(tins: &mut [Tin], config: &CakeConfig, bytes_per_sec: u64) {
    let mtu = config.mtu;
    let target = config.target.as_nanos();
    let rtt = config.rtt.as_nanos();
    match config.diffserv {
        DiffservMode::Besteffort => {
            tins[0].set_rate(bytes_per_sec, mtu, target, rtt);
            tins[0].tin_quantum = 65535;
        }
        DiffservMode::Precedence | DiffservMode::Diffserv8 => {
            let (mut rate, mut quantum) = (bytes_per_sec, 256u32);
            for tin in tins.iter_mut().take(MAX_TINS) {
                tin.set_rate(rate, mtu, target, rtt);
                tin.tin_quantum = quantum.max(1) as u16;
                rate = (rate * 7) >> 3;
                quantum = (quantum * 7) >> 3;
            }
        }
        DiffservMode::Diffserv4 => {
            for (tin, shift) in tins.iter_mut().zip([0, 4, 1, 2]) {
                tin.set_rate(bytes_per_sec >> shift, mtu, target, rtt);
                tin.tin_quantum = 1024 >> shift;
            }
        }
        DiffservMode::Diffserv3 => {
            for (tin, shift) in tins.iter_mut().zip([0, 4, 2]) {
                tin.set_rate(bytes_per_sec >> shift, mtu, target, rtt);
                tin.tin_quantum = 1024 >> shift;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dscp_maps_to_the_kernels_tins() {
        let ef = 46;
        let cs1 = 8;
        let le = 1;
        let af41 = 34;
        let cs6 = 48;
        assert_eq!(tin_of(DiffservMode::Diffserv3, ef), 2, "EF is voice");
        assert_eq!(tin_of(DiffservMode::Diffserv3, cs1), 1, "CS1 is bulk");
        assert_eq!(tin_of(DiffservMode::Diffserv3, af41), 0);
        assert_eq!(tin_of(DiffservMode::Diffserv4, ef), 3);
        assert_eq!(tin_of(DiffservMode::Diffserv4, af41), 2, "AF41 is video");
        assert_eq!(tin_of(DiffservMode::Diffserv4, le), 1);
        assert_eq!(tin_of(DiffservMode::Diffserv4, 0), 0);
        assert_eq!(tin_of(DiffservMode::Diffserv8, cs6), 7);
        assert_eq!(tin_of(DiffservMode::Diffserv8, 0), 2);
        assert_eq!(tin_of(DiffservMode::Precedence, ef), 5);
        assert_eq!(tin_of(DiffservMode::Besteffort, ef), 0);
    }

    #[test]
    fn set_rate_follows_cake_set_rate() {
        // 20 Mbit/s = 2 500 000 B/s: 400 ns per byte, kept as 400 << 34 >> k.
        let mut tin = Tin::new();
        tin.set_rate(2_500_000, 1514, 5_000_000, 100_000_000);
        assert_eq!(tin.rate.duration(1514), 605_600);
        assert_eq!(tin.flow_quantum, 610, "rate >> 12");
        assert_eq!(tin.cparams.target, 5_000_000, "1.5 MTU times is below 5 ms");
        assert_eq!(tin.cparams.interval, 100_000_000);
        // 1 Mbit/s: one MTU takes 12.1 ms, so the target is 18.2 ms and the interval grows.
        tin.set_rate(125_000, 1514, 5_000_000, 100_000_000);
        assert_eq!(tin.rate.duration(1514), 12_112_000);
        assert_eq!(tin.cparams.target, 18_168_000);
        assert_eq!(tin.cparams.interval, 113_168_000);
        assert_eq!(tin.flow_quantum, 300, "at least 300");
        tin.set_rate(0, 1514, 5_000_000, 100_000_000);
        assert_eq!((tin.rate.duration(1514), tin.flow_quantum), (0, 1514));
    }

    #[test]
    fn diffserv4_splits_rates_and_weights_as_the_kernel() {
        let mut tins: [Tin; 4] = core::array::from_fn(|_| Tin::new());
        let config = CakeConfig {
            diffserv: DiffservMode::Diffserv4,
            ..CakeConfig::default()
        };
        configure(&mut tins, &config, 1_600_000);
        let rates: [u64; 4] = core::array::from_fn(|i| tins[i].rate.bytes_per_sec);
        let quanta: [u16; 4] = core::array::from_fn(|i| tins[i].tin_quantum);
        assert_eq!(rates, [1_600_000, 100_000, 800_000, 400_000]);
        assert_eq!(quanta, [1024, 64, 512, 256]);
        assert_eq!(order(DiffservMode::Diffserv4)[..4], [1, 0, 2, 3]);
    }
}
