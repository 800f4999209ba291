//! Fail-open: when htbd is not running, the kernel must forward as if htbd were not there.
//!
//! The XDP program is attached through BPF links, which die with the process, so a dead htbd
//! leaves the kernel in charge. In router mode that is only useful if the kernel forwards IP,
//! and htbd's own forwarding needs it too (`bpf_fib_lookup` honours `ip_forward`). htbd changes
//! no sysctl: it refuses to start in router mode while IPv4 forwarding is off, saying how to
//! turn it on, and warns when IPv6 is enabled but not forwarded (IPv6 is then not forwarded,
//! by htbd or the kernel). In bridge mode the ports should be members of a kernel bridge, which
//! takes over when the XDP program is gone.

use std::fs;

use crate::DaemonError;

const IPV4: &str = "/proc/sys/net/ipv4/ip_forward";
const IPV6: &str = "/proc/sys/net/ipv6/conf/all/forwarding";
const IPV6_DISABLED: &str = "/proc/sys/net/ipv6/conf/all/disable_ipv6";

fn is_on(path: &str) -> Option<bool> {
    fs::read_to_string(path).ok().map(|v| v.trim() == "1")
}

/// Checks that the kernel forwards IPv4 (and says whether it forwards IPv6).
///
/// # Errors
/// [`DaemonError::Forwarding`] when IPv4 forwarding is off.
pub(crate) fn check_kernel_forwarding() -> Result<(), DaemonError> {
    if is_on(IPV4) != Some(true) {
        return Err(DaemonError::Forwarding);
    }
    let ipv6_enabled = is_on(IPV6_DISABLED) == Some(false);
    if ipv6_enabled && is_on(IPV6) == Some(false) {
        tracing::warn!(
            "IPv6 is enabled but net.ipv6.conf.all.forwarding is 0: IPv6 is not forwarded, by \
             htbd or by the kernel (sysctl -w net.ipv6.conf.all.forwarding=1 to forward it)"
        );
    }
    tracing::info!("kernel IPv4 forwarding is on: traffic keeps flowing if htbd stops");
    Ok(())
}

/// Warns about bridge-mode ports that are not in a kernel bridge (traffic would stop with htbd).
pub(crate) fn check_bridge_fail_open(ports: &[String]) {
    for port in ports {
        if fs::metadata(format!("/sys/class/net/{port}/master")).is_err() {
            tracing::warn!(
                "{port} is not a member of a kernel bridge: if htbd stops, traffic between the bridge ports stops too"
            );
        }
    }
}
