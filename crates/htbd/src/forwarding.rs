//! Fail-open: when htbd is not running, the kernel must forward as if htbd were not there.
//!
//! The XDP program is attached through BPF links, which die with the process, so a dead htbd
//! leaves the kernel in charge. In router mode that is only useful if the kernel forwards IP:
//! htbd turns forwarding on at start (and leaves it on). In bridge mode the ports should be
//! members of a kernel bridge, which takes over when the XDP program is gone.

use std::fs;

use crate::DaemonError;

fn write(path: &str, value: &str) -> std::io::Result<()> {
    fs::write(path, value)
}

/// Turns IPv4 (and, where IPv6 is enabled, IPv6) forwarding on.
///
/// # Errors
/// [`DaemonError::Forwarding`] when IPv4 forwarding cannot be enabled.
pub(crate) fn enable_kernel_forwarding() -> Result<(), DaemonError> {
    let path = "/proc/sys/net/ipv4/ip_forward";
    if fs::read_to_string(path)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
    {
        tracing::info!("kernel IPv4 forwarding is on (fail-open)");
    } else {
        write(path, "1").map_err(|source| DaemonError::Forwarding { path, source })?;
        tracing::info!("turned kernel IPv4 forwarding on, so traffic keeps flowing if htbd stops");
    }
    let v6 = "/proc/sys/net/ipv6/conf/all/forwarding";
    if fs::metadata(v6).is_ok() && write(v6, "1").is_err() {
        tracing::warn!("could not turn IPv6 forwarding on");
    }
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
