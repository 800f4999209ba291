//! tc's command line (iproute2 `tc/tc.c`): global options, the object and verb, batches. Each
//! object's commands are parsed in its own module (`tc_qdisc`, `tc_class`, `tc_filter`), and
//! each qdisc's and filter's options in theirs (`q_htb`, the leaf kinds' table `qdiscs`,
//! `f_u32`, `f_flower`), as iproute2 has them.
//!
//! Keywords are matched as tc matches them: some exactly (`rate`, `ceil`, `dev`), most by any
//! non-empty prefix, tried in tc's order (`m` is `mtu`, `b` is `burst`, `c` is `cburst`). Errors
//! read like tc's (`What is "x"?`, `Illegal "rate"`, `"rate" is required.`).
//!
//! Nothing here reads a file or the network: tc reads a link's speed from sysfs for
//! `rate N%` (`get_percent_rate`), and here the caller answers that ([`LinkSpeed`]; the plain
//! functions know no speed, the `_with` ones ask the caller's).

pub use crate::action::{Action, Monitor};
use crate::args::{Args, Result, illegal, interface, usage};
pub use crate::args::{UsageError, matches};
pub use crate::link_speed::{LinkSpeed, no_link_speed};
pub use crate::options::Options;
use crate::usage::USAGE;
use crate::{tc_class, tc_filter, tc_qdisc};

/// A parsed command line: options and the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Global options.
    pub options: Options,
    /// What to do (`None` with `-b FILE`).
    pub action: Option<Action>,
}

/// Parses a whole command line (without the program name), knowing no link speed.
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command_line(args: &[String]) -> Result<Invocation> {
    parse_command_line_with(args, &no_link_speed)
}

/// [`parse_command_line`], with `link_speed` for `rate N%`.
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command_line_with(args: &[String], link_speed: LinkSpeed<'_>) -> Result<Invocation> {
    let mut options = Options::default();
    let mut rest = args;
    while let Some(arg) = rest.first() {
        let a = arg.as_str();
        if !a.starts_with('-') || a == "-" {
            break;
        }
        rest = &rest[1..];
        if a == "--socket" || a.starts_with("--socket=") {
            let path = match a.strip_prefix("--socket=") {
                Some(path) => path.to_owned(),
                None => {
                    let Some((path, more)) = rest.split_first() else {
                        return usage("--socket needs a path");
                    };
                    rest = more;
                    path.clone()
                }
            };
            if options.socket.is_none() {
                options.socket = Some(path);
            } else {
                options.more_sockets.push(path);
            }
        } else if a == "--timeout" || a.starts_with("--timeout=") {
            let value = match a.strip_prefix("--timeout=") {
                Some(v) => v.to_owned(),
                None => {
                    let Some((v, more)) = rest.split_first() else {
                        return usage("--timeout needs a number of seconds");
                    };
                    rest = more;
                    v.clone()
                }
            };
            let secs = value
                .parse::<f64>()
                .ok()
                .filter(|s| (0.001..=86_400.0).contains(s))
                .ok_or_else(|| {
                    UsageError(format!(
                        "Illegal \"--timeout\" {value:?} (seconds, 0.001 to 86400)"
                    ))
                })?;
            options.timeout = Some(std::time::Duration::from_secs_f64(secs));
        } else if a == "--help" || matches(a, "-help") {
            return Ok(Invocation {
                options,
                action: Some(Action::Help(USAGE)),
            });
        } else if a == "--version" || matches(a, "-Version") {
            return Ok(Invocation {
                options,
                action: Some(Action::Version),
            });
        } else if matches(a, "-stats") || matches(a, "-statistics") {
            options.stats = true;
        } else if matches(a, "-details") {
            options.details = true;
        } else if matches(a, "-raw") {
            options.raw = true;
        } else if matches(a, "-pretty") {
            options.pretty = true;
        } else if matches(a, "-iec") {
            options.iec = true;
        } else if matches(a, "-force") {
            // Batches are atomic here: there is nothing to force past.
        } else if matches(a, "-batch") {
            let Some((file, more)) = rest.split_first() else {
                return usage("-batch needs a file name (or - for stdin)");
            };
            options.batch = Some(file.clone());
            rest = more;
        } else if matches(a, "-json") {
            options.json = true;
        } else {
            return usage(format!("Option \"{a}\" is unknown, try \"htb-cli -help\"."));
        }
    }
    if options.batch.is_some() {
        if !rest.is_empty() {
            return usage(format!(
                "-batch takes no command, but got \"{}\"",
                rest.join(" ")
            ));
        }
        return Ok(Invocation {
            options,
            action: None,
        });
    }
    if let [object, file] = rest
        && object == "batch"
    {
        options.batch = Some(file.clone());
        return Ok(Invocation {
            options,
            action: None,
        });
    }
    let action = parse_command_with(rest, link_speed)?;
    Ok(Invocation {
        options,
        action: Some(action),
    })
}

/// Parses one command: `OBJECT COMMAND ARGS…` (a command line after its options, or one line
/// of a batch file), knowing no link speed.
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command(words: &[String]) -> Result<Action> {
    parse_command_with(words, &no_link_speed)
}

/// [`parse_command`], with `link_speed` for `rate N%`.
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command_with(words: &[String], link_speed: LinkSpeed<'_>) -> Result<Action> {
    let Some((object, args)) = words.split_first() else {
        return Ok(Action::Help(USAGE));
    };
    let o = object.as_str();
    if matches(o, "qdisc") {
        tc_qdisc::parse(args)
    } else if matches(o, "class") {
        tc_class::parse(args, link_speed)
    } else if matches(o, "filter") {
        tc_filter::parse(args)
    } else if matches(o, "monitor") || o == "top" {
        monitor(args)
    } else if o == "status" {
        match args.first() {
            None => Ok(Action::Status),
            Some(w) => usage(format!("What is \"{w}\"? Usage: htb-cli status")),
        }
    } else if o == "explain" {
        crate::explain::parse(args).map(Action::Explain)
    } else if o == "flows" {
        crate::flows::parse(args).map(Action::Flows)
    } else if matches(o, "help") {
        Ok(Action::Help(USAGE))
    } else {
        usage(format!("Object \"{o}\" is unknown, try \"htb-cli help\"."))
    }
}

fn monitor(words: &[String]) -> Result<Action> {
    let mut a = Args::new(words);
    let mut m = Monitor {
        dev: None,
        interval: 1.0,
        count: 0,
    };
    while let Some(w) = a.next() {
        if w == "dev" {
            m.dev = Some(interface(a.value()?)?);
        } else if matches(w, "interval") {
            m.interval = a
                .value()?
                .parse::<f64>()
                .ok()
                .filter(|s| (0.05..=3600.0).contains(s))
                .ok_or_else(|| UsageError("Illegal \"interval\" (seconds, 0.05 to 3600)".into()))?;
        } else if matches(w, "count") {
            m.count = a.value()?.parse().or_else(|_| illegal("count"))?;
        } else {
            return usage(format!(
                "What is \"{w}\"? Usage: htb-cli monitor [ dev DEV ] [ interval SECS ] [ count N ]"
            ));
        }
    }
    Ok(Action::Monitor(m))
}

/// Splits a batch-file line into words (tc's `makeargs`: whitespace, double quotes, `#`
/// comments; a word that begins with `'` runs to the next `'`, as iproute2 reads it, so that
/// a name holding `"` can be written).
#[must_use]
pub fn split_line(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for ch in line.chars() {
        match (ch, quote) {
            ('"', None | Some('"')) => {
                quote = if quote.is_some() { None } else { Some('"') };
                any = true;
            }
            ('\'', None) if !any => {
                quote = Some('\'');
                any = true;
            }
            ('\'', Some('\'')) => quote = None,
            ('#', None) => break,
            (c, None) if c.is_whitespace() => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            (c, _) => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// Reads a batch: one command per line, `\` continues a line, `#` starts a comment. Returns
/// each command with the number of the line it starts on. No link speed is known.
///
/// # Errors
/// The first line that does not parse, with its number.
pub fn parse_batch(text: &str) -> std::result::Result<Vec<(usize, Action)>, (usize, UsageError)> {
    parse_batch_with(text, &no_link_speed)
}

/// [`parse_batch`], with `link_speed` for `rate N%`.
///
/// # Errors
/// The first line that does not parse, with its number.
pub fn parse_batch_with(
    text: &str,
    link_speed: LinkSpeed<'_>,
) -> std::result::Result<Vec<(usize, Action)>, (usize, UsageError)> {
    // Sized first: an action is ~230 bytes, and a million-circuit import's two million grown by
    // doubling were copied into fresh pages again and again (a quarter of the import's time in
    // the kernel's page clearing).
    let commands = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .count();
    let mut out = Vec::with_capacity(commands);
    let mut pending = String::new();
    let mut start = 0;
    for (n, line) in text.lines().enumerate() {
        if pending.is_empty() {
            start = n + 1;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let words = split_line(&pending);
        pending.clear();
        if words.is_empty() {
            continue;
        }
        let action = parse_command_with(&words, link_speed).map_err(|e| (start, e))?;
        if let Action::Monitor(_)
        | Action::Status
        | Action::Explain(_)
        | Action::Flows(_)
        | Action::Help(_)
        | Action::Version = action
        {
            return Err((
                start,
                UsageError("only qdisc, class and filter commands can be batched".into()),
            ));
        }
        out.push((start, action));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split_words as words;
    use htb_core::{LeafKind, LeafSpec};
    use htb_ipc::{Command, LeafQdiscSpec, Match, Object, PortRange, QdiscSpec, Rate, Show};

    fn change(s: &str) -> Command {
        match parse_command(&words(s)) {
            Ok(Action::Change(c)) => c,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn error(s: &str) -> String {
        parse_command(&words(s)).unwrap_err().0
    }

    #[test]
    fn socket_given_again_names_more_boxes() {
        let args: Vec<String> = ["--socket", "/a", "--socket=/b", "--socket", "/c", "status"]
            .map(String::from)
            .to_vec();
        let inv = parse_command_line(&args).unwrap();
        assert_eq!(inv.options.socket.as_deref(), Some("/a"));
        assert_eq!(inv.options.more_sockets, ["/b", "/c"]);
        assert_eq!(inv.action, Some(Action::Status));
        let one = parse_command_line(&["--socket".into(), "/a".into(), "status".into()]).unwrap();
        assert!(one.options.more_sockets.is_empty());
        assert!(parse_command_line(&["--socket".into()]).is_err());
    }

    #[test]
    fn status_takes_no_arguments_and_cannot_be_batched() {
        assert_eq!(parse_command(&words("status")), Ok(Action::Status));
        assert_eq!(
            error("status dev r2"),
            "What is \"dev\"? Usage: htb-cli status"
        );
        let err = parse_batch("status\n").unwrap_err();
        assert_eq!(err.0, 1);
        assert!(err.1.0.contains("can be batched"), "{:?}", err.1);
    }

    #[test]
    fn the_seed_lines_parse() {
        assert_eq!(
            change("qdisc add dev D root handle 1: htb default 20"),
            Command::QdiscAdd(Box::new(QdiscSpec {
                handle: Some(htb_core::ClassId::new(1, 0)),
                default_minor: Some(0x20),
                ..QdiscSpec::new("D".parse().unwrap())
            }))
        );
        let Command::ClassAdd(c) =
            change("class add dev D parent 1: classid 1:20 htb rate 180kbit ceil 180kbit")
        else {
            panic!()
        };
        assert_eq!(
            (
                c.id,
                c.parent,
                c.rate.bits_per_sec(),
                c.ceil.map(Rate::bits_per_sec)
            ),
            (
                htb_core::ClassId::new(1, 0x20),
                Some(htb_core::ClassId::new(1, 0)),
                180_000,
                Some(180_000)
            )
        );
        let Command::ClassChange(c) =
            change("class change dev D parent 1: classid 1:1 htb mtu 9000 rate 500mbit")
        else {
            panic!()
        };
        assert_eq!((c.mtu, c.rate), (Some(9000), Rate::from_mbit(500)));
        let inv = parse_command_line(&words("-s class show dev D")).unwrap();
        assert!(inv.options.stats);
        assert_eq!(
            inv.action,
            Some(Action::Show(Show {
                object: Some(Object::Class),
                dev: Some("D".parse().unwrap()),
                ..Show::default()
            }))
        );
    }

    #[test]
    fn leaf_qdisc_lines_of_classic_scripts_parse() {
        use htb_core::{ClassId, Duration, FqCodelSpec, SfqSpec};
        // wondershaper
        assert_eq!(
            change("qdisc add dev eth0 parent 1:10 handle 10: sfq perturb 10"),
            Command::LeafAdd(Box::new(LeafQdiscSpec {
                stab: None,
                dev: "eth0".parse().unwrap(),
                parent: Some(ClassId::new(1, 0x10)),
                handle: Some(ClassId::new(0x10, 0)),
                leaf: LeafSpec::Sfq(SfqSpec {
                    perturb: Some(10),
                    ..SfqSpec::default()
                }),
            }))
        );
        // home routers and LibreQoS's fq_codel mode
        let Command::LeafAdd(l) = change(
            "qdisc add dev eth0 parent 1:10 handle 110: fq_codel limit 1000 target 5ms interval 100ms ecn quantum 300 memory_limit 4mb drop_batch 32 ce_threshold 2500us flows 256",
        ) else {
            panic!()
        };
        assert_eq!(l.handle, Some(ClassId::new(0x110, 0)));
        assert_eq!(
            l.leaf,
            LeafSpec::FqCodel(FqCodelSpec {
                limit: Some(1000),
                flows: Some(256),
                target: Some(Duration::from_millis(5)),
                interval: Some(Duration::from_millis(100)),
                quantum: Some(300),
                ecn: Some(true),
                ce_threshold: Some(Duration::from_micros(2500)),
                memory_limit: Some(4 << 20),
                drop_batch: Some(32),
            })
        );
        assert!(matches!(
            change("qdisc add dev eth0 parent 1:3 fq_codel"),
            Command::LeafAdd(spec) if matches!(*spec, LeafQdiscSpec { handle: None, .. })
        ));
        assert!(matches!(
            change("qdisc replace dev eth0 parent 1:20 pfifo limit 100"),
            Command::LeafReplace(spec) if matches!(*spec, LeafQdiscSpec {
                leaf: LeafSpec::Pfifo { limit: Some(100) },
                ..
            })
        ));
        assert!(matches!(
            change("qdisc add dev eth0 parent 1:30 bfifo limit 30kb"),
            Command::LeafAdd(spec) if matches!(*spec, LeafQdiscSpec {
                leaf: LeafSpec::Bfifo {
                    limit: Some(30_720)
                },
                ..
            })
        ));
        assert!(matches!(
            change("qdisc change dev eth0 parent 1:10 handle 10: fq_codel target 10ms noecn"),
            Command::LeafChange(spec) if matches!(*spec, LeafQdiscSpec {
                leaf: LeafSpec::FqCodel(FqCodelSpec {
                    target: Some(_),
                    ecn: Some(false),
                    limit: None,
                    ..
                }),
                ..
            })
        ));
        let Command::LeafAdd(l) = change(
            "qdisc add dev eth0 parent 1:10 sfq quantum 1514 perturb 10 limit 127 depth 127 divisor 1024 flows 128 headdrop",
        ) else {
            panic!()
        };
        assert!(matches!(
            l.leaf,
            LeafSpec::Sfq(SfqSpec {
                headdrop: true,
                flows: Some(128),
                ..
            })
        ));
        assert_eq!(
            change("qdisc del dev eth0 parent 1:10 handle 10: sfq"),
            Command::LeafDelete {
                dev: "eth0".parse().unwrap(),
                parent: ClassId::new(1, 0x10),
                handle: Some(ClassId::new(0x10, 0)),
                kind: Some(LeafKind::Sfq),
            }
        );
        let inv = parse_command_line(&words("qdisc show dev eth0 invisible")).unwrap();
        assert!(matches!(
            inv.action,
            Some(Action::Show(Show {
                invisible: true,
                ..
            }))
        ));
    }

    /// A tbf under an HTB class, as scripts write it: dispatched by the kinds' table, listed in
    /// the qdisc usage and the refusal of an unknown kind.
    #[test]
    fn a_tbf_leaf_line_parses_and_tbf_is_listed() {
        use htb_core::{ClassId, Duration, Rate, TbfSpec};
        assert_eq!(
            change(
                "qdisc add dev eth0 parent 1:10 handle 10: tbf rate 1mbit burst 10kb latency 50ms"
            ),
            Command::LeafAdd(Box::new(LeafQdiscSpec {
                stab: None,
                dev: "eth0".parse().unwrap(),
                parent: Some(ClassId::new(1, 0x10)),
                handle: Some(ClassId::new(0x10, 0)),
                leaf: LeafSpec::Tbf(TbfSpec {
                    rate: Some(Rate::from_mbit(1)),
                    burst: Some(10 * 1024),
                    latency: Some(Duration::from_millis(50)),
                    ..TbfSpec::default()
                }),
            }))
        );
        assert!(error("qdisc add dev eth0 parent 1:10 tbf rate 1mbit").contains("\"burst\""));
        assert!(error("qdisc add dev D parent 1:10 red").contains(", cake, tbf (under"));
        let Some(Action::Help(usage)) =
            parse_command_line(&words("qdisc add help")).unwrap().action
        else {
            panic!("qdisc help is help");
        };
        assert!(
            usage.contains("{ pfifo | bfifo | sfq | fq_codel | cake | tbf }"),
            "{usage}"
        );
    }

    #[test]
    fn keywords_match_by_prefix_in_tcs_order() {
        let Command::ClassAdd(c) = change(
            "c a dev D parent 1:1 classid 1:10 htb rate 1mbit m 9000 b 15k c 3000 p 3 q 1514 o 24 mp 64 l atm",
        ) else {
            panic!()
        };
        assert_eq!(c.mtu, Some(9000), "m is mtu");
        assert_eq!(c.burst, Some(15 * 1024), "b is burst");
        assert_eq!(c.cburst, Some(3000), "c is cburst");
        assert_eq!(
            (c.prio, c.quantum, c.overhead, c.mpu),
            (Some(3), Some(1514), Some(24), Some(64))
        );
        assert_eq!(c.linklayer, Some(htb_core::LinkLayer::Atm));
        assert!(matches!(
            change("q del dev D root"),
            Command::QdiscDelete { .. }
        ));
        assert!(matches!(
            change("cl del dev D classid 1:10"),
            Command::ClassDelete(htb_ipc::ClassDelete { .. })
        ));
    }

    #[test]
    fn sqm_and_wondershapers_ingress_lines_parse() {
        for line in [
            "qdisc add dev r2 handle ffff: ingress",
            "qdisc add dev r2 ingress",
            "qdisc replace dev r2 parent ffff:fff1 handle ffff: ingress",
        ] {
            assert_eq!(
                change(line),
                Command::IngressAdd {
                    dev: "r2".parse().unwrap()
                },
                "{line}"
            );
        }
        for line in [
            "qdisc del dev r2 ingress",
            "qdisc del dev r2 handle ffff: ingress",
            "qdisc del dev r2 parent ffff:fff1",
        ] {
            assert_eq!(
                change(line),
                Command::IngressDelete {
                    dev: "r2".parse().unwrap()
                },
                "{line}"
            );
        }
        let Command::FilterAdd(f) = change(
            "filter add dev r2 parent ffff: protocol all prio 10 u32 match u32 0 0 flowid 1:1 action mirred egress redirect dev ifb4r2",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(f.parent, Some(htb_core::ClassId::new(0xffff, 0)));
        assert_eq!(
            (
                f.redirect.as_deref(),
                f.class.map(|c| c.to_string()).unwrap_or_default().as_str()
            ),
            (Some("ifb4r2"), "1:1")
        );
        // Without a flowid, as many guides write it.
        let Command::FilterAdd(f) = change(
            "filter add dev eth0 parent ffff: protocol ip u32 match u32 0 0 action mirred egress redirect dev ifb0",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(
            (
                f.redirect.as_deref(),
                f.class.map(|c| c.to_string()).unwrap_or_default().as_str()
            ),
            (Some("ifb0"), "")
        );
        assert!(error("qdisc add dev r2 handle 1: ingress").contains("ffff:"));
        assert!(error("qdisc add dev r2 clsact").contains("clsact"));
        assert!(
            error("filter add dev r2 parent ffff: u32 match u32 0 0 action mirred egress mirror dev ifb0")
                .contains("copy")
        );
    }

    /// The `dev` word is read once, as the kernel's `dev_valid_name()` checks a name: a name no
    /// interface can have fails in the parser, naming the rule, in every place a device is
    /// named; names operators use read as they are.
    #[test]
    fn a_device_name_the_kernel_refuses_is_refused_where_it_is_read() {
        for line in [
            "qdisc add dev x/y root handle 1: htb",
            "class add dev x/y parent 1: classid 1:2 htb rate 1mbit",
            "class del dev x/y classid 1:2",
            "filter add dev x/y parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.1/32 flowid 1:2",
            "filter del dev x/y",
            "filter show dev x/y",
            "class show dev x/y",
            "qdisc show dev x/y",
            "monitor dev x/y",
            "class label dev x/y classid 1:2 name n",
            "explain 10.0.0.1 dev x/y",
            "flows dev x/y",
            "filter add dev r2 parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev x/y",
        ] {
            let e = parse_command(&words(line)).unwrap_err().0;
            assert_eq!(
                e, "\"x/y\" is not a valid interface name: it may not hold '/'",
                "{line}"
            );
        }
        assert!(
            error("qdisc del dev ifb-sixteen-byte root")
                .contains("16 bytes, at most 15 (IFNAMSIZ - 1)")
        );
        assert!(error("qdisc del dev eth0:1 root").contains("may not hold ':'"));
        for dev in [
            "eth0",
            "enp3s0f1",
            "veth-a",
            "ifb0",
            "wg0",
            "bond0.100",
            "acc0",
            "ifb4enp3s0f1x",
        ] {
            let Command::QdiscDelete { dev: read } = change(&format!("qdisc del dev {dev} root"))
            else {
                panic!("{dev}")
            };
            assert_eq!(read, dev);
        }
        // A kind's options need the device first (the kind reads every word after it).
        assert_eq!(
            error("class add parent 1: classid 1:2 htb rate 1mbit"),
            "Must specify device (dev DEV)."
        );
        assert_eq!(
            error("filter add parent 1: protocol ip u32 match u32 0 0 flowid 1:2"),
            "Must specify device (dev DEV)."
        );
    }

    #[test]
    fn errors_read_like_tc() {
        assert_eq!(
            error("class add dev D parent 1: classid 1:2 htb ceil 1mbit"),
            "\"rate\" is required."
        );
        assert_eq!(
            error("class add dev D parent 1: classid 1:2 htb rate 1mbit rate 2mbit"),
            "Double \"rate\" spec"
        );
        assert_eq!(
            error("class add dev D parent 1: classid 1:2 htb rate fast"),
            "Illegal \"rate\""
        );
        assert!(
            error("class add dev D parent 1: classid 1:2 htb rate 1mbit bogus 1")
                .starts_with("What is \"bogus\"?")
        );
        assert_eq!(
            error("qdisc add dev D root htb default xyz"),
            "Illegal \"default\""
        );
        assert!(error("bogus show").starts_with("Object \"bogus\" is unknown"));
        assert!(error("class frobnicate dev D").starts_with("Command \"frobnicate\" is unknown"));
        assert!(
            error("class add dev D parent 1: classid 1:2 htb rate")
                .starts_with("Command line is not complete")
        );
        // A classless qdisc at the root: a leaf command without a parent.
        assert!(matches!(
            change("qdisc add dev D root fq_codel"),
            Command::LeafAdd(spec) if matches!(*spec, LeafQdiscSpec { parent: None, .. })
        ));
        assert!(error("qdisc add dev D fq_codel").contains("Classid cannot be zero"));
        // A size table needs something to change; under a class it has nothing to count.
        assert!(
            error("qdisc add dev D root handle 1: stab mtu 2047 htb")
                .contains("stab needs overhead, mpu or linklayer")
        );
        assert!(
            error("qdisc add dev D parent 1:10 stab overhead 4 fq_codel")
                .contains("on the root htb qdisc")
        );
        assert!(error("qdisc add dev D root mq stab overhead 4").contains("What is \"stab\""));
        let Command::QdiscAdd(q) = change(
            "qdisc add dev D root handle 1: stab mtu 2047 tsize 512 mpu 0 overhead 34 linklayer ethernet htb default 10",
        ) else {
            panic!("not a qdisc add");
        };
        assert_eq!(q.default_minor, Some(0x10));
        let stab = q.stab.unwrap();
        assert_eq!((stab.overhead, stab.mtu, stab.tsize), (34, 2047, 512));
        let Command::LeafAdd(l) =
            change("qdisc add dev D root stab overhead 44 linklayer atm fq_codel")
        else {
            panic!("not a leaf add");
        };
        assert_eq!(l.stab.unwrap().link_layer, Some(htb_core::LinkLayer::Atm));
        assert!(
            error("qdisc add dev D parent 1:10 cake diffserv5")
                .starts_with("What is \"diffserv5\"?")
        );
        assert!(error("qdisc add dev D parent 1:10 red").starts_with("Unknown qdisc \"red\""));
        assert_eq!(
            error("qdisc add dev D parent 1:10 sfq limit 1"),
            "Illegal \"limit\", must be > 1"
        );
        assert!(
            error("qdisc add dev D parent 1:10 fq_codel target x")
                .starts_with("Illegal \"target\"")
        );
        assert!(
            error("qdisc add dev D parent 1:10 fq_codel bogus").starts_with("What is \"bogus\"?")
        );
        assert!(error("qdisc add dev D parent 1:10 sfq redflowlimit 1000").contains("RED"));
        assert!(error("qdisc del dev D").contains("Classid cannot be zero"));
        assert!(
            parse_command_line(&words("-zz qdisc show"))
                .unwrap_err()
                .0
                .starts_with("Option \"-zz\" is unknown")
        );
    }

    #[test]
    fn filter_change_replace_and_get() {
        let Command::FilterChange(f) = change(
            "filter change dev D parent 1: protocol ip pref 1 handle 800::800 u32 match ip dst 10.0.0.9/32 flowid 1:30",
        ) else {
            panic!()
        };
        assert_eq!(
            (
                f.prio,
                f.handle,
                f.class.map(|c| c.to_string()).unwrap_or_default().as_str()
            ),
            (Some(1), Some(htb_ipc::FilterHandle(0x8000_0800)), "1:30")
        );
        assert_eq!(
            f.matcher.dst.map(|p| p.to_string()).as_deref(),
            Some("10.0.0.9/32")
        );
        let Command::FilterReplace(f) = change(
            "filter replace dev D parent 1: protocol ip prio 2 flower ip_proto udp dst_port 53 classid 1:20",
        ) else {
            panic!()
        };
        assert_eq!((f.prio, f.handle, f.kind.name()), (Some(2), None, "flower"));
        let e = parse_command_line(&words(
            "filter change dev D parent 1: u32 match ip dst 10.0.0.9/32 flowid 1:30",
        ))
        .unwrap_err();
        assert!(e.0.contains("needs the filter's pref and handle"), "{e:?}");
        let Ok(Invocation {
            action: Some(Action::Show(s)),
            ..
        }) = parse_command_line(&words(
            "filter get dev D parent 1: protocol ip pref 1 handle 800::800 u32",
        ))
        else {
            panic!()
        };
        assert_eq!(
            (s.object, s.prio, s.handle),
            (
                Some(Object::Filter),
                Some(1),
                Some(htb_ipc::FilterHandle(0x8000_0800))
            )
        );
        assert!(
            parse_command_line(&words("filter get dev D pref 1 u32"))
                .unwrap_err()
                .0
                .contains("filter get needs")
        );
    }

    #[test]
    fn u32_and_flower_filters() {
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: protocol ip prio 1 u32 match ip dst 10.201.2.0/24 match ip dport 5201 0xffff match ip protocol 17 0xff match ip tos 0xb8 0xfc flowid 1:10",
        ) else {
            panic!()
        };
        assert_eq!(
            (
                f.kind.name(),
                f.protocol.name(),
                f.prio,
                f.class.map(|c| c.to_string()).unwrap_or_default().as_str()
            ),
            ("u32", "ip", Some(1), "1:10")
        );
        assert_eq!(
            f.matcher,
            Match {
                dst: Some("10.201.2.0/24".parse().unwrap()),
                dport: Some(PortRange {
                    first: 5201,
                    last: 5201
                }),
                proto: Some(17),
                dscp: Some(46),
                ..Match::default()
            }
        );
        let Command::FilterAdd(f) =
            change("filter add dev D parent 1: prio 2 u32 match ip sport 5200 0xfff0 classid 1:20")
        else {
            panic!()
        };
        assert_eq!(
            f.matcher.sport,
            Some(PortRange {
                first: 5200,
                last: 5215
            })
        );
        assert_eq!(
            f.protocol,
            htb_ipc::Protocol::Ip,
            "an ip match implies protocol ip"
        );
        assert!(
            error("filter add dev D parent 1: u32 match ip dport 80 0x00ff classid 1:1")
                .contains("not a port range")
        );
        // LARTC's catch-all: a key with mask 0 matches every packet.
        let Command::FilterAdd(all) =
            change("filter add dev D parent 1: u32 match u32 0 0 at 0 classid 1:1")
        else {
            panic!("not a filter add");
        };
        assert_eq!(all.matcher, Match::default());
        // A key that is no header field htbd parses stays a general key, checked per packet.
        let Command::FilterAdd(raw) =
            change("filter add dev D parent 1: u32 match u32 1 0xffff at 4 classid 1:1")
        else {
            panic!("not a filter add");
        };
        assert_eq!(raw.matcher.raw.as_slice().len(), 1);
        // A hash table, a link with its hash key, a filter placed by sample.
        let Command::FilterAdd(t) =
            change("filter add dev D parent 1: prio 5 handle 2: protocol ip u32 divisor 256")
        else {
            panic!("not a filter add");
        };
        assert_eq!(t.hashing.divisor, Some(256));
        let Command::FilterAdd(l) = change(
            "filter add dev D parent 1: prio 5 protocol ip u32 ht 800:: match ip dst 10.0.0.0/16 hashkey mask 0x000000ff at 16 link 2:",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(l.hashing.link, Some(2));
        assert_eq!(l.hashing.table, Some((0x800, 0)));
        assert_eq!(
            l.hashing.hashkey,
            Some(htb_ipc::HashKey { mask: 0xff, at: 16 })
        );
        let Command::FilterAdd(s) = change(
            "filter add dev D parent 1: prio 5 protocol ip u32 ht 2: sample ip dst 10.0.0.42 match ip dst 10.0.0.42/32 flowid 1:2a",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(s.hashing.table, Some((2, 0x2a)));
        assert!(error("filter add dev D parent 1: u32 divisor 3").contains("divisor"));
        assert!(error("filter add dev D parent 1: u32 match ip dst 10.0.0.0/8 offset at 0 mask 0x0f00 shift 6 link 1:").contains("offset"));

        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: protocol ip pref 3 flower ip_proto udp dst_ip 10.201.2.0/24 dst_port 5000-5100 ip_tos 0xb8/0xfc classid 1:30",
        ) else {
            panic!()
        };
        assert_eq!((f.kind.name(), f.prio), ("flower", Some(3)));
        assert_eq!(
            f.matcher.dport,
            Some(PortRange {
                first: 5000,
                last: 5100
            })
        );
        assert_eq!((f.matcher.proto, f.matcher.dscp), (Some(17), Some(46)));
        assert!(
            error("filter add dev D parent 1: protocol ip flower dst_port 80 classid 1:1")
                .contains("ip_proto")
        );
        assert!(
            error("filter add dev D parent 1: protocol ip flower vlan_id 5 classid 1:1")
                .contains("802.1Q")
        );
        assert_eq!(
            change("filter del dev D parent 1: prio 1 handle 800::800 u32"),
            Command::FilterDelete(htb_ipc::FilterDelete {
                dev: "D".parse().unwrap(),
                parent: Some(htb_core::ClassId::new(1, 0)),
                prio: Some(1),
                handle: Some(htb_ipc::FilterHandle(0x8000_0800))
            })
        );
    }

    #[test]
    fn hex_handles_one_word_u32_handles_and_shorthand_keys_as_tc_reads_them() {
        // get_qdisc_handle: strtoul base 16 takes 0x (two scripts of the issue write these).
        for (text, major) in [
            ("0x1:", 1),
            ("0x2002:", 0x2002),
            ("0x9000:", 0x9000),
            ("1", 1),
        ] {
            let Command::QdiscAdd(q) = change(&format!(
                "qdisc add dev D root handle {text} htb default 10"
            )) else {
                panic!("not a qdisc add: {text}");
            };
            assert_eq!(q.handle, Some(htb_core::ClassId::new(major, 0)), "{text}");
        }
        assert!(error("qdisc add dev D root handle 0x10000: htb").contains("handle"));
        // LibreQoS v0.81: a node handle written as one number, placed in the bucket ht names.
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 0x1:0 protocol ip u32 ht 3:2: handle 0x65 match ip dst 100.64.0.2/32 flowid 1:13",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(f.handle, Some(htb_ipc::FilterHandle(0x0030_2065)));
        assert_eq!(f.hashing.table, Some((3, 2)));
        // The same before the kind, and the kernel's own spelling of a handle.
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: prio 1 handle 0x80000800 protocol ip u32 match ip dst 10.0.0.1/32 flowid 1:1",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(f.handle, Some(htb_ipc::FilterHandle(0x8000_0800)));
        assert!(
            error("filter add dev D parent 1: u32 ht 3:2: handle 4:2:65 match ip dst 10.0.0.1/32 flowid 1:1")
                .contains("not in hash table 3: bucket 2")
        );
        assert!(
            error("filter add dev D parent 1: u32 handle 800 match ip dst 10.0.0.1/32 flowid 1:1")
                .contains("not a u32 handle")
        );
        // `match u32 V M` with no `at` is offset 0; zero masks match every packet.
        for catch_all in [
            "filter add dev D parent 1: u32 match u32 0 0 flowid 1:1",
            "filter add dev D parent 1: protocol ip u32 match ip protocol 0 0x00 flowid 1:1",
            "filter add dev D parent 1: u32 match u8 0 0 flowid 1:1",
        ] {
            let Command::FilterAdd(f) = change(catch_all) else {
                panic!("not a filter add: {catch_all}");
            };
            assert_eq!(f.matcher, Match::default(), "{catch_all}");
        }
        // tc-testing's sample case: a sample key without `at`, then a zero-mask match.
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: prio 5 protocol ip u32 ht 2: sample u32 0x7 0xff match u8 0 0 flowid 1:2",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(f.hashing.table, Some((2, 7)));
    }

    #[test]
    fn protocol_arp_is_a_filter_protocol_and_fw_is_refused_saying_why() {
        let Command::FilterAdd(f) =
            change("filter add dev D parent 1: protocol arp prio 1 u32 match u32 0 0 flowid 1:10")
        else {
            panic!("not a filter add");
        };
        assert_eq!((f.protocol.name(), f.matcher), ("arp", Match::default()));
        let fw = error("filter add dev D parent 1: protocol all prio 1 handle 1 fw classid 1:11");
        assert!(fw.contains("firewall mark") && fw.contains("XDP"), "{fw}");
        assert!(error("filter add dev D parent 1: matchall classid 1:1").contains("matchall"));
    }

    #[test]
    fn police_on_u32_and_flower_filters() {
        // wondershaper 1.1a's ingress line (u32's own `police`), and the `action` form.
        for line in [
            "filter add dev D parent 1: protocol ip prio 50 u32 match ip src 0.0.0.0/0 police rate 2048kbit burst 10k drop flowid :1",
            "filter add dev D parent 1: protocol ip prio 50 u32 match ip src 0.0.0.0/0 action police rate 2048kbit burst 10k drop flowid 1:1",
            "filter add dev D parent 1: protocol ip prio 50 flower src_ip 0.0.0.0/0 action police rate 2048kbit burst 10k conform-exceed drop classid 1:1",
        ] {
            let Command::FilterAdd(f) = change(line) else {
                panic!("not a filter add: {line}");
            };
            let p = f.police.unwrap_or_else(|| panic!("no police: {line}"));
            assert_eq!(
                (p.rate, p.burst, p.exceed),
                (
                    Some(Rate::from_kbit(2048)),
                    10 * 1024,
                    htb_ipc::ControlAction::Drop
                ),
                "{line}"
            );
        }
        assert!(
            error("filter add dev D parent 1: u32 match u32 0 0 police rate 1mbit flowid 1:1")
                .contains("'burst' requires 'rate'")
        );
    }

    #[test]
    fn mq_and_htb_under_its_classes_as_libreqos_writes_them() {
        use htb_core::ClassId;
        assert_eq!(
            change("qdisc replace dev eth1 root handle 7FFF: mq"),
            Command::MqReplace(htb_ipc::MqSpec {
                dev: "eth1".parse().unwrap(),
                handle: Some(ClassId::new(0x7fff, 0)),
            })
        );
        let Command::QdiscAdd(q) =
            change("qdisc add dev eth1 parent 7FFF:0x1 handle 0x1: htb default 2")
        else {
            panic!("not a qdisc add");
        };
        assert_eq!(
            (q.parent, q.handle, q.default_minor),
            (
                Some(ClassId::new(0x7fff, 1)),
                Some(ClassId::new(1, 0)),
                Some(2)
            )
        );
        assert!(error("qdisc change dev eth1 root handle 7fff: mq").contains("no options"));
        assert!(error("qdisc add dev eth1 parent 1:1 mq").contains("at the root"));
        assert!(error("qdisc add dev eth1 root mq debug").contains("no options"));
    }

    #[test]
    fn masks_are_hex_and_gact_ok_is_what_classifying_does() {
        // f_u32.c reads every mask in base 16, with or without 0x.
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: protocol ip prio 98 u32 match tcp src 22 FFFF classid 1:3",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(
            f.matcher.sport,
            Some(PortRange {
                first: 22,
                last: 22
            })
        );
        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: prio 99 u32 ht 1: sample u32 0x10203040 ff match u8 0 0 classid 1:1",
        ) else {
            panic!("not a filter add");
        };
        assert_eq!(f.hashing.table, Some((1, 0x40)));
        assert_eq!(
            f.protocol,
            htb_ipc::Protocol::All,
            "a zero-mask key keeps tc's protocol"
        );
        for ok in ["action ok", "action pass", "action gact ok"] {
            change(&format!(
                "filter add dev D parent 1: protocol ip prio 1 u32 match ip src 127.0.0.1/32 flowid 1:1 {ok}"
            ));
        }
        assert!(
            error("filter add dev D parent 1: protocol ip prio 1 u32 match ip src 127.0.0.1/32 flowid 1:1 action drop")
                .contains("only classify")
        );
    }

    #[test]
    fn batches_keep_line_numbers_and_stop_at_the_first_bad_line() {
        let text = "# a tree\nqdisc add dev D root handle 1: htb default 20\n\nclass add dev D parent 1: \\\n  classid 1:20 htb rate 1mbit\nclass show dev D\n";
        let parsed = parse_batch(text).unwrap();
        assert_eq!(
            parsed.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [2, 4, 6]
        );
        let bad = "qdisc add dev D root handle 1: htb\nclass add dev D classid 1:1 htb\n";
        let (line, e) = parse_batch(bad).unwrap_err();
        assert_eq!((line, e.0.as_str()), (2, "\"rate\" is required."));
        assert_eq!(
            split_line("class \"add\" dev  D # comment"),
            ["class", "add", "dev", "D"]
        );
        assert_eq!(
            split_line("name 'say \"hi\" #1' x O'Neil \"it's\""),
            ["name", "say \"hi\" #1", "x", "O'Neil", "it's"]
        );
    }
}
