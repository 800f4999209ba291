//! Feeds [`History`](super::history::History) once a second: every port's counters from the
//! data plane's status, and the tracked classes' counters in one statistics copy per port.
//! It runs only while the listener does, and costs the data plane one job per port a second
//! (at most [`MAX_TRACKED`](super::history::MAX_TRACKED) classes' counters).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Web;
use super::api::{ApiError, ask};
use super::history::Sample;
use crate::control::Query;

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_secs(1);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Samples until the control task is gone.
pub async fn run(web: Arc<Web>) {
    let mut tick = tokio::time::interval(INTERVAL);
    // A late tick (a busy control task) is skipped, not made up in a burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if !once(&web).await {
            return;
        }
    }
}

/// One round; `false` once htbd is stopping.
async fn once(web: &Web) -> bool {
    match ask(web, Query::Status).await {
        Ok(status) => {
            let at_ms = unix_ms();
            let mut history = web.history();
            for p in &status.ports {
                history.port(
                    &p.dev,
                    Sample {
                        at_ms,
                        bytes: p.tx_bytes,
                        packets: p.tx_packets,
                        drops: p.drops_queue
                            + p.drops_pool
                            + p.drops_police
                            + p.drops_no_egress
                            + p.drops_purged,
                        rx_bytes: p.rx_bytes,
                        // Frames queued are counted per data plane, not per port.
                        backlog: 0,
                        rtt_p50_us: 0,
                    },
                );
            }
        }
        Err(ApiError::Stopping) => return false,
        Err(e) => tracing::debug!("console sampler: status failed: {e}"),
    }
    let tracked = web.history().tracked();
    if tracked.is_empty() {
        return true;
    }
    match ask(web, |tx| Query::Sample(tracked.clone(), tx)).await {
        Ok(stats) => {
            let at_ms = unix_ms();
            let mut history = web.history();
            for (key, stats) in tracked.iter().zip(stats) {
                let sample = stats.map(|s| Sample {
                    at_ms,
                    bytes: s.queue.bytes,
                    packets: s.queue.packets,
                    drops: s.queue.drops,
                    rx_bytes: 0,
                    backlog: u32::try_from(s.queue.backlog_bytes).unwrap_or(u32::MAX),
                    rtt_p50_us: s.rtt.and_then(|r| r.p50_us).unwrap_or(0),
                });
                history.class(key, sample);
            }
        }
        Err(ApiError::Stopping) => return false,
        Err(e) => tracing::debug!("console sampler: class counters failed: {e}"),
    }
    true
}
