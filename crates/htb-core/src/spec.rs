//! What users ask for (class and qdisc parameters) and how defaults are resolved.

use alloc::vec::Vec;
use core::fmt;

use crate::class_id::ClassId;
use crate::error::ClassError;
use crate::leaf::LeafConfig;
use crate::rate::{LengthAdjust, Rate};
use crate::stab::SizeTable;
use crate::time::Duration;

/// Highest class priority (tc `prio 0..7`; `TC_HTB_NUMPRIO - 1`).
pub const MAX_PRIO: u8 = 7;
/// Levels of the class tree (`TC_HTB_MAXDEPTH`): a path from a root class to a leaf has at
/// most eight classes.
pub const MAX_DEPTH: usize = 8;
/// Default class MTU (tc `mtu`), used only to size default bursts.
pub const DEFAULT_MTU: u32 = 1600;
/// The longest burst a class may be given, as time at its rate.
pub const MAX_BURST_TIME: Duration = Duration::from_secs(3600);

/// Parameters of a class, as given to `tc class add|change ... htb rate R [ceil R] ...`.
///
/// Unset options get defaults when the class is added or changed (tc semantics: `change`
/// replaces every parameter, and those not given fall back to their defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSpec {
    /// Guaranteed rate (`rate`). Required, non-zero.
    pub rate: Rate,
    /// Upper limit including borrowed bandwidth (`ceil`); default: `rate`.
    pub ceil: Option<Rate>,
    /// Bytes the class may send at once above `rate` (`burst`); default: see
    /// [`SchedulerConfig::default_burst_time`].
    pub burst: Option<u64>,
    /// Bytes the class may send at once above `ceil` (`cburst`); default as `burst`, at `ceil`.
    pub cburst: Option<u64>,
    /// Priority 0 (highest) to 7 (`prio`); larger values are clamped with a warning.
    pub prio: u32,
    /// DRR quantum in bytes (`quantum`); default `rate / r2q` clamped to 1000..=200000.
    pub quantum: Option<u32>,
    /// MTU used to size default bursts (`mtu`); default [`DEFAULT_MTU`].
    pub mtu: Option<u32>,
    /// Length adjustment (`overhead`, `mpu`, `linklayer`).
    pub adjust: LengthAdjust,
}

impl ClassSpec {
    /// A spec with `rate` and every other parameter at its default.
    #[must_use]
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            ceil: None,
            burst: None,
            cburst: None,
            prio: 0,
            quantum: None,
            mtu: None,
            adjust: LengthAdjust::default(),
        }
    }

    /// Sets `ceil`.
    #[must_use]
    pub fn with_ceil(mut self, ceil: Rate) -> Self {
        self.ceil = Some(ceil);
        self
    }

    /// Sets `burst` in bytes.
    #[must_use]
    pub fn with_burst(mut self, bytes: u64) -> Self {
        self.burst = Some(bytes);
        self
    }

    /// Sets `cburst` in bytes.
    #[must_use]
    pub fn with_cburst(mut self, bytes: u64) -> Self {
        self.cburst = Some(bytes);
        self
    }

    /// Sets `prio`.
    #[must_use]
    pub fn with_prio(mut self, prio: u32) -> Self {
        self.prio = prio;
        self
    }

    /// Sets `quantum` in bytes.
    #[must_use]
    pub fn with_quantum(mut self, bytes: u32) -> Self {
        self.quantum = Some(bytes);
        self
    }

    /// Resolves defaults into the parameters the scheduler applies.
    pub(crate) fn resolve(
        &self,
        id: ClassId,
        config: &SchedulerConfig,
        warnings: &mut Vec<Warning>,
    ) -> Result<ClassConfig, ClassError> {
        if self.rate.is_zero() {
            return Err(ClassError::ZeroRate(id));
        }
        let ceil = self.ceil.unwrap_or(self.rate);
        if ceil.is_zero() {
            return Err(ClassError::ZeroCeil(id));
        }
        if ceil < self.rate {
            warnings.push(Warning::CeilBelowRate { class: id });
        }
        let mtu = u64::from(self.mtu.unwrap_or(DEFAULT_MTU));
        let default_burst =
            |rate: Rate| rate.bytes_in(config.default_burst_time).saturating_add(mtu);
        let burst = self.burst.unwrap_or_else(|| default_burst(self.rate));
        let cburst = self.cburst.unwrap_or_else(|| default_burst(ceil));
        let buffer = self.rate.time_for_bytes(burst);
        let cbuffer = ceil.time_for_bytes(cburst);
        if buffer > MAX_BURST_TIME {
            return Err(ClassError::BurstTooLarge {
                class: id,
                bytes: burst,
            });
        }
        if cbuffer > MAX_BURST_TIME {
            return Err(ClassError::BurstTooLarge {
                class: id,
                bytes: cburst,
            });
        }
        let prio = if self.prio > u32::from(MAX_PRIO) {
            warnings.push(Warning::PrioClamped {
                class: id,
                requested: self.prio,
            });
            MAX_PRIO
        } else {
            self.prio as u8
        };
        // htb_change_class: quantum = rate_bytes_ps / r2q, clamped, unless given explicitly.
        let quantum = match self.quantum {
            Some(0) | None => {
                let auto = self.rate.bytes_per_sec() / u64::from(config.r2q.max(1));
                if auto < 1000 {
                    warnings.push(Warning::QuantumSmall {
                        class: id,
                        computed: auto,
                    });
                    1000
                } else if auto > 200_000 {
                    warnings.push(Warning::QuantumBig {
                        class: id,
                        computed: auto,
                    });
                    200_000
                } else {
                    auto as u32
                }
            }
            Some(q) if q > i32::MAX as u32 => return Err(ClassError::QuantumTooLarge(id)),
            Some(q) => q,
        };
        Ok(ClassConfig {
            rate: self.rate,
            ceil,
            burst,
            cburst,
            buffer,
            cbuffer,
            prio,
            quantum,
            adjust: self.adjust,
        })
    }
}

/// A class's parameters after defaults were applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassConfig {
    /// Guaranteed rate.
    pub rate: Rate,
    /// Ceiling rate.
    pub ceil: Rate,
    /// Burst in bytes at `rate`.
    pub burst: u64,
    /// Burst in bytes at `ceil`.
    pub cburst: u64,
    /// `burst` as time at `rate` (the kernel's `buffer`).
    pub buffer: Duration,
    /// `cburst` as time at `ceil` (the kernel's `cbuffer`).
    pub cbuffer: Duration,
    /// Priority 0..=7.
    pub prio: u8,
    /// DRR quantum in bytes.
    pub quantum: u32,
    /// Length adjustment.
    pub adjust: LengthAdjust,
}

/// Scheduler-wide settings (tc `qdisc add ... htb default N r2q N direct_qlen N`, plus the
/// knobs the kernel hard-codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Major number of the qdisc handle; every class id must have it (`1:` → 1).
    pub major: u16,
    /// Minor of the default class for unclassified traffic (`default 20` = 0x20); 0 = none,
    /// in which case unclassified traffic goes to the direct queue, unshaped, as in the kernel.
    pub default_minor: u32,
    /// Rate-to-quantum divisor for automatic quanta (`r2q`, default 10, at least 1).
    pub r2q: u32,
    /// Packet limit of the direct queue (`direct_qlen`, default 1000).
    pub direct_qlen: u32,
    /// The queue discipline a leaf class gets until one is set for it (the kernel gives
    /// `pfifo`; the default here is `fq_codel` with the kernel's defaults, so that a full class
    /// still keeps its latency low).
    pub default_leaf: LeafConfig,
    /// Seed of the leaves' randomness (`sfq`'s perturbation keys). The scheduler draws nothing
    /// itself: give it a random seed in production and a fixed one for reproducible runs.
    pub seed: u64,
    /// Default `burst`/`cburst` as time: a class without an explicit burst gets
    /// `rate × default_burst_time + mtu` bytes (default 1 ms).
    ///
    /// The kernel's default (`rate / hz + mtu` with `hz = 10^9` on hrtimer systems) is about
    /// 1600 B at any rate: 12.8 µs of credit at 1 Gbit/s, so any timer latency beyond that is
    /// lost capacity and the class under-delivers (sqm-scripts #71, LibreQoS #40). One
    /// millisecond of rate is the common operator advice and covers the wake-up latency of a
    /// userspace data plane; at low rates the `mtu` term dominates, as in the kernel.
    pub default_burst_time: Duration,
    /// Wait-queue events processed per level per [`dequeue`](crate::Scheduler::dequeue) call
    /// before deferring the rest to the next call (the kernel allows 2 jiffies, then prints
    /// "htb: too many events!"; here the overflow is only counted). Default 1024.
    pub max_events_per_level: u32,
    /// Mode hysteresis (the kernel's `htb_hysteresis` module parameter, default off: less
    /// CPU, less accuracy).
    pub hysteresis: bool,
    /// The qdisc's size table (`stab …`): the length HTB charges and counts for each packet,
    /// before each class's own `overhead`/`mpu`/`linklayer` (`qdisc_calculate_pkt_len`).
    /// `None`: the packet's length.
    pub stab: Option<SizeTable>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            major: 1,
            default_minor: 0,
            r2q: 10,
            direct_qlen: 1000,
            default_leaf: LeafConfig::default(),
            seed: 0x6874_625f_7365_6564,
            default_burst_time: Duration::from_millis(1),
            max_events_per_level: 1024,
            hysteresis: false,
            stab: None,
        }
    }
}

/// Something about a request that was accepted but deserves the operator's attention. The
/// scheduler never prints: warnings are returned as values (no "quantum is big" log spam).
///
/// On the control socket's wire a warning is data too: `{"warning": "quantum_big", "class":
/// "1:10", "computed": 250000}`; clients print it with [`Display`](fmt::Display).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "warning", rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Warning {
    /// `rate / r2q` was below 1000 bytes; the quantum was raised to 1000.
    QuantumSmall {
        /// The class.
        class: ClassId,
        /// `rate / r2q` in bytes.
        computed: u64,
    },
    /// `rate / r2q` was above 200000 bytes; the quantum was lowered to 200000.
    QuantumBig {
        /// The class.
        class: ClassId,
        /// `rate / r2q` in bytes.
        computed: u64,
    },
    /// `prio` was above 7 and was clamped to 7.
    PrioClamped {
        /// The class.
        class: ClassId,
        /// The requested priority.
        requested: u32,
    },
    /// `ceil` is below `rate`: the class will never exceed `ceil`.
    CeilBelowRate {
        /// The class.
        class: ClassId,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QuantumSmall { class, computed } => write!(
                f,
                "quantum of class {class} is small (rate/r2q = {computed} bytes), using 1000; \
                 set r2q or quantum"
            ),
            Self::QuantumBig { class, computed } => write!(
                f,
                "quantum of class {class} is big (rate/r2q = {computed} bytes), using 200000; \
                 set r2q or quantum"
            ),
            Self::PrioClamped { class, requested } => {
                write!(f, "prio {requested} of class {class} is above 7, using 7")
            }
            Self::CeilBelowRate { class } => {
                write!(
                    f,
                    "ceil of class {class} is below its rate; the class is limited to ceil"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(spec: &ClassSpec) -> (Result<ClassConfig, ClassError>, Vec<Warning>) {
        let mut warnings = Vec::new();
        let r = spec.resolve(
            ClassId::new(1, 1),
            &SchedulerConfig::default(),
            &mut warnings,
        );
        (r, warnings)
    }

    #[test]
    fn defaults_follow_the_documented_rule() {
        let (cfg, warnings) = resolve(&ClassSpec::new(Rate::from_mbit(100)));
        let cfg = cfg.unwrap();
        assert_eq!(cfg.ceil, Rate::from_mbit(100));
        // 100 Mbit/s × 1 ms = 12500 B, + 1600 B mtu.
        assert_eq!(cfg.burst, 14_100);
        assert_eq!(cfg.cburst, 14_100);
        assert_eq!(cfg.buffer, Rate::from_mbit(100).time_for_bytes(14_100));
        assert_eq!(cfg.quantum, 200_000);
        assert_eq!(
            warnings,
            [Warning::QuantumBig {
                class: ClassId::new(1, 1),
                computed: 1_250_000
            }]
        );
    }

    #[test]
    fn quantum_rules_mirror_htb_change_class() {
        let (cfg, w) = resolve(&ClassSpec::new(Rate::from_kbit(64)));
        assert_eq!(cfg.unwrap().quantum, 1000);
        assert!(matches!(w[0], Warning::QuantumSmall { computed: 800, .. }));
        let (cfg, w) = resolve(&ClassSpec::new(Rate::from_mbit(1)));
        assert_eq!(cfg.unwrap().quantum, 12_500);
        assert!(w.is_empty());
        let (cfg, w) = resolve(&ClassSpec::new(Rate::from_mbit(100)).with_quantum(1514));
        assert_eq!(cfg.unwrap().quantum, 1514);
        assert!(
            w.is_empty(),
            "explicit quantum is used verbatim without warning"
        );
    }

    #[test]
    fn invalid_specs_are_refused() {
        assert_eq!(
            resolve(&ClassSpec::new(Rate::ZERO)).0,
            Err(ClassError::ZeroRate(ClassId::new(1, 1)))
        );
        let zero_ceil = ClassSpec::new(Rate::from_mbit(1)).with_ceil(Rate::ZERO);
        assert_eq!(
            resolve(&zero_ceil).0,
            Err(ClassError::ZeroCeil(ClassId::new(1, 1)))
        );
        let huge = ClassSpec::new(Rate::from_kbit(8)).with_burst(10_000_000);
        assert!(matches!(
            resolve(&huge).0,
            Err(ClassError::BurstTooLarge { .. })
        ));
    }

    #[test]
    fn prio_and_ceil_warnings() {
        let (cfg, w) = resolve(
            &ClassSpec::new(Rate::from_mbit(2))
                .with_prio(9)
                .with_ceil(Rate::from_mbit(1)),
        );
        assert_eq!(cfg.unwrap().prio, 7);
        assert!(w.contains(&Warning::PrioClamped {
            class: ClassId::new(1, 1),
            requested: 9
        }));
        assert!(w.contains(&Warning::CeilBelowRate {
            class: ClassId::new(1, 1)
        }));
    }
}
