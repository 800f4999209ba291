//! What an `sfq` qdisc is asked to be (tc's options, unset ones `None`) and what it runs with:
//! `sfq_init`'s defaults, `sfq_change`'s checks and caps.

use crate::leaf::options::{LeafOption, OptionValue};
use crate::leaf::port::DEFAULT_PSCHED_MTU;

/// `SFQ_MAX_DEPTH`.
pub const SFQ_MAX_DEPTH: u32 = 127;
/// `SFQ_MAX_FLOWS`.
pub const SFQ_MAX_FLOWS: u32 = 0x10000 - SFQ_MAX_DEPTH - 1;

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

/// What `sfq_change` refuses. Its own type, not the leaf's error, so that this module does not
/// depend on the module of every kind's spec that depends on it; that module turns it into the
/// [`LeafError`](crate::leaf::LeafError) users see, with its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SfqError {
    /// A limit under two packets, after the caps.
    Limit,
    /// `divisor` not a power of two up to 65536.
    Divisor(u32),
    /// `quantum` too large for the kernel's 16-bit credits.
    Quantum(u32),
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

    /// `sfq_change` on top of `base` (tc sends the whole option block).
    pub(crate) fn apply(&self, base: &SfqConfig) -> Result<SfqConfig, SfqError> {
        let mut c = *base;
        if let Some(quantum) = self.quantum.filter(|&q| q != 0) {
            // Credits are 16-bit counts of 8 bytes in the kernel.
            if quantum.div_ceil(8) > i16::MAX as u32 {
                return Err(SfqError::Quantum(quantum));
            }
            c.quantum = quantum;
        }
        c.perturb = self.perturb.unwrap_or(0);
        if let Some(flows) = self.flows.filter(|&f| f != 0) {
            c.flows = flows.min(SFQ_MAX_FLOWS);
        }
        if let Some(divisor) = self.divisor.filter(|&d| d != 0) {
            if !divisor.is_power_of_two() || divisor > 65536 {
                return Err(SfqError::Divisor(divisor));
            }
            c.divisor = divisor;
            c.flows = c.flows.min(divisor);
        }
        if let Some(depth) = self.depth.filter(|&d| d != 0) {
            c.depth = depth.min(SFQ_MAX_DEPTH);
        }
        c.headdrop = self.headdrop;
        if let Some(limit) = self.limit.filter(|&l| l != 0) {
            c.limit = limit.min(c.depth.saturating_mul(c.flows));
            c.flows = c.flows.min(c.limit);
        }
        // A one-packet sfq corrupts the kernel's round (CVE-2024-57996): refused there, here too.
        if c.limit < 2 {
            return Err(SfqError::Limit);
        }
        Ok(c)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::{LeafConfig, LeafError, LeafSpec};

    #[test]
    fn limits_follow_sfq_change() {
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
    fn change_takes_the_whole_block() {
        // perturb not given means off, headdrop not given cleared.
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
    fn every_config_round_trips_through_its_spec() {
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
}
