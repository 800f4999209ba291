//! tc's command-line grammar for HTB (iproute2 `tc/tc.c`, `tc_qdisc.c`, `tc_class.c`,
//! `tc_filter.c`, `q_htb.c`, `f_u32.c`, `f_flower.c`), parsed into typed requests.
//!
//! Keywords are matched as tc matches them: some exactly (`rate`, `ceil`, `dev`), most by any
//! non-empty prefix, tried in tc's order (`m` is `mtu`, `b` is `burst`, `c` is `cburst`). Errors
//! read like tc's (`What is "x"?`, `Illegal "rate"`, `"rate" is required.`).

use std::fmt;
use std::net::IpAddr;

use htb_core::ClassId;
use htb_core::units::{parse_rate_or_percent, parse_size};
use htb_ipc::{ClassSpec, Command, FilterSpec, Object, QdiscSpec, Show};

/// A usage error: tc's wording, exit status 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

type Result<T> = std::result::Result<T, UsageError>;

fn usage<T>(message: impl Into<String>) -> Result<T> {
    Err(UsageError(message.into()))
}

fn illegal<T>(what: &str) -> Result<T> {
    usage(format!("Illegal \"{what}\""))
}

/// tc's `matches()`: `word` is a non-empty prefix of `keyword`.
#[must_use]
pub fn matches(word: &str, keyword: &str) -> bool {
    !word.is_empty() && keyword.starts_with(word)
}

/// Global options (before the object).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-s`: statistics.
    pub stats: bool,
    /// `-d`: details.
    pub details: bool,
    /// `-r`: raw buffer values.
    pub raw: bool,
    /// `-j`: JSON.
    pub json: bool,
    /// `-p`: pretty JSON.
    pub pretty: bool,
    /// `-iec`: rates in IEC units.
    pub iec: bool,
    /// `--socket PATH`.
    pub socket: Option<String>,
    /// `-b FILE` / `batch FILE`.
    pub batch: Option<String>,
}

/// What one command line asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read state.
    Show(Show),
    /// Change state.
    Change(Command),
    /// Live per-class rates.
    Monitor(Monitor),
    /// Print usage.
    Help(&'static str),
    /// Print the version.
    Version,
}

/// `monitor [dev D] [interval SECS] [count N]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Monitor {
    /// Only this interface.
    pub dev: Option<String>,
    /// Seconds between refreshes.
    pub interval: f64,
    /// Stop after this many refreshes (0: until interrupted).
    pub count: u64,
}

impl Eq for Monitor {}

/// Top-level usage (tc's, for the HTB parts).
pub const USAGE: &str = "\
Usage: htb-cli [ OPTIONS ] OBJECT { COMMAND | help }
       htb-cli [ OPTIONS ] -b[atch] FILE     (all commands of FILE, atomically)
       htb-cli monitor [ dev DEV ] [ interval SECS ] [ count N ]
       htb-cli sim SCENARIO.toml [ --json ] [ --svg OUT.svg ]
where  OBJECT := { qdisc | class | filter }
       OPTIONS := { -s[tatistics] | -d[etails] | -r[aw] | -i[ec] | -j[son] | -p[retty] |
                    -b[atch] FILE | -V[ersion] | -h[elp] | --socket PATH }
The daemon is reached at /run/htbd.sock, or $HTBD_SOCKET, or --socket PATH.";

const QDISC_USAGE: &str = "\
Usage: htb-cli qdisc [ add | del | replace | change | show ] dev STRING
       [ handle QHANDLE ] [ root ] htb [ default MINOR-ID ] [ r2q N ] [ direct_qlen P ]
       htb-cli qdisc { show | list } [ dev STRING ]";

const CLASS_USAGE: &str = "\
Usage: htb-cli class [ add | del | change | replace | show ] dev STRING
       [ classid CLASSID ] [ root | parent CLASSID ] htb rate R1 [ burst B1 ] [ mpu B ]
       [ overhead O ] [ prio P ] [ ceil R2 ] [ cburst B2 ] [ mtu MTU ] [ quantum Q ]
       [ linklayer { ethernet | atm | adsl } ]
 rate     rate allocated to this class (class can still borrow)
 burst    max bytes burst which can be accumulated during idle period {computed}
 mpu      minimum packet size used in rate computations
 overhead per-packet size overhead used in rate computations
 linklay  adapting to a linklayer e.g. atm
 ceil     definite upper class rate (no borrows) {rate}
 cburst   burst but for ceil {computed}
 mtu      max packet size we create rate map for {1600}
 prio     priority of leaf; lower are served first {0}
 quantum  how much bytes to serve from leaf at once {use r2q}";

const FILTER_USAGE: &str = "\
Usage: htb-cli filter [ add | del | show ] dev STRING [ parent CLASSID ]
       [ protocol PROTO ] [ pref PRIO ] [ handle FILTERID ] FILTER_TYPE [ FILTER_OPTIONS ]
FILTER_TYPE := u32 | flower
u32:    match ip { src | dst } PREFIX | match ip { sport | dport } PORT MASK
        | match ip protocol N 0xff | match ip { tos | dsfield } V M
        | match ip6 { src | dst } PREFIX | match ip6 { sport | dport } PORT MASK
        | match ip6 { protocol | priority } V M | match { tcp | udp } { src | dst } PORT MASK
        ... { flowid | classid } CLASSID
flower: [ src_ip PREFIX ] [ dst_ip PREFIX ] [ ip_proto tcp | udp | sctp | icmp | icmpv6 | N ]
        [ src_port PORT[-PORT] ] [ dst_port PORT[-PORT] ] [ ip_tos V[/M] ] [ vlan_id VID ]
        [ skip_sw | skip_hw ] classid CLASSID";

/// A parsed command line: options and the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Global options.
    pub options: Options,
    /// What to do (`None` with `-b FILE`).
    pub action: Option<Action>,
}

/// Parses a whole command line (without the program name).
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command_line(args: &[String]) -> Result<Invocation> {
    let mut options = Options::default();
    let mut rest = args;
    while let Some(arg) = rest.first() {
        let a = arg.as_str();
        if !a.starts_with('-') || a == "-" {
            break;
        }
        rest = &rest[1..];
        if let Some(path) = a.strip_prefix("--socket=") {
            options.socket = Some(path.to_owned());
        } else if a == "--socket" {
            let Some((path, more)) = rest.split_first() else {
                return usage("--socket needs a path");
            };
            options.socket = Some(path.clone());
            rest = more;
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
    let action = parse_command(rest)?;
    Ok(Invocation {
        options,
        action: Some(action),
    })
}

/// Parses one command: `OBJECT COMMAND ARGS…` (a command line after its options, or one line
/// of a batch file).
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command(words: &[String]) -> Result<Action> {
    let Some((object, args)) = words.split_first() else {
        return Ok(Action::Help(USAGE));
    };
    let o = object.as_str();
    if matches(o, "qdisc") {
        qdisc(args)
    } else if matches(o, "class") {
        class(args)
    } else if matches(o, "filter") {
        filter(args)
    } else if matches(o, "monitor") || o == "top" {
        monitor(args)
    } else if matches(o, "help") {
        Ok(Action::Help(USAGE))
    } else {
        usage(format!("Object \"{o}\" is unknown, try \"htb-cli help\"."))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Add,
    Change,
    Replace,
    Delete,
    Show,
}

fn verb(word: Option<&String>, object: &str) -> Result<Verb> {
    let Some(w) = word else {
        return Ok(Verb::Show);
    };
    let w = w.as_str();
    Ok(if matches(w, "add") {
        Verb::Add
    } else if matches(w, "change") {
        Verb::Change
    } else if matches(w, "replace") {
        Verb::Replace
    } else if matches(w, "delete") {
        Verb::Delete
    } else if matches(w, "show") || matches(w, "list") || matches(w, "lst") {
        Verb::Show
    } else {
        return usage(format!(
            "Command \"{w}\" is unknown, try \"htb-cli {object} help\"."
        ));
    })
}

/// Arguments as a cursor, tc's `NEXT_ARG()` style.
struct Args<'a> {
    words: &'a [String],
    at: usize,
}

impl<'a> Args<'a> {
    fn new(words: &'a [String]) -> Self {
        Self { words, at: 0 }
    }

    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.at)?;
        self.at += 1;
        Some(w.as_str())
    }

    /// The value after keyword `key` (tc: `Command line is not complete. Try option "help"`).
    fn value(&mut self, _key: &str) -> Result<&'a str> {
        self.next()
            .ok_or_else(|| UsageError("Command line is not complete. Try option \"help\"".into()))
    }

    fn rest(&self) -> &'a [String] {
        &self.words[self.at..]
    }
}

fn class_id(s: &str, what: &str) -> Result<ClassId> {
    s.parse().or_else(|_| illegal(what))
}

/// `1:` or `1` (tc's `get_qdisc_handle`).
fn qdisc_handle(s: &str) -> Result<String> {
    let digits = s.strip_suffix(':').unwrap_or(s);
    match u16::from_str_radix(digits, 16) {
        Ok(major) if major != 0 => Ok(format!("{major:x}:")),
        _ => usage(format!(
            "Illegal \"handle\" \"{s}\" (expected a qdisc handle like 1:)"
        )),
    }
}

fn u32_arg(s: &str, what: &str, radix: u32) -> Result<u32> {
    let parsed = if radix == 0 {
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            u32::from_str_radix(hex, 16)
        } else if s.len() > 1 && s.starts_with('0') {
            u32::from_str_radix(&s[1..], 8)
        } else {
            s.parse()
        }
    } else {
        u32::from_str_radix(s, radix)
    };
    parsed.or_else(|_| illegal(what))
}

fn u16_arg(s: &str, what: &str) -> Result<u16> {
    s.parse().or_else(|_| illegal(what))
}

fn qdisc(words: &[String]) -> Result<Action> {
    let verb = verb(words.first(), "qdisc")?;
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    let mut spec = QdiscSpec::default();
    let mut kind: Option<&str> = None;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(a.value("dev")?.to_owned()),
            "handle" => spec.handle = Some(qdisc_handle(a.value("handle")?)?),
            "root" => {}
            "parent" => {
                let p = a.value("parent")?;
                return usage(format!(
                    "htb-cli manages the root htb qdisc only; \"parent {p}\" is not supported"
                ));
            }
            "ingress" | "clsact" => {
                return usage(format!("htb-cli manages the root htb qdisc only, not {w}"));
            }
            w if matches(w, "help") => return Ok(Action::Help(QDISC_USAGE)),
            w if verb == Verb::Show => {
                // tc accepts a few selectors here (invisible, ingress, …); none matter to us.
                if !matches!(w, "invisible") {
                    return usage(format!("What is \"{w}\"? Try \"htb-cli qdisc help\"."));
                }
            }
            "htb" => {
                kind = Some("htb");
                htb_qdisc_options(&mut a, &mut spec)?;
            }
            other => {
                return usage(format!(
                    "Unknown qdisc \"{other}\": htb-cli manages htb only"
                ));
            }
        }
    }
    if verb == Verb::Show {
        return Ok(Action::Show(Show {
            object: Some(Object::Qdisc),
            dev,
            ..Show::default()
        }));
    }
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    spec.dev = dev.clone();
    if verb != Verb::Delete && kind.is_none() {
        return usage(
            "Unknown qdisc: say \"htb\", e.g. qdisc add dev eth0 root handle 1: htb default 20",
        );
    }
    Ok(Action::Change(match verb {
        Verb::Add => Command::QdiscAdd(spec),
        Verb::Change => Command::QdiscChange(spec),
        Verb::Replace => Command::QdiscReplace(spec),
        Verb::Delete => Command::QdiscDelete { dev },
        Verb::Show => unreachable!("handled above"),
    }))
}

/// `htb_parse_opt`.
fn htb_qdisc_options(a: &mut Args<'_>, spec: &mut QdiscSpec) -> Result<()> {
    while let Some(w) = a.next() {
        if matches(w, "r2q") {
            spec.r2q = Some(u32_arg(a.value(w)?, "r2q", 10)?);
        } else if matches(w, "default") {
            spec.default_minor = Some(u32_arg(a.value(w)?, "default", 16)?);
        } else if matches(w, "debug") {
            let _ = a.value(w)?;
        } else if matches(w, "direct_qlen") {
            spec.direct_qlen = Some(u32_arg(a.value(w)?, "direct_qlen", 10)?);
        } else if matches(w, "offload") {
            return usage("\"offload\" is not supported: htbd shapes in software");
        } else if w == "help" {
            return usage(QDISC_USAGE);
        } else {
            return usage(format!("What is \"{w}\"?\n{QDISC_USAGE}"));
        }
    }
    Ok(())
}

fn class(words: &[String]) -> Result<Action> {
    let verb = verb(words.first(), "class")?;
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    let mut id = None;
    let mut parent = None;
    let mut spec: Option<ClassSpec> = None;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(a.value("dev")?.to_owned()),
            "classid" => id = Some(class_id(a.value("classid")?, "classid")?),
            "handle" => return usage("Error: try \"classid\" instead of \"handle\""),
            "root" => parent = Some("root".to_owned()),
            "parent" => {
                let p = a.value("parent")?;
                parent = Some(if p == "root" {
                    "root".to_owned()
                } else {
                    class_id(p, "parent")?.to_string()
                });
            }
            w if matches(w, "estimator") => {
                let _ = (a.value(w)?, a.value(w)?);
            }
            w if matches(w, "help") => return Ok(Action::Help(CLASS_USAGE)),
            "htb" if verb != Verb::Show => {
                let dev_name = dev.clone().unwrap_or_default();
                spec = Some(htb_class_options(&mut a, &dev_name)?);
            }
            other if verb == Verb::Show => {
                return usage(format!("What is \"{other}\"? Try \"htb-cli class help\"."));
            }
            other => {
                return usage(format!(
                    "Unknown class kind \"{other}\": htb-cli manages htb only"
                ));
            }
        }
    }
    if verb == Verb::Show {
        return Ok(Action::Show(Show {
            object: Some(Object::Class),
            dev,
            class: id.map(|c| c.to_string()),
            parent,
            stats: false,
        }));
    }
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    let Some(id) = id else {
        return usage("Must specify classid (classid MAJ:MIN).");
    };
    if verb == Verb::Delete {
        return Ok(Action::Change(Command::ClassDelete {
            dev,
            id: id.to_string(),
        }));
    }
    let Some(mut spec) = spec else {
        return usage("Must specify the class kind: ... htb rate RATE");
    };
    spec.dev = dev;
    spec.id = id.to_string();
    spec.parent = parent.filter(|p| p != "root");
    Ok(Action::Change(match verb {
        Verb::Add => Command::ClassAdd(spec),
        Verb::Change => Command::ClassChange(spec),
        Verb::Replace => Command::ClassReplace(spec),
        Verb::Delete | Verb::Show => unreachable!("handled above"),
    }))
}

/// The link speed of `dev` for `N%` rates (tc reads `/sys/class/net/DEV/speed`, in Mbit/s).
fn link_speed(dev: &str) -> Option<htb_core::Rate> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{dev}/speed")).ok()?;
    let mbit: u64 = text.trim().parse().ok().filter(|&m| m > 0)?;
    Some(htb_core::Rate::from_mbit(mbit))
}

/// `htb_parse_class_opt`.
fn htb_class_options(a: &mut Args<'_>, dev: &str) -> Result<ClassSpec> {
    let mut spec = ClassSpec::default();
    let mut rate = None;
    let rate_arg = |s: &str, what: &str| -> Result<u64> {
        let speed = if s.ends_with('%') {
            link_speed(dev)
        } else {
            None
        };
        match parse_rate_or_percent(s, speed) {
            Ok(r) => Ok(r.bits_per_sec()),
            Err(htb_core::units::UnitError::PercentWithoutLinkSpeed) => usage(format!(
                "Illegal \"{what}\": cannot read the speed of {dev} for \"{s}\""
            )),
            Err(_) => illegal(what),
        }
    };
    // Sizes may carry tc's "/CELL" (legacy rate tables): accepted, ignored.
    let size_arg = |s: &str, what: &str| -> Result<u64> {
        let size = s.split('/').next().unwrap_or(s);
        parse_size(size).or_else(|_| illegal(what))
    };
    while let Some(w) = a.next() {
        if matches(w, "prio") {
            spec.prio = Some(u32_arg(a.value(w)?, "prio", 10)?);
        } else if matches(w, "mtu") {
            spec.mtu = Some(u32_arg(a.value(w)?, "mtu", 10)?);
        } else if matches(w, "mpu") {
            spec.mpu = Some(u16_arg(a.value(w)?, "mpu")?);
        } else if matches(w, "overhead") {
            spec.overhead = Some(u16_arg(a.value(w)?, "overhead")?);
        } else if matches(w, "linklayer") {
            let v = a.value(w)?;
            spec.linklayer = Some(match v {
                "ethernet" => "ethernet".into(),
                "atm" | "adsl" => "atm".into(),
                _ => return illegal("linklayer"),
            });
        } else if matches(w, "quantum") {
            spec.quantum = Some(u32_arg(a.value(w)?, "quantum", 10)?);
        } else if matches(w, "burst") || w == "buffer" || w == "maxburst" {
            spec.burst = Some(size_arg(a.value(w)?, "buffer")?);
        } else if matches(w, "cburst") || w == "cbuffer" || w == "cmaxburst" {
            spec.cburst = Some(size_arg(a.value(w)?, "cbuffer")?);
        } else if w == "ceil" {
            if spec.ceil.is_some() {
                return usage("Double \"ceil\" spec");
            }
            spec.ceil = Some(rate_arg(a.value(w)?, "ceil")?);
        } else if w == "rate" {
            if rate.is_some() {
                return usage("Double \"rate\" spec");
            }
            rate = Some(rate_arg(a.value(w)?, "rate")?);
        } else if w == "help" {
            return usage(CLASS_USAGE);
        } else {
            return usage(format!("What is \"{w}\"?\n{CLASS_USAGE}"));
        }
    }
    let Some(rate) = rate else {
        return usage("\"rate\" is required.");
    };
    spec.rate = rate;
    Ok(spec)
}

fn filter(words: &[String]) -> Result<Action> {
    let verb = verb(words.first(), "filter")?;
    if matches!(verb, Verb::Change | Verb::Replace) {
        return usage(
            "filter change/replace is not supported: delete the filter and add it again (in one batch, atomically)",
        );
    }
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    let mut spec = FilterSpec {
        protocol: "all".into(),
        ..FilterSpec::default()
    };
    let mut kind_given = false;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(a.value("dev")?.to_owned()),
            "root" => spec.parent = None,
            "parent" => spec.parent = Some(class_id(a.value("parent")?, "parent")?.to_string()),
            "handle" => spec.handle = Some(a.value("handle")?.to_owned()),
            "u32" | "flower" => {
                spec.kind = w.to_owned();
                kind_given = true;
                if verb == Verb::Add {
                    if w == "u32" {
                        u32_options(&mut a, &mut spec)?;
                    } else {
                        flower_options(&mut a, &mut spec)?;
                    }
                } else if let Some(extra) = a.next() {
                    return usage(format!(
                        "What is \"{extra}\"? (filter del and show take no match)"
                    ));
                }
            }
            w if matches(w, "preference") || matches(w, "priority") => {
                let v = a.value(w)?;
                spec.prio = Some(u32_arg(v, "preference", 0)?);
            }
            w if matches(w, "protocol") => {
                let v = a.value(w)?;
                spec.protocol = match v.to_ascii_lowercase().as_str() {
                    "ip" => "ip".into(),
                    "ipv6" => "ipv6".into(),
                    "all" => "all".into(),
                    "802.1q" | "8021q" => "802.1q".into(),
                    _ => return illegal("protocol"),
                };
            }
            w if matches(w, "chain") => {
                if a.value(w)? != "0" {
                    return usage("only chain 0 exists here");
                }
            }
            w if matches(w, "help") => return Ok(Action::Help(FILTER_USAGE)),
            other => {
                return usage(format!(
                    "Unknown filter \"{other}\", hence option \"{}\" is unparsable (htb-cli knows u32 and flower)",
                    a.rest().first().map_or("", String::as_str)
                ));
            }
        }
    }
    let dev = match (dev, verb) {
        (Some(dev), _) => dev,
        (None, Verb::Show) => String::new(),
        (None, _) => return usage("Must specify device (dev DEV)."),
    };
    match verb {
        Verb::Show => Ok(Action::Show(Show {
            object: Some(Object::Filter),
            dev: (!dev.is_empty()).then_some(dev),
            ..Show::default()
        })),
        Verb::Delete => {
            if spec.handle.is_some() && spec.prio.is_none() {
                return usage("Error: a filter handle needs its prio (pref N handle H)");
            }
            Ok(Action::Change(Command::FilterDelete {
                dev,
                prio: spec.prio,
                handle: spec.handle,
            }))
        }
        _ => {
            if !kind_given {
                return usage("Must specify the filter type: u32 or flower");
            }
            if spec.class.is_empty() {
                return usage("Must specify flowid/classid: where matching packets go");
            }
            spec.dev = dev;
            Ok(Action::Change(Command::FilterAdd(spec)))
        }
    }
}

fn number(s: &str, what: &str) -> Result<u32> {
    u32_arg(s, what, 0)
}

/// A value/mask pair on a port as an inclusive range (a mask of contiguous high bits).
fn port_range(value: u32, mask: u32, what: &str) -> Result<(u16, u16)> {
    let (Ok(value), Ok(mask)) = (u16::try_from(value), u16::try_from(mask)) else {
        return illegal(what);
    };
    // Contiguous high bits: !mask + 1 is a power of two (or mask is 0: any port).
    let span = u32::from(!mask) + 1;
    if !span.is_power_of_two() {
        return usage(format!(
            "Illegal \"{what}\": mask {mask:#06x} is not a prefix of the port, so it is not a port range"
        ));
    }
    let first = value & mask;
    Ok((first, first | !mask))
}

fn tos_to_dscp(value: u32, mask: u32, what: &str) -> Result<u8> {
    match (u8::try_from(value), mask) {
        (Ok(v), 0xfc | 0xff) => Ok(v >> 2),
        _ => usage(format!(
            "Illegal \"{what}\": only the DSCP bits can be matched (mask 0xfc, or 0xff)"
        )),
    }
}

fn set_once<T>(slot: &mut Option<T>, value: T, what: &str) -> Result<()> {
    if slot.is_some() {
        return usage(format!("Double \"{what}\" match: one per filter"));
    }
    *slot = Some(value);
    Ok(())
}

fn prefix(s: &str, v6: bool, what: &str) -> Result<String> {
    let addr = s.split('/').next().unwrap_or(s);
    match addr.parse::<IpAddr>() {
        Ok(ip) if ip.is_ipv6() == v6 => Ok(s.to_owned()),
        _ => illegal(what),
    }
}

/// `parse_u32` / `parse_selector` / `parse_ip` / `parse_ip6`.
fn u32_options(a: &mut Args<'_>, spec: &mut FilterSpec) -> Result<()> {
    let m = &mut spec.matcher;
    while let Some(w) = a.next() {
        if matches(w, "match") {
            let layer = a.value("match")?;
            let field = a.value("match")?;
            match (layer, field) {
                ("ip" | "ip6", "src" | "dst") => {
                    let v6 = layer == "ip6";
                    let p = prefix(a.value("match")?, v6, "match")?;
                    let slot = if field == "src" {
                        &mut m.src
                    } else {
                        &mut m.dst
                    };
                    set_once(slot, p, field)?;
                }
                ("ip" | "ip6", "sport" | "dport") | ("tcp" | "udp", "src" | "dst") => {
                    let value = number(a.value("match")?, "match")?;
                    let mask = number(a.value("match")?, "match")?;
                    let range = port_range(value, mask, field)?;
                    let slot = if matches!(field, "sport" | "src") {
                        &mut m.sport
                    } else {
                        &mut m.dport
                    };
                    set_once(slot, range, field)?;
                }
                ("ip" | "ip6", "protocol") => {
                    let value = number(a.value("match")?, "match")?;
                    let mask = number(a.value("match")?, "match")?;
                    let (Ok(p), 0xff) = (u8::try_from(value), mask) else {
                        return usage("Illegal \"protocol\": value 0-255 with mask 0xff");
                    };
                    set_once(&mut m.proto, p, "protocol")?;
                }
                ("ip", "tos" | "dsfield") | ("ip6", "priority") => {
                    let value = number(a.value("match")?, "match")?;
                    let mask = number(a.value("match")?, "match")?;
                    set_once(&mut m.dscp, tos_to_dscp(value, mask, field)?, field)?;
                }
                ("u32" | "u16" | "u8", _) => {
                    return usage(format!(
                        "raw \"match {layer}\" offsets are not supported: use match ip/ip6/tcp/udp fields"
                    ));
                }
                _ => {
                    return usage(format!(
                        "Illegal \"match\": \"{layer} {field}\" is not supported"
                    ));
                }
            }
            if layer == "ip6" && spec.protocol == "all" {
                spec.protocol = "ipv6".into();
            }
            if layer == "ip" && spec.protocol == "all" {
                spec.protocol = "ip".into();
            }
        } else if matches(w, "classid") || matches(w, "flowid") {
            spec.class = class_id(a.value(w)?, "classid")?.to_string();
        } else if w == "skip_hw" || w == "skip_sw" {
        } else if w == "help" {
            return usage(FILTER_USAGE);
        } else if matches(w, "action") || matches(w, "police") {
            return usage(format!(
                "\"{w}\" is not supported: htbd filters only classify"
            ));
        } else {
            return usage(format!("What is \"{w}\"?\n{FILTER_USAGE}"));
        }
    }
    Ok(())
}

/// `flower_parse_opt`.
fn flower_options(a: &mut Args<'_>, spec: &mut FilterSpec) -> Result<()> {
    let m = &mut spec.matcher;
    let ip = matches!(spec.protocol.as_str(), "ip" | "ipv6");
    while let Some(w) = a.next() {
        if matches(w, "classid") || matches(w, "flowid") {
            spec.class = class_id(a.value(w)?, "classid")?.to_string();
        } else if w == "skip_hw" || w == "skip_sw" {
        } else if matches(w, "vlan_id") {
            if spec.protocol != "802.1q" {
                return usage("Can't set \"vlan_id\" if ethertype isn't 802.1Q or 802.1AD");
            }
            let v = u16_arg(a.value(w)?, "vlan_id")?;
            if v > 4094 {
                return illegal("vlan_id");
            }
            m.vlan = Some(v);
        } else if matches(w, "ip_proto") {
            if !ip {
                return usage("Illegal \"eth_type\" for ip proto");
            }
            let v = a.value(w)?;
            m.proto = Some(match v {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                "icmp" => 1,
                "icmpv6" => 58,
                n => u8::try_from(number(n, "ip_proto")?).or_else(|_| illegal("ip_proto"))?,
            });
        } else if matches(w, "ip_tos") {
            let v = a.value(w)?;
            let (value, mask) = v.split_once('/').unwrap_or((v, "0xff"));
            m.dscp = Some(tos_to_dscp(
                number(value, "ip_tos")?,
                number(mask, "ip_tos")?,
                "ip_tos",
            )?);
        } else if matches(w, "dst_ip") || matches(w, "src_ip") {
            if !ip {
                return usage(format!("Illegal \"eth_type\" for {w}"));
            }
            let p = prefix(a.value(w)?, spec.protocol == "ipv6", w)?;
            if w.starts_with("dst") {
                m.dst = Some(p);
            } else {
                m.src = Some(p);
            }
        } else if matches(w, "dst_port") || matches(w, "src_port") {
            if !matches!(m.proto, Some(6 | 17 | 132)) {
                return usage(
                    "Illegal \"ip_proto\" for port: give ip_proto tcp, udp or sctp first",
                );
            }
            let v = a.value(w)?;
            let port = |s: &str| u16_arg(s, w);
            let range = match v.split_once('-') {
                Some((lo, hi)) => (port(lo)?, port(hi)?),
                None => (port(v)?, port(v)?),
            };
            if range.0 > range.1 {
                return illegal(w);
            }
            if w.starts_with("dst") {
                m.dport = Some(range);
            } else {
                m.sport = Some(range);
            }
        } else if w == "help" {
            return usage(FILTER_USAGE);
        } else if matches(w, "action") || matches(w, "police") {
            return usage(format!(
                "\"{w}\" is not supported: htbd filters only classify"
            ));
        } else {
            return usage(format!("What is \"{w}\"?\n{FILTER_USAGE}"));
        }
    }
    Ok(())
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
            m.dev = Some(a.value(w)?.to_owned());
        } else if matches(w, "interval") {
            m.interval = a
                .value(w)?
                .parse::<f64>()
                .ok()
                .filter(|s| (0.05..=3600.0).contains(s))
                .ok_or_else(|| UsageError("Illegal \"interval\" (seconds, 0.05 to 3600)".into()))?;
        } else if matches(w, "count") {
            m.count = a.value(w)?.parse().or_else(|_| illegal("count"))?;
        } else {
            return usage(format!(
                "What is \"{w}\"? Usage: htb-cli monitor [ dev DEV ] [ interval SECS ] [ count N ]"
            ));
        }
    }
    Ok(Action::Monitor(m))
}

/// Splits a batch-file line into words (tc's `makeargs`: whitespace, double quotes, `#`
/// comments).
#[must_use]
pub fn split_line(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for ch in line.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
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
/// each command with the number of the line it starts on.
///
/// # Errors
/// The first line that does not parse, with its number.
pub fn parse_batch(text: &str) -> std::result::Result<Vec<(usize, Action)>, (usize, UsageError)> {
    let mut out = Vec::new();
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
        let action = parse_command(&words).map_err(|e| (start, e))?;
        if let Action::Monitor(_) | Action::Help(_) | Action::Version = action {
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
    use htb_ipc::MatchSpec;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

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
    fn the_seed_lines_parse() {
        assert_eq!(
            change("qdisc add dev D root handle 1: htb default 20"),
            Command::QdiscAdd(QdiscSpec {
                dev: "D".into(),
                handle: Some("1:".into()),
                default_minor: Some(0x20),
                ..QdiscSpec::default()
            })
        );
        let Command::ClassAdd(c) =
            change("class add dev D parent 1: classid 1:20 htb rate 180kbit ceil 180kbit")
        else {
            panic!()
        };
        assert_eq!(
            (c.id.as_str(), c.parent.as_deref(), c.rate, c.ceil),
            ("1:20", Some("1:"), 180_000, Some(180_000))
        );
        let Command::ClassChange(c) =
            change("class change dev D parent 1: classid 1:1 htb mtu 9000 rate 500mbit")
        else {
            panic!()
        };
        assert_eq!((c.mtu, c.rate), (Some(9000), 500_000_000));
        let inv = parse_command_line(&words("-s class show dev D")).unwrap();
        assert!(inv.options.stats);
        assert_eq!(
            inv.action,
            Some(Action::Show(Show {
                object: Some(Object::Class),
                dev: Some("D".into()),
                ..Show::default()
            }))
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
        assert_eq!(c.linklayer.as_deref(), Some("atm"));
        assert!(matches!(
            change("q del dev D root"),
            Command::QdiscDelete { .. }
        ));
        assert!(matches!(
            change("cl del dev D classid 1:10"),
            Command::ClassDelete { .. }
        ));
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
        assert!(error("qdisc add dev D root fq_codel").contains("htb only"));
        assert!(
            parse_command_line(&words("-zz qdisc show"))
                .unwrap_err()
                .0
                .starts_with("Option \"-zz\" is unknown")
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
                f.kind.as_str(),
                f.protocol.as_str(),
                f.prio,
                f.class.as_str()
            ),
            ("u32", "ip", Some(1), "1:10")
        );
        assert_eq!(
            f.matcher,
            MatchSpec {
                dst: Some("10.201.2.0/24".into()),
                dport: Some((5201, 5201)),
                proto: Some(17),
                dscp: Some(46),
                ..MatchSpec::default()
            }
        );
        let Command::FilterAdd(f) =
            change("filter add dev D parent 1: prio 2 u32 match ip sport 5200 0xfff0 classid 1:20")
        else {
            panic!()
        };
        assert_eq!(f.matcher.sport, Some((5200, 5215)));
        assert_eq!(f.protocol, "ip", "an ip match implies protocol ip");
        assert!(
            error("filter add dev D parent 1: u32 match ip dport 80 0x00ff classid 1:1")
                .contains("not a port range")
        );
        assert!(
            error("filter add dev D parent 1: u32 match u32 0 0 at 0 classid 1:1").contains("raw")
        );

        let Command::FilterAdd(f) = change(
            "filter add dev D parent 1: protocol ip pref 3 flower ip_proto udp dst_ip 10.201.2.0/24 dst_port 5000-5100 ip_tos 0xb8/0xfc classid 1:30",
        ) else {
            panic!()
        };
        assert_eq!((f.kind.as_str(), f.prio), ("flower", Some(3)));
        assert_eq!(f.matcher.dport, Some((5000, 5100)));
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
            Command::FilterDelete {
                dev: "D".into(),
                prio: Some(1),
                handle: Some("800::800".into())
            }
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
    }
}
