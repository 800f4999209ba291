//! The writer and the parser agree: every command the grammar can say is written as words that
//! parse back to it (`parse(print(x)) == x`), for arbitrary valid commands of every variant,
//! and a few written out in full.
//!
//! The strategies make commands in the form the parser makes them (canonical): where the
//! grammar gives one value two spellings, or sets two fields with one word, a command that the
//! parser would never produce has no words of its own, and is not generated. Each such place
//! says why.

mod strategies;

use htb_core::{ClassId, LeafSpec, Rate, SfqSpec};
use htb_ipc::{
    ClassDelete, ClassSpec, Command, FilterKind, FilterSpec, LeafQdiscSpec, Match, PortRange,
    Protocol, QdiscSpec, U32Hashing,
};
use htb_tc::parse::{Action, parse_command, split_line};
use htb_tc::write::{WriteError, command_line};
use proptest::prelude::*;
use strategies::command;

/// Writes `c`, reads the line back, and says what came back.
fn round_trip(c: &Command) -> Result<Command, String> {
    let line = command_line(c).map_err(|e| format!("not written: {e}"))?;
    match parse_command(&split_line(&line)) {
        Ok(Action::Change(back)) => Ok(back),
        Ok(other) => Err(format!("{line}\n  read as {other:?}")),
        Err(e) => Err(format!("{line}\n  refused: {e}")),
    }
}

/// Run on a thread of its own with a large stack: a command's strategy nests deeply, and a
/// debug build's frames for it outgrow the test harness's 2 MiB.
#[test]
fn every_command_reads_back_as_itself() {
    let run = || {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
        runner
            .run(&command(), |c| {
                prop_assert_eq!(round_trip(&c), Ok(c));
                Ok(())
            })
            .map_err(|e| e.to_string())
    };
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(run)
        .expect("a thread")
        .join()
        .expect("no panic");
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

// ---- examples ----

#[test]
fn the_words_are_tcs() {
    let cases: [(Command, &str); 7] = [
        (
            Command::QdiscAdd(Box::new(QdiscSpec {
                handle: Some(ClassId::new(1, 0)),
                default_minor: Some(0x20),
                ..QdiscSpec::new("eth0".parse().unwrap())
            })),
            "qdisc add dev eth0 root handle 1: htb default 20",
        ),
        (
            Command::ClassAdd(Box::new(ClassSpec {
                parent: Some(ClassId::new(1, 1)),
                ceil: Some(Rate::from_bits_per_sec(1_234_567)),
                burst: Some(15 * 1024),
                ..ClassSpec::new(
                    "eth0".parse().unwrap(),
                    ClassId::new(1, 0x20),
                    Rate::from_kbit(1500),
                )
            })),
            "class add dev eth0 parent 1:1 classid 1:20 htb rate 1500kbit ceil 1234567bit burst 15360",
        ),
        (
            Command::LeafAdd(Box::new(LeafQdiscSpec {
                dev: "eth0".parse().unwrap(),
                parent: Some(ClassId::new(1, 0x10)),
                handle: Some(ClassId::new(0x10, 0)),
                leaf: LeafSpec::Sfq(SfqSpec {
                    perturb: Some(10),
                    ..SfqSpec::default()
                }),
                stab: None,
            })),
            "qdisc add dev eth0 parent 1:10 handle 10: sfq perturb 10",
        ),
        (
            Command::FilterAdd(Box::new(FilterSpec {
                parent: Some(ClassId::new(1, 0)),
                protocol: Protocol::Ip,
                prio: Some(1),
                kind: FilterKind::U32,
                matcher: Match {
                    dst: Some("10.0.0.0/24".parse().unwrap()),
                    dport: Some(PortRange {
                        first: 5200,
                        last: 5215,
                    }),
                    proto: Some(17),
                    ..Match::default()
                },
                class: Some(ClassId::new(1, 0x10)),
                ..FilterSpec::new("eth0".parse().unwrap())
            })),
            "filter add dev eth0 parent 1: protocol ip pref 1 u32 match ip dst 10.0.0.0/24 match ip dport 5200 0xfff0 match ip protocol 17 0xff classid 1:10",
        ),
        (
            Command::FilterAdd(Box::new(FilterSpec {
                parent: Some(ClassId::new(0xffff, 0)),
                protocol: Protocol::Ip,
                kind: FilterKind::Flower,
                matcher: Match {
                    proto: Some(6),
                    dport: Some(PortRange {
                        first: 80,
                        last: 90,
                    }),
                    ..Match::default()
                },
                redirect: Some("ifb0".parse().unwrap()),
                ..FilterSpec::new("eth0".parse().unwrap())
            })),
            "filter add dev eth0 parent ffff: protocol ip flower ip_proto tcp dst_port 80-90 action mirred egress redirect dev ifb0",
        ),
        (
            // A u32 filter matching everything: tc sends no selector without a `match`, and
            // the kernel's u32_change refuses a filter without one.
            Command::FilterAdd(Box::new(FilterSpec {
                parent: Some(ClassId::new(1, 0)),
                protocol: Protocol::All,
                prio: Some(2),
                kind: FilterKind::U32,
                class: Some(ClassId::new(1, 0x10)),
                ..FilterSpec::new("eth0".parse().unwrap())
            })),
            "filter add dev eth0 parent 1: protocol all pref 2 u32 match u32 0 0 classid 1:10",
        ),
        (
            Command::ClassDelete(ClassDelete {
                dev: "my#dev".parse().unwrap(),
                id: ClassId::new(1, 0x20),
            }),
            "class del dev \"my#dev\" classid 1:20",
        ),
    ];
    for (c, text) in cases {
        assert_eq!(command_line(&c).as_deref(), Ok(text));
        assert_eq!(round_trip(&c), Ok(c));
    }
}

#[test]
fn what_the_grammar_cannot_say_is_refused_saying_why() {
    let u32_ports = Command::FilterAdd(Box::new(FilterSpec {
        protocol: Protocol::Ip,
        kind: FilterKind::U32,
        matcher: Match {
            dport: Some(PortRange {
                first: 80,
                last: 90,
            }),
            ..Match::default()
        },
        class: Some(ClassId::new(1, 1)),
        ..FilterSpec::new("eth0".parse().unwrap())
    }));
    assert!(matches!(
        command_line(&u32_ports),
        Err(WriteError::PortRange(_))
    ));
    let flower_keys = FilterSpec {
        kind: FilterKind::Flower,
        hashing: U32Hashing {
            link: Some(2),
            ..U32Hashing::default()
        },
        ..FilterSpec::new("eth0".parse().unwrap())
    };
    assert!(matches!(
        command_line(&Command::FilterAdd(Box::new(flower_keys))),
        Err(WriteError::NotInKind { kind: "flower", .. })
    ));
    // A leading `'` is quoted by `"`, a `"` by `'`; a text with both has no words.
    for (dev, written) in [("'ab", "\"'ab\""), ("a\"b", "'a\"b'"), ("a#b", "\"a#b\"")] {
        let c = Command::QdiscDelete {
            dev: dev.parse().unwrap(),
        };
        assert_eq!(
            command_line(&c).as_deref(),
            Ok(format!("qdisc del dev {written} root").as_str())
        );
        assert_eq!(round_trip(&c), Ok(c));
    }
    let unquotable = Command::QdiscDelete {
        dev: "a'b\"c".parse().unwrap(),
    };
    assert!(matches!(
        command_line(&unquotable),
        Err(WriteError::Unquotable(_))
    ));
}
