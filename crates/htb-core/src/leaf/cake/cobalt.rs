//! COBALT (`sch_cake.c`'s `cobalt_*`): CoDel's control law and BLUE's drop probability run
//! side by side on each flow. CoDel signals flows that answer to congestion (marking ECN
//! packets, dropping others); BLUE raises a drop probability while a flow keeps overflowing the
//! queue, which is what an unresponsive flow does.
//!
//! Times are nanoseconds on the scheduler's clock; differences are taken as signed, as the
//! kernel's `ktime_sub` does.

/// `REC_INV_SQRT_CACHE`: counts below this take `1/sqrt(count)` from a table.
const CACHE: usize = 16;

/// `cobalt_newton_step`: one Newton–Raphson step of `1/sqrt(count)` in Q0.32.
const fn newton_step(rec_inv_sqrt: u32, count: u32) -> u32 {
    let invsqrt = rec_inv_sqrt as u64;
    let invsqrt2 = (invsqrt * invsqrt) >> 32;
    let mut val = (3u64 << 32).wrapping_sub(count as u64 * invsqrt2);
    val >>= 2; // avoid overflow in the following multiply
    val = (val * invsqrt) >> (32 - 2 + 1);
    val as u32
}

/// `cobalt_cache_init`: four Newton steps per count from the previous count's value, so that
/// small counts (where one step is far off) are exact; entries 0 and 1 are `~0`, as close to
/// 1.0 as Q0.32 gets.
const REC_INV_SQRT: [u32; CACHE] = {
    let mut cache = [u32::MAX; CACHE];
    let mut value = u32::MAX;
    let mut count = 1;
    while count < CACHE {
        let mut step = 0;
        while step < 4 {
            value = newton_step(value, count as u32);
            step += 1;
        }
        cache[count] = value;
        count += 1;
    }
    cache
};

/// `struct cobalt_params`: one tin's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CobaltParams {
    /// CoDel's interval, ns.
    pub(crate) interval: u64,
    /// Largest sojourn kept persistently, and BLUE's update period, ns.
    pub(crate) target: u64,
    /// Serialisation time of an MTU-sized packet at the tin's rate, ns.
    pub(crate) mtu_time: u64,
}

/// BLUE's increment of the drop probability (Q0.32): 1/256, as `cake_set_rate` sets it.
const P_INC: u32 = 1 << 24;
/// BLUE's decrement: 1/4096.
const P_DEC: u32 = 1 << 20;

/// `struct cobalt_vars`: one flow's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CobaltVars {
    /// CoDel's signalling count.
    pub(crate) count: u32,
    /// `1/sqrt(count)`, Q0.32.
    pub(crate) rec_inv_sqrt: u32,
    /// When to signal next (or when signalled last; an activity timeout at rest).
    pub(crate) drop_next: u64,
    /// When BLUE last changed `p_drop`.
    pub(crate) blue_timer: u64,
    /// BLUE's drop probability, Q0.32.
    pub(crate) p_drop: u32,
    /// In CoDel's dropping state.
    pub(crate) dropping: bool,
    /// The last packet looked at was CE-marked.
    pub(crate) ecn_marked: bool,
}

impl Default for CobaltVars {
    /// At rest. The kernel zeroes a queue's variables once, at `cake_init`, so a queue never
    /// used before has `rec_inv_sqrt` 0 and signals at the second packet over target; every
    /// queue that has come back to rest holds `~0` (the cache's entry for count 0), which
    /// makes the first signal come an interval after the target was first exceeded, as
    /// COBALT intends. Queue records here are fresh whenever a flow starts, so they start as
    /// a rested queue does.
    fn default() -> Self {
        Self {
            count: 0,
            rec_inv_sqrt: REC_INV_SQRT[0],
            drop_next: 0,
            blue_timer: 0,
            p_drop: 0,
            dropping: false,
            ecn_marked: false,
        }
    }
}

/// `a - b` as the kernel's signed `ktime_sub`.
#[inline]
fn signed(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

impl CobaltVars {
    /// `cobalt_invsqrt`.
    fn invsqrt(&mut self) {
        self.rec_inv_sqrt = match REC_INV_SQRT.get(self.count as usize) {
            Some(&cached) => cached,
            None => newton_step(self.rec_inv_sqrt, self.count),
        };
    }

    /// `cobalt_control`: `t + interval / sqrt(count)`. The kernel scales a `u32` interval
    /// (`reciprocal_scale`), wrapping intervals past 4.29 s; here the product is wide.
    fn control(t: u64, interval: u64, rec_inv_sqrt: u32) -> u64 {
        let scaled = (u128::from(interval) * u128::from(rec_inv_sqrt)) >> 32;
        t.wrapping_add(scaled as u64)
    }

    /// `cobalt_queue_full`: the queue overflowed. True when BLUE went from quiescent to
    /// active (one more unresponsive flow).
    pub(crate) fn queue_full(&mut self, p: &CobaltParams, now: u64) -> bool {
        let mut up = false;
        if signed(now, self.blue_timer) > p.target as i64 {
            up = self.p_drop == 0;
            self.p_drop = self.p_drop.wrapping_add(P_INC);
            if self.p_drop < P_INC {
                self.p_drop = u32::MAX;
            }
            self.blue_timer = now;
        }
        self.dropping = true;
        self.drop_next = now;
        if self.count == 0 {
            self.count = 1;
        }
        up
    }

    /// `cobalt_queue_empty`: the flow was served and found empty. True when BLUE went from
    /// active to quiescent.
    #[inline]
    pub(crate) fn queue_empty(&mut self, p: &CobaltParams, now: u64) -> bool {
        let mut down = false;
        if self.p_drop != 0 && signed(now, self.blue_timer) > p.target as i64 {
            self.p_drop = self.p_drop.saturating_sub(P_DEC);
            self.blue_timer = now;
            down = self.p_drop == 0;
        }
        self.dropping = false;
        if self.count != 0 && signed(now, self.drop_next) >= 0 {
            self.count -= 1;
            self.invsqrt();
            self.drop_next = Self::control(self.drop_next, p.interval, self.rec_inv_sqrt);
        }
        down
    }

    /// `cobalt_should_drop`: a packet dequeued after `sojourn` ns, with `bulk_flows` bulk
    /// flows in its tin (0 unless `ingress`). `set_ce` marks the packet CE if it can carry it;
    /// `random` is BLUE's coin. True: drop it.
    #[inline]
    pub(crate) fn should_drop(
        &mut self,
        p: &CobaltParams,
        now: u64,
        sojourn: u64,
        bulk_flows: u32,
        set_ce: impl FnOnce() -> bool,
        random: u32,
    ) -> bool {
        if self.count == 0 && !self.dropping && self.p_drop == 0 && sojourn <= p.target {
            // At rest and under target (most packets): nothing to signal, no coin to toss;
            // only the activity timeout moves, as below.
            self.ecn_marked = false;
            self.drop_next = now.wrapping_add(p.interval);
            return false;
        }
        let mut schedule = signed(now, self.drop_next);
        let over_target = sojourn > p.target
            && sojourn > p.mtu_time.saturating_mul(u64::from(bulk_flows) * 2)
            && sojourn > p.mtu_time.saturating_mul(4);
        let mut next_due = self.count != 0 && schedule >= 0;
        let mut drop = false;
        self.ecn_marked = false;
        if over_target {
            if !self.dropping {
                self.dropping = true;
                self.drop_next = Self::control(now, p.interval, self.rec_inv_sqrt);
            }
            if self.count == 0 {
                self.count = 1;
            }
        } else if self.dropping {
            self.dropping = false;
        }
        if next_due && self.dropping {
            // An ECN mark where possible, a drop otherwise.
            self.ecn_marked = set_ce();
            drop = !self.ecn_marked;
            self.count = self.count.wrapping_add(1);
            if self.count == 0 {
                self.count -= 1;
            }
            self.invsqrt();
            self.drop_next = Self::control(self.drop_next, p.interval, self.rec_inv_sqrt);
            schedule = signed(now, self.drop_next);
        } else {
            while next_due {
                self.count -= 1;
                self.invsqrt();
                self.drop_next = Self::control(self.drop_next, p.interval, self.rec_inv_sqrt);
                schedule = signed(now, self.drop_next);
                next_due = self.count != 0 && schedule >= 0;
            }
        }
        // Simple BLUE; its lack of ECN is deliberate.
        if self.p_drop != 0 {
            drop |= random < self.p_drop;
        }
        // drop_next doubles as an activity timeout.
        if self.count == 0 {
            self.drop_next = now.wrapping_add(p.interval);
        } else if schedule > 0 && !drop {
            self.drop_next = now;
        }
        drop
    }

    /// Whether the flow's state has decayed to rest, so that it may leave the decaying list
    /// (`cake_dequeue`'s test for keeping an empty flow in the flowchain).
    #[inline]
    pub(crate) fn at_rest(&self, now: u64) -> bool {
        self.p_drop == 0 && self.count == 0 && signed(now, self.drop_next) >= 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> CobaltParams {
        CobaltParams {
            interval: 100_000_000,
            target: 5_000_000,
            mtu_time: 1_211_200, // 1514 B at 10 Mbit/s
        }
    }

    #[test]
    fn the_inverse_square_root_cache_is_the_kernels() {
        // Computed by cobalt_cache_init's own steps (four Newton steps per count).
        let expected = [
            0xffff_ffff,
            0xffff_ffff,
            0xb4ea_d8a0,
            0x93cd_39e7,
            0x7fff_ffff,
            0x727c_9717,
            0x6882_f5bf,
            0x60c2_479b,
            0x5a82_799a,
            0x5555_5555,
            0x50f4_4d8a,
            0x4d2f_d8f4,
            0x49e6_9d17,
            0x4700_6a81,
            0x446b_3b96,
            0x4219_528c,
        ];
        assert_eq!(REC_INV_SQRT, expected);
        // Past the cache, one step from the previous value.
        assert_eq!(newton_step(expected[15], 16), 0x3fe5_4743);
        for (count, &v) in REC_INV_SQRT.iter().enumerate().skip(3) {
            let exact = 4_294_967_296.0 / (count as f64).sqrt();
            assert!((f64::from(v) - exact).abs() / exact < 1e-6, "count {count}");
        }
    }

    #[test]
    fn a_standing_queue_is_signalled_after_an_interval_then_faster() {
        let p = params();
        let mut v = CobaltVars::default();
        let ms = 1_000_000u64;
        // Sojourn 20 ms from t = 0: dropping begins, the first signal an interval later.
        assert!(!v.should_drop(&p, 0, 20 * ms, 0, || false, u32::MAX));
        assert!(v.dropping);
        let first = (100 * ms * 0xffff_ffff) >> 32;
        assert_eq!((v.count, v.drop_next), (1, first));
        assert!(!v.should_drop(&p, 50 * ms, 20 * ms, 0, || false, u32::MAX));
        // Due: a drop (not ECN-capable), count 2, the next at +interval/sqrt(2).
        assert!(v.should_drop(&p, 100 * ms, 20 * ms, 0, || false, u32::MAX));
        assert_eq!(v.count, 2);
        assert_eq!(v.drop_next, first + ((100 * ms * 0xb4ea_d8a0) >> 32));
        // ECN-capable packets are marked instead.
        let mut marked = false;
        assert!(!v.should_drop(
            &p,
            v.drop_next,
            20 * ms,
            0,
            || {
                marked = true;
                true
            },
            u32::MAX
        ));
        assert!(marked && v.ecn_marked);
        assert_eq!(v.count, 3);
        // Below target, dropping ends; the count decays as the schedule passes.
        assert!(!v.should_drop(&p, 400 * ms, ms, 0, || false, u32::MAX));
        assert!(!v.dropping);
        assert!(v.count < 3);
    }

    #[test]
    fn small_sojourns_against_the_mtu_time_are_not_over_target() {
        let p = params();
        let mut v = CobaltVars::default();
        // 6 ms is above the 5 ms target but below 2 × mtu_time × 4 bulk flows (9.7 ms).
        assert!(!v.should_drop(&p, 0, 6_000_000, 4, || false, u32::MAX));
        assert!(!v.dropping);
        assert!(!v.should_drop(&p, 0, 6_000_000, 0, || false, u32::MAX));
        assert!(v.dropping);
    }

    #[test]
    fn blue_rises_on_overflow_and_decays_on_empty() {
        let p = params();
        let mut v = CobaltVars::default();
        let ms = 1_000_000u64;
        assert!(v.queue_full(&p, 10 * ms), "quiescent to active");
        assert_eq!(v.p_drop, 1 << 24);
        assert!(
            !v.queue_full(&p, 12 * ms),
            "within target of the last change"
        );
        assert_eq!(v.p_drop, 1 << 24);
        assert!(!v.queue_full(&p, 20 * ms));
        assert_eq!(v.p_drop, 2 << 24);
        // BLUE drops with probability p_drop: a coin below it drops.
        assert!(v.should_drop(&p, 21 * ms, 0, 0, || true, 0));
        assert!(!v.should_drop(&p, 21 * ms, 0, 0, || true, u32::MAX));
        let mut down = false;
        let mut t = 30 * ms;
        for _ in 0..40 {
            down |= v.queue_empty(&p, t);
            t += 10 * ms;
        }
        assert!(down && v.p_drop == 0);
        assert!(v.at_rest(t));
    }

    #[test]
    fn p_drop_saturates() {
        let p = params();
        let mut v = CobaltVars::default();
        // 256 overflows a target apart: 256 × 1/256 is a certain drop.
        for i in 1..=300u64 {
            v.queue_full(&p, i * 10_000_000);
        }
        assert_eq!(v.p_drop, u32::MAX);
    }
}
