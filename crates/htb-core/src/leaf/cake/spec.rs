//! What a `cake` qdisc is asked to be and what it runs with: tc's options as the netlink
//! attributes iproute2's `cake_parse_opt` sends (each `None` when not sent), applied to the
//! running parameters as `cake_change` applies them, with `cake_init`'s defaults.

use core::fmt;

use crate::leaf::options::{LeafOption, OptionValue};
use crate::leaf::port::DEFAULT_PSCHED_MTU;
use crate::rate::Rate;
use crate::time::Duration;

keyword_enum! {
    /// How DSCP maps to tins (`TCA_CAKE_DIFFSERV_MODE`).
    pub enum DiffservMode {
        /// Three tins: Bulk (CS1, LE), Best Effort, Voice (CS7, CS6, EF, VA, TOS4). The default.
        #[default]
        Diffserv3 => "diffserv3",
        /// Four tins: Bulk, Best Effort, Video (AF4x, AF3x, CS3, AF2x, TOS4, CS2), Voice (CS7, CS6,
        /// EF, VA, CS5, CS4).
        Diffserv4 => "diffserv4",
        /// Eight tins (`cake_config_diffserv8`).
        Diffserv8 => "diffserv8",
        /// One tin: DSCP ignored.
        Besteffort => "besteffort",
        /// Eight tins by the IP precedence (the DSCP's top three bits).
        Precedence => "precedence",
    }
}

keyword_enum! {
    /// What a flow is to `cake`'s fairness (`TCA_CAKE_FLOW_MODE`): bit 0 the source host, bit 1
    /// the destination host, bit 2 the 5-tuple (`CAKE_FLOW_SRC_IP`, `_DST_IP`, `_FLOWS`).
    pub enum FlowMode {
        /// Every packet in one queue.
        Flowblind => "flowblind",
        /// One queue per source address.
        Srchost => "srchost",
        /// One queue per destination address.
        Dsthost => "dsthost",
        /// One queue per address pair.
        Hosts => "hosts",
        /// One queue per 5-tuple.
        Flows => "flows",
        /// Flows, fair first between source hosts.
        DualSrchost => "dual-srchost",
        /// Flows, fair first between destination hosts.
        DualDsthost => "dual-dsthost",
        /// Flows, fair between source hosts and between destination hosts. The default.
        #[default]
        TripleIsolate => "triple-isolate",
    }
}

impl FlowMode {
    /// The kernel's number (`CAKE_FLOW_*`): its bits say what is hashed.
    #[must_use]
    pub fn bits(self) -> u8 {
        match self {
            Self::Flowblind => 0,
            Self::Srchost => 1,
            Self::Dsthost => 2,
            Self::Hosts => 3,
            Self::Flows => 4,
            Self::DualSrchost => 5,
            Self::DualDsthost => 6,
            Self::TripleIsolate => 7,
        }
    }

    /// `cake_dsrc`: flows are fair between source hosts.
    pub(crate) fn dual_src(self) -> bool {
        self.bits() & 5 == 5
    }

    /// `cake_ddst`: flows are fair between destination hosts.
    pub(crate) fn dual_dst(self) -> bool {
        self.bits() & 6 == 6
    }
}

keyword_enum! {
    /// `cake`'s ACK filter (`TCA_CAKE_ACK_FILTER`).
    pub enum AckFilter {
        /// `no-ack-filter` (the default).
        #[default]
        Off => "no-ack-filter",
        /// `ack-filter`: a queued pure ACK goes once two newer ones make it redundant.
        Filter => "ack-filter",
        /// `ack-filter-aggressive`: once one newer ACK does.
        Aggressive => "ack-filter-aggressive",
    }
}

keyword_enum! {
    /// Link-layer cell framing `cake` compensates for (`TCA_CAKE_ATM`).
    pub enum AtmMode {
        /// `noatm`.
        #[default]
        None => "noatm",
        /// `atm`: 48-byte payloads in 53-byte cells (ADSL).
        Atm => "atm",
        /// `ptm`: one byte in 65 (VDSL2's 64b/65b coding).
        Ptm => "ptm",
    }
}

/// `cake`'s options as tc sends them: each `Some` is an attribute `cake_change` applies, so
/// `qdisc change` touches only what it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct CakeSpec {
    /// `bandwidth RATE`; zero is `unlimited`.
    pub bandwidth: Option<Rate>,
    /// `autorate-ingress`: estimate the bandwidth from the arrivals.
    pub autorate_ingress: Option<bool>,
    /// The tins.
    pub diffserv: Option<DiffservMode>,
    /// The flow isolation.
    pub flow_mode: Option<FlowMode>,
    /// `nat`: look hosts up through conntrack (htbd has none: shown, not used).
    pub nat: Option<bool>,
    /// `wash`: clear the DSCP of what passes.
    pub wash: Option<bool>,
    /// `split-gso` (htbd sees no GSO frames: shown, not used).
    pub split_gso: Option<bool>,
    /// `ingress`: dropped packets count against the shaper, and AQM knows the bulk flows.
    pub ingress: Option<bool>,
    /// The ACK filter.
    pub ack_filter: Option<AckFilter>,
    /// `memlimit`: the buffer's byte limit (0: from the bandwidth).
    pub memlimit: Option<u32>,
    /// Cell framing.
    pub atm: Option<AtmMode>,
    /// `overhead N` (and the presets that add to it): bytes per packet, replacing the L2
    /// header; sent with any of them.
    pub overhead: Option<i32>,
    /// `raw`: the packet's own length, no compensation (sent by `raw` only).
    pub raw: bool,
    /// `mpu`: the smallest length a packet is charged.
    pub mpu: Option<u32>,
    /// `rtt`: CoDel's interval (the presets too).
    pub rtt: Option<Duration>,
    /// CoDel's target (tc sends `rtt / 20`, or the preset's).
    pub target: Option<Duration>,
    /// `fwmark MASK`: the tin from the packet's mark.
    pub fwmark: Option<u32>,
}

/// `cake`'s parameters in effect (`struct cake_sched_data`'s settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CakeConfig {
    /// The shaper's rate (`rate_bps`); zero: unlimited (tins shared by DRR weights).
    pub bandwidth: Rate,
    /// `CAKE_FLAG_AUTORATE_INGRESS`.
    pub autorate_ingress: bool,
    /// The tins.
    pub diffserv: DiffservMode,
    /// The flow isolation.
    pub flow_mode: FlowMode,
    /// `CAKE_FLOW_NAT_FLAG` (no conntrack here: shown, not used).
    pub nat: bool,
    /// `CAKE_FLAG_WASH`.
    pub wash: bool,
    /// `CAKE_FLAG_SPLIT_GSO` (no GSO frames here: shown, not used).
    pub split_gso: bool,
    /// `CAKE_FLAG_INGRESS`.
    pub ingress: bool,
    /// The ACK filter.
    pub ack_filter: AckFilter,
    /// `buffer_config_limit` (0: from the bandwidth, at least 4 MB).
    pub memlimit: u32,
    /// Cell framing.
    pub atm: AtmMode,
    /// `rate_overhead`.
    pub overhead: i32,
    /// `CAKE_FLAG_OVERHEAD`: the L2 header is replaced by `overhead`; false is `raw`.
    pub overhead_set: bool,
    /// `rate_mpu`.
    pub mpu: u32,
    /// CoDel's interval (`rtt`).
    pub rtt: Duration,
    /// CoDel's target.
    pub target: Duration,
    /// `fwmark_mask`.
    pub fwmark: u32,
    /// The port's `psched_mtu`: the MTU time's size and part of the buffer limit.
    pub mtu: u32,
}

impl Default for CakeConfig {
    /// `cake_init`'s defaults.
    fn default() -> Self {
        Self {
            bandwidth: Rate::ZERO,
            autorate_ingress: false,
            diffserv: DiffservMode::Diffserv3,
            flow_mode: FlowMode::TripleIsolate,
            nat: false,
            wash: false,
            split_gso: true,
            ingress: false,
            ack_filter: AckFilter::Off,
            memlimit: 0,
            atm: AtmMode::None,
            overhead: 0,
            overhead_set: false,
            mpu: 0,
            rtt: Duration::from_millis(100),
            target: Duration::from_millis(5),
            fwmark: 0,
            mtu: DEFAULT_PSCHED_MTU,
        }
    }
}

/// The kernel keeps `rtt` and `target` in whole microseconds, at least 1.
fn micros(d: Duration) -> Duration {
    Duration::from_micros((d.as_nanos() / 1000).clamp(1, u64::from(u32::MAX)))
}

impl CakeSpec {
    /// Its options (fields), for readers of text; `overhead` and `mpu` in tc's ranges.
    pub const OPTIONS: [LeafOption; 17] = [
        LeafOption::new("bandwidth", OptionValue::Rate),
        LeafOption::new("autorate_ingress", OptionValue::Flag),
        LeafOption::new("diffserv", OptionValue::Keyword),
        LeafOption::new("flow_mode", OptionValue::Keyword),
        LeafOption::new("nat", OptionValue::Flag),
        LeafOption::new("wash", OptionValue::Flag),
        LeafOption::new("split_gso", OptionValue::Flag),
        LeafOption::new("ingress", OptionValue::Flag),
        LeafOption::new("ack_filter", OptionValue::Keyword),
        LeafOption::new("memlimit", OptionValue::Size),
        LeafOption::new("atm", OptionValue::Keyword),
        LeafOption::new("overhead", OptionValue::Int { min: -64, max: 256 }),
        LeafOption::new("raw", OptionValue::Flag),
        LeafOption::new("mpu", OptionValue::Int { min: 0, max: 256 }),
        LeafOption::new("rtt", OptionValue::Time),
        LeafOption::new("target", OptionValue::Time),
        LeafOption::new("fwmark", OptionValue::Count),
    ];

    /// `cake_change` on top of `base`: what is given replaces what runs.
    #[must_use]
    pub fn apply(&self, base: &CakeConfig) -> CakeConfig {
        let mut c = *base;
        if let Some(nat) = self.nat {
            c.nat = nat;
        }
        if let Some(rate) = self.bandwidth {
            c.bandwidth = rate;
        }
        if let Some(mode) = self.diffserv {
            c.diffserv = mode;
        }
        if let Some(wash) = self.wash {
            c.wash = wash;
        }
        if let Some(mode) = self.flow_mode {
            c.flow_mode = mode;
        }
        if let Some(atm) = self.atm {
            c.atm = atm;
        }
        if let Some(overhead) = self.overhead {
            c.overhead = overhead;
            c.overhead_set = true;
        }
        if self.raw {
            c.overhead_set = false;
        }
        if let Some(mpu) = self.mpu {
            c.mpu = mpu;
        }
        if let Some(rtt) = self.rtt {
            c.rtt = micros(rtt);
        }
        if let Some(target) = self.target {
            c.target = micros(target);
        }
        if let Some(autorate) = self.autorate_ingress {
            c.autorate_ingress = autorate;
        }
        if let Some(ingress) = self.ingress {
            c.ingress = ingress;
        }
        if let Some(filter) = self.ack_filter {
            c.ack_filter = filter;
        }
        if let Some(limit) = self.memlimit {
            c.memlimit = limit;
        }
        if let Some(split) = self.split_gso {
            c.split_gso = split;
        }
        if let Some(mask) = self.fwmark {
            c.fwmark = mask;
        }
        c
    }
}

impl CakeConfig {
    /// These parameters as a spec with every option given: it applies back to exactly them.
    #[must_use]
    pub fn to_spec(&self) -> CakeSpec {
        CakeSpec {
            bandwidth: Some(self.bandwidth),
            autorate_ingress: Some(self.autorate_ingress),
            diffserv: Some(self.diffserv),
            flow_mode: Some(self.flow_mode),
            nat: Some(self.nat),
            wash: Some(self.wash),
            split_gso: Some(self.split_gso),
            ingress: Some(self.ingress),
            ack_filter: Some(self.ack_filter),
            memlimit: Some(self.memlimit),
            atm: Some(self.atm),
            overhead: Some(self.overhead),
            raw: !self.overhead_set,
            mpu: Some(self.mpu),
            rtt: Some(self.rtt),
            target: Some(self.target),
            fwmark: Some(self.fwmark),
        }
    }

    /// Tins in use.
    #[must_use]
    pub fn tins(&self) -> usize {
        match self.diffserv {
            DiffservMode::Besteffort => 1,
            DiffservMode::Diffserv3 => 3,
            DiffservMode::Diffserv4 => 4,
            DiffservMode::Diffserv8 | DiffservMode::Precedence => 8,
        }
    }
}

impl fmt::Display for DiffservMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for FlowMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_applies_only_what_is_sent_and_raw_clears_the_overhead_flag() {
        // tc-testing 2313: `cake overhead 128 mpu 256`, then `change … cake mpu 128`.
        let first = CakeSpec {
            overhead: Some(128),
            mpu: Some(256),
            ..CakeSpec::default()
        }
        .apply(&CakeConfig::default());
        assert!(first.overhead_set);
        let changed = CakeSpec {
            mpu: Some(128),
            ..CakeSpec::default()
        }
        .apply(&first);
        assert_eq!((changed.overhead, changed.mpu), (128, 128));
        assert!(changed.overhead_set);
        // `raw` sends overhead 0 and RAW: the flag is cleared after the overhead is taken.
        let raw = CakeSpec {
            overhead: Some(0),
            raw: true,
            ..CakeSpec::default()
        }
        .apply(&changed);
        assert_eq!((raw.overhead, raw.overhead_set), (0, false));
    }

    #[test]
    fn times_are_whole_microseconds_of_at_least_one() {
        let c = CakeSpec {
            rtt: Some(Duration::from_nanos(200_999)),
            target: Some(Duration::ZERO),
            ..CakeSpec::default()
        }
        .apply(&CakeConfig::default());
        assert_eq!(c.rtt, Duration::from_micros(200));
        assert_eq!(c.target, Duration::from_micros(1));
    }

    #[test]
    fn every_config_round_trips_through_its_spec() {
        for overhead_set in [false, true] {
            let c = CakeConfig {
                bandwidth: Rate::from_mbit(20),
                diffserv: DiffservMode::Diffserv4,
                flow_mode: FlowMode::DualDsthost,
                ack_filter: AckFilter::Aggressive,
                atm: AtmMode::Ptm,
                overhead: -4,
                overhead_set,
                mpu: 64,
                fwmark: 0xff,
                ..CakeConfig::default()
            };
            assert_eq!(c.to_spec().apply(&CakeConfig::default()), c);
        }
    }

    #[test]
    fn flow_mode_bits_are_the_kernels() {
        assert!(FlowMode::TripleIsolate.dual_src() && FlowMode::TripleIsolate.dual_dst());
        assert!(FlowMode::DualSrchost.dual_src() && !FlowMode::DualSrchost.dual_dst());
        assert!(!FlowMode::Hosts.dual_src() && !FlowMode::Flows.dual_dst());
    }
}
