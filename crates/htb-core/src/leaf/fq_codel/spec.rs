//! What an `fq_codel` qdisc is asked to be (tc's options, unset ones `None`) and what it runs
//! with: `fq_codel_init`'s defaults, `fq_codel_change`'s checks and clamps.

use crate::leaf::options::{LeafOption, OptionValue};
use crate::leaf::port::DEFAULT_PSCHED_MTU;
use crate::time::Duration;

/// Largest `fq_codel` quantum (`FQ_CODEL_QUANTUM_MAX`).
pub const FQ_CODEL_QUANTUM_MAX: u32 = 1 << 20;

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

/// What `fq_codel_change` refuses. Its own type, not the leaf's error, so that this module
/// does not depend on the module of every kind's spec that depends on it; that module turns it
/// into the [`LeafError`](crate::leaf::LeafError) users see, with its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FqCodelError {
    /// `limit 0`.
    Limit,
    /// `flows` outside 1..=65536.
    Flows(u32),
    /// `flows` other than the running instance's (the kernel cannot resize it).
    FlowsFixed {
        /// The instance's.
        current: u32,
        /// Asked for.
        requested: u32,
    },
    /// `quantum` above [`FQ_CODEL_QUANTUM_MAX`].
    Quantum(u32),
    /// A zero `target` or `interval` (its name).
    ZeroTime(&'static str),
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

    /// `fq_codel_change` on top of `base`: what is given replaces what runs. `fresh` is a new
    /// qdisc (`fq_codel_init`), the only time `flows` may be set.
    pub(crate) fn apply(
        &self,
        base: &FqCodelConfig,
        fresh: bool,
    ) -> Result<FqCodelConfig, FqCodelError> {
        let mut c = *base;
        if let Some(flows) = self.flows {
            if !(1..=65536).contains(&flows) {
                return Err(FqCodelError::Flows(flows));
            }
            if !fresh && flows != base.flows {
                return Err(FqCodelError::FlowsFixed {
                    current: base.flows,
                    requested: flows,
                });
            }
            c.flows = flows;
        }
        if let Some(target) = self.target {
            if target == Duration::ZERO {
                return Err(FqCodelError::ZeroTime("target"));
            }
            c.target = target;
        }
        if let Some(ce) = self.ce_threshold {
            c.ce_threshold = Some(ce);
        }
        if let Some(interval) = self.interval {
            if interval == Duration::ZERO {
                return Err(FqCodelError::ZeroTime("interval"));
            }
            c.interval = interval;
        }
        if let Some(limit) = self.limit {
            if limit == 0 {
                return Err(FqCodelError::Limit);
            }
            c.limit = limit;
        }
        if let Some(ecn) = self.ecn {
            c.ecn = ecn;
        }
        if let Some(quantum) = self.quantum {
            if quantum > FQ_CODEL_QUANTUM_MAX {
                return Err(FqCodelError::Quantum(quantum));
            }
            c.quantum = quantum.max(256);
        }
        if let Some(batch) = self.drop_batch {
            c.drop_batch = batch.max(1);
        }
        if let Some(memory) = self.memory_limit {
            c.memory_limit = memory.min(1 << 31);
        }
        Ok(c)
    }
}

impl FqCodelConfig {
    /// These parameters as a spec with every option given (what a saved state writes).
    pub(crate) fn to_spec(self) -> FqCodelSpec {
        FqCodelSpec {
            limit: Some(self.limit),
            flows: Some(self.flows),
            target: Some(self.target),
            interval: Some(self.interval),
            quantum: Some(self.quantum),
            ecn: Some(self.ecn),
            ce_threshold: self.ce_threshold,
            memory_limit: Some(self.memory_limit),
            drop_batch: Some(self.drop_batch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::{LeafConfig, LeafError, LeafSpec};

    #[test]
    fn change_keeps_what_is_not_given_and_never_resizes() {
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
    }

    #[test]
    fn refusals_are_the_kernels() {
        let fresh = |s: FqCodelSpec| s.apply(&FqCodelConfig::default(), true);
        assert_eq!(
            fresh(FqCodelSpec {
                flows: Some(0),
                ..FqCodelSpec::default()
            }),
            Err(FqCodelError::Flows(0))
        );
        assert_eq!(
            fresh(FqCodelSpec {
                quantum: Some(FQ_CODEL_QUANTUM_MAX + 1),
                ..FqCodelSpec::default()
            }),
            Err(FqCodelError::Quantum(FQ_CODEL_QUANTUM_MAX + 1))
        );
        assert_eq!(
            fresh(FqCodelSpec {
                interval: Some(Duration::ZERO),
                ..FqCodelSpec::default()
            }),
            Err(FqCodelError::ZeroTime("interval"))
        );
        assert_eq!(
            fresh(FqCodelSpec {
                limit: Some(0),
                ..FqCodelSpec::default()
            }),
            Err(FqCodelError::Limit)
        );
    }
}
