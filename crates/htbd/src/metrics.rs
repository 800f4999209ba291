//! Prometheus metrics (`[daemon] http = "127.0.0.1:9469"`, off by default): `GET /metrics`
//! answers in the OpenMetrics text format, encoded with the `prometheus-client` crate.
//!
//! A scrape is one call to the control task ([`Scrape`], gathered like `class show -s`: the
//! data plane copies the statistics of [`STATS_CHUNK`](crate::control) classes per job, between
//! two packet batches, so a scrape of 100 000 classes never stops forwarding for more than one
//! chunk's copy), then encoded on a blocking thread ([`exposition`]) and sent by the HTTP
//! listener ([`crate::web`]) in chunks as it is encoded ([`chunks`]). Requests on the control socket are counted and timed as they are served
//! ([`requests`]).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `htb_class_bytes_total`, `htb_class_packets_total` | counter | `dev`, `class` |
//! | `htb_class_drops_total`, `htb_class_overlimits_total` | counter | `dev`, `class` |
//! | `htb_class_lended_packets_total`, `htb_class_borrowed_packets_total` | counter | `dev`, `class` |
//! | `htb_class_backlog_bytes`, `htb_class_backlog_packets` | gauge | `dev`, `class` |
//! | `htb_class_rate_bits_per_second`, `htb_class_ceil_bits_per_second` | gauge | `dev`, `class`, `parent` |
//! | `htb_qdisc_backlog_packets`, `htb_qdisc_direct_packets_total` | gauge, counter | `dev` |
//! | `htb_port_{rx,tx}_{packets,bytes}_total` | counter | `dev` |
//! | `htb_port_drops_total` | counter | `dev`, `reason` (`queue`, `pool`, `no_egress`, `purged`) |
//! | `htb_port_socket_drops_total` | counter | `dev`, `reason` (`rx_ring_full`, `fill_ring_empty`, `rx_dropped`, `invalid`) |
//! | `htb_xdp_verdicts_total` | counter | `verdict` (`redirected`, `pass_not_ip`, …) |
//! | `htb_frames` | gauge | `state` (`free`, `in_fill`, `in_tx`, `held`) |
//! | `htb_frames_queued` | gauge | |
//! | `htb_dataplane_loops_total`, `htb_dataplane_sleeps_total` | counter | |
//! | `htb_dataplane_jobs_total`, `htb_dataplane_job_seconds_total` | counter | |
//! | `htb_dataplane_longest_job_seconds` | gauge | |
//! | `htb_dataplane_longest_job_cpu_seconds` | gauge | |
//! | `htb_dataplane_late_seconds_total` | counter | |
//! | `htb_ipc_requests_total` | counter | `request` (`ping`, `show`, `apply`, `status`, `stage`, `explain`), `outcome` (`ok`, `error`) |
//! | `htb_ipc_request_duration_seconds` | histogram | `request` |
//! | `htb_scrape_gather_seconds` | gauge | |
//! | `htb_generation_info` | gauge (1) | `generation`: the hash of the state the box runs |
//! | `htb_one_way_classes` | gauge | classes on two ports carried one way since the previous scrape ([`one_way`]) |

pub mod chunks;
pub mod exposition;
pub mod one_way;
pub mod requests;

use htb_core::{ClassId, ClassStats, SchedulerStats};
use htb_xdp::EngineStats;

/// Everything one scrape reports.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// The data plane's counters: ports, frames, XDP verdicts.
    pub engine: EngineStats,
    /// Per port with HTB trees: the schedulers' and the classes' statistics.
    pub trees: Vec<TreeScrape>,
    /// How long gathering took, in seconds.
    pub gather_seconds: f64,
    /// The generation of the state the box runs.
    pub generation: Option<htb_ipc::Generation>,
    /// Classes carried one way since the previous scrape ([`one_way`]; `None`: not compared).
    pub one_way_classes: Option<usize>,
    /// The flow tables and their exporter (`None`: no `[flows]`).
    pub flows: Option<Box<htb_ipc::FlowStatus>>,
}

/// One port's trees (one, or one per `mq` class).
#[derive(Clone, Debug)]
pub struct TreeScrape {
    /// The port.
    pub dev: String,
    /// Each tree's scheduler totals.
    pub schedulers: Vec<SchedulerStats>,
    /// Every class.
    pub classes: Vec<ClassScrape>,
}

/// One class.
#[derive(Clone, Copy, Debug)]
pub struct ClassScrape {
    /// Its id.
    pub id: ClassId,
    /// Its parent (`None`: a root class).
    pub parent: Option<ClassId>,
    /// Its configured rate and ceil in bit/s.
    pub rate: u64,
    /// Ceil in bit/s.
    pub ceil: u64,
    /// The data plane's counters.
    pub stats: ClassStats,
    /// Its TCP round trips, where its port measures them.
    pub rtt: Option<htb_ipc::RttStats>,
}
