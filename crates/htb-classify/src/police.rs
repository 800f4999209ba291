//! `action police` (the kernel's `act_police.c`, iproute2's `m_police.c`): a token bucket the
//! packets a filter matches pass through; those over its rate (or longer than its `mtu`) get
//! the *exceed* verdict, the others the *conform* one.
//!
//! The kernel keeps the bucket as tokens and a timestamp under a spinlock. Here it is one
//! number per bucket, the time at which it would be full again (the GCRA form of the same
//! bucket), so that the workers sharing a filter share its policer through a compare-and-swap
//! instead of a lock: a packet of cost `c` conforms at `now` when `max(full_at - now, 0) + c ≤
//! burst`, and then moves `full_at` to `max(full_at, now) + c` — exactly `act_police`'s
//! `toks = min(toks + elapsed, burst) - c ≥ 0`.

use alloc::sync::Arc;
use core::fmt;
use core::ops::Deref;
use core::sync::atomic::{AtomicU64, Ordering};

use htb_core::{Instant, LengthAdjust, Rate};

/// A verdict (tc's `CONTROL`, `TC_ACT_*`), as `conform-exceed EXCEED[/CONFORM]` gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum ControlAction {
    /// `ok` / `pass` (`TC_ACT_OK`): the packet goes to the filter's class.
    #[default]
    Ok,
    /// `pipe` (`TC_ACT_PIPE`): on to the next action; with none, the filter's class.
    Pipe,
    /// `continue` (`TC_ACT_UNSPEC`): the filter does not match after all; the next one is tried.
    Continue,
    /// `drop` / `shot` (`TC_ACT_SHOT`).
    Drop,
    /// `reclassify` (`TC_ACT_RECLASSIFY`, the exceed verdict tc gives by default): the
    /// kernel classifies the packet again from the first filter, meets the same policer still
    /// over its rate, and after four rounds drops it ("reclassify loop"); so it is a drop here.
    Reclassify,
}

impl ControlAction {
    /// tc's names (`parse_action_control`; a prefix of the name, as tc matches it).
    #[must_use]
    pub fn parse(word: &str) -> Option<Self> {
        let is = |name: &str| !word.is_empty() && name.starts_with(word);
        Some(if is("reclassify") {
            Self::Reclassify
        } else if is("drop") || is("shot") {
            Self::Drop
        } else if is("continue") {
            Self::Continue
        } else if is("pass") || is("ok") {
            Self::Ok
        } else if is("pipe") {
            Self::Pipe
        } else {
            return None;
        })
    }

    /// The name tc prints (`action_n2a`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "pass",
            Self::Pipe => "pipe",
            Self::Continue => "continue",
            Self::Drop => "drop",
            Self::Reclassify => "reclassify",
        }
    }

    /// Whether a packet given this verdict is dropped.
    #[must_use]
    pub fn drops(self) -> bool {
        matches!(self, Self::Drop | Self::Reclassify)
    }
}

/// `police rate R burst B [mtu M] [peakrate P] [overhead O] [mpu U] [linklayer L]
/// [conform-exceed EXCEED[/CONFORM]]` (`struct tc_police`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct PoliceConfig {
    /// The bucket's rate (`None`: no bucket; only `mtu` polices).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub rate: Option<Rate>,
    /// The bucket's depth in bytes at `rate`.
    pub burst: u32,
    /// Longer packets exceed; 0: tc's default, `255 << cell_log` of the rate table (2040
    /// bytes) with a rate, no limit without one.
    pub mtu: u32,
    /// A second bucket, `mtu` bytes deep, that packets must also fit.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub peakrate: Option<Rate>,
    /// `overhead`, `mpu` and `linklayer` of both buckets' rate tables.
    pub adjust: LengthAdjust,
    /// The verdict for packets over the rate (tc's default: `reclassify`).
    pub exceed: ControlAction,
    /// The verdict for the others (tc's default: `ok`).
    pub conform: ControlAction,
}

impl Default for PoliceConfig {
    fn default() -> Self {
        Self {
            rate: None,
            burst: 0,
            mtu: 0,
            peakrate: None,
            adjust: LengthAdjust::default(),
            exceed: ControlAction::Reclassify,
            conform: ControlAction::Ok,
        }
    }
}

/// Why a policer's options were refused (`act_parse_police`'s checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoliceError {
    /// Neither `rate` nor `mtu`.
    NothingToPolice,
    /// `rate` without `burst`.
    RateNeedsBurst,
    /// `peakrate` without `rate`.
    PeakNeedsRate,
    /// `peakrate` without `mtu`.
    PeakNeedsMtu,
    /// A rate of zero.
    ZeroRate,
}

impl fmt::Display for PoliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NothingToPolice => {
                "'rate' or 'avrate' or 'mtu' or 'pkts_rate' MUST be specified."
            }
            Self::RateNeedsBurst => "'burst' requires 'rate'.",
            Self::PeakNeedsRate => "'peakrate' requires 'rate'.",
            Self::PeakNeedsMtu => "'mtu' is required, if 'peakrate' is requested.",
            Self::ZeroRate => "police rate and peakrate must be above zero",
        })
    }
}

impl core::error::Error for PoliceError {}

/// tc's default `mtu` with a rate: the rate table's 256 cells of `1 << cell_log` bytes
/// (`tc_calc_rtable` picks cell_log 3 for its 2047-byte default), less one cell.
const DEFAULT_MTU: u32 = 255 << 3;

impl PoliceConfig {
    /// `act_parse_police`'s checks.
    ///
    /// # Errors
    /// What tc refuses.
    pub fn check(&self) -> Result<(), PoliceError> {
        if self.rate.is_none() && self.mtu == 0 {
            return Err(PoliceError::NothingToPolice);
        }
        if [self.rate, self.peakrate]
            .into_iter()
            .flatten()
            .any(|r| r.bits_per_sec() == 0)
        {
            return Err(PoliceError::ZeroRate);
        }
        if self.rate.is_some() && self.burst == 0 {
            return Err(PoliceError::RateNeedsBurst);
        }
        if self.peakrate.is_some() {
            if self.rate.is_none() {
                return Err(PoliceError::PeakNeedsRate);
            }
            if self.mtu == 0 {
                return Err(PoliceError::PeakNeedsMtu);
            }
        }
        Ok(())
    }

    /// The `mtu` in force (what the kernel keeps and tc prints): the one given, else 2040
    /// bytes with a rate and no limit without.
    #[must_use]
    pub fn effective_mtu(&self) -> u32 {
        match (self.mtu, self.rate) {
            (0, Some(_)) => DEFAULT_MTU,
            (0, None) => u32::MAX,
            (mtu, _) => mtu,
        }
    }
}

/// Nanoseconds `len` bytes take at `rate` (`psched_l2t_ns`), the length adjusted first.
fn cost_ns(rate: Rate, adjust: LengthAdjust, len: u32) -> u64 {
    let bytes = u128::from(adjust.charged_len(len));
    let ns = bytes * 8_000_000_000 / u128::from(rate.bits_per_sec().max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Counters of a policer (tc's "Action statistics").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PoliceStats {
    /// Packets that reached it.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Packets over its rate or `mtu`.
    pub overlimits: u64,
    /// Packets its verdicts dropped.
    pub drops: u64,
}

/// A running policer: its buckets and counters, shared by every worker that classifies with
/// the filter it belongs to.
#[derive(Debug)]
pub struct Policer {
    config: PoliceConfig,
    burst_ns: u64,
    peak_depth_ns: u64,
    mtu: u32,
    /// When the rate bucket is full again (ns of the data plane's clock); 0: full.
    full_at: AtomicU64,
    /// The same for the peak bucket.
    peak_full_at: AtomicU64,
    packets: AtomicU64,
    bytes: AtomicU64,
    overlimits: AtomicU64,
    drops: AtomicU64,
}

impl Policer {
    /// A policer with full buckets (`tcf_police_init`).
    #[must_use]
    pub fn new(config: PoliceConfig) -> Self {
        let burst_ns = config
            .rate
            .map_or(0, |r| cost_ns(r, LengthAdjust::default(), config.burst));
        let mtu = config.effective_mtu();
        let peak_depth_ns = config
            .peakrate
            .map_or(0, |p| cost_ns(p, config.adjust, mtu));
        Self {
            config,
            burst_ns,
            peak_depth_ns,
            mtu,
            full_at: AtomicU64::new(0),
            peak_full_at: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            overlimits: AtomicU64::new(0),
            drops: AtomicU64::new(0),
        }
    }

    /// Its options.
    #[must_use]
    pub fn config(&self) -> &PoliceConfig {
        &self.config
    }

    /// `tcf_police_act`: the verdict for a packet of `len` bytes at `now`, its buckets drawn
    /// on when it conforms.
    pub fn act(&self, now: Instant, len: u32) -> ControlAction {
        self.packets.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(u64::from(len), Ordering::Relaxed);
        let conforms = len <= self.mtu && self.take(now.as_nanos(), len);
        let verdict = if conforms {
            self.config.conform
        } else {
            self.overlimits.fetch_add(1, Ordering::Relaxed);
            self.config.exceed
        };
        if verdict.drops() {
            self.drops.fetch_add(1, Ordering::Relaxed);
        }
        verdict
    }

    /// Draws `len` bytes from the buckets if both hold them.
    fn take(&self, now: u64, len: u32) -> bool {
        let Some(rate) = self.config.rate else {
            // Only an mtu: every packet that fits conforms.
            return true;
        };
        let cost = cost_ns(rate, self.config.adjust, len);
        let peak_cost = self
            .config
            .peakrate
            .map(|p| cost_ns(p, self.config.adjust, len));
        loop {
            let full_at = self.full_at.load(Ordering::Acquire);
            if full_at.saturating_sub(now).saturating_add(cost) > self.burst_ns {
                return false;
            }
            if let Some(pc) = peak_cost {
                let peak = self.peak_full_at.load(Ordering::Acquire);
                if peak.saturating_sub(now).saturating_add(pc) > self.peak_depth_ns {
                    return false;
                }
            }
            let next = full_at.max(now).saturating_add(cost);
            if self
                .full_at
                .compare_exchange_weak(full_at, next, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            if let Some(pc) = peak_cost {
                // Checked above; a worker that drew on it meanwhile can overdraw it by one
                // packet, which the next packets repay.
                let _ =
                    self.peak_full_at
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |peak| {
                            Some(peak.max(now).saturating_add(pc))
                        });
            }
            return true;
        }
    }

    /// Its counters.
    #[must_use]
    pub fn stats(&self) -> PoliceStats {
        PoliceStats {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            overlimits: self.overlimits.load(Ordering::Relaxed),
            drops: self.drops.load(Ordering::Relaxed),
        }
    }
}

/// A filter's policer as filters and classifiers hold it: one bucket, shared. Two are equal
/// when their options are (what a reload compares), whatever their buckets hold.
#[derive(Clone, Debug)]
pub struct Police(Arc<Policer>);

impl Police {
    /// A new policer with full buckets.
    #[must_use]
    pub fn new(config: PoliceConfig) -> Self {
        Self(Arc::new(Policer::new(config)))
    }
}

impl Deref for Police {
    type Target = Policer;

    fn deref(&self) -> &Policer {
        &self.0
    }
}

impl PartialEq for Police {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
    }
}

impl Eq for Police {}

#[cfg(test)]
mod tests {
    use super::*;

    fn policer(rate_mbit: u64, burst: u32) -> Policer {
        Policer::new(PoliceConfig {
            rate: Some(Rate::from_mbit(rate_mbit)),
            burst,
            exceed: ControlAction::Drop,
            ..PoliceConfig::default()
        })
    }

    /// Offers `len`-byte packets at `offered` bit/s for `ns` nanoseconds and returns the bytes
    /// that conformed.
    fn passed_bytes(p: &Policer, len: u32, offered: u64, ns: u64) -> u64 {
        let gap = u64::from(len) * 8 * 1_000_000_000 / offered;
        let (mut t, mut passed) = (0, 0u64);
        while t < ns {
            if !p.act(Instant::from_nanos(t), len).drops() {
                passed += u64::from(len);
            }
            t += gap;
        }
        passed
    }

    /// As [`passed_bytes`], in bit/s over `secs`.
    fn passed_rate(p: &Policer, len: u32, offered: u64, secs: u64) -> f64 {
        passed_bytes(p, len, offered, secs * 1_000_000_000) as f64 * 8.0 / secs as f64
    }

    #[test]
    fn a_policer_passes_its_rate_and_its_burst() {
        let p = policer(5, 10_000);
        let rate = passed_rate(&p, 1442, 20_000_000, 10);
        // 5 Mbit/s, plus the 10 kB burst spread over 10 s.
        let want = 5e6 + 10_000.0 * 8.0 / 10.0;
        assert!((rate - want).abs() / want < 0.005, "{rate} against {want}");
        let s = p.stats();
        assert_eq!(s.packets, s.overlimits + (s.packets - s.overlimits));
        assert!(s.overlimits > 0 && s.drops == s.overlimits);
        // A full bucket takes a burst at once, then refuses.
        let p = policer(1, 3000);
        let now = Instant::from_nanos(1_000_000_000);
        assert!(!p.act(now, 1500).drops());
        assert!(!p.act(now, 1500).drops());
        assert!(p.act(now, 1500).drops());
        // 1500 bytes at 1 Mbit/s is 12 ms later.
        assert!(
            !p.act(now + htb_core::Duration::from_millis(12), 1500)
                .drops()
        );
    }

    #[test]
    fn mtu_peakrate_and_verdicts_follow_act_police() {
        // tc's default mtu with a rate: 2040 bytes; a jumbo frame exceeds.
        let p = policer(1000, 100_000);
        assert!(p.act(Instant::from_nanos(0), 2041).drops());
        assert!(!p.act(Instant::from_nanos(0), 2040).drops());
        // peakrate: back-to-back packets are limited to the peak even with burst to spare.
        let with_peak = |peakrate| {
            Policer::new(PoliceConfig {
                rate: Some(Rate::from_mbit(10)),
                burst: 100_000,
                mtu: 1500,
                peakrate,
                exceed: ControlAction::Drop,
                ..PoliceConfig::default()
            })
        };
        // 20 ms of 100 Mbit/s: without a peak the whole burst goes at once; with a 20 Mbit/s
        // peak, 20 ms of it (50 kB) and one mtu.
        let burst = passed_bytes(&with_peak(None), 1500, 100_000_000, 20_000_000);
        assert!(burst >= 100_000, "{burst}");
        let peaked = passed_bytes(
            &with_peak(Some(Rate::from_mbit(20))),
            1500,
            100_000_000,
            20_000_000,
        );
        assert!((50_000..=51_500 + 1500).contains(&peaked), "{peaked}");
        // Over a second the rate bucket rules: 10 Mbit/s and the burst.
        let rate = passed_rate(&with_peak(Some(Rate::from_mbit(20))), 1500, 100_000_000, 1);
        assert!((rate - 10.8e6).abs() < 0.02e6, "{rate}");
        // continue and pipe are verdicts the caller acts on; reclassify drops.
        let p = Policer::new(PoliceConfig {
            rate: Some(Rate::from_mbit(1)),
            burst: 1500,
            exceed: ControlAction::Continue,
            conform: ControlAction::Pipe,
            ..PoliceConfig::default()
        });
        assert_eq!(p.act(Instant::from_nanos(0), 1500), ControlAction::Pipe);
        assert_eq!(p.act(Instant::from_nanos(0), 1500), ControlAction::Continue);
        assert_eq!(p.stats().drops, 0);
        assert!(ControlAction::Reclassify.drops());
        assert_eq!(
            ControlAction::parse("recl"),
            Some(ControlAction::Reclassify)
        );
        assert_eq!(ControlAction::parse("shot"), Some(ControlAction::Drop));
        assert_eq!(ControlAction::parse("goto"), None);
    }

    #[test]
    fn tc_refuses_what_it_refuses() {
        let c = |f: fn(&mut PoliceConfig)| {
            let mut c = PoliceConfig::default();
            f(&mut c);
            c.check()
        };
        assert_eq!(c(|_| {}), Err(PoliceError::NothingToPolice));
        assert_eq!(
            c(|c| c.rate = Some(Rate::from_mbit(1))),
            Err(PoliceError::RateNeedsBurst)
        );
        assert_eq!(
            c(|c| {
                c.mtu = 1500;
                c.peakrate = Some(Rate::from_mbit(1));
            }),
            Err(PoliceError::PeakNeedsRate)
        );
        assert_eq!(
            c(|c| {
                c.rate = Some(Rate::from_mbit(1));
                c.burst = 10_000;
                c.peakrate = Some(Rate::from_mbit(2));
            }),
            Err(PoliceError::PeakNeedsMtu)
        );
        assert_eq!(c(|c| c.mtu = 1500), Ok(()));
    }
}
