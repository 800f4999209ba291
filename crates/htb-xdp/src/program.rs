//! The XDP program (C, compiled by build.rs), loaded and attached with aya.
//!
//! Attachment uses BPF links, which the kernel detaches when the last fd goes away: if htbd
//! dies, even by `kill -9`, the program goes with it and the kernel forwards as before.

use std::time::Duration;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, XskMap};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader, include_bytes_aligned};

use crate::error::XdpError;

/// The compiled object (see `src/bpf/htb_xdp.c`).
static OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/htb_xdp.o"));

/// How to attach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttachMode {
    /// Native (driver) mode, falling back to generic (skb) mode where the driver has none.
    #[default]
    Auto,
    /// Native mode only.
    Native,
    /// Generic (skb) mode.
    Skb,
}

/// Per-verdict frame counts of the XDP program (summed over CPUs), in the order of `enum
/// verdict` in the C source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// Sent to htbd.
    pub redirected: u64,
    /// Not IPv4/IPv6 (ARP, LLDP, …): to the kernel.
    pub pass_not_ip: u64,
    /// Truncated or malformed headers: to the kernel.
    pub pass_malformed: u64,
    /// TTL / hop limit expiring: to the kernel (it sends the ICMP error).
    pub pass_ttl: u64,
    /// Local, unreachable or not forwarded by the FIB: to the kernel.
    pub pass_fib: u64,
    /// Next hop not resolved: to the kernel, which resolves it.
    pub pass_no_neigh: u64,
    /// Egress not managed by htbd: to the kernel.
    pub pass_unmanaged: u64,
    /// Ingress not managed by htbd.
    pub pass_not_port: u64,
    /// No socket in the slot (htbd starting or stopping): to the kernel.
    pub pass_no_socket: u64,
    /// Router mode: not addressed to the port's MAC (broadcast, multicast, another host's):
    /// to the kernel, which does not forward it either.
    pub pass_not_ours: u64,
    /// The data plane had not beaten for the liveness timeout: to the kernel.
    pub pass_stale: u64,
    /// Router mode: IPv4 with options, which the forwarding router must process: to the
    /// kernel.
    pub pass_ip_options: u64,
    /// Longer than the sockets take (one frame, or a chain of frames with multi-buffer), as
    /// after an MTU raised while htbd runs: to the kernel.
    pub pass_too_big: u64,
}

/// Entries of `enum verdict` before `V_COUNT`.
pub(crate) const VERDICTS: u32 = 13;

/// What the program is loaded for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProgramConfig {
    /// Bridge mode (every frame to the socket) rather than router mode.
    pub(crate) bridge: bool,
    /// Send every frame to the kernel once the data plane's last beat is older than this.
    pub(crate) stale_after: Option<Duration>,
    /// Load the `xdp.frags` entry point: frames larger than a page arrive as multi-buffer
    /// `xdp_buff`s (a native-mode veth or NIC refuses a program without it at a jumbo MTU).
    pub(crate) frags: bool,
    /// The longest frame the sockets take; longer ones go to the kernel.
    pub(crate) max_frame_len: u32,
}

/// The loaded program and its maps.
pub(crate) struct XdpProgram {
    bpf: Ebpf,
    /// The entry point loaded: `htb_xdp`, or `htb_xdp_frags` for multi-buffer.
    entry: &'static str,
    /// The data plane's heartbeat (`heartbeat` in the C source), taken out of `bpf` once.
    heartbeat: Array<MapData, u64>,
}

/// aya's error as the source (or, where aya gave none, what was missing).
fn program_error(
    what: impl Into<String>,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> XdpError {
    XdpError::Program {
        what: what.into(),
        source: e.into(),
    }
}

impl XdpProgram {
    /// Loads the program into the kernel (nothing is attached yet). With `stale_after`, the
    /// program sends every frame to the kernel once the data plane's last
    /// [`beat`](Self::beat) is older than that.
    pub(crate) fn load(config: &ProgramConfig) -> Result<Self, XdpError> {
        let bridge_mode = u32::from(config.bridge);
        let stale_after_ns = config.stale_after.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        let entry = if config.frags {
            "htb_xdp_frags"
        } else {
            "htb_xdp"
        };
        let mut bpf = EbpfLoader::new()
            .override_global("bridge_mode", &bridge_mode, true)
            .override_global("stale_after_ns", &stale_after_ns, true)
            .override_global("max_frame_len", &config.max_frame_len, true)
            .load(OBJECT)
            .map_err(|e| program_error("load object", e))?;
        let program: &mut Xdp = bpf
            .program_mut(entry)
            .ok_or_else(|| program_error(format!("find {entry}"), "missing from the object"))?
            .try_into()
            .map_err(|e| program_error(format!("{entry} is not an XDP program"), e))?;
        program
            .load()
            .map_err(|e| program_error(format!("verify and load {entry}"), e))?;
        let heartbeat = bpf
            .take_map("heartbeat")
            .ok_or_else(|| program_error("heartbeat map", "missing"))?;
        let heartbeat =
            Array::try_from(heartbeat).map_err(|e| program_error("heartbeat map", e))?;
        Ok(Self {
            bpf,
            entry,
            heartbeat,
        })
    }

    /// Tells the program the data plane is alive at `monotonic_ns` (CLOCK_MONOTONIC, the
    /// clock of `bpf_ktime_get_ns`).
    pub(crate) fn beat(&mut self, monotonic_ns: u64) -> Result<(), XdpError> {
        self.heartbeat
            .set(0, monotonic_ns, 0)
            .map_err(|e| program_error("heartbeat", e))
    }

    /// Declares a managed port: frames arriving on `ifindex` queue q go to XSKMAP slot
    /// `slot_base + q`; in router mode only frames addressed to `mac`.
    pub(crate) fn add_port(
        &mut self,
        ifindex: u32,
        slot_base: u32,
        queues: u32,
        mac: [u8; 6],
    ) -> Result<(), XdpError> {
        let map = self
            .bpf
            .map_mut("ports")
            .ok_or_else(|| program_error("ports map", "missing"))?;
        let mut ports: BpfHashMap<_, u32, [u8; 16]> =
            BpfHashMap::try_from(map).map_err(|e| program_error("ports map", e))?;
        ports
            .insert(ifindex, port_value(slot_base, queues, mac), 0)
            .map_err(|e| program_error("ports map insert", e))
    }

    /// Puts a socket into XSKMAP slot `slot`.
    pub(crate) fn set_socket(&mut self, slot: u32, fd: std::os::fd::RawFd) -> Result<(), XdpError> {
        let map = self
            .bpf
            .map_mut("xsks_map")
            .ok_or_else(|| program_error("xsks_map", "missing"))?;
        let mut xsks = XskMap::try_from(map).map_err(|e| program_error("xsks_map", e))?;
        xsks.set(slot, fd, 0)
            .map_err(|e| program_error(format!("xsks_map slot {slot}"), e))
    }

    /// Attaches to `interface`. Returns the mode used.
    pub(crate) fn attach(
        &mut self,
        interface: &str,
        mode: AttachMode,
    ) -> Result<&'static str, XdpError> {
        let entry = self.entry;
        let program: &mut Xdp = self
            .bpf
            .program_mut(entry)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| program_error(format!("find {entry}"), "missing"))?;
        let attach = |program: &mut Xdp, mode: XdpMode| program.attach(interface, mode);
        match mode {
            AttachMode::Native => attach(program, XdpMode::Driver).map(|_| "native"),
            AttachMode::Skb => attach(program, XdpMode::Skb).map(|_| "skb"),
            AttachMode::Auto => match attach(program, XdpMode::Driver) {
                Ok(_) => Ok("native"),
                Err(native) => {
                    tracing::info!(
                        "{interface}: native XDP unavailable ({native}); using skb mode"
                    );
                    attach(program, XdpMode::Skb).map(|_| "skb")
                }
            },
        }
        .map_err(|e| program_error(format!("attach to {interface}"), e))
    }

    /// Frame counts per verdict.
    pub(crate) fn verdicts(&self) -> Verdicts {
        let mut sums = [0u64; VERDICTS as usize];
        if let Some(map) = self.bpf.map("verdicts")
            && let Ok(array) = PerCpuArray::<_, u64>::try_from(map)
        {
            for (i, sum) in sums.iter_mut().enumerate() {
                if let Ok(values) = array.get(&(i as u32), 0) {
                    *sum = values.iter().sum();
                }
            }
        }
        Verdicts::from_sums(sums)
    }
}

impl Verdicts {
    /// The counts of `enum verdict`'s entries, in its order.
    #[must_use]
    pub fn from_sums(sums: [u64; VERDICTS as usize]) -> Self {
        Self {
            redirected: sums[0],
            pass_not_ip: sums[1],
            pass_malformed: sums[2],
            pass_ttl: sums[3],
            pass_fib: sums[4],
            pass_no_neigh: sums[5],
            pass_unmanaged: sums[6],
            pass_not_port: sums[7],
            pass_no_socket: sums[8],
            pass_not_ours: sums[9],
            pass_stale: sums[10],
            pass_ip_options: sums[11],
            pass_too_big: sums[12],
        }
    }
}

/// `struct port` of the C source as the map stores it: `slot_base`, `queues` (native-endian
/// u32s), the MAC, two bytes of padding.
fn port_value(slot_base: u32, queues: u32, mac: [u8; 6]) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..4].copy_from_slice(&slot_base.to_ne_bytes());
    value[4..8].copy_from_slice(&queues.to_ne_bytes());
    value[8..14].copy_from_slice(&mac);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `V_PASS_NOT_IP` → `pass_not_ip`; `V_REDIRECT` → `redirected`.
    fn field_of(enumerator: &str) -> String {
        let name = enumerator.trim_start_matches("V_").to_ascii_lowercase();
        if name == "redirect" {
            "redirected".into()
        } else {
            name
        }
    }

    #[test]
    fn the_counts_follow_the_c_programs_enum() {
        // One list in C (the map's indices), read into named fields here: each enumerator
        // must name the field its index fills, and every field must have one.
        let source = include_str!("bpf/htb_xdp.c");
        let body = source
            .split("enum verdict {")
            .nth(1)
            .and_then(|rest| rest.split("V_COUNT").next())
            .expect("enum verdict in htb_xdp.c");
        let enumerators: Vec<&str> = body
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(|w| w.trim_end_matches(','))
            .filter(|w| w.starts_with("V_"))
            .collect();
        assert_eq!(enumerators.len(), VERDICTS as usize, "{enumerators:?}");
        let counts = Verdicts::from_sums(std::array::from_fn(|i| i as u64));
        let shown = format!("{counts:?}");
        for (i, e) in enumerators.iter().enumerate() {
            let field = field_of(e);
            assert!(
                shown.contains(&format!(" {field}: {i},"))
                    || shown.contains(&format!(" {field}: {i} }}")),
                "{e} (index {i}) does not fill field {field}: {shown}"
            );
        }
        assert_eq!(shown.matches(": ").count(), enumerators.len(), "{shown}");
    }
}
