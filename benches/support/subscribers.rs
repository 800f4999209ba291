//! One `/32` filter per subscriber, as a LibreQoS-style import writes them: shared by the
//! classifier benchmarks that need a large, realistic filter list.

use std::net::{IpAddr, Ipv4Addr};

use htb_config::filter::{Filter, IpPrefix, Match};
use htb_core::ClassId;

/// `n` filters at prio 5, subscriber `i` (address `address(i)`) to class `1:0x10+i`.
pub(crate) fn subscriber_filters(n: u32, address: impl Fn(u32) -> Ipv4Addr) -> Vec<Filter> {
    (0..n)
        .map(|i| Filter {
            police: None,
            prio: 5,
            matcher: Match {
                dst: IpPrefix::new(IpAddr::V4(address(i)), 32),
                ..Match::default()
            },
            class: ClassId::new(1, 0x10 + i),
        })
        .collect()
}
