//! `[flows]`: flow records per worker and their export as IPFIX (RFC 7011) over UDP.
//!
//! ```toml
//! [flows]
//! entries = 65536            # records per data-plane worker (about 12 MiB at the default)
//! active_timeout = "60s"     # a flow running this long is exported and goes on
//! idle_timeout = "15s"       # a flow idle this long is exported and freed
//! sampling = 1               # 1-in-N packets (1: every packet)
//! ipfix = "192.0.2.10:4739"  # the collector (UDP); without it, flows are only shown
//! observation_domain = 1
//! template_refresh = "60s"   # templates re-sent this often (RFC 7011 §8.4)
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use htb_config::values::TimeValue;
use htb_config::{ConfigError, Located};
use htb_xdp::flow_table::FlowConfig;
use serde::Deserialize;

/// `[flows]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FlowsSection {
    entries: Option<Located<usize>>,
    active_timeout: Option<Located<TimeValue>>,
    idle_timeout: Option<Located<TimeValue>>,
    sampling: Option<Located<u32>>,
    ipfix: Option<Located<String>>,
    observation_domain: Option<u32>,
    template_refresh: Option<Located<TimeValue>>,
}

/// Flow metering and export, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowsConfig {
    /// Each worker's table.
    pub table: FlowConfig,
    /// Where records go (`None`: only `htb-cli flows` shows them).
    pub ipfix: Option<IpfixConfig>,
}

/// `[flows] ipfix` and its companions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpfixConfig {
    /// The collector's address (UDP).
    pub collector: SocketAddr,
    /// The Observation Domain ID in every message's header.
    pub observation_domain: u32,
    /// How often templates are re-sent.
    pub template_refresh: Duration,
}

/// The most records a worker's table may hold (about 3.2 GB).
const MAX_ENTRIES: usize = 1 << 24;

/// A time value within `range`, or its default.
fn duration(
    text: &str,
    value: Option<&Located<TimeValue>>,
    default: Duration,
    range: std::ops::RangeInclusive<Duration>,
) -> Result<Duration, ConfigError> {
    let Some(t) = value else {
        return Ok(default);
    };
    let d = Duration::from_nanos(t.get_ref().0.as_nanos());
    if range.contains(&d) {
        Ok(d)
    } else {
        Err(ConfigError::spanned(
            text,
            &t.span(),
            format!(
                "{} must be {:?} to {:?}",
                t.get_ref().0,
                range.start(),
                range.end()
            ),
        ))
    }
}

impl FlowsSection {
    /// Validates the section (`text`: the file, for positions).
    pub(super) fn validate(self, text: &str) -> Result<FlowsConfig, ConfigError> {
        let defaults = FlowConfig::default();
        let entries = match &self.entries {
            None => defaults.entries,
            Some(e) if (64..=MAX_ENTRIES).contains(e.get_ref()) => *e.get_ref(),
            Some(e) => {
                return Err(ConfigError::spanned(
                    text,
                    &e.span(),
                    format!("{} must be 64 to {MAX_ENTRIES}", e.get_ref()),
                ));
            }
        };
        let second = Duration::from_secs(1);
        let idle_timeout = duration(
            text,
            self.idle_timeout.as_ref(),
            defaults.idle_timeout,
            second..=Duration::from_secs(3600),
        )?;
        let active_timeout = duration(
            text,
            self.active_timeout.as_ref(),
            defaults.active_timeout,
            second..=Duration::from_secs(86_400),
        )?;
        let sampling = match &self.sampling {
            None => 1,
            Some(n) if (1..=1_000_000).contains(n.get_ref()) => *n.get_ref(),
            Some(n) => {
                return Err(ConfigError::spanned(
                    text,
                    &n.span(),
                    format!("{} must be 1 to 1000000 (1-in-N)", n.get_ref()),
                ));
            }
        };
        let template_refresh = duration(
            text,
            self.template_refresh.as_ref(),
            Duration::from_secs(60),
            second..=Duration::from_secs(3600),
        )?;
        let ipfix = match &self.ipfix {
            None => None,
            Some(a) => {
                let collector: SocketAddr = a.get_ref().parse().map_err(|_| {
                    ConfigError::spanned(
                        text,
                        &a.span(),
                        format!(
                            "{:?} is not an address and port, e.g. \"192.0.2.10:4739\" \
                             or \"[2001:db8::10]:4739\"",
                            a.get_ref()
                        ),
                    )
                })?;
                Some(IpfixConfig {
                    collector,
                    observation_domain: self.observation_domain.unwrap_or(1),
                    template_refresh,
                })
            }
        };
        Ok(FlowsConfig {
            table: FlowConfig {
                entries,
                active_timeout,
                idle_timeout,
                sampling,
            },
            ipfix,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::DaemonConfig;

    const BASE: &str = "[daemon]\nmode = \"router\"\n[[interface]]\nname = \"r1\"\n";

    fn parse(flows: &str) -> Result<DaemonConfig, String> {
        DaemonConfig::parse(&format!("{BASE}[flows]\n{flows}")).map_err(|e| e.to_string())
    }

    #[test]
    fn flows_take_their_defaults_and_reach_the_engine() {
        let c = parse("ipfix = \"192.0.2.10:4739\"\n").unwrap();
        let f = c.flows.unwrap();
        assert_eq!(f.table, htb_xdp::flow_table::FlowConfig::default());
        assert_eq!(c.engine.flows, Some(f.table));
        let ipfix = f.ipfix.unwrap();
        assert_eq!(ipfix.collector.to_string(), "192.0.2.10:4739");
        assert_eq!(ipfix.observation_domain, 1);
        assert_eq!(ipfix.template_refresh, std::time::Duration::from_secs(60));
        let c = parse(
            "entries = 1000\nidle_timeout = \"5s\"\nactive_timeout = \"120s\"\nsampling = 10\n\
             ipfix = \"[2001:db8::1]:2055\"\nobservation_domain = 9\ntemplate_refresh = \"10s\"\n",
        )
        .unwrap();
        let f = c.flows.unwrap();
        assert_eq!(
            (
                f.table.entries,
                f.table.sampling,
                f.table.idle_timeout.as_secs()
            ),
            (1000, 10, 5)
        );
        assert_eq!(f.table.active_timeout.as_secs(), 120);
        assert_eq!(f.ipfix.unwrap().observation_domain, 9);
        // Without the section, nothing is kept.
        assert_eq!(DaemonConfig::parse(BASE).unwrap().engine.flows, None);
        // Without a collector, flows are kept and only shown.
        assert_eq!(parse("").unwrap().flows.unwrap().ipfix, None);
    }

    #[test]
    fn bad_flows_settings_are_refused_where_they_are() {
        for (bad, says) in [
            (
                "entries = 10\n",
                "line 6, column 11: flows.entries: 10 must be 64 to",
            ),
            (
                "idle_timeout = \"10ms\"\n",
                "line 6, column 16: flows.idle_timeout: 10ms must be 1s",
            ),
            ("active_timeout = \"48h\"\n", "flows.active_timeout"),
            (
                "sampling = 0\n",
                "line 6, column 12: flows.sampling: 0 must be 1 to 1000000",
            ),
            (
                "ipfix = \"collector\"\n",
                "line 6, column 9: flows.ipfix: \"collector\" is not an address",
            ),
            (
                "template_refresh = \"0s\"\n",
                "flows.template_refresh: 0s must be",
            ),
            ("colour = 1\n", "colour"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
