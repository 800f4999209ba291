//! What a leaf qdisc is asked to be (tc's options, unset ones `None`) and what it resolves to
//! with the kernel's defaults and limits (`fq_codel_init`/`fq_codel_change`, `sfq_init`/
//! `sfq_change`, `fifo_init`).

use core::fmt;

use super::cake::{CakeConfig, CakeSpec};
use super::options::{LeafOption, OptionValue};
use super::tbf::{TbfConfig, TbfError, TbfSpec};
use super::tc_args::option;
use crate::time::Duration;

/// [`LeafConfig::tc_args`]: each option as ` KEYWORD VALUE` (a space before each).
#[derive(Clone, Copy, Debug)]
pub struct TcArgs<'a>(pub(super) &'a LeafConfig);

impl fmt::Display for TcArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_tc_args(f)
    }
}

/// The kernel's default `txqueuelen`, which sizes `pfifo` and `bfifo` without a limit.
pub const DEFAULT_TXQUEUELEN: u32 = 1000;
/// `psched_mtu` of an Ethernet port with MTU 1500: 1514 bytes. The default `quantum` of
/// `sfq` and `fq_codel` and CoDel's `mtu`.
pub const DEFAULT_PSCHED_MTU: u32 = 1514;
/// `SFQ_MAX_DEPTH`.
pub const SFQ_MAX_DEPTH: u32 = 127;
/// `SFQ_MAX_FLOWS`.
pub const SFQ_MAX_FLOWS: u32 = 0x10000 - SFQ_MAX_DEPTH - 1;
/// Largest `fq_codel` quantum (`FQ_CODEL_QUANTUM_MAX`).
pub const FQ_CODEL_QUANTUM_MAX: u32 = 1 << 20;

/// `pfifo`'s option: its limit in packets.
const PFIFO_OPTIONS: [LeafOption; 1] = [LeafOption::new("limit", OptionValue::Packets)];
/// `bfifo`'s option: its limit in bytes.
const BFIFO_OPTIONS: [LeafOption; 1] = [LeafOption::new("limit", OptionValue::Size)];

/// A leaf qdisc kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum LeafKind {
    /// `pfifo`: tail drop at a packet limit.
    Pfifo,
    /// `bfifo`: tail drop at a byte limit.
    Bfifo,
    /// `sfq`: stochastic fairness queueing.
    Sfq,
    /// `fq_codel`: flow queueing with CoDel (RFC 8290).
    FqCodel,
    /// `cake`: tins, host-fair flow queueing with COBALT, an ACK filter, its own shaper.
    Cake,
    /// `tbf`: a token bucket in front of a byte-limited fifo.
    Tbf,
}

impl LeafKind {
    /// Every kind, in the order lists of them are written (usage texts, refusals): what a
    /// registry of kinds iterates, so that a list of names is never kept by hand.
    pub const ALL: [Self; 6] = [
        Self::Pfifo,
        Self::Bfifo,
        Self::Sfq,
        Self::FqCodel,
        Self::Cake,
        Self::Tbf,
    ];

    /// tc's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Pfifo => "pfifo",
            Self::Bfifo => "bfifo",
            Self::Sfq => "sfq",
            Self::FqCodel => "fq_codel",
            Self::Cake => "cake",
            Self::Tbf => "tbf",
        }
    }

    /// The kind named `name` (tc's names).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Its options: each field of its spec, named as the spec's serde form names it.
    #[must_use]
    pub fn options(self) -> &'static [LeafOption] {
        match self {
            Self::Pfifo => &PFIFO_OPTIONS,
            Self::Bfifo => &BFIFO_OPTIONS,
            Self::Sfq => &SfqSpec::OPTIONS,
            Self::FqCodel => &FqCodelSpec::OPTIONS,
            Self::Cake => &CakeSpec::OPTIONS,
            Self::Tbf => &TbfSpec::OPTIONS,
        }
    }

    /// The option that limits its queue in bytes, for a kind without a packet limit (`bfifo`'s
    /// `limit`, `cake`'s `memlimit`): what to say to one who gives it a packet count.
    #[must_use]
    pub fn byte_limit(self) -> Option<&'static str> {
        let options = self.options();
        if options.iter().any(|o| o.value == OptionValue::Packets) {
            return None;
        }
        options
            .iter()
            .find(|o| o.value == OptionValue::Size && o.name.ends_with("limit"))
            .map(|o| o.name)
    }

    /// The names of every kind, `sep` between them and `last` before the last (`"pfifo,
    /// bfifo, … or cake"`), for messages that list what is supported.
    #[must_use]
    pub fn list(sep: &str, last: &str) -> alloc::string::String {
        let mut out = alloc::string::String::new();
        for (i, kind) in Self::ALL.iter().enumerate() {
            if i > 0 {
                out.push_str(if i + 1 == Self::ALL.len() { last } else { sep });
            }
            out.push_str(kind.name());
        }
        out
    }
}

impl fmt::Display for LeafKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// `FqCodelSpec`, `SfqSpec` and `CakeSpec` share their serde header and fields of one shape
// (`pub limit: Option<u32>`), which `duplicates` lists as a pair: each is one qdisc's option
// block, a field per tc keyword with its own default documented, and a macro over them would
// hide those docs and the fields from rustdoc's and the reader's view.

/// `fq_codel`'s options (`tc qdisc … fq_codel [limit PACKETS] [flows N] [target TIME]
/// [interval TIME] [quantum BYTES] [ecn|noecn] [ce_threshold TIME] [memory_limit BYTES]
/// [drop_batch N]`).
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FqCodelSpec {
    /// Packet limit (default 10240).
    pub limit: Option<u32>,
    /// Hash buckets, 1 to 65536 (default 1024); fixed once created.
    pub flows: Option<u32>,
    /// CoDel target (default 5 ms).
    pub target: Option<Duration>,
    /// CoDel interval (default 100 ms).
    pub interval: Option<Duration>,
    /// DRR quantum in bytes (default 1514; at least 256).
    pub quantum: Option<u32>,
    /// Mark ECN-capable packets instead of dropping (default on).
    pub ecn: Option<bool>,
    /// Mark packets whose sojourn exceeds this (default off).
    pub ce_threshold: Option<Duration>,
    /// Byte limit of the buffers held (default 32 MB).
    pub memory_limit: Option<u32>,
    /// Packets dropped at once over the limit (default 64).
    pub drop_batch: Option<u32>,
}

impl FqCodelSpec {
    /// Its options (fields), for readers of text.
    pub const OPTIONS: [LeafOption; 9] = [
        LeafOption::new("limit", OptionValue::Packets),
        LeafOption::new("flows", OptionValue::Count),
        LeafOption::new("target", OptionValue::Time),
        LeafOption::new("interval", OptionValue::Time),
        LeafOption::new("quantum", OptionValue::Size),
        LeafOption::new("ecn", OptionValue::Flag),
        LeafOption::new("ce_threshold", OptionValue::Time),
        LeafOption::new("memory_limit", OptionValue::Size),
        LeafOption::new("drop_batch", OptionValue::Count),
    ];
}

/// `sfq`'s options (`tc qdisc … sfq [limit N] [perturb SECS] [quantum BYTES] [divisor N]
/// [flows N] [depth N] [headdrop]`).
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SfqSpec {
    /// Packet limit (default 127).
    pub limit: Option<u32>,
    /// DRR quantum in bytes (default 1514).
    pub quantum: Option<u32>,
    /// Seconds between hash re-keyings; 0 or unset: never.
    pub perturb: Option<u32>,
    /// Hash buckets, a power of two up to 65536 (default 1024).
    pub divisor: Option<u32>,
    /// Flows holding packets at once (default 128).
    pub flows: Option<u32>,
    /// Packets per flow (default and at most 127).
    pub depth: Option<u32>,
    /// Drop from the head of a full flow instead of refusing the new packet.
    pub headdrop: bool,
}

impl SfqSpec {
    /// Its options (fields), for readers of text.
    pub const OPTIONS: [LeafOption; 7] = [
        LeafOption::new("limit", OptionValue::Packets),
        LeafOption::new("quantum", OptionValue::Size),
        LeafOption::new("perturb", OptionValue::Count),
        LeafOption::new("divisor", OptionValue::Count),
        LeafOption::new("flows", OptionValue::Count),
        LeafOption::new("depth", OptionValue::Count),
        LeafOption::new("headdrop", OptionValue::Flag),
    ];
}

/// A leaf qdisc as asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum LeafSpec {
    /// `pfifo [limit PACKETS]` (default: `txqueuelen`, 1000).
    Pfifo {
        /// Packets.
        limit: Option<u32>,
    },
    /// `bfifo [limit BYTES]` (default: `txqueuelen × mtu`, 1 514 000).
    Bfifo {
        /// Bytes.
        limit: Option<u32>,
    },
    /// `sfq …`.
    Sfq(SfqSpec),
    /// `fq_codel …`.
    FqCodel(FqCodelSpec),
    /// `cake …`.
    Cake(CakeSpec),
    /// `tbf rate R burst B (limit L | latency T) [peakrate P mtu M]`.
    Tbf(TbfSpec),
}

impl Default for LeafSpec {
    /// `fq_codel` with the kernel's defaults: htbd's default leaf.
    fn default() -> Self {
        Self::FqCodel(FqCodelSpec::default())
    }
}

/// `fq_codel`'s parameters in effect.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FqCodelConfig {
    /// Packet limit.
    pub limit: u32,
    /// Hash buckets.
    pub flows: u32,
    /// CoDel target.
    pub target: Duration,
    /// CoDel interval.
    pub interval: Duration,
    /// DRR quantum in bytes.
    pub quantum: u32,
    /// ECN marking.
    pub ecn: bool,
    /// CE-marking threshold.
    pub ce_threshold: Option<Duration>,
    /// Byte limit of the buffers held.
    pub memory_limit: u32,
    /// Packets dropped at once over the limit.
    pub drop_batch: u32,
    /// Backlog (bytes) at or below which CoDel never drops (`cparams.mtu`, the port's
    /// `psched_mtu`).
    pub mtu: u32,
}

impl Default for FqCodelConfig {
    /// `fq_codel_init`'s defaults.
    fn default() -> Self {
        Self {
            limit: 10 * 1024,
            flows: 1024,
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            quantum: DEFAULT_PSCHED_MTU,
            ecn: true,
            ce_threshold: None,
            memory_limit: 32 << 20,
            drop_batch: 64,
            mtu: DEFAULT_PSCHED_MTU,
        }
    }
}

/// `sfq`'s parameters in effect.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SfqConfig {
    /// Packet limit.
    pub limit: u32,
    /// DRR quantum in bytes.
    pub quantum: u32,
    /// Seconds between re-keyings (0: never).
    pub perturb: u32,
    /// Hash buckets (a power of two).
    pub divisor: u32,
    /// Flows holding packets at once.
    pub flows: u32,
    /// Packets per flow.
    pub depth: u32,
    /// Head drop.
    pub headdrop: bool,
}

impl SfqConfig {
    /// These parameters as a spec that resolves back to exactly them.
    #[must_use]
    pub fn to_spec(&self) -> SfqSpec {
        // A given limit is capped at depth × flows and caps flows, and a given divisor caps
        // flows: a config outside those bounds can only come from leaving that option out (at
        // its default), so it is left out again.
        SfqSpec {
            limit: (self.flows <= self.limit
                && self.limit <= self.depth.saturating_mul(self.flows))
            .then_some(self.limit),
            quantum: Some(self.quantum),
            perturb: Some(self.perturb),
            divisor: (self.flows <= self.divisor).then_some(self.divisor),
            flows: Some(self.flows),
            depth: Some(self.depth),
            headdrop: self.headdrop,
        }
    }
}

// A struct literal of defaults, the same shape as `SchedulerConfig`'s `Default`, which
// `duplicates` lists as a pair: the values are sfq's own.
impl Default for SfqConfig {
    /// `sfq_init`'s defaults.
    fn default() -> Self {
        Self {
            limit: SFQ_MAX_DEPTH,
            quantum: DEFAULT_PSCHED_MTU,
            perturb: 0,
            divisor: 1024,
            flows: 128,
            depth: SFQ_MAX_DEPTH,
            headdrop: false,
        }
    }
}

/// A leaf qdisc's parameters in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case")
)]
pub enum LeafConfig {
    /// `pfifo`, limit in packets.
    Pfifo {
        /// Packets.
        limit: u32,
    },
    /// `bfifo`, limit in bytes.
    Bfifo {
        /// Bytes.
        limit: u32,
    },
    /// `sfq`.
    Sfq(SfqConfig),
    /// `fq_codel`.
    FqCodel(FqCodelConfig),
    /// `cake`.
    Cake(CakeConfig),
    /// `tbf`.
    Tbf(TbfConfig),
}

impl Default for LeafConfig {
    fn default() -> Self {
        Self::FqCodel(FqCodelConfig::default())
    }
}

/// Why a leaf's options were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeafError {
    /// A limit of zero (or one, for `sfq`) packets.
    Limit {
        /// The kind.
        kind: LeafKind,
        /// The smallest limit accepted.
        min: u32,
    },
    /// `fq_codel flows` outside 1..=65536.
    FqCodelFlows(u32),
    /// `fq_codel flows` differs from the running instance's (the kernel cannot resize it).
    FqCodelFlowsFixed {
        /// The instance's.
        current: u32,
        /// Asked for.
        requested: u32,
    },
    /// `fq_codel quantum` above [`FQ_CODEL_QUANTUM_MAX`].
    FqCodelQuantum(u32),
    /// A zero `target` or `interval`.
    ZeroTime(&'static str),
    /// `sfq divisor` not a power of two up to 65536.
    SfqDivisor(u32),
    /// `sfq quantum` too large for the kernel's 16-bit credits.
    SfqQuantum(u32),
    /// A `tbf` tc or the kernel refuses.
    Tbf(TbfError),
}

impl fmt::Display for LeafError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Limit { kind, min } => write!(f, "{kind}: limit must be at least {min}"),
            Self::FqCodelFlows(n) => write!(f, "fq_codel: flows {n} is not within 1..65536"),
            Self::FqCodelFlowsFixed { current, requested } => write!(
                f,
                "fq_codel: flows cannot change on a running qdisc ({current} → {requested}); \
                 replace it instead"
            ),
            Self::FqCodelQuantum(q) => {
                write!(f, "fq_codel: quantum {q} is above {FQ_CODEL_QUANTUM_MAX}")
            }
            Self::ZeroTime(what) => write!(f, "fq_codel: {what} must be above 0"),
            Self::SfqDivisor(d) => {
                write!(f, "sfq: divisor {d} is not a power of two up to 65536")
            }
            Self::SfqQuantum(q) => write!(f, "sfq: quantum {q} is above 262136"),
            Self::Tbf(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for LeafError {}

impl LeafSpec {
    /// The kind asked for.
    #[must_use]
    pub fn kind(&self) -> LeafKind {
        match self {
            Self::Pfifo { .. } => LeafKind::Pfifo,
            Self::Bfifo { .. } => LeafKind::Bfifo,
            Self::Sfq(_) => LeafKind::Sfq,
            Self::FqCodel(_) => LeafKind::FqCodel,
            Self::Cake(_) => LeafKind::Cake,
            Self::Tbf(_) => LeafKind::Tbf,
        }
    }

    /// The parameters of a new qdisc (`tc qdisc add`): the kernel's defaults where unset.
    ///
    /// # Errors
    /// [`LeafError`] for values the kernel refuses.
    pub fn resolve(&self) -> Result<LeafConfig, LeafError> {
        // tbf has no defaults to start from: its spec is whole or refused.
        if let Self::Tbf(s) = self {
            return s.resolve().map(LeafConfig::Tbf).map_err(LeafError::Tbf);
        }
        let base = match self.kind() {
            LeafKind::Pfifo => LeafConfig::Pfifo {
                limit: DEFAULT_TXQUEUELEN,
            },
            LeafKind::Bfifo => LeafConfig::Bfifo {
                limit: DEFAULT_TXQUEUELEN * DEFAULT_PSCHED_MTU,
            },
            LeafKind::Sfq => LeafConfig::Sfq(SfqConfig::default()),
            LeafKind::FqCodel => LeafConfig::FqCodel(FqCodelConfig::default()),
            LeafKind::Cake => LeafConfig::Cake(CakeConfig::default()),
            LeafKind::Tbf => return Err(LeafError::Tbf(TbfError::Needs("rate"))),
        };
        self.apply(&base, true)
    }

    /// The parameters after `tc qdisc change` of a qdisc running with `current`: what the
    /// kernel's `change` does with the options tc sends. `fq_codel` changes only what is given
    /// (and never its `flows`); `sfq` takes its whole option block (an unset `perturb` turns
    /// perturbation off, `headdrop` is set or cleared); a fifo without `limit` returns to the
    /// default.
    ///
    /// # Errors
    /// [`LeafError`]; also when the kinds differ (reported as a refused limit of the new kind,
    /// which callers avoid by comparing kinds first).
    pub fn resolve_change(&self, current: &LeafConfig) -> Result<LeafConfig, LeafError> {
        if current.kind() != self.kind() {
            return self.resolve();
        }
        self.apply(current, false)
    }

    fn apply(&self, base: &LeafConfig, fresh: bool) -> Result<LeafConfig, LeafError> {
        Ok(match (self, base) {
            (Self::Pfifo { limit }, _) => LeafConfig::Pfifo {
                limit: limit.unwrap_or(DEFAULT_TXQUEUELEN),
            },
            (Self::Bfifo { limit }, _) => LeafConfig::Bfifo {
                limit: limit.unwrap_or(DEFAULT_TXQUEUELEN * DEFAULT_PSCHED_MTU),
            },
            (Self::FqCodel(s), LeafConfig::FqCodel(base)) => {
                LeafConfig::FqCodel(fq_codel(s, base, fresh)?)
            }
            (Self::Sfq(s), LeafConfig::Sfq(base)) => LeafConfig::Sfq(sfq(s, base)?),
            (Self::Cake(s), LeafConfig::Cake(base)) => LeafConfig::Cake(s.apply(base)),
            // tc sends tbf's whole block: a change is a new configuration.
            (Self::Tbf(s), _) => LeafConfig::Tbf(s.resolve().map_err(LeafError::Tbf)?),
            _ => return self.resolve(),
        })
    }
}

/// `fq_codel_change` on top of `base`.
fn fq_codel(
    s: &FqCodelSpec,
    base: &FqCodelConfig,
    fresh: bool,
) -> Result<FqCodelConfig, LeafError> {
    let mut c = *base;
    if let Some(flows) = s.flows {
        if !(1..=65536).contains(&flows) {
            return Err(LeafError::FqCodelFlows(flows));
        }
        if !fresh && flows != base.flows {
            return Err(LeafError::FqCodelFlowsFixed {
                current: base.flows,
                requested: flows,
            });
        }
        c.flows = flows;
    }
    if let Some(target) = s.target {
        if target == Duration::ZERO {
            return Err(LeafError::ZeroTime("target"));
        }
        c.target = target;
    }
    if let Some(ce) = s.ce_threshold {
        c.ce_threshold = Some(ce);
    }
    if let Some(interval) = s.interval {
        if interval == Duration::ZERO {
            return Err(LeafError::ZeroTime("interval"));
        }
        c.interval = interval;
    }
    if let Some(limit) = s.limit {
        if limit == 0 {
            return Err(LeafError::Limit {
                kind: LeafKind::FqCodel,
                min: 1,
            });
        }
        c.limit = limit;
    }
    if let Some(ecn) = s.ecn {
        c.ecn = ecn;
    }
    if let Some(quantum) = s.quantum {
        if quantum > FQ_CODEL_QUANTUM_MAX {
            return Err(LeafError::FqCodelQuantum(quantum));
        }
        c.quantum = quantum.max(256);
    }
    if let Some(batch) = s.drop_batch {
        c.drop_batch = batch.max(1);
    }
    if let Some(memory) = s.memory_limit {
        c.memory_limit = memory.min(1 << 31);
    }
    Ok(c)
}

/// `sfq_change` on top of `base` (tc sends the whole option block).
fn sfq(s: &SfqSpec, base: &SfqConfig) -> Result<SfqConfig, LeafError> {
    let mut c = *base;
    if let Some(quantum) = s.quantum.filter(|&q| q != 0) {
        // Credits are 16-bit counts of 8 bytes in the kernel.
        if quantum.div_ceil(8) > i16::MAX as u32 {
            return Err(LeafError::SfqQuantum(quantum));
        }
        c.quantum = quantum;
    }
    c.perturb = s.perturb.unwrap_or(0);
    if let Some(flows) = s.flows.filter(|&f| f != 0) {
        c.flows = flows.min(SFQ_MAX_FLOWS);
    }
    if let Some(divisor) = s.divisor.filter(|&d| d != 0) {
        if !divisor.is_power_of_two() || divisor > 65536 {
            return Err(LeafError::SfqDivisor(divisor));
        }
        c.divisor = divisor;
        c.flows = c.flows.min(divisor);
    }
    if let Some(depth) = s.depth.filter(|&d| d != 0) {
        c.depth = depth.min(SFQ_MAX_DEPTH);
    }
    c.headdrop = s.headdrop;
    if let Some(limit) = s.limit.filter(|&l| l != 0) {
        c.limit = limit.min(c.depth.saturating_mul(c.flows));
        c.flows = c.flows.min(c.limit);
    }
    // A one-packet sfq corrupts the kernel's round (CVE-2024-57996): refused there, here too.
    if c.limit < 2 {
        return Err(LeafError::Limit {
            kind: LeafKind::Sfq,
            min: 2,
        });
    }
    Ok(c)
}

impl LeafConfig {
    /// The kind.
    #[must_use]
    pub fn kind(&self) -> LeafKind {
        match self {
            Self::Pfifo { .. } => LeafKind::Pfifo,
            Self::Bfifo { .. } => LeafKind::Bfifo,
            Self::Sfq(_) => LeafKind::Sfq,
            Self::FqCodel(_) => LeafKind::FqCodel,
            Self::Cake(_) => LeafKind::Cake,
            Self::Tbf(_) => LeafKind::Tbf,
        }
    }

    /// These parameters as a spec with every option given (what a saved state writes).
    #[must_use]
    pub fn to_spec(&self) -> LeafSpec {
        match *self {
            Self::Pfifo { limit } => LeafSpec::Pfifo { limit: Some(limit) },
            Self::Bfifo { limit } => LeafSpec::Bfifo { limit: Some(limit) },
            Self::Sfq(c) => LeafSpec::Sfq(c.to_spec()),
            Self::FqCodel(c) => LeafSpec::FqCodel(FqCodelSpec {
                limit: Some(c.limit),
                flows: Some(c.flows),
                target: Some(c.target),
                interval: Some(c.interval),
                quantum: Some(c.quantum),
                ecn: Some(c.ecn),
                ce_threshold: c.ce_threshold,
                memory_limit: Some(c.memory_limit),
                drop_batch: Some(c.drop_batch),
            }),
            Self::Cake(c) => LeafSpec::Cake(c.to_spec()),
            Self::Tbf(c) => LeafSpec::Tbf(c.to_spec()),
        }
    }

    /// Its options as tc's command line takes them, every one given (a space before each):
    /// `htbd --print-tc` writes them after the kind's name.
    #[must_use]
    pub fn tc_args(&self) -> TcArgs<'_> {
        TcArgs(self)
    }

    /// [`tc_args`](Self::tc_args), each kind's own words.
    pub(super) fn write_tc_args(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pfifo { limit } | Self::Bfifo { limit } => write!(f, " limit {limit}"),
            // The spec leaves out what sfq_change would have capped: the same config back.
            Self::Sfq(c) => {
                let s = c.to_spec();
                option(f, "limit", s.limit)?;
                option(f, "quantum", s.quantum)?;
                option(f, "depth", s.depth)?;
                option(f, "divisor", s.divisor)?;
                option(f, "flows", s.flows)?;
                option(f, "perturb", s.perturb.filter(|&p| p != 0))?;
                if s.headdrop {
                    f.write_str(" headdrop")?;
                }
                Ok(())
            }
            Self::FqCodel(c) => {
                write!(f, " limit {} flows {}", c.limit, c.flows)?;
                write!(f, " target {} interval {}", c.target, c.interval)?;
                option(f, "ce_threshold", c.ce_threshold)?;
                write!(
                    f,
                    " quantum {} memory_limit {} drop_batch {}",
                    c.quantum, c.memory_limit, c.drop_batch
                )?;
                f.write_str(if c.ecn { " ecn" } else { " noecn" })
            }
            Self::Cake(c) => c.write_tc_args(f),
            Self::Tbf(c) => c.write_tc_args(f),
        }
    }

    /// Most packets it may hold (for a frame budget): the packet limit, or for `bfifo` its
    /// byte limit over 64-byte frames.
    #[must_use]
    pub fn max_packets(&self) -> u32 {
        match *self {
            Self::Pfifo { limit } => limit,
            Self::Bfifo { limit } => limit / 64,
            Self::Sfq(c) => c.limit,
            Self::FqCodel(c) => c.limit,
            // Its byte limit, or tc's packet limit with an MTU each.
            Self::Cake(_) => 10_240,
            // Its byte limit over 64-byte frames, as bfifo.
            Self::Tbf(c) => c.limit / 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_named_back() {
        for (i, kind) in LeafKind::ALL.into_iter().enumerate() {
            // `kind as usize` counts the variants: a kind left out of `ALL` shifts the rest.
            assert_eq!(kind as usize, i, "{kind}");
            assert_eq!(LeafKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(LeafKind::from_name("red"), None);
        assert_eq!(
            LeafKind::list(", ", " or "),
            "pfifo, bfifo, sfq, fq_codel, cake or tbf"
        );
    }

    #[test]
    fn defaults_are_the_kernels() {
        let LeafConfig::FqCodel(c) = LeafSpec::default().resolve().unwrap() else {
            panic!("fq_codel")
        };
        assert_eq!(
            (
                c.limit,
                c.flows,
                c.quantum,
                c.ecn,
                c.memory_limit,
                c.drop_batch
            ),
            (10240, 1024, 1514, true, 32 << 20, 64)
        );
        assert_eq!(
            (c.target, c.interval),
            (Duration::from_millis(5), Duration::from_millis(100))
        );
        assert_eq!(
            LeafSpec::Sfq(SfqSpec::default()).resolve().unwrap(),
            LeafConfig::Sfq(SfqConfig::default())
        );
        assert_eq!(
            LeafSpec::Pfifo { limit: None }.resolve().unwrap(),
            LeafConfig::Pfifo { limit: 1000 }
        );
        assert_eq!(
            LeafSpec::Bfifo { limit: None }.resolve().unwrap(),
            LeafConfig::Bfifo { limit: 1_514_000 }
        );
    }

    #[test]
    fn sfq_limits_follow_sfq_change() {
        let spec = |f: fn(&mut SfqSpec)| {
            let mut s = SfqSpec::default();
            f(&mut s);
            LeafSpec::Sfq(s)
        };
        let resolve = |s: LeafSpec| match s.resolve() {
            Ok(LeafConfig::Sfq(c)) => Ok(c),
            Ok(_) => unreachable!(),
            Err(e) => Err(e),
        };
        // limit is capped at depth × flows and caps flows.
        let r = resolve(spec(|s| {
            s.limit = Some(10_000);
            s.depth = Some(10);
            s.flows = Some(20);
        }))
        .unwrap();
        assert_eq!((r.limit, r.flows, r.depth), (200, 20, 10));
        let r = resolve(spec(|s| s.limit = Some(50))).unwrap();
        assert_eq!((r.limit, r.flows), (50, 50));
        assert_eq!(resolve(spec(|s| s.depth = Some(500))).unwrap().depth, 127);
        assert_eq!(
            resolve(spec(|s| s.divisor = Some(1000))),
            Err(LeafError::SfqDivisor(1000))
        );
        assert!(resolve(spec(|s| s.limit = Some(1))).is_err());
        assert!(
            resolve(spec(|s| {
                s.limit = Some(100);
                s.depth = Some(1);
                s.flows = Some(1);
            }))
            .is_err(),
            "one packet in all: the CVE-2024-57996 shape"
        );
        assert_eq!(resolve(spec(|s| s.divisor = Some(64))).unwrap().flows, 64);
    }

    #[test]
    fn fq_codel_change_keeps_what_is_not_given_and_never_resizes() {
        let running = LeafSpec::FqCodel(FqCodelSpec {
            target: Some(Duration::from_millis(10)),
            ecn: Some(false),
            ..FqCodelSpec::default()
        })
        .resolve()
        .unwrap();
        let changed = LeafSpec::FqCodel(FqCodelSpec {
            limit: Some(500),
            ..FqCodelSpec::default()
        })
        .resolve_change(&running)
        .unwrap();
        let LeafConfig::FqCodel(c) = changed else {
            panic!()
        };
        assert_eq!(
            (c.limit, c.target, c.ecn),
            (500, Duration::from_millis(10), false)
        );
        let resize = LeafSpec::FqCodel(FqCodelSpec {
            flows: Some(2048),
            ..FqCodelSpec::default()
        });
        assert!(matches!(
            resize.resolve_change(&running),
            Err(LeafError::FqCodelFlowsFixed { .. })
        ));
        assert!(resize.resolve().is_ok(), "a new qdisc may have any size");
        let LeafConfig::FqCodel(c) = LeafSpec::FqCodel(FqCodelSpec {
            quantum: Some(100),
            drop_batch: Some(0),
            ..FqCodelSpec::default()
        })
        .resolve()
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (c.quantum, c.drop_batch),
            (256, 1),
            "clamped as the kernel does"
        );
        // sfq's change takes the whole block: perturb not given means off.
        let sfq = LeafSpec::Sfq(SfqSpec {
            perturb: Some(10),
            headdrop: true,
            ..SfqSpec::default()
        })
        .resolve()
        .unwrap();
        let LeafConfig::Sfq(c) = LeafSpec::Sfq(SfqSpec::default())
            .resolve_change(&sfq)
            .unwrap()
        else {
            panic!()
        };
        assert_eq!((c.perturb, c.headdrop), (0, false));
    }

    #[test]
    fn every_sfq_config_round_trips_through_its_spec() {
        let values = [
            None,
            Some(1),
            Some(2),
            Some(10),
            Some(127),
            Some(128),
            Some(1000),
            Some(70_000),
        ];
        for limit in values {
            for flows in values {
                for depth in values {
                    for divisor in [None, Some(16), Some(1024)] {
                        let spec = LeafSpec::Sfq(SfqSpec {
                            limit,
                            flows,
                            depth,
                            divisor,
                            ..SfqSpec::default()
                        });
                        if let Ok(config) = spec.resolve() {
                            assert_eq!(config.to_spec().resolve(), Ok(config), "{spec:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn specs_round_trip_through_configs() {
        for spec in [
            LeafSpec::Pfifo { limit: Some(5) },
            LeafSpec::Bfifo {
                limit: Some(30_000),
            },
            LeafSpec::Sfq(SfqSpec {
                perturb: Some(10),
                headdrop: true,
                ..SfqSpec::default()
            }),
            LeafSpec::FqCodel(FqCodelSpec {
                ce_threshold: Some(Duration::from_millis(1)),
                ..FqCodelSpec::default()
            }),
        ] {
            let config = spec.resolve().unwrap();
            assert_eq!(config.to_spec().resolve().unwrap(), config);
        }
    }
}
