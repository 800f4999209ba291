//! What one measurement window saw cross the router, and the premise a shaping measurement
//! must prove before it judges the shaper.

use crate::owed::Counted;

/// What crossed the router in a measurement window: L2 bytes sent by node-1 and received by
/// node-2 (which also counts whatever else node-2 receives, such as ARP: negligible).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// node-1's eth0 sent.
    pub offered: Counted,
    /// node-2's eth0 received.
    pub delivered: Counted,
}

impl Load {
    /// node-1's send rate, bit/s.
    #[must_use]
    pub fn offered_bps(&self) -> f64 {
        self.offered.bps()
    }

    /// node-2's receive rate, bit/s.
    #[must_use]
    pub fn delivered_bps(&self) -> f64 {
        self.delivered.bps()
    }

    /// Proves the premise of a shaping measurement: the generator offered at least 1.1× the
    /// class's `rate`. Otherwise the window measured the generator, not the shaper, and the
    /// test fails saying so instead of passing or failing by luck.
    ///
    /// # Panics
    /// When the premise does not hold.
    pub fn assert_saturates(&self, what: &str, rate_bps: f64) {
        eprintln!(
            "{what}: offered {:.3} Mbit/s ({:.2}× the class), delivered {:.3} Mbit/s",
            self.offered_bps() / 1e6,
            self.offered_bps() / rate_bps,
            self.delivered_bps() / 1e6
        );
        assert!(
            self.offered_bps() >= 1.1 * rate_bps,
            "{what}: premise failed: the generator offered only {:.1} Mbit/s for a {:.1} Mbit/s \
             class (needs 1.1×), so this window would measure the generator, not the shaper",
            self.offered_bps() / 1e6,
            rate_bps / 1e6
        );
    }
}
