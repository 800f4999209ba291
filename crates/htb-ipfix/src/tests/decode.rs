//! The collector: every way a message is refused (and that a refused one teaches nothing),
//! and what it reads past: padding, options templates, unknown templates, withdrawals,
//! other exporters' layouts.

use std::net::IpAddr;

use super::*;

/// A message of domain 7 holding `sets`, with its length written.
fn message(domain: u32, sets: &[Vec<u8>]) -> Vec<u8> {
    let mut m = vec![0, 10, 0, 0, 0x65, 0x53, 0xf1, 0x05, 0, 0, 0, 0];
    m.extend_from_slice(&domain.to_be_bytes());
    for s in sets {
        m.extend_from_slice(s);
    }
    let len = u16::try_from(m.len()).unwrap();
    m[2..4].copy_from_slice(&len.to_be_bytes());
    m
}

/// A set with its header.
fn set(id: u16, body: &[u8]) -> Vec<u8> {
    let mut s = id.to_be_bytes().to_vec();
    s.extend_from_slice(&u16::try_from(body.len() + 4).unwrap().to_be_bytes());
    s.extend_from_slice(body);
    s
}

/// A template record of IANA elements given as (id, length).
fn template(id: u16, fields: &[(u16, u16)]) -> Vec<u8> {
    let mut t = id.to_be_bytes().to_vec();
    t.extend_from_slice(&u16::try_from(fields.len()).unwrap().to_be_bytes());
    for (id, len) in fields {
        t.extend_from_slice(&id.to_be_bytes());
        t.extend_from_slice(&len.to_be_bytes());
    }
    t
}

/// The exporter's first message: header, template set (at 16), one IPv4 data set (the last
/// 93 bytes).
fn good() -> Vec<u8> {
    exporter(1400)
        .export(NOW, &[record("10.0.0.1", "10.0.0.2")])
        .remove(0)
}

/// `good` changed by `f`, its header's length rewritten when `fix_len`.
fn changed(f: impl Fn(&mut Vec<u8>), fix_len: bool) -> Vec<u8> {
    let mut m = good();
    f(&mut m);
    if fix_len {
        let len = u16::try_from(m.len()).unwrap();
        m[2..4].copy_from_slice(&len.to_be_bytes());
    }
    m
}

#[test]
fn every_malformed_message_is_refused_and_teaches_nothing() {
    let good = good();
    let data_at = good.len() - 93;
    let set_len = |at: usize, len: u16| {
        move |m: &mut Vec<u8>| m[at + 2..at + 4].copy_from_slice(&len.to_be_bytes())
    };
    let record_error = |template, why| DecodeError::Record { template, why };
    let end_reason_at = data_at + 4 + 4 + 4 + 1 + 2 + 2 + 1 + 2 + 32;
    let cases: Vec<(Vec<u8>, DecodeError)> = vec![
        (Vec::new(), DecodeError::Short(0)),
        (good[..15].to_vec(), DecodeError::Short(15)),
        (changed(|m| m[1] = 9, false), DecodeError::Version(9)),
        (changed(|m| m[0] = 1, false), DecodeError::Version(0x10a)),
        // A byte more than the header says, and a datagram cut short.
        (
            changed(|m| m.push(0), false),
            DecodeError::Length {
                said: 321,
                has: 322,
            },
        ),
        (
            good[..300].to_vec(),
            DecodeError::Length {
                said: 321,
                has: 300,
            },
        ),
        // A set length below its header, beyond the message, and a set header cut short.
        (
            changed(set_len(16, 3), false),
            DecodeError::SetLength { at: 16, len: 3 },
        ),
        (
            changed(set_len(data_at, 94), false),
            DecodeError::SetLength {
                at: data_at,
                len: 94,
            },
        ),
        (
            changed(|m| m.extend_from_slice(&[1, 0, 0]), true),
            DecodeError::SetLength { at: 321, len: 0 },
        ),
        // Set IDs 0, 1 and 4 to 255 are reserved.
        (
            changed(|m| m[data_at..data_at + 2].copy_from_slice(&[0, 0]), false),
            DecodeError::ReservedSet(0),
        ),
        (
            changed(|m| m[data_at..data_at + 2].copy_from_slice(&[0, 1]), false),
            DecodeError::ReservedSet(1),
        ),
        (
            changed(
                |m| m[data_at..data_at + 2].copy_from_slice(&[0, 255]),
                false,
            ),
            DecodeError::ReservedSet(255),
        ),
        // Template 256's field count beyond its set; a template id below 256.
        (changed(|m| m[23] = 200, false), DecodeError::Template(16)),
        (
            changed(|m| m[20..22].copy_from_slice(&[0, 7]), false),
            DecodeError::Template(16),
        ),
        // flowEndReason 9.
        (
            changed(|m| m[end_reason_at] = 9, false),
            record_error(256, RecordError::EndReason(9)),
        ),
        // The data set ends 8 bytes into a second record: no padding is that long.
        (
            changed(
                |m| {
                    m.extend_from_slice(&[0; 8]);
                    m[data_at + 3] += 8;
                },
                true,
            ),
            record_error(256, RecordError::Truncated),
        ),
    ];
    for (message, want) in cases {
        let mut c = Collector::new();
        assert_eq!(c.decode(&message), Err(want), "{want}");
        assert_eq!(c.known_templates(), 0, "{want}");
    }
    assert!(Collector::new().decode(&good).is_ok());
}

#[test]
fn records_that_are_not_flow_records_are_refused() {
    let cases = [
        // An address of 5 bytes, a counter of 9, a port of none.
        (vec![(8, 5), (12, 4)], RecordError::FieldLength(8)),
        (vec![(8, 4), (12, 4), (1, 9)], RecordError::FieldLength(1)),
        (
            vec![(8, 4), (12, 4), (7, 0), (4, 1)],
            RecordError::FieldLength(7),
        ),
        // No destination address.
        (vec![(8, 4), (4, 1)], RecordError::NoAddresses),
    ];
    for (fields, why) in cases {
        let t = template(300, &fields);
        let len: usize = fields.iter().map(|&(_, l)| usize::from(l)).sum();
        let m = message(7, &[set(2, &t), set(300, &vec![1; len])]);
        let mut c = Collector::new();
        assert_eq!(
            c.decode(&m),
            Err(DecodeError::Record { template: 300, why }),
            "{why}"
        );
        assert_eq!(c.known_templates(), 0);
    }
}

#[test]
fn a_template_cut_inside_its_enterprise_number_is_refused() {
    // One enterprise field specifier whose PEN runs past the set.
    let body = [0x01, 0x2c, 0x00, 0x01, 0x80, 0x01, 0x00, 0x04, 0x00, 0x00];
    let m = message(7, &[set(2, &body)]);
    assert_eq!(Collector::new().decode(&m), Err(DecodeError::Template(16)));
}

#[test]
fn padding_options_templates_and_unknown_sets_are_read_past() {
    let mut m = good();
    let data_at = m.len() - 93;
    // Seven bytes of padding after the record, whatever they hold (§9.1), ...
    m.extend_from_slice(&[0xff; 7]);
    m[data_at + 3] += 7;
    // ... four zeros after a template set's records, an options template set, and a data set
    // of a template never heard.
    let tail = [
        set(2, &[0, 0, 0, 0]),
        set(3, &[1, 0x90, 0, 1, 0, 1, 0, 4, 0, 1]),
        set(400, &[1, 2, 3, 4]),
        set(401, &[0; 4]),
    ];
    for s in &tail {
        m.extend_from_slice(s);
    }
    let len = u16::try_from(m.len()).unwrap();
    m[2..4].copy_from_slice(&len.to_be_bytes());
    let mut c = Collector::new();
    let d = c.decode(&m).unwrap();
    assert_eq!(d.records, [record("10.0.0.1", "10.0.0.2")]);
    assert_eq!((d.templates, d.unknown_sets), (2, 2));
    assert_eq!((d.domain, d.sequence, d.export_time), (7, 0, 1_700_000_005));
    assert_eq!(c.known_templates(), 2);
}

#[test]
fn templates_are_per_domain_and_withdrawals_forget_them() {
    let mut e = exporter(1400);
    let mut c = Collector::new();
    c.decode(&e.templates_due(NOW).unwrap()).unwrap();
    let data = e
        .export(NOW + 1, &[record("10.0.0.1", "10.0.0.2")])
        .remove(0);
    // The same data set from domain 8 has no template there.
    let mut other = data.clone();
    other[15] = 8;
    assert_eq!(c.decode(&other).unwrap().unknown_sets, 1);
    // Withdrawing 256 in domain 8 leaves domain 7's.
    let withdraw_256 = set(2, &[1, 0, 0, 0]);
    assert_eq!(
        c.decode(&message(8, std::slice::from_ref(&withdraw_256)))
            .unwrap()
            .templates,
        1
    );
    assert_eq!(c.decode(&data).unwrap().records.len(), 1);
    // In domain 7 it is forgotten (§8.1); 257 is kept.
    c.decode(&message(7, &[withdraw_256])).unwrap();
    assert_eq!(c.known_templates(), 1);
    let d = c.decode(&data).unwrap();
    assert_eq!((d.records.len(), d.unknown_sets), (0, 1));
    // Template ID 2 with no fields withdraws all of a domain's templates.
    c.decode(&e.templates_due(NOW + 60_000).unwrap()).unwrap();
    let mut other_domain = e.templates_due(NOW + 120_000).unwrap();
    other_domain[15] = 8;
    c.decode(&other_domain).unwrap();
    assert_eq!(c.known_templates(), 4);
    c.decode(&message(7, &[set(2, &[0, 2, 0, 0])])).unwrap();
    assert_eq!(c.known_templates(), 2);
    assert_eq!(c.decode(&other).unwrap().records.len(), 1);
}

#[test]
fn another_exporters_layout_is_read_by_its_template() {
    // Reduced-size counters (§6.2), fields in another order, an element this crate does not
    // know (IE 5, ipClassOfService), another enterprise's element, and a variable-length one.
    let t = template(
        500,
        &[(136, 1), (12, 4), (1, 4), (5, 1), (8, 4), (2, 2), (58, 2)],
    );
    let mut foreign = t;
    foreign[3] += 1;
    foreign.extend_from_slice(&[0x80, 0x01, 0x00, 0x02, 0, 0, 0, 9]);
    let variable = template(501, &[(8, 4), (12, 4), (82, 0xffff)]);
    let mut templates = foreign.clone();
    templates.extend_from_slice(&variable);
    let data = [
        3, // flowEndReason
        192, 0, 2, 2, // destination
        0, 0, 0x10, 0,    // octets 4096
        0xb8, // ipClassOfService
        192, 0, 2, 1, // source
        0, 4, // packets 4
        0, 0, // vlanId 0
        0xaa, 0xbb, // enterprise 9's element
    ];
    let m = message(
        7,
        &[
            set(2, &templates),
            set(500, &data),
            set(501, &[192, 0, 2, 1, 192, 0, 2, 2, 1, b'x']),
        ],
    );
    let d = Collector::new().decode(&m).unwrap();
    assert_eq!((d.templates, d.unknown_sets), (2, 1));
    let [r] = d.records.as_slice() else {
        panic!("{:?}", d.records)
    };
    assert_eq!(r.src, "192.0.2.1".parse::<IpAddr>().unwrap());
    assert_eq!(r.dst, "192.0.2.2".parse::<IpAddr>().unwrap());
    assert_eq!((r.octets, r.packets, r.vlan), (4096, 4, None));
    assert_eq!(r.end_reason, EndReason::EndOfFlow);
    // What the template does not carry reads as nothing, sampling as every packet.
    assert_eq!(
        (r.class, r.rtt_min_us, r.sampling_interval),
        (None, None, 1)
    );
}
