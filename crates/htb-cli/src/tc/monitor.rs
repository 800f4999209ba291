//! `htb-cli monitor`: per-class rates, refreshed in place (like `top`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use htb_ipc::{Object, Show};

use super::parse::Monitor;
use crate::client::{Client, ClientError};

/// Polls class statistics every `interval` and prints a table of rates.
pub(super) fn run(
    client: &mut Client,
    m: &Monitor,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let terminal = std::io::stdout().is_terminal();
    let mut previous: HashMap<(htb_ipc::InterfaceName, htb_core::ClassId), (u64, u64, u64)> =
        HashMap::new();
    let mut last = Instant::now();
    let mut round = 0u64;
    loop {
        let show = Show {
            object: Some(Object::Class),
            dev: m.dev.clone(),
            stats: true,
            ..Show::default()
        };
        let shown = client.show(show)?;
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        last = now;
        let mut text = String::new();
        if terminal {
            text.push_str("\x1b[H\x1b[2J");
        }
        text.push_str(&format!(
            "htb-cli monitor: every {}s{}\n{:<8} {:<10} {:<10} {:>12} {:>12} {:>12} {:>10} {:>9} {:>10} {:>10}\n",
            m.interval,
            if terminal { " (Ctrl-C to quit)" } else { "" },
            "dev", "class", "parent", "rate", "ceil", "sent bit/s", "pkt/s", "dropped", "backlog", "borrowed"
        ));
        for c in &shown.classes {
            let s = c.stats.unwrap_or_default();
            let key = (c.dev.clone(), c.id);
            let (bps, pps) = match previous.get(&key) {
                Some(&(bytes, packets, _)) if round > 0 && dt > 0.0 => (
                    format!(
                        "{:.0}",
                        (s.queue.bytes.saturating_sub(bytes) * 8) as f64 / dt
                    ),
                    format!("{:.0}", s.queue.packets.saturating_sub(packets) as f64 / dt),
                ),
                _ => ("-".into(), "-".into()),
            };
            previous.insert(key, (s.queue.bytes, s.queue.packets, s.queue.drops));
            text.push_str(&format!(
                "{:<8} {:<10} {:<10} {:>12} {:>12} {:>12} {:>10} {:>9} {:>10} {:>10}\n",
                c.dev,
                c.id,
                c.parent
                    .map_or_else(|| "root".to_owned(), |p| p.to_string()),
                super::format::rate_text(c.rate.bits_per_sec(), false),
                super::format::rate_text(c.ceil.bits_per_sec(), false),
                bps,
                pps,
                s.queue.drops,
                format!("{}p", s.queue.backlog_packets),
                s.borrowed
            ));
        }
        if !terminal {
            text.push('\n');
        }
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        round += 1;
        if m.count > 0 && round >= m.count {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(m.interval));
    }
}
