//! What one measurement window saw cross the router, and the premise a shaping measurement
//! must prove before it judges the shaper.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::host::gen_bin;
use crate::lab::{Lab, N1, N2, Reaped};
use crate::owed::Counted;
use crate::premise::unmeasured;

/// What crossed the router in a measurement window: L2 bytes sent by node-1 and received by
/// node-2 (which also counts whatever else node-2 receives, such as ARP: negligible).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// node-1's eth0 sent.
    pub offered: Counted,
    /// node-2's eth0 received.
    pub delivered: Counted,
}

impl Load {
    /// node-1's send rate, bit/s.
    #[must_use]
    pub fn offered_bps(&self) -> f64 {
        self.offered.bps()
    }

    /// node-2's receive rate, bit/s.
    #[must_use]
    pub fn delivered_bps(&self) -> f64 {
        self.delivered.bps()
    }

    /// Proves the premise of a shaping measurement: the generator offered at least 1.1× the
    /// class's `rate`. Otherwise the window measured the generator (starved of CPU by the
    /// host), not the shaper, and the attempt is abandoned to be measured again
    /// ([`crate::premise`]) instead of passing or failing by luck.
    ///
    /// # Panics
    /// When the premise does not hold ([`unmeasured`]).
    pub fn assert_saturates(&self, what: &str, rate_bps: f64) {
        eprintln!(
            "{what}: offered {:.3} Mbit/s ({:.2}× the class), delivered {:.3} Mbit/s",
            self.offered_bps() / 1e6,
            self.offered_bps() / rate_bps,
            self.delivered_bps() / 1e6
        );
        if self.offered_bps() < 1.1 * rate_bps {
            unmeasured(format!(
                "{what}: premise failed: the generator offered only {:.1} Mbit/s for a {:.1} \
                 Mbit/s class (needs 1.1×), so this window would measure the generator, not \
                 the shaper",
                self.offered_bps() / 1e6,
                rate_bps / 1e6
            ));
        }
    }
}

/// Loads offered through the lab and measured across the router.
impl Lab {
    /// Offers UDP at `offered` (iperf3's payload rate, e.g. "120M") from node-1 to
    /// node-2:`port` for `secs` and measures, over the steady part (after 1.2 s, until a
    /// second before the end), the L2 rate node-1 sent and the L2 rate arriving at node-2.
    pub fn udp_load(&self, port: u16, offered: &str, secs: u32) -> Load {
        self.udp_loads(&[(port, offered)], secs)
    }

    /// As [`udp_load`](Self::udp_load), with one flow per `(port, offered)` at once; the rates
    /// are their sums.
    pub fn udp_loads(&self, flows: &[(u16, &str)], secs: u32) -> Load {
        self.udp_loads_sized(flows, secs, 1400)
    }

    /// As [`udp_loads`](Self::udp_loads), with `len`-byte datagrams.
    pub fn udp_loads_sized(&self, flows: &[(u16, &str)], secs: u32, len: usize) -> Load {
        let _servers: Vec<Reaped> = flows
            .iter()
            .map(|&(port, _)| self.iperf_server(N2, port))
            .collect();
        let clients: Vec<Child> = flows
            .iter()
            .map(|&(port, offered)| self.udp_flow_sized(port, offered, secs, len))
            .collect();
        let load = self.measure_load(
            Duration::from_millis(1200),
            Duration::from_secs(u64::from(secs) - 2),
        );
        for client in clients {
            let _ = client.wait_with_output();
        }
        load
    }

    /// The L2 rate arriving at node-2 while node-1 offers UDP at `offered` (see
    /// [`udp_load`](Self::udp_load)), in bit/s.
    pub fn udp_rate_at_n2(&self, port: u16, offered: &str, secs: u32) -> f64 {
        self.udp_load(port, offered, secs).delivered_bps()
    }

    /// Offers `size`-byte UDP frames from node-1 to node-2:`dport` paced at `rate` (L2, e.g.
    /// "1.3gbit") with the AF_XDP generator `htb-xdp-gen` for `secs`, and measures as
    /// [`udp_load`](Self::udp_load). No receiver listens: node-2 counts the frames and drops
    /// them (its ICMP replies are rate-limited by the kernel).
    ///
    /// # Panics
    /// When the generator cannot be started (it is built next to htbd: `cargo build --release
    /// -p htb-xdp-gen`).
    pub fn xdp_load(&self, dport: u16, rate: &str, size: usize, secs: u32) -> Load {
        self.xdp_loads(&[(0, dport, rate)], size, secs)
    }

    /// As [`xdp_load`](Self::xdp_load), with one generator per `(queue, dport, rate)` at
    /// once, each sending on that TX queue of node-1 (which a veth delivers to the same RX
    /// queue of r1, so to the worker polling it); the rates are their sums.
    ///
    /// # Panics
    /// As [`xdp_load`](Self::xdp_load).
    pub fn xdp_loads(&self, flows: &[(u32, u16, &str)], size: usize, secs: u32) -> Load {
        let generator = gen_bin();
        let children: Vec<_> = flows
            .iter()
            .map(|&(queue, dport, rate)| {
                self.cmd(N1, generator.to_str().unwrap_or("htb-xdp-gen"))
                    .args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
                    .args(["--dst-mac", "02:00:0a:c9:01:01", "--src-ip", "10.201.1.2"])
                    .args(["--dst-ip", "10.201.2.2", "--dport", &dport.to_string()])
                    .args(["--queue", &queue.to_string()])
                    .args(["--size", &size.to_string(), "--rate", rate])
                    .args(["--seconds", &secs.to_string()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("cannot start {}: {e}", generator.display()))
            })
            .collect();
        let load = self.measure_load(
            Duration::from_millis(1200),
            Duration::from_secs(u64::from(secs) - 2),
        );
        for child in children {
            let out = child.wait_with_output().expect("htb-xdp-gen");
            assert!(
                out.status.success(),
                "htb-xdp-gen failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        load
    }

    /// Waits `skip`, then counts node-1's L2 bytes sent and node-2's received over `window`.
    /// The clock is read on both sides of each pair of counter reads, so that the window's
    /// length is known within what reading them took (a stall of this process between a
    /// counter and the clock cannot pass for the shaper's).
    pub fn measure_load(&self, skip: Duration, window: Duration) -> Load {
        std::thread::sleep(skip);
        let read = || {
            let before = Instant::now();
            let counters = (
                self.tx_counters(N1, "eth0").0,
                self.rx_counters(N2, "eth0").0,
            );
            (before, counters, Instant::now())
        };
        crate::accounted::window_edge();
        let (a0, (s0, r0), b0) = read();
        std::thread::sleep(window);
        let (a1, (s1, r1), b1) = read();
        crate::accounted::window_edge();
        let (shortest, longest) = ((a1 - b0).as_secs_f64(), (b1 - a0).as_secs_f64());
        let counted = |bytes: u64| Counted {
            bytes: bytes as f64,
            shortest,
            longest,
        };
        Load {
            offered: counted(s1 - s0),
            delivered: counted(r1 - r0),
        }
    }
}
