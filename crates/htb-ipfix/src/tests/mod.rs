//! The crate's tests: byte layout against RFC 7011, the exporter's messages, the collector's
//! refusals, and round trips of arbitrary records.

use std::time::Duration;

use crate::*;

mod decode;
mod export;
mod layout;
mod props;

/// A UDP flow of class 1:10 with every field set.
fn record(src: &str, dst: &str) -> FlowRecord {
    FlowRecord {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto: 17,
        src_port: 40000,
        dst_port: 5201,
        vlan: Some(100),
        tcp_flags: 0,
        octets: 1_000_000,
        packets: 1000,
        start_ms: 1_700_000_000_000,
        end_ms: 1_700_000_004_000,
        end_reason: EndReason::IdleTimeout,
        ingress_if: 3,
        egress_if: 4,
        class: Some(ClassId::new(1, 0x10)),
        rtt_min_us: Some(420),
        rtt_median_us: Some(1250),
        retransmits: 2,
        leaf_drops: 7,
        sampling_interval: 1,
    }
}

/// An exporter of domain 7, refreshing templates every 60 s.
fn exporter(max_message: usize) -> Exporter {
    Exporter::new(ExporterConfig {
        observation_domain: 7,
        template_refresh: Duration::from_secs(60),
        max_message,
    })
    .unwrap()
}

/// The time of the tests' first export, Unix ms.
const NOW: u64 = 1_700_000_005_123;
