//! The `filter add|del` commands: a filter checked against its qdisc, given its priority and
//! handle by the kernel's rules.

use htb_ipc::{ErrorCode, IpcError};

use super::filter_entry::{AUTO_PRIO, FilterEntry, FilterKind, Protocol, assign_handles, matcher};
use super::qdisc::QdiscModel;
use super::{Model, Step, Undo, error, parse_class_id};

/// Checks a `filter add` against the qdisc and gives it a priority and handle.
fn new_filter(qdisc: &QdiscModel, f: &htb_ipc::FilterSpec) -> Result<FilterEntry, IpcError> {
    let invalid = |m: String| error(ErrorCode::Invalid, m);
    if let Some(parent) = f.parent.as_deref() {
        let id = parse_class_id(parent)?;
        if !(id.is_qdisc() && id.major() == qdisc.config.major) {
            return Err(invalid(format!(
                "filters attach to the qdisc ({:x}:), not to class {parent}",
                qdisc.config.major
            )));
        }
    }
    let protocol = Protocol::parse(&f.protocol).map_err(invalid)?;
    let kind = FilterKind::parse(&f.kind).map_err(invalid)?;
    let class = parse_class_id(&f.class)?;
    if !qdisc.classes.contains_key(&class) {
        return Err(error(
            ErrorCode::NotFound,
            format!("class {class} does not exist (add it before its filters)"),
        ));
    }
    let matcher = matcher(&f.matcher, protocol)?;
    let prio = match f.prio {
        Some(0) => return Err(invalid("filter prio must be above 0".into())),
        Some(p) => p,
        // As tcf_auto_prio: 49152 for the first, then one below the lowest existing priority
        // (one above the highest when the lowest is 1).
        None => {
            let prios = qdisc.filters.iter().map(|f| f.prio);
            match (prios.clone().min(), prios.max()) {
                (None, _) | (_, None) => AUTO_PRIO,
                (Some(low), _) if low > 1 => low - 1,
                (_, Some(high)) => high.saturating_add(1),
            }
        }
    };
    if let Some(peer) = qdisc.filters.iter().find(|e| e.prio == prio) {
        if peer.kind != kind {
            return Err(invalid(format!(
                "prio {prio} holds {} filters; a {} filter needs another prio",
                peer.kind.name(),
                kind.name()
            )));
        }
        if peer.protocol != protocol {
            return Err(invalid(format!(
                "prio {prio} holds protocol {} filters; protocol {} needs another prio",
                peer.protocol.name(),
                protocol.name()
            )));
        }
    }
    let mut entries: Vec<(FilterEntry, bool)> = qdisc.filters.iter().map(|&e| (e, true)).collect();
    let mut entry = FilterEntry {
        prio,
        protocol,
        kind,
        handle: 0,
        matcher,
        class,
    };
    if let Some(h) = f.handle.as_deref() {
        entry.handle = kind.parse_handle(h).map_err(invalid)?;
        if qdisc
            .filters
            .iter()
            .any(|e| e.prio == prio && e.handle == entry.handle)
        {
            return Err(error(
                ErrorCode::Exists,
                format!("a filter with prio {prio} and handle {h} exists"),
            ));
        }
        return Ok(entry);
    }
    entries.push((entry, false));
    assign_handles(&mut entries);
    Ok(entries.pop().map_or(entry, |(e, _)| e))
}

impl Model {
    /// `filter add`.
    pub(super) fn filter_add(
        &mut self,
        step: &mut Step<'_>,
        f: &htb_ipc::FilterSpec,
    ) -> Result<(), IpcError> {
        let port = step.port;
        let qdisc = self.qdisc_mut(port)?;
        let entry = new_filter(qdisc, f)?;
        step.undo.push(Undo::Filters {
            port,
            old: qdisc.filters.clone(),
        });
        qdisc.filters.push(entry);
        qdisc.sort_filters();
        step.refilter.insert(port);
        Ok(())
    }

    /// `filter del`: one filter (prio and handle), a priority, or all.
    pub(super) fn filter_delete(
        &mut self,
        step: &mut Step<'_>,
        prio: Option<u32>,
        handle: Option<&str>,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let qdisc = self.qdisc_mut(port)?;
        let old = qdisc.filters.clone();
        match (prio, handle) {
            (None, None) => qdisc.filters.clear(),
            (None, Some(_)) => {
                return Err(error(
                    ErrorCode::Invalid,
                    "deleting one filter by handle needs its prio, as in tc",
                ));
            }
            (Some(prio), None) => {
                qdisc.filters.retain(|f| f.prio != prio);
                if qdisc.filters.len() == old.len() {
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("no filter with prio {prio} on {name}"),
                    ));
                }
            }
            (Some(prio), Some(handle)) => {
                let position = qdisc
                    .filters
                    .iter()
                    .position(|f| f.prio == prio && f.kind.parse_handle(handle) == Ok(f.handle));
                let Some(position) = position else {
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("no filter with prio {prio} and handle {handle} on {name}"),
                    ));
                };
                qdisc.filters.remove(position);
            }
        }
        step.undo.push(Undo::Filters { port, old });
        step.refilter.insert(port);
        Ok(())
    }
}
