//! `htb-cli explain ADDR [peer ADDR] [dev DEV] [proto tcp|udp|N] [port N] [peer_port N]`:
//! which filter and class packets to and from an address take on each port, from htbd's data
//! plane's own classifier (not tc's: tc has no such command; `tc filter get` needs the filter).

use std::io::Write;
use std::net::IpAddr;

use htb_ipc::{Direction, Explain, Explanation, ReplyBody, RequestBody};

use super::args::{Args, Result, illegal, interface, usage};
use super::options::Options;
use crate::client::{Client, ClientError};

/// The usage line.
pub(crate) const EXPLAIN_USAGE: &str = "Usage: htb-cli explain ADDR [ peer ADDR ] [ dev DEV ] \
[ proto { tcp | udp | N } ] [ port N ] [ peer_port N ]";

/// Parses `explain`'s words.
///
/// # Errors
/// tc-style usage errors.
pub(super) fn parse(words: &[String]) -> Result<Explain> {
    let Some((addr, rest)) = words.split_first() else {
        return usage(EXPLAIN_USAGE);
    };
    let address = |w: &str| -> Result<IpAddr> {
        w.parse().or_else(|_| {
            usage(format!(
                "\"{w}\" is not an IPv4 or IPv6 address. {EXPLAIN_USAGE}"
            ))
        })
    };
    let mut ask = Explain {
        addr: address(addr)?,
        peer: None,
        dev: None,
        proto: None,
        addr_port: None,
        peer_port: None,
    };
    let mut a = Args::new(rest);
    while let Some(w) = a.next() {
        match w {
            "peer" => ask.peer = Some(address(a.value()?)?),
            "dev" => ask.dev = Some(interface(a.value()?)?),
            "proto" => {
                ask.proto = Some(match a.value()? {
                    "tcp" => 6,
                    "udp" => 17,
                    "icmp" => 1,
                    "sctp" => 132,
                    n => n.parse().or_else(|_| illegal("proto"))?,
                });
            }
            "port" => ask.addr_port = Some(a.value()?.parse().or_else(|_| illegal("port"))?),
            "peer_port" => {
                ask.peer_port = Some(a.value()?.parse().or_else(|_| illegal("peer_port"))?);
            }
            other => return usage(format!("What is \"{other}\"? {EXPLAIN_USAGE}")),
        }
    }
    if let Some(peer) = ask.peer
        && peer.is_ipv4() != ask.addr.is_ipv4()
    {
        return usage(format!(
            "{} and {peer} are of different address families",
            ask.addr
        ));
    }
    Ok(ask)
}

/// Asks htbd and prints its answer (`-j`: as JSON).
pub(super) fn run(
    client: &mut Client,
    options: &Options,
    ask: Explain,
    out: &mut impl Write,
) -> std::result::Result<(), ClientError> {
    let addr = ask.addr;
    let ReplyBody::Explained(explained) = client.call(RequestBody::Explain(ask))? else {
        return Err(ClientError::Unexpected);
    };
    let text = if options.json {
        super::format::json(&explained, options.pretty).map_err(|_| ClientError::Unexpected)?
    } else {
        format(addr, &explained)
    };
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

/// The text form: a line per port and direction.
#[must_use]
pub(super) fn format(addr: IpAddr, e: &Explanation) -> String {
    let mut text = String::new();
    for p in &e.ports {
        let way = match p.direction {
            Direction::ToAddr => format!("to {addr}"),
            Direction::FromAddr => format!("from {addr}"),
        };
        let what = p.outcome.words();
        text.push_str(&format!("dev {} {way}: {what}", p.dev));
        if p.path.len() > 1 {
            let path: Vec<String> = p.path.iter().map(ToString::to_string).collect();
            text.push_str(&format!(", path {}", path.join(" < ")));
        }
        if let Some(queue) = p.leaf_queue {
            text.push_str(&format!(", leaf queue {queue}"));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::ClassId;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn explain_takes_an_address_and_optional_words() {
        let e = parse(&words(
            "10.0.3.7 peer 192.0.2.1 dev r2 proto tcp port 443 peer_port 5555",
        ))
        .unwrap();
        assert_eq!(e.addr, "10.0.3.7".parse::<IpAddr>().unwrap());
        assert_eq!(e.peer, Some("192.0.2.1".parse().unwrap()));
        assert_eq!((e.dev.as_deref(), e.proto), (Some("r2"), Some(6)));
        assert_eq!((e.addr_port, e.peer_port), (Some(443), Some(5555)));
        assert_eq!(parse(&words("2001:db8::7")).unwrap().proto, None);
        for (bad, says) in [
            ("", "Usage: htb-cli explain"),
            ("10.0.3", "not an IPv4 or IPv6 address"),
            ("10.0.3.7 proto tcpx", "Illegal \"proto\""),
            ("10.0.3.7 port 70000", "Illegal \"port\""),
            ("10.0.3.7 color red", "What is \"color\""),
            ("10.0.3.7 peer ::1", "different address families"),
            ("10.0.3.7 dev", ""),
        ] {
            let e = parse(&words(bad)).unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn each_port_and_direction_gets_a_line_with_the_path_and_the_leaf_queue() {
        let e = Explanation {
            ports: vec![
                htb_ipc::PortExplanation {
                    dev: "r2".parse().unwrap(),
                    direction: Direction::ToAddr,
                    outcome: htb_ipc::Outcome::Filter {
                        prio: 1,
                        matcher: htb_ipc::Match::default(),
                        class: ClassId::new(1, 0x10),
                        policed: false,
                    },
                    path: vec![ClassId::new(1, 0x10), ClassId::new(1, 1)],
                    leaf_queue: Some(347),
                },
                htb_ipc::PortExplanation {
                    dev: "r2".parse().unwrap(),
                    direction: Direction::FromAddr,
                    outcome: htb_ipc::Outcome::Default {
                        class: ClassId::new(1, 0x20),
                    },
                    path: vec![ClassId::new(1, 0x20)],
                    leaf_queue: None,
                },
                htb_ipc::PortExplanation {
                    dev: "r1".parse().unwrap(),
                    direction: Direction::ToAddr,
                    outcome: htb_ipc::Outcome::Unshaped,
                    path: vec![],
                    leaf_queue: None,
                },
            ],
        };
        assert_eq!(
            format("10.0.3.7".parse().unwrap(), &e),
            "dev r2 to 10.0.3.7: filter pref 1 (everything) -> class 1:10, path 1:10 < 1:1, \
             leaf queue 347\n\
             dev r2 from 10.0.3.7: no filter matches -> default class 1:20\n\
             dev r1 to 10.0.3.7: no HTB tree -> unshaped\n"
        );
    }
}
