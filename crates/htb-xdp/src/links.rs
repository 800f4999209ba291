//! Watching the ports while htbd runs: an operator may change a port's MAC address, its MTU or
//! its number of RX queues (`ethtool -L`) under a running daemon. None of these may blackhole or
//! misroute traffic:
//!
//! - a new MAC is followed: the XDP program's port entry (which frames are ours) and the data
//!   plane's egress lookup (the XDP program writes the egress port's MAC as the source) take it;
//!   before, every frame routed out of a port whose MAC changed was dropped as having no egress;
//! - an MTU the frames cannot hold is reported: larger frames cannot reach the socket;
//! - queues beyond those with a socket are handed to the kernel by the XDP program (it checks
//!   `rx_queue_index` against the port's queue count) and reported: a restart shapes them too.
//!
//! Each change is logged once, when it is seen (sysfs is read once a second).

use std::time::{Duration, Instant};

use crate::netdev::{NetDev, format_mac};
use crate::program::XdpProgram;

/// How often sysfs is read.
pub(crate) const LINK_CHECK: Duration = Duration::from_secs(1);

/// The ports as last seen.
pub(crate) struct LinkWatch {
    devs: Vec<NetDev>,
    /// Per port, its first XSKMAP slot and how many sockets it has (its queues at start).
    slots: Vec<(u32, u32)>,
    /// The largest MTU a UMEM frame holds ([`IoConfig::max_mtu`](crate::IoConfig::max_mtu)).
    max_mtu: u32,
    checked: Instant,
}

impl LinkWatch {
    pub(crate) fn new(devs: Vec<NetDev>, slots: Vec<(u32, u32)>, max_mtu: u32) -> Self {
        Self {
            devs,
            slots,
            max_mtu,
            checked: Instant::now(),
        }
    }

    /// Reads the ports' facts when [`LINK_CHECK`] has passed; follows MAC changes in the XDP
    /// program and returns them (port index, new MAC) for the data plane.
    pub(crate) fn check(&mut self, program: &mut XdpProgram) -> Vec<(usize, [u8; 6])> {
        if self.checked.elapsed() < LINK_CHECK {
            return Vec::new();
        }
        self.checked = Instant::now();
        let mut moved = Vec::new();
        for (port, old) in self.devs.iter_mut().enumerate() {
            let Ok(now) = NetDev::open(&old.name) else {
                // Gone: its XDP link went with it; the kernel handles whatever replaces it.
                continue;
            };
            if now.ifindex != old.ifindex {
                tracing::warn!(
                    "{}: the interface was replaced (ifindex {} -> {}): htbd is no longer \
                     attached to it; restart htbd to shape it",
                    old.name,
                    old.ifindex,
                    now.ifindex
                );
                *old = now;
                continue;
            }
            if now.mac != old.mac {
                let (base, sockets) = self.slots[port];
                match program.add_port(old.ifindex, base, sockets, now.mac) {
                    Ok(()) => tracing::info!(
                        "{}: MAC address changed from {} to {}: following it",
                        old.name,
                        format_mac(&old.mac),
                        format_mac(&now.mac)
                    ),
                    Err(e) => tracing::warn!(
                        "{}: MAC address changed to {} but the XDP program was not told ({e}): \
                         frames to the new address go to the kernel",
                        old.name,
                        format_mac(&now.mac)
                    ),
                }
                moved.push((port, now.mac));
            }
            if now.mtu != old.mtu {
                if now.mtu > self.max_mtu {
                    tracing::warn!(
                        "{}: MTU changed from {} to {}, more than frames of this UMEM hold \
                         (MTU {} at most): larger frames cannot reach htbd; raise frame_size \
                         and restart it",
                        old.name,
                        old.mtu,
                        now.mtu,
                        self.max_mtu
                    );
                } else {
                    tracing::info!("{}: MTU changed from {} to {}", old.name, old.mtu, now.mtu);
                }
            }
            if now.rx_queues != old.rx_queues {
                let sockets = self.slots[port].1;
                if now.rx_queues > sockets {
                    tracing::warn!(
                        "{}: {} RX queues now, htbd has sockets on {sockets}: frames on the \
                         others go to the kernel unshaped; restart htbd to shape them",
                        old.name,
                        now.rx_queues
                    );
                } else {
                    tracing::info!("{}: {} RX queues now", old.name, now.rx_queues);
                }
            }
            *old = now;
        }
        moved
    }
}
