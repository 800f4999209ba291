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

fuzz_target!(|data: &[u8]| {
    let _ = Collector::new().decode(data);

    let mut bytes = Bytes(data);
    let extra = usize::from(bytes.u16() % 1200);
    let mut exporter = Exporter::new(ExporterConfig {
        observation_domain: 1,
        template_refresh: Duration::from_secs(1),
        max_message: Exporter::smallest_message() + extra,
    })
    .expect("at least the smallest message");
    let mut records = Vec::new();
    while !bytes.0.is_empty() && records.len() < 64 {
        records.push(record(&mut bytes));
    }
    let mut collector = Collector::new();
    let mut read = Vec::new();
    for message in exporter.export(1_700_000_000_000, &records) {
        let decoded = collector.decode(&message).expect("our own message reads");
        assert_eq!(u64::from(decoded.sequence), read.len() as u64);
        read.extend(decoded.records);
    }
    assert_eq!(read, records);
    assert_eq!(exporter.records_sent(), records.len() as u64);
});
