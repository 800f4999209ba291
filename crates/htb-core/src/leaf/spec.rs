//! What a leaf qdisc is asked to be (tc's options, unset ones `None`) and what it resolves to
//! with the kernel's defaults and limits, over every kind: the kind, the spec and parameters of
//! any kind, why one is refused. Each kind's own options, defaults and checks (its `*_init` and
//! `*_change`) are kept with its queue; this module hands each spec to its kind.

use core::fmt;

use super::cake::{CakeConfig, CakeSpec};
use super::fifo::{BFIFO_OPTIONS, Fifo, PFIFO_OPTIONS};
use super::fq_codel::{FQ_CODEL_QUANTUM_MAX, FqCodelConfig, FqCodelError, FqCodelSpec};
use super::options::{LeafOption, OptionValue};
use super::sfq::{SfqConfig, SfqError, SfqSpec};
use super::tbf::{TbfConfig, TbfError, TbfSpec};

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

impl From<FqCodelError> for LeafError {
    fn from(e: FqCodelError) -> Self {
        match e {
            FqCodelError::Limit => Self::Limit {
                kind: LeafKind::FqCodel,
                min: 1,
            },
            FqCodelError::Flows(n) => Self::FqCodelFlows(n),
            FqCodelError::FlowsFixed { current, requested } => {
                Self::FqCodelFlowsFixed { current, requested }
            }
            FqCodelError::Quantum(q) => Self::FqCodelQuantum(q),
            FqCodelError::ZeroTime(what) => Self::ZeroTime(what),
        }
    }
}

impl From<SfqError> for LeafError {
    fn from(e: SfqError) -> Self {
        match e {
            SfqError::Limit => Self::Limit {
                kind: LeafKind::Sfq,
                min: 2,
            },
            SfqError::Divisor(d) => Self::SfqDivisor(d),
            SfqError::Quantum(q) => Self::SfqQuantum(q),
        }
    }
}

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
                limit: Fifo::limit_or_default(None, false),
            },
            LeafKind::Bfifo => LeafConfig::Bfifo {
                limit: Fifo::limit_or_default(None, true),
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
                limit: Fifo::limit_or_default(*limit, false),
            },
            (Self::Bfifo { limit }, _) => LeafConfig::Bfifo {
                limit: Fifo::limit_or_default(*limit, true),
            },
            (Self::FqCodel(s), LeafConfig::FqCodel(base)) => {
                LeafConfig::FqCodel(s.apply(base, fresh)?)
            }
            (Self::Sfq(s), LeafConfig::Sfq(base)) => LeafConfig::Sfq(s.apply(base)?),
            (Self::Cake(s), LeafConfig::Cake(base)) => LeafConfig::Cake(s.apply(base)),
            // tc sends tbf's whole block: a change is a new configuration.
            (Self::Tbf(s), _) => LeafConfig::Tbf(s.resolve().map_err(LeafError::Tbf)?),
            _ => return self.resolve(),
        })
    }
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
            Self::FqCodel(c) => LeafSpec::FqCodel(c.to_spec()),
            Self::Cake(c) => LeafSpec::Cake(c.to_spec()),
            Self::Tbf(c) => LeafSpec::Tbf(c.to_spec()),
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
    use crate::time::Duration;

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
