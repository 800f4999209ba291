//! `autorate-ingress` (`cake_enqueue`'s capacity estimate from the arrivals).

/// `autorate-ingress`'s estimate of the link's capacity from the arrivals.
#[derive(Clone, Debug, Default)]
pub(super) struct Autorate {
    pub(super) last_packet_time: u64,
    pub(super) avg_window_begin: u64,
    pub(super) avg_packet_interval: u64,
    pub(super) avg_window_bytes: u64,
    pub(super) avg_peak_bandwidth: u64,
    pub(super) last_reconfig_time: u64,
}

impl Autorate {
    /// `cake_enqueue`'s estimate: the peak arrival rate of bursts, averaged. True when the
    /// shaper should follow it (15/16 of it): at most every 250 ms after the last change,
    /// which the kernel never moves, so past 250 ms it follows at every burst.
    pub(super) fn estimate(&mut self, now: u64) -> bool {
        let interval = now.saturating_sub(self.last_packet_time).min(1_000_000_000);
        let shift = if interval > self.avg_packet_interval {
            2
        } else {
            8
        };
        self.avg_packet_interval = ewma(self.avg_packet_interval, interval, shift);
        self.last_packet_time = now;
        if interval <= self.avg_packet_interval {
            return false;
        }
        let window = now.saturating_sub(self.avg_window_begin).max(1);
        let rate = (u128::from(self.avg_window_bytes) * 1_000_000_000 / u128::from(window))
            .min(u128::from(u64::MAX)) as u64;
        let shift = if rate > self.avg_peak_bandwidth { 2 } else { 8 };
        self.avg_peak_bandwidth = ewma(self.avg_peak_bandwidth, rate, shift);
        self.avg_window_bytes = 0;
        self.avg_window_begin = now;
        now > self.last_reconfig_time + 250_000_000
    }
}

/// `cake_ewma`.
pub(super) fn ewma(avg: u64, sample: u64, shift: u32) -> u64 {
    avg - (avg >> shift) + (sample >> shift)
}
