//! What the console's charts draw: per port and per tracked class, the last 10 minutes one
//! sample a second and the last day one sample a minute, in rings of fixed size.
//!
//! A class is tracked from the moment a page shows it or a search finds it, and the least
//! recently viewed one makes room when [`MAX_TRACKED`] are. Samples keep the cumulative
//! counters (a chart's rate is the difference of two), so a sample the sampler missed (a busy
//! control task) costs a point, not a wrong rate.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

/// One second samples kept: 10 minutes.
pub const SECONDS: usize = 600;
/// One minute samples kept: a day.
pub const MINUTES: usize = 1440;
/// Classes tracked at once.
pub const MAX_TRACKED: usize = 128;

/// Counters at one instant. 48 bytes: a tracked class's two rings hold 2 040 of them, 98 kB,
/// so [`MAX_TRACKED`] classes cost at most 12.5 MB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// Bytes sent (a port: received and sent, as `rx_bytes` and `bytes`).
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped.
    pub drops: u64,
    /// Bytes received (ports only; 0 for classes).
    pub rx_bytes: u64,
    /// Backlog in bytes (classes; 0 for ports).
    pub backlog: u32,
    /// Median TCP round trip in µs (0: none measured).
    pub rtt_p50_us: u32,
}

/// What a key's two rings hold.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Series {
    /// One a second, oldest first.
    pub seconds: VecDeque<Sample>,
    /// One a minute, oldest first.
    pub minutes: VecDeque<Sample>,
}

impl Series {
    fn push(&mut self, sample: Sample) {
        if self.seconds.len() == SECONDS {
            self.seconds.pop_front();
        }
        // A minute sample when a new minute began since the last one.
        let new_minute = self
            .minutes
            .back()
            .is_none_or(|last| sample.at_ms / 60_000 > last.at_ms / 60_000);
        if new_minute {
            if self.minutes.len() == MINUTES {
                self.minutes.pop_front();
            }
            self.minutes.push_back(sample);
        }
        self.seconds.push_back(sample);
    }

    /// The rate in bit/s of the byte counter `bytes` over the last `span` one-second samples
    /// (fewer when fewer exist; `None` with less than two).
    #[must_use]
    pub fn bits_per_second(&self, span: usize, bytes: impl Fn(&Sample) -> u64) -> Option<u64> {
        let last = self.seconds.back()?;
        let first = self
            .seconds
            .get(self.seconds.len().saturating_sub(span.max(1) + 1))?;
        let ms = last.at_ms.checked_sub(first.at_ms).filter(|&ms| ms > 0)?;
        Some(bytes(last).saturating_sub(bytes(first)) * 8 * 1000 / ms)
    }
}

pub use crate::control::ClassKey;

/// Every tracked series.
#[derive(Debug, Default)]
pub struct History {
    ports: HashMap<String, Series>,
    classes: HashMap<ClassKey, Series>,
    /// When each tracked class was last viewed (a counter, not a clock: the order is all the
    /// eviction needs).
    viewed: HashMap<ClassKey, u64>,
    views: u64,
}

impl History {
    /// Starts tracking `class` (or notes that it was viewed again), evicting the least recently
    /// viewed class when [`MAX_TRACKED`] are tracked.
    pub fn view(&mut self, class: ClassKey) {
        self.views += 1;
        if !self.viewed.contains_key(&class)
            && self.viewed.len() >= MAX_TRACKED
            && let Some(oldest) = self
                .viewed
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone())
        {
            self.viewed.remove(&oldest);
            self.classes.remove(&oldest);
        }
        self.viewed.insert(class, self.views);
    }

    /// The tracked classes.
    #[must_use]
    pub fn tracked(&self) -> Vec<ClassKey> {
        self.viewed.keys().cloned().collect()
    }

    /// Records a port's sample.
    pub fn port(&mut self, dev: &str, sample: Sample) {
        match self.ports.get_mut(dev) {
            Some(series) => series.push(sample),
            None => {
                let mut series = Series::default();
                series.push(sample);
                self.ports.insert(dev.to_owned(), series);
            }
        }
    }

    /// Records a tracked class's sample (`None`: the class is gone, and is forgotten).
    pub fn class(&mut self, class: &ClassKey, sample: Option<Sample>) {
        let Some(sample) = sample else {
            self.viewed.remove(class);
            self.classes.remove(class);
            return;
        };
        if self.viewed.contains_key(class) {
            self.classes.entry(class.clone()).or_default().push(sample);
        }
    }

    /// A port's series.
    #[must_use]
    pub fn port_series(&self, dev: &str) -> Option<&Series> {
        self.ports.get(dev)
    }

    /// A class's series, if tracked.
    #[must_use]
    pub fn class_series(&self, class: &ClassKey) -> Option<&Series> {
        self.classes.get(class)
    }

    /// Bytes the rings hold now (for `/api/v1/overview`'s memory line).
    #[must_use]
    pub fn bytes(&self) -> usize {
        let samples: usize = self
            .ports
            .values()
            .chain(self.classes.values())
            .map(|s| s.seconds.len() + s.minutes.len())
            .sum();
        samples * size_of::<Sample>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::ClassId;

    fn at(s: u64, bytes: u64) -> Sample {
        Sample {
            at_ms: s * 1000,
            bytes,
            ..Sample::default()
        }
    }

    #[test]
    fn rings_keep_ten_minutes_of_seconds_and_a_day_of_minutes() {
        assert_eq!(size_of::<Sample>(), 48, "the memory the docs state");
        let mut series = Series::default();
        for s in 0..(2 * 86_400) {
            series.push(at(s, s * 1000));
        }
        assert_eq!(series.seconds.len(), SECONDS);
        assert_eq!(series.minutes.len(), MINUTES);
        assert_eq!(
            series.seconds.back().unwrap().at_ms,
            (2 * 86_400 - 1) * 1000
        );
        assert_eq!(
            series.seconds.front().unwrap().at_ms,
            (2 * 86_400 - 600) * 1000
        );
        // Minute samples are the first of each minute, a minute apart.
        let m: Vec<u64> = series.minutes.iter().map(|s| s.at_ms).collect();
        assert!(m.windows(2).all(|w| w[1] - w[0] == 60_000), "{:?}", &m[..3]);
        assert_eq!(*m.last().unwrap(), (2 * 86_400 - 60) * 1000);
    }

    #[test]
    fn the_rate_is_the_difference_of_counters_over_their_time() {
        let mut series = Series::default();
        assert_eq!(series.bits_per_second(5, |s| s.bytes), None);
        series.push(at(10, 0));
        assert_eq!(series.bits_per_second(5, |s| s.bytes), None);
        // 125 000 bytes a second: 1 Mbit/s; a missed second does not change the rate.
        series.push(at(11, 125_000));
        series.push(at(13, 375_000));
        assert_eq!(series.bits_per_second(1, |s| s.bytes), Some(1_000_000));
        assert_eq!(series.bits_per_second(5, |s| s.bytes), Some(1_000_000));
        // A counter that went back (a class deleted and added again) reads 0, not a wrap.
        series.push(at(14, 5));
        assert_eq!(series.bits_per_second(1, |s| s.bytes), Some(0));
    }

    #[test]
    fn the_least_recently_viewed_class_makes_room() {
        let mut history = History::default();
        let key = |n: u32| ("r2".parse().unwrap(), ClassId::new(1, n));
        for n in 0..MAX_TRACKED as u32 {
            history.view(key(n));
            history.class(&key(n), Some(at(1, 1)));
        }
        // Class 0 is viewed again: class 1 is now the least recent.
        history.view(key(0));
        history.view(key(9999));
        assert_eq!(history.tracked().len(), MAX_TRACKED);
        assert!(history.class_series(&key(0)).is_some());
        assert!(history.class_series(&key(1)).is_none());
        assert!(!history.tracked().contains(&key(1)));
        // A sample of an untracked class is not kept; a gone class is forgotten.
        history.class(&key(1), Some(at(2, 2)));
        assert!(history.class_series(&key(1)).is_none());
        history.class(&key(0), None);
        assert!(!history.tracked().contains(&key(0)));
        assert_eq!(history.bytes(), (MAX_TRACKED - 2) * 2 * size_of::<Sample>());
    }
}
