//! IPFIX messages (htb-ipfix): any bytes go to the collector's decoder, which must refuse
//! or read them and never panic; and records built from the bytes are exported in small
//! messages and must read back exactly, every one once, with sequence numbers that add up.
#![no_main]

use std::net::IpAddr;
use std::time::Duration;

use htb_ipfix::{ClassId, Collector, EndReason, Exporter, ExporterConfig, FlowRecord};
use libfuzzer_sys::fuzz_target;

/// Reads the bytes as a sequence of numbers (zeros once they run out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

fn record(b: &mut Bytes<'_>) -> FlowRecord {
    let v6 = b.take::<1>()[0] & 1 == 1;
    let addr = |b: &mut Bytes<'_>| -> IpAddr {
        if v6 {
            IpAddr::from(b.take::<16>())
        } else {
            IpAddr::from(b.take::<4>())
        }
    };
    let (src, dst) = (addr(b), addr(b));
    let [proto, flags, reason] = b.take::<3>();
    let class = (b.u16(), b.u32());
    FlowRecord {
        src,
        dst,
        proto,
        src_port: b.u16(),
        dst_port: b.u16(),
        vlan: Some(b.u16()).filter(|&v| v != 0),
        tcp_flags: flags,
        octets: b.u64(),
        packets: b.u64(),
        start_ms: b.u64(),
        end_ms: b.u64(),
        end_reason: EndReason::from_code(reason % 5 + 1).unwrap_or(EndReason::IdleTimeout),
        ingress_if: b.u32(),
        egress_if: b.u32(),
        class: Some(ClassId::new(class.0, class.1)).filter(|_| class != (0, 0)),
        rtt_min_us: Some(b.u32()).filter(|&v| v != 0),
        rtt_median_us: Some(b.u32()).filter(|&v| v != 0),
        retransmits: b.u32(),
        leaf_drops: b.u64(),
        sampling_interval: b.u32(),
    }
}

/// Exports `records` at `now_ms` and reads every message back with `collector`: each within
/// `max`, each Sequence Number the records read before it (from `first`).
fn round_trip(
    exporter: &mut Exporter,
    collector: &mut Collector,
    now_ms: u64,
    records: &[FlowRecord],
    max: usize,
) {
    let first = exporter.records_sent();
    let mut read = Vec::new();
    for message in exporter.export(now_ms, records) {
        assert!(message.len() <= max, "{} bytes over {max}", message.len());
        let decoded = collector.decode(&message).expect("our own message reads");
        assert_eq!(decoded.domain, 1);
        assert_eq!(u64::from(decoded.export_time), now_ms / 1000);
        assert_eq!(decoded.sequence, (first + read.len() as u64) as u32);
        read.extend(decoded.records);
    }
    assert_eq!(read, records);
    assert_eq!(exporter.records_sent(), first + records.len() as u64);
}

fuzz_target!(|data: &[u8]| {
    // Anything, to a collector that knows nothing and to one that knows our templates (so
    // data sets of 256 and 257 in domain 1 are read as records).
    let _ = Collector::new().decode(data);
    let mut primed = Collector::new();
    let mut templates = Exporter::new(ExporterConfig::default()).expect("the default config");
    let message = templates
        .templates_due(0)
        .expect("templates are due at first");
    primed.decode(&message).expect("our templates read");
    let _ = primed.decode(data);

    let mut bytes = Bytes(data);
    let extra = usize::from(bytes.u16() % 1200);
    let max = Exporter::smallest_message() + extra;
    let mut exporter = Exporter::new(ExporterConfig {
        observation_domain: 1,
        template_refresh: Duration::from_secs(1),
        max_message: max,
    })
    .expect("at least the smallest message");
    let mut records = Vec::new();
    while !bytes.0.is_empty() && records.len() < 64 {
        records.push(record(&mut bytes));
    }
    // A fresh collector reads the first export (templates first) and, with what it learned,
    // a second one half a second later (no templates: not due), in two halves.
    let mut collector = Collector::new();
    let now = 1_700_000_000_000;
    round_trip(&mut exporter, &mut collector, now, &records, max);
    let (a, b) = records.split_at(records.len() / 2);
    round_trip(&mut exporter, &mut collector, now + 500, a, max);
    round_trip(&mut exporter, &mut collector, now + 500, b, max);
});
