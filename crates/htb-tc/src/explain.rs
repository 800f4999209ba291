//! `explain ADDR [peer ADDR] [dev DEV] [proto tcp|udp|N] [port N] [peer_port N]` (htbd's,
//! not tc's: tc has no such command): which filter and class packets to and from an address
//! take. Its grammar; htb-cli asks htbd and prints the answer.

use std::net::IpAddr;

use htb_ipc::Explain;

use crate::args::{Args, Result, illegal, interface, usage};

/// The usage line.
pub(crate) const EXPLAIN_USAGE: &str = "Usage: htb-cli explain ADDR [ peer ADDR ] [ dev DEV ] \
[ proto { tcp | udp | N } ] [ port N ] [ peer_port N ]";

/// Parses `explain`'s words.
///
/// # Errors
/// tc-style usage errors.
pub(crate) fn parse(words: &[String]) -> Result<Explain> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split_words as words;

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
}
