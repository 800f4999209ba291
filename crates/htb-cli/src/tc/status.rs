//! `htb-cli status`: the data plane's counters — frames, per-port traffic and drops, XDP
//! verdicts (not a tc command: tc has no daemon to ask).

use std::io::Write;

use htb_ipc::{ReplyBody, RequestBody, Status};

use super::parse::Options;
use crate::client::{Client, ClientError};

/// Asks htbd for its status and prints it (`-j`: as JSON, `-p`: pretty).
pub(super) fn run(
    client: &mut Client,
    options: &Options,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let ReplyBody::Status(status) = client.call(RequestBody::Status {})? else {
        return Err(ClientError::Unexpected);
    };
    let text = if options.json {
        super::format::json(&status, options.pretty).map_err(|_| ClientError::Unexpected)?
    } else {
        format(&status)
    };
    // A closed stdout (`| head`) is not an error of htbd's.
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

/// The text form.
#[must_use]
pub(super) fn format(s: &Status) -> String {
    let f = &s.frames;
    let mut text = format!(
        "htbd {} (pid {})\nframes {}: free {}, in fill rings {}, in TX rings {}, held {} (queued {})\n",
        s.daemon, s.pid, f.total, f.free, f.in_fill, f.in_tx, f.held, f.queued
    );
    if let Some(g) = s.generation {
        text.push_str(&format!("generation {g} (the hash of the state it runs)\n"));
    }
    for p in &s.ports {
        text.push_str(&format!(
            "dev {}: rx {} pkts {} bytes, tx {} pkts {} bytes\n  dropped: queue {} pool {} \
             police {} no-egress {} purged {}; kernel: rx_ring_full {} fill_ring_empty {} \
             rx_dropped {} invalid {}\n",
            p.dev,
            p.rx_packets,
            p.rx_bytes,
            p.tx_packets,
            p.tx_bytes,
            p.drops_queue,
            p.drops_pool,
            p.drops_police,
            p.drops_no_egress,
            p.drops_purged,
            p.kernel_rx_ring_full,
            p.kernel_fill_ring_empty,
            p.kernel_rx_dropped,
            p.kernel_invalid
        ));
    }
    let v = &s.xdp;
    text.push_str(&format!(
        "xdp: redirected {}; to the kernel: not_ip {} malformed {} ttl {} fib {} no_neigh {} \
         unmanaged {} not_port {} no_socket {} not_ours {} stale {} ip_options {} too_big {}\n\
         data plane: {} passes, {} sleeps; {} control jobs, {} µs in all, longest {} µs ({} µs of CPU at most)\n",
        v.redirected,
        v.pass_not_ip,
        v.pass_malformed,
        v.pass_ttl,
        v.pass_fib,
        v.pass_no_neigh,
        v.pass_unmanaged,
        v.pass_not_port,
        v.pass_no_socket,
        v.pass_not_ours,
        v.pass_stale,
        v.pass_ip_options,
        v.pass_too_big,
        s.loops,
        s.sleeps,
        s.jobs,
        s.jobs_us,
        s.longest_job_us,
        s.longest_job_cpu_us
    ));
    let late = |stalls: &htb_core::StallLog| {
        format!(
            "{} late passes (over 200 µs late), {} µs in all, the latest {} µs",
            stalls.count(),
            stalls.total().as_nanos() / 1000,
            stalls.longest().as_nanos() / 1000
        )
    };
    let credit = match s.stall_credit_us {
        0 => "no stall credit".to_owned(),
        us => format!(
            "stall credit up to {} per stall",
            htb_core::Duration::from_micros(us)
        ),
    };
    text.push_str(&format!(
        "kept from forwarding: {} ({credit})\n",
        late(&s.stalls())
    ));
    if s.frames.between_workers > 0 || s.workers.len() > 1 {
        text.push_str(&format!(
            "frames between workers: {}\n",
            s.frames.between_workers
        ));
    }
    if s.workers.len() > 1 {
        if s.split_subtrees > 0 {
            text.push_str(&format!(
                "split subtrees (served by every worker): {}\n",
                s.split_subtrees
            ));
        }
        for (i, w) in s.workers.iter().enumerate() {
            let cpu = w
                .cpu
                .map_or_else(|| "any CPU".to_owned(), |c| format!("CPU {c}"));
            text.push_str(&format!(
                "worker {i} ({cpu}): {} passes, {} sleeps, {} queued, {} subtrees; frames handed \
                 to other workers {}, taken from them {}, dropped at a full handoff ring {}; {}\n",
                w.loops,
                w.sleeps,
                w.queued,
                w.subtrees,
                w.handed_out,
                w.taken_in,
                w.handoff_drops,
                late(&w.stalls)
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use htb_ipc::{FrameStatus, PortStatus};

    use super::*;

    #[test]
    fn text_names_every_counter() {
        let status = Status {
            daemon: "0.1.0".into(),
            pid: 42,
            frames: FrameStatus {
                total: 32768,
                free: 28000,
                in_fill: 4096,
                in_tx: 12,
                held: 660,
                queued: 660,
                between_workers: 0,
            },
            ports: vec![PortStatus {
                rx_packets: 7,
                drops_pool: 3,
                ..PortStatus::new("r2-0".parse().unwrap())
            }],
            ..Status::default()
        };
        let text = format(&status);
        assert!(text.starts_with("htbd 0.1.0 (pid 42)\n"), "{text}");
        assert!(
            text.contains("frames 32768: free 28000, in fill rings 4096, in TX rings 12, held 660 (queued 660)"),
            "{text}"
        );
        assert!(text.contains("dev r2-0: rx 7 pkts 0 bytes"), "{text}");
        assert!(text.contains("pool 3 "), "{text}");
        assert_eq!(status.frames.in_use(), 672);
        assert!(
            !text.contains("worker"),
            "one worker: no worker lines\n{text}"
        );
        let stalls = |us: &[u64]| {
            let mut log = htb_core::StallLog::default();
            for &u in us {
                log.note(htb_core::Duration::from_micros(u));
            }
            log
        };
        let two = Status {
            workers: vec![
                htb_ipc::WorkerStatus {
                    cpu: Some(0),
                    loops: 5,
                    subtrees: 2,
                    handed_out: 9,
                    stalls: stalls(&[2800, 300]),
                    ..htb_ipc::WorkerStatus::default()
                },
                htb_ipc::WorkerStatus {
                    stalls: stalls(&[400]),
                    ..htb_ipc::WorkerStatus::default()
                },
            ],
            stall_credit_us: 10_000,
            split_subtrees: 3,
            generation: Some(htb_ipc::Generation(0x0123_4567_89ab_cdef)),
            ..status
        };
        let text = format(&two);
        assert!(
            text.contains("split subtrees (served by every worker): 3\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "worker 0 (CPU 0): 5 passes, 0 sleeps, 0 queued, 2 subtrees; frames handed \
                 to other workers 9"
            ) && text.contains("worker 1 (any CPU)"),
            "{text}"
        );
        assert!(
            text.contains(
                "kept from forwarding: 3 late passes (over 200 µs late), 3500 µs in all, the \
                 latest 2800 µs (stall credit up to 10ms per stall)\n"
            ) && text
                .contains("2 late passes (over 200 µs late), 3100 µs in all, the latest 2800 µs\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngeneration 0123456789abcdef (the hash of the state it runs)\n"),
            "{text}"
        );
    }
}
