//! `htb-cli explain ADDR [peer ADDR] [dev DEV] [proto tcp|udp|N] [port N] [peer_port N]`:
//! which filter and class packets to and from an address take on each port, from htbd's data
//! plane's own classifier (not tc's: tc has no such command; `tc filter get` needs the filter).

use std::io::Write;
use std::net::IpAddr;

use htb_ipc::{Direction, Explain, Explanation, ReplyBody, RequestBody};

use super::parse::Options;
use crate::client::{Client, ClientError};

/// Asks htbd and prints its answer (`-j`: as JSON).
pub(super) fn run(
    client: &mut Client,
    options: &Options,
    ask: Explain,
    out: &mut impl Write,
) -> Result<(), ClientError> {
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
