//! Router mode's fast path runs in XDP, before netfilter: what htbd forwards never meets the
//! prerouting, forward or postrouting hooks — no filtering, no NAT, no conntrack. A router
//! whose rules would be silently bypassed must not start unnoticed, so at start htbd lists the
//! rules of those hooks (nftables through `nft -j list ruleset`, legacy iptables through
//! `iptables-legacy-save`) and refuses to run in router mode while any exist, unless
//! `[daemon] netfilter = "bypass"` says the operator knows (then it warns, listing them).
//!
//! Rules reach the kernel through these tools (or their libraries, which come with them); with
//! neither installed and no legacy tables loaded there is nothing to bypass.

use std::process::Command;

use serde_json::Value;

use crate::DaemonError;

/// What to do when router mode would bypass netfilter rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetfilterPolicy {
    /// Refuse to start (the default).
    #[default]
    Refuse,
    /// Start anyway, with a warning listing them.
    Bypass,
}

/// Hooks the XDP fast path skips for the traffic it forwards.
const BYPASSED_HOOKS: [&str; 3] = ["prerouting", "forward", "postrouting"];

/// The base chains of an nftables ruleset (`nft -j list ruleset`) that router mode would
/// bypass: hooked at prerouting, forward or postrouting in the ip, ip6 or inet family, with
/// rules or a drop policy. Each as `family table chain (hook H, N rules[, policy drop])`.
#[must_use]
pub fn bypassed_nft_chains(ruleset: &Value) -> Vec<String> {
    let items = ruleset["nftables"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let mut found = Vec::new();
    for chain in items.iter().filter_map(|i| i.get("chain")) {
        let text = |k: &str| chain[k].as_str().unwrap_or_default();
        let (family, table, name, hook) =
            (text("family"), text("table"), text("name"), text("hook"));
        if !["ip", "ip6", "inet"].contains(&family) || !BYPASSED_HOOKS.contains(&hook) {
            continue;
        }
        let rules = items
            .iter()
            .filter_map(|i| i.get("rule"))
            .filter(|r| r["family"] == family && r["table"] == table && r["chain"] == name)
            .count();
        let drop = text("policy") == "drop";
        if rules > 0 || drop {
            found.push(format!(
                "nftables {family} {table} {name} (hook {hook}, {rules} rule{}{})",
                if rules == 1 { "" } else { "s" },
                if drop { ", policy drop" } else { "" }
            ));
        }
    }
    found
}

/// The chains of an `iptables-save` dump that router mode would bypass: PREROUTING, FORWARD or
/// POSTROUTING with rules, or with a DROP policy. `tool` names the dump in the result.
#[must_use]
pub fn bypassed_iptables_chains(tool: &str, dump: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut table = "";
    for line in dump.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim();
        } else if let Some(rest) = line.strip_prefix(':') {
            let mut words = rest.split_whitespace();
            let (chain, policy) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            if ["PREROUTING", "FORWARD", "POSTROUTING"].contains(&chain) && policy == "DROP" {
                found.push(format!("{tool} -t {table} {chain} (policy DROP)"));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or("");
            if ["PREROUTING", "FORWARD", "POSTROUTING"].contains(&chain) {
                let entry = format!("{tool} -t {table} {chain}");
                if !found.contains(&entry) {
                    found.push(entry);
                }
            }
        }
    }
    found
}

/// Why a listing tool's rules could not be read.
#[derive(Debug, thiserror::Error)]
enum ListingError {
    /// It could not be run.
    #[error("{program}: {source}")]
    Run {
        program: String,
        source: std::io::Error,
    },
    /// It ran and failed.
    #[error("{command}: {stderr}")]
    Failed { command: String, stderr: String },
}

/// Runs a listing tool; `None` when it is not installed.
fn listing(program: &str, args: &[&str]) -> Option<Result<String, ListingError>> {
    match Command::new(program).args(args).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => Some(Err(ListingError::Run {
            program: program.to_owned(),
            source,
        })),
        Ok(out) if !out.status.success() => Some(Err(ListingError::Failed {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })),
        Ok(out) => Some(Ok(String::from_utf8_lossy(&out.stdout).into_owned())),
    }
}

/// Whether legacy iptables has tables in this network namespace (for IPv4 or IPv6).
fn legacy_tables(file: &str) -> bool {
    std::fs::read_to_string(file).is_ok_and(|t| !t.trim().is_empty())
}

/// Every netfilter rule in this network namespace that router mode would bypass, and what
/// could not be checked.
fn survey() -> (Vec<String>, Vec<String>) {
    let mut found = Vec::new();
    let mut unchecked = Vec::new();
    match listing("nft", &["-j", "list", "ruleset"]) {
        None => tracing::debug!("nft is not installed: no nftables rules to check"),
        Some(Err(e)) => unchecked.push(e.to_string()),
        Some(Ok(json)) => match serde_json::from_str::<Value>(&json) {
            Ok(v) => found.extend(bypassed_nft_chains(&v)),
            Err(e) => unchecked.push(format!("nft -j list ruleset: {e}")),
        },
    }
    for (names, tool) in [
        ("/proc/net/ip_tables_names", "iptables-legacy-save"),
        ("/proc/net/ip6_tables_names", "ip6tables-legacy-save"),
    ] {
        if !legacy_tables(names) {
            continue;
        }
        match listing(tool, &[]) {
            None => unchecked.push(format!(
                "legacy iptables tables are loaded ({names}) but {tool} is not installed"
            )),
            Some(Err(e)) => unchecked.push(e.to_string()),
            Some(Ok(dump)) => found.extend(bypassed_iptables_chains(tool, &dump)),
        }
    }
    (found, unchecked)
}

/// Router mode's check at start (see the module docs).
///
/// # Errors
/// [`DaemonError::NetfilterBypassed`] when rules would be bypassed and `policy` refuses.
pub(crate) fn check(policy: NetfilterPolicy) -> Result<(), DaemonError> {
    let (found, unchecked) = survey();
    for what in &unchecked {
        tracing::warn!("netfilter rules could not be checked: {what}");
    }
    if found.is_empty() {
        return Ok(());
    }
    match policy {
        NetfilterPolicy::Refuse => Err(DaemonError::NetfilterBypassed {
            rules: found.join("; "),
        }),
        NetfilterPolicy::Bypass => {
            tracing::warn!(
                "netfilter = \"bypass\": what htbd forwards skips these rules: {}",
                found.join("; ")
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_chains_on_forwarding_hooks_with_rules_or_drop_are_bypassed() {
        // `nft -j list ruleset` of a host with chains on the forwarding hooks.
        let ruleset: Value =
            serde_json::from_str(include_str!("../testdata/nft-ruleset.json")).expect("fixture");
        assert_eq!(
            bypassed_nft_chains(&ruleset),
            [
                "nftables inet filter forward (hook forward, 2 rules)",
                "nftables ip nat post (hook postrouting, 1 rule)",
                "nftables ip6 f fw (hook forward, 0 rules, policy drop)",
            ]
        );
        assert!(bypassed_nft_chains(&serde_json::json!({"nftables": []})).is_empty());
        assert!(bypassed_nft_chains(&Value::Null).is_empty());
    }

    #[test]
    fn iptables_forwarding_rules_and_drop_policies_are_bypassed() {
        let dump = "# Generated by iptables-save\n*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n\
                    :OUTPUT ACCEPT [0:0]\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n*nat\n\
                    :PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
                    -A POSTROUTING -o r2 -j MASQUERADE\n-A POSTROUTING -o r1 -j MASQUERADE\nCOMMIT\n";
        assert_eq!(
            bypassed_iptables_chains("iptables-legacy-save", dump),
            [
                "iptables-legacy-save -t filter FORWARD (policy DROP)",
                "iptables-legacy-save -t nat POSTROUTING",
            ]
        );
        let open =
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n";
        assert!(bypassed_iptables_chains("iptables-legacy-save", open).is_empty());
    }
}
