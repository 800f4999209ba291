//! The flow exporter: a thread of its own, off the data plane's, that empties the export ring
//! of ended flow records ([`htb_xdp::flow_table`]) and sends them to the collector as IPFIX
//! (RFC 7011) over UDP, templates first and again every `template_refresh` — over UDP a
//! collector that restarted has forgotten them (RFC 7011 §8.4). Records wait at most
//! [`BATCH_WAIT`] or until [`BATCH_RECORDS`] have gathered.
//!
//! A collector that is down costs the records sent meanwhile (counted as send errors, as a
//! UDP exporter cannot know more), never the data plane: the ring in between is bounded, and
//! a full one loses records on the data plane's side, counted there.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use htb_xdp::flow_table::{FlowEnd, FlowRecord};

use crate::config::{FlowsConfig, IpfixConfig};

/// The longest a record waits for others to share its message.
pub const BATCH_WAIT: Duration = Duration::from_millis(100);

/// Records that make a batch worth sending at once.
pub const BATCH_RECORDS: usize = 256;

/// The largest message sent: within a 1500-byte MTU with IPv6 and UDP headers.
const MAX_MESSAGE: usize = 1400;

/// What the exporter did, for `htb-cli status` and `/metrics`.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Records sent.
    pub records: AtomicU64,
    /// Messages sent.
    pub messages: AtomicU64,
    /// Messages the socket refused.
    pub send_errors: AtomicU64,
}

/// `[flows]` as running: its configuration and the exporter's counters.
#[derive(Clone, Debug)]
pub struct FlowExportState {
    /// The configuration.
    pub config: FlowsConfig,
    /// The exporter's counters.
    pub counters: Arc<ExportCounters>,
}

/// The exporter's thread.
#[derive(Debug)]
pub struct FlowExporter {
    state: FlowExportState,
    thread: JoinHandle<()>,
}

impl FlowExporter {
    /// Starts the thread on `records`: to `config.ipfix`'s collector, or (without one) only
    /// emptying the ring. `ports` are the data plane's ports by index with their ifindex;
    /// `epoch` is when the data plane's clock read 0.
    ///
    /// # Errors
    /// When the UDP socket cannot be made or the thread cannot start.
    pub fn start(
        records: Receiver<FlowRecord>,
        config: FlowsConfig,
        ports: Vec<u32>,
        epoch: Instant,
    ) -> std::io::Result<Self> {
        let counters = Arc::new(ExportCounters::default());
        let sender = config
            .ipfix
            .map(|ipfix| Sender::new(ipfix, Arc::clone(&counters)))
            .transpose()?;
        let clock = Clock::new(epoch);
        let sampling = config.table.sampling;
        let thread = std::thread::Builder::new()
            .name("htbd-flows".into())
            .spawn(move || run(&records, sender, &ports, &clock, sampling))?;
        Ok(Self {
            state: FlowExportState { config, counters },
            thread,
        })
    }

    /// Its configuration and counters.
    #[must_use]
    pub fn state(&self) -> FlowExportState {
        self.state.clone()
    }

    /// Waits for the thread, which ends once the data plane is gone and the ring is empty
    /// (the records the data plane forced out at its stop are sent first).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

/// The data plane's clock against the wall clock.
struct Clock {
    epoch: Instant,
}

impl Clock {
    fn new(epoch: Instant) -> Self {
        Self { epoch }
    }

    /// Unix ms now.
    fn now_unix_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Unix ms of the data plane's `ns`.
    fn unix_ms(&self, ns: u64) -> u64 {
        let at = self.epoch + Duration::from_nanos(ns);
        let ago = Instant::now().saturating_duration_since(at);
        Self::now_unix_ms().saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX))
    }
}

/// The socket and the IPFIX exporter's state.
struct Sender {
    socket: UdpSocket,
    exporter: htb_ipfix::Exporter,
    counters: Arc<ExportCounters>,
    collector: SocketAddr,
}

impl Sender {
    fn new(ipfix: IpfixConfig, counters: Arc<ExportCounters>) -> std::io::Result<Self> {
        let local: SocketAddr = if ipfix.collector.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local)?;
        let exporter = htb_ipfix::Exporter::new(htb_ipfix::ExporterConfig {
            observation_domain: ipfix.observation_domain,
            template_refresh: ipfix.template_refresh,
            max_message: MAX_MESSAGE,
        })
        .map_err(std::io::Error::other)?;
        Ok(Self {
            socket,
            exporter,
            counters,
            collector: ipfix.collector,
        })
    }

    fn send(&self, message: &[u8]) {
        match self.socket.send_to(message, self.collector) {
            Ok(_) => {
                self.counters.messages.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let errors = self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                // Once, then every 1000th: a collector that is away stays away a while.
                if errors.is_multiple_of(1000) {
                    tracing::warn!(
                        "flow export to {} failed ({e}); {} messages lost so far",
                        self.collector,
                        errors + 1
                    );
                }
            }
        }
    }

    fn export(&mut self, records: &[htb_ipfix::FlowRecord]) {
        let now = Clock::now_unix_ms();
        for message in self.exporter.export(now, records) {
            self.send(&message);
        }
        self.counters
            .records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }

    fn refresh(&mut self) {
        if let Some(templates) = self.exporter.templates_due(Clock::now_unix_ms()) {
            self.send(&templates);
        }
    }
}

/// The thread: batches records and sends them until the data plane is gone.
fn run(
    records: &Receiver<FlowRecord>,
    mut sender: Option<Sender>,
    ports: &[u32],
    clock: &Clock,
    sampling: u32,
) {
    if let Some(s) = sender.as_mut() {
        s.refresh();
    }
    let mut batch = Vec::with_capacity(BATCH_RECORDS);
    let mut oldest: Option<Instant> = None;
    loop {
        let wait = oldest.map_or(BATCH_WAIT, |t| BATCH_WAIT.saturating_sub(t.elapsed()));
        let ended = match records.recv_timeout(wait) {
            Ok(record) => {
                batch.push(record);
                oldest.get_or_insert_with(Instant::now);
                batch.extend(records.try_iter().take(BATCH_RECORDS * 4));
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let due = oldest.is_some_and(|t| t.elapsed() >= BATCH_WAIT);
        if let Some(s) = sender.as_mut() {
            if !batch.is_empty() && (ended || due || batch.len() >= BATCH_RECORDS) {
                let converted: Vec<htb_ipfix::FlowRecord> = batch
                    .iter()
                    .map(|r| ipfix_record(r, ports, clock, sampling))
                    .collect();
                s.export(&converted);
                batch.clear();
                oldest = None;
            }
            s.refresh();
        } else {
            batch.clear();
            oldest = None;
        }
        if ended {
            return;
        }
    }
}

/// A data-plane record as IPFIX carries it.
fn ipfix_record(
    r: &FlowRecord,
    ports: &[u32],
    clock: &Clock,
    sampling: u32,
) -> htb_ipfix::FlowRecord {
    let ifindex = |p: u16| ports.get(usize::from(p)).copied().unwrap_or(0);
    htb_ipfix::FlowRecord {
        src: r.key.src,
        dst: r.key.dst,
        proto: r.key.proto,
        src_port: r.key.sport,
        dst_port: r.key.dport,
        vlan: r.key.vlan,
        tcp_flags: r.tcp_flags,
        octets: r.bytes,
        packets: r.packets,
        start_ms: clock.unix_ms(r.first_ns),
        end_ms: clock.unix_ms(r.last_ns),
        end_reason: match r.end {
            Some(FlowEnd::Idle) | None => htb_ipfix::EndReason::IdleTimeout,
            Some(FlowEnd::Active) => htb_ipfix::EndReason::ActiveTimeout,
            Some(FlowEnd::EndOfFlow) => htb_ipfix::EndReason::EndOfFlow,
            Some(FlowEnd::Forced) => htb_ipfix::EndReason::ForcedEnd,
            Some(FlowEnd::Evicted) => htb_ipfix::EndReason::LackOfResources,
        },
        ingress_if: ifindex(r.key.ingress),
        egress_if: ifindex(r.key.egress),
        class: r.class,
        rtt_min_us: r
            .rtt_min_ns
            .map(|n| u32::try_from(n / 1000).unwrap_or(u32::MAX)),
        rtt_median_us: r
            .rtt_median_ns
            .map(|n| u32::try_from(n / 1000).unwrap_or(u32::MAX)),
        retransmits: r.retransmits,
        leaf_drops: r.leaf_drops,
        sampling_interval: sampling,
    }
}
