//! Which tin `cake_dequeue` serves: by DRR weight when unlimited, else the highest-priority
//! tin within its threshold, or the earliest one.
//!
//! The kernel walks its tins in order each time (`cake_dequeue`'s "Choose a class to work on").
//! Here two masks say which tins that walk would touch: the busy ones (flows with packets or
//! waiting to send), and those whose deficit is not positive (a visit tops them up). A tin in
//! neither is passed over without effect, so the walk skips it: the tins chosen and every
//! deficit come out as the kernel's, while an idle tin's record is not read.

use alloc::format;

use super::tins::Tin;
use crate::CheckError;

/// The tin served last and the masks of the tins the choice looks at (bit `t`: tin `t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TinChoice {
    /// `cur_tin`.
    cur: u8,
    /// Tins with sparse or bulk flows.
    busy: u8,
    /// Tins whose deficit is zero or less.
    owed: u8,
}

impl TinChoice {
    /// The choice among `tins`, starting at the first.
    pub(super) fn new(tins: &[Tin]) -> Self {
        let mut choice = Self::default();
        choice.recount(tins);
        choice
    }

    /// Takes the masks from `tins` afresh and starts at the first (`cake_change`).
    pub(super) fn recount(&mut self, tins: &[Tin]) {
        *self = Self::default();
        for t in 0..tins.len() {
            self.note(tins, t);
        }
    }

    /// Notes tin `t`'s flow counts and deficit, after either changed.
    #[inline]
    pub(super) fn note(&mut self, tins: &[Tin], t: usize) {
        let bit = 1 << t;
        let b = &tins[t];
        if b.busy() {
            self.busy |= bit;
        } else {
            self.busy &= !bit;
        }
        if b.tin_deficit <= 0 {
            self.owed |= bit;
        } else {
            self.owed &= !bit;
        }
    }

    /// Tin `t` has a flow more (`sparse_flow_count` went up).
    #[inline]
    pub(super) fn busied(&mut self, t: usize) {
        self.busy |= 1 << t;
    }

    /// Tin `t` (`tin`) has a flow less: it may have none left.
    #[inline]
    pub(super) fn emptied(&mut self, t: usize, tin: &Tin) {
        if !tin.busy() {
            self.busy &= !(1 << t);
        }
    }

    /// Tin `t` was charged for a packet: its deficit may have run out.
    #[inline]
    pub(super) fn charged(&mut self, tins: &[Tin], t: usize) {
        self.charged_to(t, tins[t].tin_deficit);
    }

    /// Tin `t` was charged for a packet, down to `deficit`.
    #[inline]
    pub(super) fn charged_to(&mut self, t: usize, deficit: i32) {
        if deficit <= 0 {
            self.owed |= 1 << t;
        }
    }

    /// Whether tin `t` has flows to serve.
    #[inline]
    pub(super) fn busy(&self, t: usize) -> bool {
        self.busy >> t & 1 != 0
    }

    /// The tin to serve without a shaper: the one served last while it is busy and in credit,
    /// else the next busy one in credit, topping deficits up on the way. `None`: nothing to
    /// serve.
    #[inline]
    pub(super) fn by_weight(&mut self, tins: &mut [Tin]) -> Option<usize> {
        let cur = usize::from(self.cur);
        let bit = 1u8 << cur;
        // `busy | owed == bit` with `cur` busy.
        if self.busy == bit && self.owed & !bit == 0 {
            // The walk would come back to this tin alone, topping it up once a round until it
            // is in credit.
            let b = &mut tins[cur];
            while b.tin_deficit < 0 {
                b.tin_deficit += i32::from(b.tin_quantum);
            }
            if b.tin_deficit > 0 {
                self.owed = 0;
            }
            return Some(cur);
        }
        if self.busy(cur) && tins[cur].tin_deficit >= 0 {
            return Some(cur);
        }
        self.walk(tins)
    }

    /// `cake_dequeue`'s DRR walk over the tins from the one served last, visiting only the
    /// tins a visit changes or stops at.
    fn walk(&mut self, tins: &mut [Tin]) -> Option<usize> {
        let count = tins.len();
        let mut cur = usize::from(self.cur) % count;
        let (mut wrapped, mut empty) = (false, true);
        loop {
            // Tins past the last one the walk could act on: it wraps.
            let ahead = u32::from(self.busy | self.owed) >> cur;
            if ahead != 0 {
                cur += ahead.trailing_zeros() as usize;
                let bit = 1 << cur;
                let busy = self.busy & bit != 0;
                let b = &mut tins[cur];
                if b.tin_deficit >= 0 && busy {
                    self.cur = cur as u8;
                    return Some(cur);
                }
                if b.tin_deficit <= 0 {
                    b.tin_deficit += i32::from(b.tin_quantum);
                    if b.tin_deficit > 0 {
                        self.owed &= !bit;
                    }
                }
                empty &= !busy;
                cur += 1;
                if cur < count {
                    continue;
                }
            }
            cur = 0;
            if wrapped {
                if empty {
                    self.cur = 0;
                    return None;
                }
            } else {
                wrapped = true;
            }
        }
    }

    /// The tin to serve under the shaper: the first busy tin whose threshold lets it send
    /// now, else the busy tin that may send soonest (the last of equals). `None`: nothing to
    /// serve.
    pub(super) fn by_threshold(&mut self, tins: &[Tin], now: u64) -> Option<usize> {
        let mut best_time = i64::MAX;
        let mut best = 0;
        let mut busy = self.busy;
        while busy != 0 {
            let t = busy.trailing_zeros() as usize;
            busy &= busy - 1;
            let to_packet = tins[t].time_next_packet.wrapping_sub(now) as i64;
            if to_packet <= 0 || to_packet <= best_time {
                best_time = to_packet;
                best = t;
            }
        }
        self.cur = best as u8;
        self.busy(best).then_some(best)
    }

    /// Checks the masks against the tins.
    pub(super) fn check(&self, tins: &[Tin]) -> Result<(), CheckError> {
        let mut expected = *self;
        expected.busy = 0;
        expected.owed = 0;
        for t in 0..tins.len() {
            expected.note(tins, t);
        }
        if expected != *self || usize::from(self.cur) >= tins.len() {
            return Err(CheckError(format!(
                "cake's tin choice {self:?} of {} tins; they say {expected:?}",
                tins.len()
            )));
        }
        Ok(())
    }
}
