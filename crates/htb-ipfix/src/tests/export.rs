//! The exporter's messages read back: families, empty values, splitting, sequence numbers,
//! template refresh, and the sizes it refuses.

use super::*;

/// Decodes every message with one collector, checking each Sequence Number counts the records
/// read before it; returns the records.
fn read_all(c: &mut Collector, messages: &[Vec<u8>], first_sequence: u32) -> Vec<FlowRecord> {
    let mut got = Vec::new();
    for m in messages {
        let d = c.decode(m).unwrap();
        assert_eq!(d.domain, 7);
        assert_eq!(
            d.sequence,
            first_sequence.wrapping_add(got.len() as u32),
            "records before this message"
        );
        got.extend(d.records);
    }
    got
}

#[test]
fn records_of_both_families_read_back_as_they_were_sent() {
    let mut e = exporter(1400);
    let mut v6 = record("2001:db8::1", "2001:db8::2");
    v6.end_reason = EndReason::LackOfResources;
    v6.proto = 58;
    (v6.src_port, v6.dst_port) = (0, 0);
    let sent = vec![
        record("10.0.0.1", "10.0.0.2"),
        v6,
        record("192.0.2.1", "192.0.2.9"),
    ];
    let mut c = Collector::new();
    let messages = e.export(NOW, &sent);
    assert_eq!(messages.len(), 1);
    assert_eq!(read_all(&mut c, &messages, 0), sent);
    assert_eq!(c.known_templates(), 2);
    // v4, v6, v4: three data sets after the template set.
    let d = Collector::new().decode(&messages[0]).unwrap();
    assert_eq!((d.templates, d.unknown_sets), (2, 0));
    assert_eq!(d.export_time, 1_700_000_005);
}

#[test]
fn empty_class_round_trips_and_vlan_are_sent_as_zero_and_read_as_none() {
    let mut e = exporter(1400);
    let mut none = record("10.0.0.1", "10.0.0.2");
    none.class = None;
    none.rtt_min_us = None;
    none.rtt_median_us = None;
    none.vlan = None;
    let mut zero = none;
    zero.class = Some(ClassId::new(0, 0));
    zero.vlan = Some(0);
    zero.rtt_min_us = Some(0);
    let mut c = Collector::new();
    let m = e.export(NOW, &[none, zero]).remove(0);
    let got = c.decode(&m).unwrap().records;
    assert_eq!(got[0], none);
    // Zero is "none" on the wire; a round trip measured as 0 µs is sent as 1 µs.
    assert_eq!(got[1].class, None);
    assert_eq!(got[1].vlan, None);
    assert_eq!(got[1].rtt_min_us, Some(1));
    // A class whose minor needs 32 bits keeps it.
    let mut wide = none;
    wide.class = Some(ClassId::new(0xffff, 0x1_86a0));
    let m = e.export(NOW, &[wide]).remove(0);
    assert_eq!(c.decode(&m).unwrap().records, [wide]);
}

#[test]
fn small_messages_carry_every_record_once_with_counted_sequence_numbers() {
    let smallest = Exporter::smallest_message();
    assert_eq!(smallest, 16 + 212 + 4 + 113);
    let mut e = exporter(smallest);
    let sent: Vec<FlowRecord> = (0..25u16)
        .map(|i| {
            let mut r = if i % 3 == 0 {
                record("2001:db8::1", "2001:db8::2")
            } else {
                record("10.0.0.1", "10.0.0.2")
            };
            r.src_port = i;
            r
        })
        .collect();
    let messages = e.export(NOW, &sent);
    // The first holds the templates and one record; the others as many as fit in 345 bytes.
    assert!(messages.len() > 8, "{} messages", messages.len());
    assert!(messages.iter().all(|m| m.len() <= smallest));
    let mut c = Collector::new();
    assert_eq!(read_all(&mut c, &messages, 0), sent);
    assert_eq!(e.records_sent(), 25);
    // The next call goes on counting, without templates (not due).
    let next = e.export(NOW + 1, &[record("10.0.0.1", "10.0.0.2")]);
    let d = c.decode(&next[0]).unwrap();
    assert_eq!((d.sequence, d.templates, d.records.len()), (25, 0, 1));
}

#[test]
fn a_1400_byte_message_holds_as_many_ipv4_records_as_fit() {
    let mut e = exporter(1400);
    e.templates_due(NOW);
    let sent = vec![record("10.0.0.1", "10.0.0.2"); 40];
    let messages = e.export(NOW, &sent);
    // (1400 - 16 - 4) / 89 = 15 records a message: 15, 15, 10.
    let lens: Vec<usize> = messages.iter().map(Vec::len).collect();
    assert_eq!(lens, [20 + 15 * 89, 20 + 15 * 89, 20 + 10 * 89]);
    let mut c = Collector::new();
    c.decode(&exporter(1400).templates_due(NOW).unwrap())
        .unwrap();
    assert_eq!(read_all(&mut c, &messages, 0), sent);
}

#[test]
fn the_sequence_number_wraps_at_2_to_the_32() {
    let mut e = exporter(Exporter::smallest_message());
    e.set_records_sent((1 << 32) - 2);
    let batch = vec![record("10.0.0.1", "10.0.0.2"); 3];
    // The templates and one record, then the other two: 2^32 - 2, then 2^32 - 1.
    let messages = e.export(NOW, &batch);
    assert_eq!(messages.len(), 2);
    let mut c = Collector::new();
    assert_eq!(read_all(&mut c, &messages, u32::MAX - 1), batch);
    let next = e.export(NOW + 1, &batch);
    assert_eq!(c.decode(&next[0]).unwrap().sequence, 1);
    assert_eq!(e.records_sent(), (1 << 32) + 4);
}

#[test]
fn templates_go_first_and_again_after_the_refresh_not_before() {
    let mut e = exporter(1400);
    let first = e
        .templates_due(NOW)
        .expect("the first call sends templates");
    assert_eq!(Collector::new().decode(&first).unwrap().templates, 2);
    assert_eq!(e.templates_due(NOW), None);
    assert_eq!(e.templates_due(NOW + 59_999), None);
    // Data without templates: a collector that restarted cannot read it ...
    let data = e.export(NOW + 30_000, &[record("10.0.0.1", "10.0.0.2")]);
    let mut restarted = Collector::new();
    let d = restarted.decode(&data[0]).unwrap();
    assert_eq!((d.templates, d.records.len(), d.unknown_sets), (0, 0, 1));
    // ... until the refresh, which comes with the next data ...
    let data = e.export(NOW + 60_000, &[record("10.0.0.1", "10.0.0.2")]);
    assert_eq!(data.len(), 1);
    let d = restarted.decode(&data[0]).unwrap();
    assert_eq!((d.templates, d.records.len(), d.sequence), (2, 1, 1));
    // ... and counts from then: not again until 60 s after it.
    assert_eq!(e.templates_due(NOW + 60_001), None);
    assert!(e.export(NOW + 119_999, &[]).is_empty());
    // With no records, export sends the templates alone when they are due.
    let alone = e.export(NOW + 120_000, &[]);
    assert_eq!(alone.len(), 1);
    let d = Collector::new().decode(&alone[0]).unwrap();
    assert_eq!((d.templates, d.records.len(), d.sequence), (2, 0, 2));
    assert!(e.templates_due(NOW + 180_000).is_some());
    // A clock stepped back sends them too: the refresh is measured from a time to come.
    assert!(e.templates_due(NOW).is_some());
    assert_eq!(e.templates_due(NOW + 1), None);
}

#[test]
fn sizes_that_cannot_make_valid_messages_are_refused() {
    let smallest = Exporter::smallest_message();
    let with = |max_message| {
        Exporter::new(ExporterConfig {
            max_message,
            ..ExporterConfig::default()
        })
    };
    assert_eq!(
        with(smallest - 1).unwrap_err(),
        ExporterError::MessageTooSmall(smallest - 1, smallest)
    );
    assert_eq!(
        with(65_536).unwrap_err(),
        ExporterError::MessageTooLarge(65_536)
    );
    assert!(with(smallest).is_ok());
    assert!(with(65_535).is_ok());
    assert_eq!(ExporterConfig::default().max_message, 1400);
    assert_eq!(
        ExporterConfig::default().template_refresh,
        Duration::from_secs(60)
    );
}
