//! The `filter add|del` commands: a filter checked against its qdisc, given its priority and
//! handle by the kernel's rules.

use htb_config::filter::Police;
use htb_core::ClassId;
use htb_ipc::{ErrorCode, FilterHandle, IpcError};

use super::filter_entry::{AUTO_PRIO, FilterEntry, FilterKind, U32Parts, matcher, u32_divisor};
use super::ingress::INGRESS_MAJOR;
use super::qdisc::QdiscModel;
use super::{Model, Step, Undo, error, of_qdisc};

/// A refusal of what a command says (`EINVAL`), in the words of `why`.
fn invalid(why: impl std::fmt::Display) -> IpcError {
    error(ErrorCode::Invalid, why.to_string())
}

/// The u32 hash-table parts of a `filter add`, checked against the tables that exist
/// (`u32_change` in `cls_u32.c`).
fn u32_parts(
    qdisc: &QdiscModel,
    f: &htb_ipc::FilterSpec,
    kind: FilterKind,
) -> Result<U32Parts, IpcError> {
    let h = &f.hashing;
    if h.is_empty() {
        return Ok(U32Parts::default());
    }
    if kind != FilterKind::U32 {
        return Err(invalid("divisor, ht, link and hashkey are u32's"));
    }
    let divisor = h.divisor.map(u32_divisor).transpose().map_err(invalid)?;
    let link = match h.link {
        None => None,
        Some(table) => {
            let table = u16::try_from(table)
                .ok()
                .filter(|&t| (1..0x1000).contains(&t));
            let declared = table.filter(|&t| qdisc.filters.is_hash_table(u32::from(t)));
            match (table, declared) {
                (Some(_), Some(t)) => Some(t),
                (Some(t), None) if qdisc.filters.table_used(u32::from(t)) => {
                    return Err(invalid(format!(
                        "link {t:x}: is a root table: not linking to root node"
                    )));
                }
                _ => {
                    return Err(error(
                        ErrorCode::NotFound,
                        format!(
                            "link {:x}: link hash table not found (add it first: u32 divisor N)",
                            h.link.unwrap_or(0)
                        ),
                    ));
                }
            }
        }
    };
    if divisor.is_some() && (link.is_some() || h.table.is_some() || f.class.is_some()) {
        return Err(invalid(
            "a u32 hash table (divisor) takes no ht, link or classid",
        ));
    }
    if let Some(key) = h.hashkey {
        if link.is_none() {
            return Err(invalid(
                "hashkey picks a bucket of the linked table: it needs link",
            ));
        }
        if key.at % 4 != 0 {
            return Err(invalid(format!(
                "hashkey at {}: offset must be a multiple of 4",
                key.at
            )));
        }
    }
    Ok(U32Parts {
        divisor,
        link,
        hashkey: h.hashkey,
    })
}

/// A handle for a u32 filter placed with `ht TABLE:BUCKET:` (`gen_new_kid`: the next free node
/// id of that table and bucket, from 0x800) or a new hash table (`gen_new_htid`).
fn u32_placement(
    qdisc: &QdiscModel,
    f: &htb_ipc::FilterSpec,
    parts: &U32Parts,
) -> Result<Option<u32>, IpcError> {
    if parts.divisor.is_some() {
        if let Some(given) = f.handle {
            let h = given.0;
            if h == 0 || h & 0xfffff != 0 {
                return Err(invalid(format!(
                    "a hash table's handle is a table id like 2:, not {}",
                    given.display(FilterKind::U32)
                )));
            }
            return Ok(Some(h));
        }
        return Ok(Some(qdisc.filters.next_table() << 20));
    }
    let Some((table, bucket)) = f.hashing.table else {
        return Ok(None);
    };
    let Some(decl) = qdisc.filters.hash_table(table) else {
        // Not a table made with `divisor`: a prio's root table (`800:` …), one bucket.
        if bucket != 0 || table == 0 {
            return Err(invalid(format!(
                "ht {table:x}:{bucket:x}: not a hash table made with divisor, and a root table has one bucket"
            )));
        }
        return place(qdisc, f, table, 0);
    };
    let buckets = decl.u32().divisor.unwrap_or(1);
    if bucket >= u32::from(buckets) {
        return Err(invalid(format!(
            "ht {table:x}:{bucket:x}: bucket out of range (the table has {buckets} buckets)"
        )));
    }
    place(qdisc, f, table, bucket)
}

/// The handle of a filter in `table`, `bucket`: the one given (its table and bucket must agree)
/// or the next free node.
fn place(
    qdisc: &QdiscModel,
    f: &htb_ipc::FilterSpec,
    table: u32,
    bucket: u32,
) -> Result<Option<u32>, IpcError> {
    let base = table << 20 | bucket << 12;
    if let Some(given) = f.handle {
        let h = given.0;
        if h & 0xfff == 0 || h & !0xfff != base {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "handle {} is not a node of ht {table:x}:{bucket:x}:",
                    given.display(FilterKind::U32)
                ),
            ));
        }
        return Ok(Some(h));
    }
    let node = qdisc.filters.next_node(table, bucket);
    if node > 0xfff {
        return Err(error(
            ErrorCode::Invalid,
            format!("ht {table:x}: has no free node id"),
        ));
    }
    Ok(Some(base | node))
}

/// Checks a `filter add` against the qdisc and gives it a priority and handle.
fn new_filter(qdisc: &QdiscModel, f: &htb_ipc::FilterSpec) -> Result<FilterEntry, IpcError> {
    if let Some(parent) = f.parent
        && !(parent.is_qdisc() && parent.major() == qdisc.config.major)
    {
        return Err(invalid(format!(
            "filters attach to the qdisc ({:x}:), not to class {parent}",
            qdisc.config.major
        )));
    }
    let protocol = f.protocol;
    let kind = f.kind;
    let ingress = qdisc.config.major == INGRESS_MAJOR;
    if ingress && !f.hashing.is_empty() {
        return Err(invalid(
            "u32 hash tables and links are for an htb qdisc's filters; an ingress qdisc's filters match directly",
        ));
    }
    if ingress && f.redirect.is_none() && f.police.is_none() {
        return Err(invalid(
            "a filter of the ingress qdisc needs an action: mirred egress redirect dev IFB (shape in the IFB's tree) or police (drop what exceeds a rate)",
        ));
    }
    let class = match f.class.map(|c| of_qdisc(c, qdisc.config.major)) {
        None => None,
        // The ingress qdisc has no classes: the flowid is shown, as tc keeps it.
        Some(class) if ingress => Some(class),
        Some(class) => {
            if class.major() != qdisc.config.major {
                return Err(error(
                    ErrorCode::NotFound,
                    format!(
                        "class {class} is not a class of {:x}: (a filter of an htb qdisc names one of its classes)",
                        qdisc.config.major
                    ),
                ));
            }
            if !qdisc.classes.contains(class) {
                return Err(error(
                    ErrorCode::NotFound,
                    format!("class {class} does not exist (add it before its filters)"),
                ));
            }
            Some(class)
        }
    };
    let u32 = u32_parts(qdisc, f, kind)?;
    if class.is_none() && u32.divisor.is_none() && u32.link.is_none() && !ingress {
        return Err(invalid(
            "Must specify flowid/classid: where matching packets go",
        ));
    }
    let matcher = matcher(&f.matcher, protocol)?;
    let prio = match f.prio {
        Some(0) => return Err(invalid("filter prio must be above 0")),
        Some(p) => p,
        // As tcf_auto_prio: 49152 for the first, then one below the lowest existing priority
        // (one above the highest when the lowest is 1).
        // The list is sorted by prio: the lowest is first, the highest last.
        None => match (qdisc.filters.first(), qdisc.filters.last()) {
            (Some(low), _) if low.prio > 1 => low.prio - 1,
            (_, Some(high)) => high.prio.saturating_add(1),
            _ => AUTO_PRIO,
        },
    };
    if let Some(peer) = qdisc.filters.in_prio(prio).next()
        && peer.kind != kind
    {
        return Err(invalid(format!(
            "prio {prio} holds {} filters; a {} filter needs another prio",
            peer.kind.name(),
            kind.name()
        )));
    }
    // One protocol per prio, as the kernel's tcf_proto. But htb-cli reads u32's `match ip …`
    // under `protocol all` as an IPv4 filter (what its keys read) where tc keeps `all`, so `all`
    // shares a prio with an IP protocol here, as those lines (LibreQoS's, unprotocoled) share
    // one in the kernel.
    if let Some(held) = qdisc.filters.protocol_clash(prio, protocol) {
        return Err(invalid(format!(
            "prio {prio} holds protocol {} filters; protocol {} needs another prio",
            held.name(),
            protocol.name()
        )));
    }
    let police = f
        .police
        .as_deref()
        .map(|&p| {
            p.check().map_err(|e| invalid(format!("police: {e}")))?;
            Ok(Police::new(p))
        })
        .transpose()?;
    if police.is_some() && class.is_none() && !ingress {
        return Err(invalid(
            "a policer belongs to a filter that classifies (give it a flowid)",
        ));
    }
    let mut entry = FilterEntry::new(prio, protocol, kind, 0, matcher, class)
        .with_u32(u32)
        .with_police(police)
        .with_redirect(f.redirect.clone());
    let placed = u32_placement(qdisc, f, &u32)?;
    // A filter in a hash table is that table's prio's, wherever it was added (the kernel's
    // u32 tables are shared by the qdisc's prios; `u32_walk` shows a table under its own).
    if u32.divisor.is_none()
        && let Some((table, _)) = f.hashing.table
        && let Some(decl) = qdisc.filters.hash_table(table)
    {
        entry.prio = decl.prio;
    }
    // Handle 0 is none given, as in the kernel (`u32_change`, `fl_change` pick one).
    let given = placed.or(f.handle.map(|h| h.0).filter(|&h| h != 0));
    if let Some(h) = given {
        entry.handle = h;
        // Taken: the same prio and handle; or, for u32, a table or a node of a hash table
        // (their ids are the qdisc's, in whichever prio).
        let hashed =
            kind == FilterKind::U32 && (u32.divisor.is_some() || f.hashing.table.is_some());
        if qdisc.filters.with_handle(h).any(|e| {
            e.prio == prio
                || (kind == FilterKind::U32
                    && e.kind == FilterKind::U32
                    && (hashed || e.is_hash_table()))
        }) {
            return Err(error(
                ErrorCode::Exists,
                format!(
                    "a filter with prio {prio} and handle {} exists",
                    FilterHandle(h).display(kind)
                ),
            ));
        }
        return Ok(entry);
    }
    entry.handle = qdisc
        .filters
        .next_handle(prio, kind)
        .map_err(|e| error(ErrorCode::Invalid, e.to_string()))?;
    Ok(entry)
}

impl Model {
    /// `filter add`.
    pub(super) fn filter_add(
        &mut self,
        step: &mut Step<'_>,
        f: &htb_ipc::FilterSpec,
    ) -> Result<(), IpcError> {
        let port = step.port;
        let major = self
            .tree_mut(port, f.parent.map(ClassId::major))?
            .config
            .major;
        self.check_redirect(major, f.redirect.as_deref())?;
        let qdisc = self.tree_mut(port, Some(major))?;
        if f.kind == FilterKind::U32
            && f.class.is_none()
            && f.hashing.is_empty()
            && f.redirect.is_none()
            && f.police.is_none()
            && f.matcher.is_empty()
        {
            // `tc filter add … prio 5 u32` alone makes the prio's root table exist; htbd makes
            // the tables it needs when a filter uses them.
            return Ok(());
        }
        let entry = new_filter(qdisc, f)?;
        // The undo names the one entry (a copy of 100 000 filters per add would make a large
        // batch quadratic).
        let order = entry.order();
        qdisc.add_filter(entry);
        step.undo.push(Undo::FilterAdded { port, major, order });
        step.filters_changed(major);
        Ok(())
    }

    /// `filter change` (`replace`: or add when there is no such filter): the filter at the
    /// given prio and handle is taken out and the new one put in its place, with its handle.
    /// Unlike the kernel's u32, whose change keeps the old selector and takes only a new
    /// classid or link, the new match applies too: what the command line says is what runs.
    pub(super) fn filter_change(
        &mut self,
        step: &mut Step<'_>,
        f: &htb_ipc::FilterSpec,
        replace: bool,
    ) -> Result<(), IpcError> {
        let name = step.name.clone();
        let major = f.parent.map(ClassId::major);
        let qdisc = self.tree_mut(step.port, major)?;
        let (Some(prio), Some(handle)) = (f.prio, f.handle) else {
            if replace {
                return self.filter_add(step, f);
            }
            return Err(error(
                ErrorCode::Invalid,
                "filter change needs the filter's prio and handle (pref N handle H)",
            ));
        };
        let kind = f.kind;
        let existing = qdisc.filters.get(prio, handle.0).cloned();
        let handle_text = handle.display(kind);
        match existing {
            None if replace => self.filter_add(step, f),
            None => Err(error(
                ErrorCode::NotFound,
                format!("no filter with prio {prio} and handle {handle_text} on {name} to change"),
            )),
            Some(e) if e.kind != kind => Err(error(
                ErrorCode::Invalid,
                format!(
                    "the filter with prio {prio} and handle {handle_text} is {}, not {}",
                    e.kind.name(),
                    kind.name()
                ),
            )),
            Some(e) if e.is_hash_table() || f.hashing.divisor.is_some() => Err(error(
                ErrorCode::Invalid,
                "a u32 hash table cannot be changed: delete it (with its filters) and add it again",
            )),
            Some(_) => {
                self.filter_delete(step, major, Some(prio), Some(handle))?;
                self.filter_add(step, f)
            }
        }
    }

    /// `filter del`: one filter (prio and handle), a priority, or all.
    pub(super) fn filter_delete(
        &mut self,
        step: &mut Step<'_>,
        major: Option<u16>,
        prio: Option<u32>,
        handle: Option<FilterHandle>,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let qdisc = self.tree_mut(port, major)?;
        let major = qdisc.config.major;
        let removed = match (prio, handle) {
            (None, None) => qdisc.remove_filters_where(None, |_| true),
            (None, Some(_)) => {
                return Err(error(
                    ErrorCode::Invalid,
                    "deleting one filter by handle needs its prio, as in tc",
                ));
            }
            (Some(prio), None) => {
                let removed = qdisc.remove_filters_where(Some(prio), |_| true);
                if removed.is_empty() {
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("no filter with prio {prio} on {name}"),
                    ));
                }
                removed
            }
            (Some(prio), Some(handle)) => {
                let Some(removed) = qdisc.remove_filter((prio, handle.0)) else {
                    // Named as the prio's filters are (a prio holds one kind).
                    let kind = qdisc.filters.in_prio(prio).next().map(|f| f.kind);
                    let text = kind.map_or_else(
                        || format!("{:#x}", handle.0),
                        |k| handle.display(k).to_string(),
                    );
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("no filter with prio {prio} and handle {text} on {name}"),
                    ));
                };
                let mut removed = vec![removed];
                if removed[0].is_hash_table() {
                    // A hash table goes with its filters (`u32_destroy_hnode`).
                    let table = removed[0].table();
                    removed.extend(qdisc.remove_filters_where(None, |f| {
                        f.kind == FilterKind::U32 && f.table() == table
                    }));
                }
                removed
            }
        };
        step.undo.push(Undo::FiltersRemoved {
            port,
            major,
            removed,
        });
        step.filters_changed(major);
        Ok(())
    }
}
