//! Rates of classes the console lists without tracking them (a tree page's children): the
//! counters each list saw, so that the next list of the same classes (the page's update a
//! second later) turns them into rates. Bounded: past [`MAX_REMEMBERED`] classes it starts
//! over, which costs one update's rates.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::history::ClassKey;

/// Classes remembered at once (about 100 bytes each with the key and the map's own: 20 MB).
pub const MAX_REMEMBERED: usize = 200_000;
/// Counters older than this are too old for a rate a page calls current.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// A class's rates between two sightings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Bits sent per second.
    pub bps: u64,
    /// Packets sent per second.
    pub pps: u64,
    /// Packets dropped per second.
    pub drops_per_s: f64,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Instant,
    bytes: u64,
    packets: u64,
    drops: u64,
}

/// The last counters seen per class.
#[derive(Debug, Default)]
pub struct RateMemo {
    seen: HashMap<ClassKey, Seen>,
}

impl RateMemo {
    /// Notes `class`'s counters at `at`, and gives its rates since it was last seen (`None`:
    /// not seen within [`MAX_AGE`], or seen less than 100 ms ago, too short to say).
    pub fn see(
        &mut self,
        class: &ClassKey,
        at: Instant,
        bytes: u64,
        packets: u64,
        drops: u64,
    ) -> Option<Rates> {
        let now = Seen {
            at,
            bytes,
            packets,
            drops,
        };
        let before = self.seen.get(class).copied();
        let rates = before.and_then(|b| {
            let span = at.checked_duration_since(b.at)?;
            if span < Duration::from_millis(100) || span > MAX_AGE {
                return None;
            }
            let per_s = |later: u64, earlier: u64| {
                later.saturating_sub(earlier) as f64 / span.as_secs_f64()
            };
            Some(Rates {
                bps: (per_s(bytes, b.bytes) * 8.0).round() as u64,
                pps: per_s(packets, b.packets).round() as u64,
                drops_per_s: per_s(drops, b.drops),
            })
        });
        // A sighting too soon after the last keeps the older one, so that a page refreshed
        // twice quickly still gets a rate over a span long enough to mean one.
        if before.is_none_or(|b| at.saturating_duration_since(b.at) >= Duration::from_millis(100)) {
            if self.seen.len() >= MAX_REMEMBERED && !self.seen.contains_key(class) {
                self.seen.clear();
            }
            self.seen.insert(class.clone(), now);
        }
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::ClassId;

    #[test]
    fn two_sightings_make_a_rate_and_stale_ones_do_not() {
        let mut memo = RateMemo::default();
        let key = ("r2".parse().unwrap(), ClassId::new(1, 10));
        let t0 = Instant::now();
        assert_eq!(memo.see(&key, t0, 1000, 10, 0), None);
        // Too soon: no rate, and the first sighting stays the reference.
        assert_eq!(
            memo.see(&key, t0 + Duration::from_millis(50), 2000, 11, 0),
            None
        );
        let r = memo
            .see(&key, t0 + Duration::from_secs(2), 251_000, 210, 4)
            .unwrap();
        assert_eq!((r.bps, r.pps), (1_000_000, 100));
        assert!((r.drops_per_s - 2.0).abs() < 1e-9);
        assert_eq!(memo.see(&key, t0 + Duration::from_secs(40), 0, 0, 0), None);
    }
}
