//! Facts about network interfaces, read from sysfs.

use std::fs;

use crate::error::XdpError;

/// A network interface as the engine needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetDev {
    /// Name, `eth0`.
    pub name: String,
    /// Kernel interface index.
    pub ifindex: u32,
    /// MAC address.
    pub mac: [u8; 6],
    /// MTU in bytes.
    pub mtu: u32,
    /// Active RX queues.
    pub rx_queues: u32,
}

fn read(name: &str, attribute: &str) -> Result<String, XdpError> {
    let path = format!("/sys/class/net/{name}/{attribute}");
    fs::read_to_string(&path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| XdpError::Interface {
            interface: name.to_owned(),
            reason: format!("cannot read {path}: {e}"),
        })
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

impl NetDev {
    /// Looks `name` up in this network namespace.
    ///
    /// # Errors
    /// [`XdpError::Interface`] when it does not exist or sysfs says something unexpected.
    pub fn open(name: &str) -> Result<Self, XdpError> {
        if name.is_empty()
            || name.len() > 15
            || name.contains(['/', '\0'])
            || name == "."
            || name == ".."
        {
            return Err(XdpError::Interface {
                interface: name.to_owned(),
                reason: "not an interface name".into(),
            });
        }
        let bad = |reason: String| XdpError::Interface {
            interface: name.to_owned(),
            reason,
        };
        let ifindex = read(name, "ifindex")?
            .parse()
            .map_err(|_| bad("bad ifindex".into()))?;
        let address = read(name, "address")?;
        let mac = parse_mac(&address).ok_or_else(|| bad(format!("bad MAC address {address:?}")))?;
        let mtu = read(name, "mtu")?
            .parse()
            .map_err(|_| bad("bad MTU".into()))?;
        let rx_queues = queue_count(name, "rx-");
        Ok(Self {
            name: name.to_owned(),
            ifindex,
            mac,
            mtu,
            rx_queues,
        })
    }
}

/// The interface's queues whose sysfs names start with `prefix` (`rx-`, `tx-`); 1 when it
/// cannot be read.
fn queue_count(name: &str, prefix: &str) -> u32 {
    fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count()
        })
        .unwrap_or(1)
        .max(1) as u32
}

/// The TX queues of interface `name` (1 when it cannot be read): tc's `mq` has a class for
/// each.
#[must_use]
pub fn tx_queue_count(name: &str) -> u32 {
    queue_count(name, "tx-")
}

/// Formats a MAC address.
#[must_use]
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_exists_and_garbage_does_not() {
        let lo = NetDev::open("lo").unwrap();
        assert_eq!(lo.ifindex, 1);
        assert_eq!(lo.mac, [0; 6]);
        assert!(NetDev::open("no-such-if0").is_err());
        assert!(NetDev::open("../etc").is_err());
        assert_eq!(parse_mac("02:00:0a:c9:01:01"), Some([2, 0, 10, 0xc9, 1, 1]));
        assert_eq!(parse_mac("02:00"), None);
        assert_eq!(format_mac(&[2, 0, 10, 0xc9, 1, 1]), "02:00:0a:c9:01:01");
    }
}
