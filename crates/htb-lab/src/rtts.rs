//! What one ping run measured: its round trips, sorted, and what was sent.

use serde_json::{Value, json};

/// RTTs of one ping run, in milliseconds, sorted.
#[derive(Clone, Debug, Default)]
pub struct Rtts {
    ms: Vec<f64>,
    sent: u32,
}

impl Rtts {
    /// The replies in iputils ping's output (`… time=12.3 ms`) of `sent` echo requests.
    #[must_use]
    pub fn from_ping_output(text: &str, sent: u32) -> Self {
        let mut ms: Vec<f64> = text
            .lines()
            .filter_map(|l| l.split("time=").nth(1))
            .filter_map(|t| t.split(' ').next()?.parse().ok())
            .collect();
        ms.sort_by(f64::total_cmp);
        Self { ms, sent }
    }

    /// The `q`-quantile (nearest rank), NaN without replies.
    #[must_use]
    pub fn quantile(&self, q: f64) -> f64 {
        if self.ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.ms.len() as f64).ceil() as usize).clamp(1, self.ms.len());
        self.ms[rank - 1]
    }

    /// Replies received.
    #[must_use]
    pub fn received(&self) -> usize {
        self.ms.len()
    }

    /// Echo requests without a reply, in percent.
    #[must_use]
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        let lost = (self.sent as usize).saturating_sub(self.ms.len());
        100.0 * lost as f64 / f64::from(self.sent)
    }

    /// p50/p95/p99/max and loss, for the JSON.
    #[must_use]
    pub fn summary(&self) -> Value {
        json!({
            "sent": self.sent,
            "received": self.received(),
            "loss_pct": self.loss_pct(),
            "p50_ms": self.quantile(0.5),
            "p95_ms": self.quantile(0.95),
            "p99_ms": self.quantile(0.99),
            "max_ms": self.quantile(1.0),
        })
    }

    /// `(rtt ms, fraction of replies at or below it)`, for a CDF.
    #[must_use]
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.ms.len() as f64;
        self.ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| (ms, (i + 1) as f64 / n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtts_from_ping_output() {
        let text = "PING 10.201.2.2 (10.201.2.2) 56(84) bytes of data.\n\
                    64 bytes from 10.201.2.2: icmp_seq=1 ttl=63 time=3.10 ms\n\
                    64 bytes from 10.201.2.2: icmp_seq=2 ttl=63 time=0.52 ms\n\
                    64 bytes from 10.201.2.2: icmp_seq=4 ttl=63 time=1.7 ms\n\
                    --- 10.201.2.2 ping statistics ---\n\
                    4 packets transmitted, 3 received, 25% packet loss, time 301ms\n\
                    rtt min/avg/max/mdev = 0.520/1.773/3.100/1.054 ms\n";
        let r = Rtts::from_ping_output(text, 4);
        assert_eq!(r.received(), 3);
        assert_eq!((r.quantile(0.5), r.quantile(1.0)), (1.7, 3.1));
        assert_eq!(r.quantile(0.01), 0.52);
        assert_eq!(r.summary()["loss_pct"], json!(25.0));
        assert_eq!(r.cdf().last(), Some(&(3.1, 1.0)));
        assert!(Rtts::default().quantile(0.5).is_nan());
    }
}
