//! When a worker's pass is due, and whether the one beginning now is late: a stall, logged
//! and, with stall credit on, handed to the schedulers to give back what it cost.
//!
//! Sans-IO: the worker tells it when passes begin and how it sleeps; the data plane's
//! simulation drives it the same way in virtual time.

use htb_core::{Duration, Instant, StallLog};

/// A span the worker was kept from forwarding, to be credited up to `at_most`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stall {
    pub(crate) from: Instant,
    pub(crate) to: Instant,
    pub(crate) at_most: Duration,
}

/// One worker's watch over its own lateness.
#[derive(Clone, Debug, Default)]
pub(crate) struct StallWatch {
    /// When the next pass is due: when the last one began if there was more to do (its
    /// classes were last served then), at the timeout of its sleep otherwise; `None` while it
    /// sleeps with no deadline (nothing is queued; a frame or a bell wakes it, and when that
    /// came is not known).
    due: Option<Instant>,
    /// Stall credit per stall (`None`: none).
    credit: Option<Duration>,
    /// The stalls so far.
    pub(crate) log: StallLog,
}

impl StallWatch {
    /// A watch crediting up to `credit` per stall.
    pub(crate) fn new(credit: Option<Duration>) -> Self {
        Self {
            due: None,
            credit,
            log: StallLog::default(),
        }
    }

    /// A pass begins at `now`. Beyond [`StallLog::FLOOR`] after it was due, the span is a
    /// stall: logged, and returned to be credited when stall credit is on. Until told
    /// otherwise ([`sleeps_until`](Self::sleeps_until)), the next pass is due as soon as this
    /// one ends, and its classes were served at `now`: a pass that runs long (its own work, or
    /// the host took the CPU in the middle of it) shows as the next one's lateness.
    pub(crate) fn pass_begins(&mut self, now: Instant) -> Option<Stall> {
        let due = self.due.replace(now)?;
        let logged = self.log.note(now - due);
        match self.credit {
            Some(at_most) if logged => Some(Stall {
                from: due,
                to: now,
                at_most,
            }),
            _ => None,
        }
    }

    /// The worker sleeps until `deadline` (`None`: until a frame or a bell wakes it).
    pub(crate) fn sleeps_until(&mut self, deadline: Option<Instant>) {
        self.due = deadline;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    #[test]
    fn a_late_pass_is_a_stall_from_when_it_was_due() {
        let mut watch = StallWatch::new(Some(Duration::from_millis(10)));
        assert_eq!(watch.pass_begins(at(0)), None, "the first pass was not due");
        // Busy: due when the last began. 150 µs later is a pass's own work.
        assert_eq!(watch.pass_begins(at(150)), None);
        // 4 ms later: a stall since the pass at 150 µs.
        assert_eq!(
            watch.pass_begins(at(4_150)),
            Some(Stall {
                from: at(150),
                to: at(4_150),
                at_most: Duration::from_millis(10)
            })
        );
        // Asleep until 5 ms, woken on time, then 3 ms late.
        watch.sleeps_until(Some(at(5_000)));
        assert_eq!(watch.pass_begins(at(5_050)), None);
        watch.sleeps_until(Some(at(6_000)));
        assert_eq!(
            watch.pass_begins(at(9_000)).map(|s| s.from),
            Some(at(6_000))
        );
        // Asleep with no deadline: whenever it wakes is on time.
        watch.sleeps_until(None);
        assert_eq!(watch.pass_begins(at(90_000)), None);
        assert_eq!(watch.log.count(), 2);
        assert_eq!(watch.log.total(), Duration::from_micros(7_000));
    }

    #[test]
    fn without_credit_stalls_are_logged_and_not_handed_on() {
        let mut watch = StallWatch::new(None);
        watch.pass_begins(at(0));
        assert_eq!(watch.pass_begins(at(4_000)), None);
        assert_eq!(watch.log.count(), 1);
    }
}
