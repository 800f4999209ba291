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
///
/// Held compactly, 56 bytes, as a tree holds a million of them: a subscriber's filter matches
/// one address, which is kept inline; a fuller match, u32 hash-table parts, a policer and a
/// redirect go to boxes that only the filters having them pay for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterEntry {
    /// Priority (`pref`).
    pub prio: u32,
    /// Handle within its priority.
    pub handle: u32,
    /// Target class (none: a u32 hash table, a link without a class, an empty u32 filter).
    pub class: Option<ClassId>,
    /// `protocol`.
    pub protocol: Protocol,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    matcher: StoredMatch,
    more: Option<Box<More>>,
}

/// A filter's match: one address inline, anything more boxed (one form per match, so that
/// equal matches are held equal).
#[derive(Clone, Debug, PartialEq, Eq)]
enum StoredMatch {
    /// A family and at most one address prefix, nothing else.
    Address {
        family: Option<Family>,
        dst: bool,
        prefix: Option<IpPrefix>,
    },
    Other(Box<Match>),
}

impl StoredMatch {
    fn new(m: Match) -> Self {
        let (dst, prefix) = match (m.src, m.dst) {
            (Some(src), None) => (false, Some(src)),
            (None, dst) => (true, dst),
            (Some(_), Some(_)) => return Self::Other(Box::new(m)),
        };
        let address = Self::Address {
            family: m.family,
            dst,
            prefix,
        };
        if address.get() == m {
            address
        } else {
            Self::Other(Box::new(m))
        }
    }

    fn get(&self) -> Match {
        match *self {
            Self::Address {
                family,
                dst,
                prefix,
            } => Match {
                family,
                src: prefix.filter(|_| !dst),
                dst: prefix.filter(|_| dst),
                ..Match::default()
            },
            Self::Other(ref m) => **m,
        }
    }
}

/// What few filters have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct More {
    u32: U32Parts,
    police: Option<Police>,
    redirect: Option<InterfaceName>,
}

impl FilterEntry {
    /// A filter matching `matcher` (restricted to `protocol`'s family already, see
    /// [`matcher`]); no hash-table parts, policer or redirect.
    #[must_use]
    pub fn new(
        prio: u32,
        protocol: Protocol,
        kind: FilterKind,
        handle: u32,
        matcher: Match,
        class: Option<ClassId>,
    ) -> Self {
        Self {
            prio,
            handle,
            class,
            protocol,
            kind,
            matcher: StoredMatch::new(matcher),
            more: None,
        }
    }

    /// With u32 hash-table parts.
    #[must_use]
    pub fn with_u32(self, u32: U32Parts) -> Self {
        self.with_more(|m| m.u32 = u32)
    }

    /// With `action police …`.
    #[must_use]
    pub fn with_police(self, police: Option<Police>) -> Self {
        self.with_more(|m| m.police = police)
    }

    /// With `action mirred egress redirect dev IFB`.
    #[must_use]
    pub fn with_redirect(self, redirect: Option<InterfaceName>) -> Self {
        self.with_more(|m| m.redirect = redirect)
    }

    /// The boxed parts changed by `f`; no box when they are all unset.
    fn with_more(mut self, f: impl FnOnce(&mut More)) -> Self {
        let mut more = self.more.take().map_or_else(More::default, |b| *b);
        f(&mut more);
        self.more = (more != More::default()).then(|| Box::new(more));
        self
    }

    /// What it matches (the family comes from `protocol`).
    #[must_use]
    pub fn matcher(&self) -> Match {
        self.matcher.get()
    }

    /// Its u32 hash tables and links.
    #[must_use]
    pub fn u32(&self) -> U32Parts {
        self.more.as_ref().map_or_else(U32Parts::default, |m| m.u32)
    }

    /// `action police …`, its bucket shared with the data plane's classifiers.
    #[must_use]
    pub fn police(&self) -> Option<&Police> {
        self.more.as_ref()?.police.as_ref()
    }

    /// `action mirred egress redirect dev IFB` (filters of an ingress qdisc).
    #[must_use]
    pub fn redirect(&self) -> Option<&InterfaceName> {
        self.more.as_ref()?.redirect.as_ref()
    }

    /// Evaluation order: by priority, then handle (tc's order within a priority).
    #[must_use]
    pub fn order(&self) -> (u32, u32) {
        (self.prio, self.handle)
    }

    /// Its u32 parts as the wire carries them (the table and bucket are in its handle).
    #[must_use]
    pub fn hashing(&self) -> U32Hashing {
        let parts = self.u32();
        U32Hashing {
            divisor: parts.divisor.map(u32::from),
            table: None,
            link: parts.link.map(u32::from),
            hashkey: parts.hashkey,
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

    /// Whether it is a u32 hash table (made with `divisor`).
    #[must_use]
    pub fn is_hash_table(&self) -> bool {
        self.u32().divisor.is_some()
    }
}

impl super::sorted_chunks::Keyed for FilterEntry {
    type Key = (u32, u32);

    fn key(&self) -> (u32, u32) {
        self.order()
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
        .filter(|(f, _)| f.is_hash_table())
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

#[cfg(test)]
mod tests {
    use htb_config::filter::{PortRange, RawKey, RawKeys};

    use super::*;

    /// Any match comes back as given; one address (and its family) is held inline, in a
    /// 56-byte entry.
    #[test]
    fn matches_come_back_as_given() {
        assert_eq!(size_of::<FilterEntry>(), 56);
        let prefix: IpPrefix = "100.64.3.7/32".parse().unwrap();
        let six: IpPrefix = "2001:db8::/64".parse().unwrap();
        let raw = RawKeys::new(&[RawKey {
            at: 16,
            nexthdr: false,
            mask: 0xff00,
            value: 0x0100,
        }])
        .unwrap();
        let inline = [
            Match::default(),
            Match {
                dst: Some(prefix),
                family: Some(Family::V4),
                ..Match::default()
            },
            Match {
                src: Some(six),
                ..Match::default()
            },
            Match {
                family: Some(Family::V6),
                ..Match::default()
            },
        ];
        let boxed = [
            Match {
                src: Some(prefix),
                dst: Some(prefix),
                ..Match::default()
            },
            Match {
                dst: Some(prefix),
                dport: Some(PortRange {
                    first: 80,
                    last: 80,
                }),
                ..Match::default()
            },
            Match {
                arp: true,
                ..Match::default()
            },
            Match {
                raw,
                ..Match::default()
            },
        ];
        for (m, is_inline) in inline
            .iter()
            .map(|m| (m, true))
            .chain(boxed.iter().map(|m| (m, false)))
        {
            let e = FilterEntry::new(10, Protocol::Ip, FilterKind::U32, 0x800, *m, None);
            assert_eq!(e.matcher(), *m);
            assert_eq!(
                matches!(e.matcher, StoredMatch::Address { .. }),
                is_inline,
                "{m:?}"
            );
        }
    }

    /// The boxed parts come back, and the box goes when they are all unset again.
    #[test]
    fn rare_parts_are_boxed_only_while_set() {
        let parts = U32Parts {
            divisor: Some(256),
            ..U32Parts::default()
        };
        let redirect: InterfaceName = "ifb0".parse().unwrap();
        let e = FilterEntry::new(
            1,
            Protocol::All,
            FilterKind::U32,
            1 << 20,
            Match::default(),
            None,
        )
        .with_u32(parts)
        .with_redirect(Some(redirect.clone()));
        assert!(e.is_hash_table() && e.u32() == parts);
        assert_eq!(e.redirect(), Some(&redirect));
        assert!(e.police().is_none());
        let bare = e.with_u32(U32Parts::default()).with_redirect(None);
        assert!(bare.more.is_none());
        assert_eq!(bare.u32(), U32Parts::default());
    }
}
