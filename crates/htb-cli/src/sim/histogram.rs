//! A log-linear histogram of delays: constant memory, deterministic, ≤ 1/32 relative error.

/// Counts of values in buckets of 1/32 of a power of two.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; (64 * SUB) as usize],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn bucket(value: u64) -> usize {
        if value < SUB {
            return value as usize;
        }
        let msb = 63 - value.leading_zeros();
        let shift = msb - SUB_BITS;
        let sub = (value >> shift) & (SUB - 1);
        ((u64::from(shift) + 1) * SUB + sub) as usize
    }

    /// The smallest value of bucket `index`.
    fn lower(index: usize) -> u64 {
        let index = index as u64;
        if index < SUB {
            return index;
        }
        let shift = index / SUB - 1;
        let sub = index % SUB;
        (SUB + sub) << shift
    }

    /// Records one value.
    pub fn record(&mut self, value: u64) {
        self.counts[Self::bucket(value)] += 1;
        self.total += 1;
        self.max = self.max.max(value);
    }

    /// The largest value recorded, exactly (0 if none).
    #[must_use]
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Number of values recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (0.0..=1.0), as the midpoint of its bucket but never above the exact
    /// maximum (the top bucket's midpoint may lie beyond it); 0 when empty.
    #[must_use]
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = (Self::lower(i), Self::lower(i + 1));
                return (lo + (hi - lo) / 2).min(self.max);
            }
        }
        Self::lower(self.counts.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_bucket_precision() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 / 50_000_000.0 - 1.0).abs() < 1.0 / 32.0, "{p50}");
        assert!((p99 / 99_000_000.0 - 1.0).abs() < 1.0 / 32.0, "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), 0);
        let mut small = Histogram::default();
        small.record(7);
        assert_eq!(small.quantile(0.99), 7);
    }

    #[test]
    fn no_quantile_exceeds_the_maximum() {
        let mut h = Histogram::default();
        // 808.85 ms lies low in its bucket [805.3, 822.1) ms, whose midpoint is above it.
        for v in [1_000_000, 808_850_000] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.99), 808_850_000);
        assert_eq!(h.quantile(1.0), h.max());
    }
}
