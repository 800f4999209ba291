//! A filter as tc shows it: `u32` or `flower`, its protocol, priority and handle, and its
//! match in both tc's and the config's form. The `filter add|del` commands are in `filters`.

use htb_config::filter::{Family, IpPrefix, Match, Police};
use htb_core::ClassId;
use htb_ipc::{ErrorCode, HashKey, InterfaceName, IpcError, U32Hashing};

use super::error;

/// Where the kernel starts numbering filter priorities it picks itself (`tcf_auto_prio`).
pub(super) const AUTO_PRIO: u32 = 0xC000;
/// First u32 hash table and node id (`gen_new_htid`, `gen_new_kid` in `cls_u32.c`).
pub(super) const U32_FIRST_ID: u32 = 0x800;
/// The last node id of a bucket (`gen_new_kid` allocates up to `htid | 0xfff`).
pub(super) const U32_LAST_ID: u32 = 0xfff;

/// A u32 divisor the kernel refuses (a filter's protocol, kind and handle are parsed once, into
/// the wire's types: `htb_ipc::Protocol`, `htb_ipc::FilterKind`, `htb_ipc::FilterHandle`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterValueError {
    /// More than 256 buckets.
    #[error("divisor {0}: exceeded maximum 256 hash buckets")]
    DivisorTooLarge(u32),
    /// Not a power of two.
    #[error("divisor {0} is not a power of 2")]
    DivisorNotPowerOfTwo(u32),
}

pub use htb_ipc::Protocol;

pub use htb_ipc::FilterKind;

/// u32's `divisor`: a power of two from 1 to 256 buckets (`u32_change` in `cls_u32.c`).
///
/// # Errors
/// Above 256, or not a power of two.
pub fn u32_divisor(d: u32) -> Result<u16, FilterValueError> {
    if d > 256 {
        Err(FilterValueError::DivisorTooLarge(d))
    } else if !d.is_power_of_two() {
        Err(FilterValueError::DivisorNotPowerOfTwo(d))
    } else {
        Ok(d as u16)
    }
}

/// A u32 filter's hash-table parts (`cls_u32.c`'s `tc_u_hnode` and a knode's `ht_down`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct U32Parts {
    /// This entry is hash table `handle >> 20` with this many buckets (no match, no class).
    pub divisor: Option<u16>,
    /// Packets it matches go on to this table (its 12-bit id).
    pub link: Option<u16>,
    /// Which bucket of the linked table (none: bucket 0).
    pub hashkey: Option<HashKey>,
}

/// A filter with what tc shows about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterEntry {
    /// Priority (`pref`).
    pub prio: u32,
    /// `protocol`.
    pub protocol: Protocol,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    /// Handle within its priority.
    pub handle: u32,
    /// What it matches (the family comes from `protocol`).
    pub matcher: Match,
    /// Target class (none: a u32 hash table, a link without a class, an empty u32 filter).
    pub class: Option<ClassId>,
    /// u32 hash tables and links.
    pub u32: U32Parts,
    /// `action police …`, its bucket shared with the data plane's classifiers.
    pub police: Option<Police>,
    /// `action mirred egress redirect dev IFB` (filters of an ingress qdisc).
    pub redirect: Option<InterfaceName>,
}

impl FilterEntry {
    /// Evaluation order: by priority, then handle (tc's order within a priority).
    #[must_use]
    pub fn order(&self) -> (u32, u32) {
        (self.prio, self.handle)
    }

    /// Its u32 parts as the wire carries them (the table and bucket are in its handle).
    #[must_use]
    pub fn hashing(&self) -> U32Hashing {
        U32Hashing {
            divisor: self.u32.divisor.map(u32::from),
            table: None,
            link: self.u32.link.map(u32::from),
            hashkey: self.u32.hashkey,
        }
    }

    /// The u32 table it sits in (`handle`'s top 12 bits).
    #[must_use]
    pub fn table(&self) -> u16 {
        (self.handle >> 20) as u16
    }

    /// The bucket of its table it sits in.
    #[must_use]
    pub fn bucket(&self) -> u32 {
        (self.handle >> 12) & 0xff
    }
}

/// Gives each filter without a handle one, the way the kernel would have: per priority, u32
/// filters share a hash table (`800:`, `801:`, … in order of first use) and number their nodes
/// from `800`; flower filters count from 1.
///
/// # Errors
/// A prio's root table with no node id left for a filter (`gen_new_kid`: 0x800 to 0xfff).
pub fn assign_handles(filters: &mut [(FilterEntry, bool)]) -> Result<(), NoNodeId> {
    // Filters placed in hash tables made with `divisor` (and those tables) are not in a prio's
    // root table.
    let hashed: Vec<u16> = filters
        .iter()
        .filter(|(f, _)| f.u32.divisor.is_some())
        .map(|(f, _)| f.table())
        .collect();
    for i in 0..filters.len() {
        if filters[i].1 {
            continue;
        }
        let (prio, kind) = (filters[i].0.prio, filters[i].0.kind);
        let peers = filters.iter().filter(|(f, given)| {
            *given && f.prio == prio && f.kind == kind && !hashed.contains(&f.table())
        });
        filters[i].0.handle = match kind {
            FilterKind::U32 => {
                let mut peers = peers.map(|(f, _)| f.handle).peekable();
                let ht = match peers.peek() {
                    Some(h) => h >> 20,
                    // A new prio's root table, as a live `filter add` would number it.
                    None => {
                        let given: super::FilterList = filters
                            .iter()
                            .filter(|(_, given)| *given)
                            .map(|(f, _)| f.clone())
                            .collect();
                        given.next_table()
                    }
                };
                let node = peers.map(|h| (h & 0xfff) + 1).max().unwrap_or(U32_FIRST_ID);
                if node > U32_LAST_ID {
                    return Err(NoNodeId { prio, table: ht });
                }
                ht << 20 | node.max(U32_FIRST_ID)
            }
            FilterKind::Flower => peers.map(|(f, _)| f.handle + 1).max().unwrap_or(1),
        };
        filters[i].1 = true;
    }
    Ok(())
}

/// A u32 filter without a handle finds no free node id in its prio's root table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "prio {prio}: u32 table {table:x}: has no free node id (as the kernel's cls_u32, a bucket \
     holds the filters 800 to fff, 2048 of them): hash the filters into a table (u32 divisor \
     256, then ht T:B:) or spread them over more prios"
)]
pub struct NoNodeId {
    /// The prio.
    pub prio: u32,
    /// Its root table.
    pub table: u32,
}

/// A prefix of one address family in a filter of another protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{prefix} is not an address of protocol {}", protocol.name())]
pub struct FamilyMismatch {
    /// The prefix.
    pub prefix: IpPrefix,
    /// The filter's protocol.
    pub protocol: Protocol,
}

/// Restricts `m` to `protocol`'s address family (tc's `protocol ip|ipv6`).
///
/// # Errors
/// `FamilyMismatch` for a prefix of the other family.
pub fn with_protocol(mut m: Match, protocol: Protocol) -> Result<Match, FamilyMismatch> {
    if let Some(family) = protocol.family() {
        for prefix in [m.src, m.dst].into_iter().flatten() {
            let of = if prefix.addr().is_ipv4() {
                Family::V4
            } else {
                Family::V6
            };
            if of != family {
                return Err(FamilyMismatch { prefix, protocol });
            }
        }
    }
    if protocol == Protocol::Arp {
        if let Some(prefix) = m.src.or(m.dst) {
            return Err(FamilyMismatch { prefix, protocol });
        }
        m.arp = true;
    }
    m.family = protocol.family();
    Ok(m)
}

/// The match a filter of `protocol` holds: the wire's, whose fields were checked as it was
/// read, restricted to the protocol's family.
///
/// # Errors
/// A prefix of another family than the protocol's (`Invalid`).
pub fn matcher(m: &Match, protocol: Protocol) -> Result<Match, IpcError> {
    with_protocol(*m, protocol).map_err(|e| error(ErrorCode::Invalid, e.to_string()))
}

/// `m` as the wire carries it: without the family and `arp`, which the filter's `protocol`
/// says (a show, an explanation and a reload's commands hold what a client would read).
#[must_use]
pub fn on_wire(m: &Match) -> Match {
    Match {
        family: None,
        arp: false,
        ..*m
    }
}
