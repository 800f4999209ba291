//! A [`Scrape`] in the OpenMetrics text format: a `prometheus-client` collector that encodes
//! the gathered values directly (100 000 classes are not registered as 800 000 metric objects
//! per scrape, only written).

use std::fmt::{self, Write};

use htb_core::ClassId;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::requests::RequestMetrics;
use super::{ClassScrape, Scrape};

/// The whole exposition as one text: the scrape and the request counters.
///
/// # Errors
/// Only if formatting fails (it writes to a `String`).
pub fn encode(scrape: Scrape, requests: &RequestMetrics) -> Result<String, fmt::Error> {
    let mut out = String::new();
    encode_into(&mut out, scrape, requests)?;
    Ok(out)
}

/// The whole exposition, written to `out` as it is encoded (the HTTP listener sends it in
/// chunks: [`super::chunks`]).
///
/// # Errors
/// When `out` refuses a write (the client went away).
pub fn encode_into(out: &mut impl Write, scrape: Scrape, requests: &RequestMetrics) -> fmt::Result {
    let mut registry = Registry::default();
    requests.register(&mut registry);
    registry.register_collector(Box::new(ScrapeCollector(scrape)));
    text::encode(out, &registry)
}

#[derive(Debug)]
struct ScrapeCollector(Scrape);

/// One metric family: its descriptor, then a value per label set.
fn family<L, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result
where
    L: prometheus_client::encoding::EncodeLabelSet,
    M: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A metric without labels.
fn single(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> fmt::Result {
    let descriptor = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(descriptor)
}

type ClassLabels<'a> = [(&'static str, &'a str); 2];

/// A metric read off a struct: name, help, the value.
type Field<T> = (&'static str, &'static str, fn(&T) -> u64);

/// A class with its label values written out once (not once per metric), inline: two heap
/// strings a class were 2 000 000 small allocations in a scrape of a million classes, which
/// the memory lock kept resident in the encoding thread's arena.
struct Labeled<'a> {
    dev: &'a str,
    id: IdText,
    parent: IdText,
    class: &'a ClassScrape,
}

/// A class id's text (`ffff:ffff` at the longest) or `root`, without a heap allocation.
struct IdText {
    bytes: [u8; 9],
    len: u8,
}

impl IdText {
    /// `id` as tc writes it, `root` for none.
    fn new(id: Option<ClassId>) -> Self {
        let mut text = Self {
            bytes: [0; 9],
            len: 0,
        };
        // Nine bytes hold every id (`ClassId`'s Display is two hex numbers of up to four
        // digits) and `root`, so the write cannot fail.
        let _ = match id {
            Some(id) => write!(text, "{id}"),
            None => text.write_str("root"),
        };
        text
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

impl Write for IdText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        let into = self.bytes.get_mut(start..end).ok_or(fmt::Error)?;
        into.copy_from_slice(s.as_bytes());
        self.len = u8::try_from(end).map_err(|_| fmt::Error)?;
        Ok(())
    }
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.0;
        let classes: Vec<Labeled<'_>> = s
            .trees
            .iter()
            .flat_map(|t| {
                t.classes.iter().map(|c| Labeled {
                    dev: &t.dev,
                    id: IdText::new(Some(c.id)),
                    parent: IdText::new(c.parent),
                    class: c,
                })
            })
            .collect();
        let per_class = |get: fn(&ClassScrape) -> u64| {
            classes.iter().map(move |l| {
                let labels: ClassLabels<'_> = [("dev", l.dev), ("class", l.id.as_str())];
                (labels, get(l.class))
            })
        };
        let counters: [Field<ClassScrape>; 6] = [
            (
                "htb_class_bytes",
                "Bytes sent by the class (inner classes: their subtree)",
                |c| c.stats.queue.bytes,
            ),
            ("htb_class_packets", "Packets sent by the class", |c| {
                c.stats.queue.packets
            }),
            (
                "htb_class_drops",
                "Packets the class's leaf dropped (full, AQM) or a change purged",
                |c| c.stats.queue.drops,
            ),
            (
                "htb_class_overlimits",
                "Times the class hit its ceil (tc's overlimits)",
                |c| c.stats.queue.overlimits,
            ),
            (
                "htb_class_lended_packets",
                "Packets sent on the class's own rate (tc's lended)",
                |c| c.stats.lends,
            ),
            (
                "htb_class_borrowed_packets",
                "Packets sent on tokens borrowed from an ancestor (tc's borrowed)",
                |c| c.stats.borrows,
            ),
        ];
        for (name, help, get) in counters {
            let samples = per_class(get).map(|(l, v)| (l, ConstCounter::new(v)));
            family(&mut encoder, name, help, MetricType::Counter, samples)?;
        }
        let gauges: [Field<ClassScrape>; 2] = [
            (
                "htb_class_backlog_bytes",
                "Bytes queued in the class's leaf",
                |c| c.stats.queue.backlog_bytes,
            ),
            (
                "htb_class_backlog_packets",
                "Packets queued in the class's leaf",
                |c| c.stats.queue.backlog_packets,
            ),
        ];
        for (name, help, get) in gauges {
            let samples = per_class(get).map(|(l, v)| (l, gauge(v)));
            family(&mut encoder, name, help, MetricType::Gauge, samples)?;
        }
        let configured: [Field<ClassScrape>; 2] = [
            (
                "htb_class_rate_bits_per_second",
                "The class's configured rate",
                |c| c.rate,
            ),
            (
                "htb_class_ceil_bits_per_second",
                "The class's configured ceil",
                |c| c.ceil,
            ),
        ];
        // TCP round trips: only the classes of ports that measure them, with samples.
        let measured = || classes.iter().filter_map(|l| Some((l, l.class.rtt?)));
        let quantiles = measured().flat_map(|(l, r)| {
            [("0.5", r.p50_us), ("0.95", r.p95_us)]
                .into_iter()
                .filter_map(move |(q, us)| {
                    let labels = [("dev", l.dev), ("class", l.id.as_str()), ("quantile", q)];
                    Some((labels, ConstGauge::new(f64::from(us?) / 1e6)))
                })
        });
        family(
            &mut encoder,
            "htb_class_rtt_seconds",
            "TCP round trip from htbd to the far end and back, of the class's last samples \
             (quantile 0.5 and 0.95)",
            MetricType::Gauge,
            quantiles,
        )?;
        let rtt_counters: [Field<htb_ipc::RttStats>; 2] = [
            (
                "htb_class_rtt_samples",
                "TCP round trips measured in the class",
                |r| r.samples,
            ),
            (
                "htb_class_tcp_retransmits",
                "TCP segments of the class sent again (below the highest sequence seen)",
                |r| r.retransmits,
            ),
        ];
        for (name, help, get) in rtt_counters {
            let samples = measured().map(|(l, r)| {
                let labels: ClassLabels<'_> = [("dev", l.dev), ("class", l.id.as_str())];
                (labels, ConstCounter::new(get(&r)))
            });
            family(&mut encoder, name, help, MetricType::Counter, samples)?;
        }
        for (name, help, get) in configured {
            let samples = classes.iter().map(|l| {
                let labels = [
                    ("dev", l.dev),
                    ("class", l.id.as_str()),
                    ("parent", l.parent.as_str()),
                ];
                (labels, gauge(get(l.class)))
            });
            family(&mut encoder, name, help, MetricType::Gauge, samples)?;
        }
        family(
            &mut encoder,
            "htb_qdisc_backlog_packets",
            "Packets queued in the port's HTB trees (leaves and the direct queues)",
            MetricType::Gauge,
            s.trees.iter().map(|t| {
                let q: u64 = t
                    .schedulers
                    .iter()
                    .map(|s| s.qlen + u64::from(s.direct_qlen))
                    .sum();
                ([("dev", t.dev.as_str())], gauge(q))
            }),
        )?;
        family(
            &mut encoder,
            "htb_qdisc_direct_packets",
            "Packets sent through the direct queue (no class matched, no default)",
            MetricType::Counter,
            s.trees.iter().map(|t| {
                let direct: u64 = t.schedulers.iter().map(|s| s.direct_packets).sum();
                ([("dev", t.dev.as_str())], ConstCounter::new(direct))
            }),
        )?;
        self.encode_ports(&mut encoder)?;
        self.encode_engine(&mut encoder)
    }
}

impl ScrapeCollector {
    fn encode_ports(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let ports = &self.0.engine.ports;
        let counters: [Field<htb_xdp::PortStats>; 4] = [
            (
                "htb_port_rx_packets",
                "Frames received from the port's sockets",
                |p| p.rx_packets,
            ),
            (
                "htb_port_rx_bytes",
                "Bytes received from the port's sockets",
                |p| p.rx_bytes,
            ),
            ("htb_port_tx_packets", "Frames sent out of the port", |p| {
                p.tx_packets
            }),
            ("htb_port_tx_bytes", "Bytes sent out of the port", |p| {
                p.tx_bytes
            }),
        ];
        for (name, help, get) in counters {
            let samples = ports
                .iter()
                .map(|p| ([("dev", p.name.as_str())], ConstCounter::new(get(p))));
            family(encoder, name, help, MetricType::Counter, samples)?;
        }
        family(
            encoder,
            "htb_port_drops",
            "Frames htbd dropped, by reason: queue (the scheduler: full, AQM), pool (frames \
             nearly exhausted), police (a filter's policer), no_egress (no way out), purged (a change \
             deleted their queue)",
            MetricType::Counter,
            ports.iter().flat_map(|p| {
                [
                    ("queue", p.drops_queue),
                    ("pool", p.drops_pool),
                    ("police", p.drops_police),
                    ("no_egress", p.drops_no_egress),
                    ("purged", p.drops_purged),
                ]
                .map(|(reason, v)| {
                    (
                        [("dev", p.name.as_str()), ("reason", reason)],
                        ConstCounter::new(v),
                    )
                })
            }),
        )?;
        family(
            encoder,
            "htb_port_socket_drops",
            "The kernel's AF_XDP socket counters (XDP_STATISTICS), summed over the port's sockets",
            MetricType::Counter,
            ports.iter().flat_map(|p| {
                [
                    ("rx_ring_full", p.xdp.rx_ring_full),
                    ("fill_ring_empty", p.xdp.rx_fill_ring_empty),
                    ("rx_dropped", p.xdp.rx_dropped),
                    ("invalid", p.xdp.rx_invalid + p.xdp.tx_invalid),
                ]
                .map(|(reason, v)| {
                    (
                        [("dev", p.name.as_str()), ("reason", reason)],
                        ConstCounter::new(v),
                    )
                })
            }),
        )
    }

    fn encode_engine(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let e = &self.0.engine;
        let v = e.verdicts;
        family(
            encoder,
            "htb_xdp_verdicts",
            "What the XDP program did with the frames it saw: redirected to htbd, or passed to \
             the kernel and why",
            MetricType::Counter,
            [
                ("redirected", v.redirected),
                ("pass_not_ip", v.pass_not_ip),
                ("pass_malformed", v.pass_malformed),
                ("pass_ttl", v.pass_ttl),
                ("pass_fib", v.pass_fib),
                ("pass_no_neigh", v.pass_no_neigh),
                ("pass_unmanaged", v.pass_unmanaged),
                ("pass_not_port", v.pass_not_port),
                ("pass_no_socket", v.pass_no_socket),
                ("pass_not_ours", v.pass_not_ours),
                ("pass_stale", v.pass_stale),
                ("pass_ip_options", v.pass_ip_options),
                ("pass_too_big", v.pass_too_big),
            ]
            .map(|(verdict, n)| ([("verdict", verdict)], ConstCounter::new(n))),
        )?;
        let f = e.frames;
        family(
            encoder,
            "htb_frames",
            "Where the UMEM's frames are: free, in_fill (lent to the kernel's fill and RX \
             rings), in_tx (in TX rings), held (by the data plane)",
            MetricType::Gauge,
            [
                ("free", f.free),
                ("in_fill", f.in_fill),
                ("in_tx", f.in_tx),
                ("held", f.with_caller),
            ]
            .map(|(state, n)| ([("state", state)], gauge(u64::from(n)))),
        )?;
        single(
            encoder,
            "htb_frames_queued",
            "Packets queued in the schedulers",
            &gauge(e.queued),
        )?;
        single(
            encoder,
            "htb_dataplane_loops",
            "Passes of the data-plane loop",
            &ConstCounter::new(e.loops),
        )?;
        single(
            encoder,
            "htb_dataplane_sleeps",
            "Times the data-plane loop slept until its next event",
            &ConstCounter::new(e.sleeps),
        )?;
        single(
            encoder,
            "htb_dataplane_jobs",
            "Control jobs (changes, statistics copies) the data plane ran between packet batches",
            &ConstCounter::new(e.jobs.count),
        )?;
        single(
            encoder,
            "htb_dataplane_job_seconds",
            "Time the data plane spent in control jobs (no packet moves meanwhile)",
            &ConstCounter::new(e.jobs.total_ns as f64 / 1e9),
        )?;
        single(
            encoder,
            "htb_dataplane_longest_job_seconds",
            "The longest control job since the start: the longest forwarding stall a change caused",
            &ConstGauge::new(e.jobs.longest_ns as f64 / 1e9),
        )?;
        single(
            encoder,
            "htb_dataplane_longest_job_cpu_seconds",
            "The most CPU time one control job took since the start (its own work, without time the host took the CPU away)",
            &ConstGauge::new(e.jobs.longest_cpu_ns as f64 / 1e9),
        )?;
        single(
            encoder,
            "htb_dataplane_late_seconds",
            "How late data-plane passes began beyond 200 µs after they were due, summed over the workers: time the host, the kernel, a control job or a long pass kept them from forwarding",
            &ConstCounter::new(
                e.workers
                    .iter()
                    .map(|w| w.stalls.total().as_nanos())
                    .sum::<u64>() as f64
                    / 1e9,
            ),
        )?;
        single(
            encoder,
            "htb_scrape_gather_seconds",
            "Time this scrape took to gather the data plane's statistics",
            &ConstGauge::new(self.0.gather_seconds),
        )?;
        family(
            encoder,
            "htb_generation_info",
            "The generation (hash) of the state this box runs: boxes holding the same \
             subscribers show the same one",
            MetricType::Gauge,
            self.0
                .generation
                .map(|g| ([("generation", g.to_string())], gauge(1))),
        )?;
        if let Some(n) = self.0.one_way_classes {
            single(
                encoder,
                "htb_one_way_classes",
                "Classes on two ports that carried packets one way only since the previous \
                 scrape: the other direction took another path (routes and shaping disagree)",
                &gauge(n as u64),
            )?;
        }
        if let Some(f) = &self.0.flows {
            single(
                encoder,
                "htb_flows_live",
                "Flow records the data plane keeps now ([flows])",
                &gauge(f.live),
            )?;
            for (name, help, value) in [
                ("htb_flows_started", "Flow records started", f.started),
                (
                    "htb_flows_ended",
                    "Flow records ended (idle, active timeout, FIN/RST, evicted, forced) and handed to the exporter",
                    f.ended,
                ),
                (
                    "htb_flows_evicted",
                    "Flow records ended early because a new flow needed the place (the table is too small)",
                    f.evicted,
                ),
                (
                    "htb_flows_ring_drops",
                    "Ended flow records lost because the export ring was full",
                    f.ring_drops,
                ),
                (
                    "htb_flows_exported",
                    "Flow records sent to the IPFIX collector",
                    f.exported,
                ),
                (
                    "htb_flow_export_messages",
                    "IPFIX messages sent to the collector",
                    f.messages,
                ),
                (
                    "htb_flow_export_errors",
                    "IPFIX messages the socket refused (their records are lost)",
                    f.send_errors,
                ),
            ] {
                single(encoder, name, help, &ConstCounter::new(value))?;
            }
        }
        Ok(())
    }
}

/// A gauge from a count (Prometheus values are `f64`/`i64`; counts above 2^63 do not occur).
fn gauge(v: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use htb_core::{ClassId, ClassStats, Mode, QueueCounters, SchedulerStats};
    use htb_xdp::{EngineStats, PortStats};

    use super::*;

    #[test]
    fn class_ids_are_written_inline_as_tc_writes_them() {
        for (id, text) in [
            (Some(ClassId::new(1, 0x10)), "1:10"),
            (Some(ClassId::new(0xffff, 0xffff)), "ffff:ffff"),
            (None, "root"),
        ] {
            assert_eq!(IdText::new(id).as_str(), text);
            assert_eq!(id.map(|i| i.to_string()).as_deref().unwrap_or("root"), text);
        }
    }
    use crate::metrics::TreeScrape;
    use crate::metrics::requests::{Outcome, Request};

    fn class(id: &str, parent: Option<&str>, bytes: u64) -> ClassScrape {
        let id: ClassId = id.parse().unwrap();
        ClassScrape {
            id,
            parent: parent.map(|p| p.parse().unwrap()),
            rate: 5_000_000,
            ceil: 10_000_000,
            stats: ClassStats {
                id,
                queue: QueueCounters {
                    bytes,
                    packets: 7,
                    drops: 2,
                    overlimits: 3,
                    requeues: 0,
                    backlog_bytes: 1500,
                    backlog_packets: 1,
                },
                lends: 5,
                borrows: 2,
                giants: 0,
                tokens: 0,
                ctokens: 0,
                mode: Mode::CanSend,
                level: 0,
            },
            rtt: None,
        }
    }

    #[test]
    fn a_scrape_reads_as_openmetrics_with_dev_and_class_labels() {
        let mut engine = EngineStats::default();
        engine.ports.push(PortStats {
            name: "r2".into(),
            rx_packets: 11,
            drops_pool: 4,
            ..PortStats::default()
        });
        engine.verdicts.redirected = 99;
        engine.frames.free = 4000;
        let scrape = Scrape {
            engine,
            trees: vec![TreeScrape {
                dev: "r2".into(),
                schedulers: vec![SchedulerStats::default()],
                classes: vec![
                    class("1:1", None, 0),
                    ClassScrape {
                        rtt: Some(htb_ipc::RttStats {
                            p50_us: Some(12_500),
                            p95_us: Some(30_000),
                            samples: 40,
                            retransmits: 3,
                        }),
                        ..class("1:10", Some("1:1"), 12345)
                    },
                ],
            }],
            gather_seconds: 0.25,
            generation: Some(htb_ipc::Generation(0xabc)),
            one_way_classes: Some(3),
            flows: Some(Box::new(htb_ipc::FlowStatus {
                live: 12,
                evicted: 4,
                exported: 90,
                ..htb_ipc::FlowStatus::default()
            })),
        };
        let requests = RequestMetrics::default();
        requests.observe(
            Request::apply,
            Outcome::ok,
            std::time::Duration::from_millis(3),
        );
        requests.observe(
            Request::show,
            Outcome::error,
            std::time::Duration::from_millis(1),
        );
        let text = encode(scrape, &requests).unwrap();
        for line in [
            "# TYPE htb_class_bytes counter",
            "htb_class_bytes_total{dev=\"r2\",class=\"1:10\"} 12345",
            "htb_class_lended_packets_total{dev=\"r2\",class=\"1:10\"} 5",
            "htb_class_rtt_seconds{dev=\"r2\",class=\"1:10\",quantile=\"0.95\"} 0.03",
            "htb_class_rtt_samples_total{dev=\"r2\",class=\"1:10\"} 40",
            "htb_class_tcp_retransmits_total{dev=\"r2\",class=\"1:10\"} 3",
            "htb_class_borrowed_packets_total{dev=\"r2\",class=\"1:10\"} 2",
            "htb_class_backlog_bytes{dev=\"r2\",class=\"1:10\"} 1500",
            "htb_class_ceil_bits_per_second{dev=\"r2\",class=\"1:10\",parent=\"1:1\"} 10000000",
            "htb_class_rate_bits_per_second{dev=\"r2\",class=\"1:1\",parent=\"root\"} 5000000",
            "htb_port_rx_packets_total{dev=\"r2\"} 11",
            "htb_port_drops_total{dev=\"r2\",reason=\"pool\"} 4",
            "htb_xdp_verdicts_total{verdict=\"redirected\"} 99",
            "htb_frames{state=\"free\"} 4000",
            "htb_scrape_gather_seconds 0.25",
            "htb_generation_info{generation=\"0000000000000abc\"} 1",
            "htb_one_way_classes 3",
            "htb_flows_live 12",
            "htb_flows_evicted_total 4",
            "htb_flows_exported_total 90",
            "htb_ipc_requests_total{request=\"apply\",outcome=\"ok\"} 1",
            "htb_ipc_requests_total{request=\"show\",outcome=\"error\"} 1",
            "htb_ipc_request_duration_seconds_count{request=\"apply\"} 1",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from:\n{text}"
            );
        }
    }
}
