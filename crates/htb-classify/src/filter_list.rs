//! The classifier's filters in evaluation order, held compactly: at a million subscribers
//! almost every filter is `protocol ip … match ip dst A/32 classid 1:N`, whose whole content
//! is an address and a class. Such a filter is 16 bytes here (its class and its address);
//! any other keeps its full [`Match`] (112 bytes) and policer in a list of its own. Prios are
//! held once per run of equal prios (the list is sorted by prio).

use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr};

use htb_core::ClassId;

use crate::classifier::Filter;
use crate::matcher::{IpPrefix, Match};
use crate::packet::Family;
use crate::police::Police;

/// A filter's match that is `dst A/32` and nothing else, with `protocol ip` or without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Host4 {
    addr: u32,
    /// Its family given (`protocol ip`): the match says so, though the address implies it.
    family: bool,
}

impl Host4 {
    fn of(m: &Match) -> Option<Self> {
        let dst = m.dst?;
        let IpAddr::V4(addr) = dst.addr() else {
            return None;
        };
        let host = Self {
            addr: u32::from(addr),
            family: m.family.is_some(),
        };
        (dst.prefix_len() == 32 && *m == host.matcher()).then_some(host)
    }

    /// The match it stands for.
    fn matcher(self) -> Match {
        Match {
            family: self.family.then_some(Family::V4),
            // A /32 is never wider than its address.
            dst: IpPrefix::new(IpAddr::V4(Ipv4Addr::from(self.addr)), 32),
            ..Match::default()
        }
    }
}

/// What one filter matches, by where it is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// A plain IPv4 host, no policer.
    Host4(Host4),
    /// The same with a policer: its index in [`FilterList::policed_hosts`].
    PolicedHost4(u32),
    /// Anything else: its index in [`FilterList::full`].
    Full(u32),
}

/// One filter: its class and what it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    class: ClassId,
    form: Form,
}

/// A filter that is not a plain IPv4 host: its keys and policer as given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Full {
    matcher: Match,
    police: Option<Police>,
}

/// The filters in evaluation order (see the module docs); position `i` is the `i`th filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FilterList {
    records: Vec<Record>,
    /// `(first position, prio)` of each run of equal prios, ascending.
    prios: Vec<(u32, u32)>,
    /// The host filters with a policer.
    policed_hosts: Vec<(Host4, Police)>,
    full: Vec<Full>,
}

/// An index into one of the side lists: more than 2^32 filters cannot be held in memory here.
fn index(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl FilterList {
    /// `filters`, already in evaluation order (sorted by prio, stably).
    pub(crate) fn new(filters: Vec<Filter>) -> Self {
        let mut list = Self {
            records: Vec::with_capacity(filters.len()),
            ..Self::default()
        };
        for (position, f) in filters.into_iter().enumerate() {
            if list.prios.last().is_none_or(|&(_, prio)| prio != f.prio) {
                list.prios.push((index(position), f.prio));
            }
            let form = match (Host4::of(&f.matcher), f.police) {
                (Some(host), None) => Form::Host4(host),
                (Some(host), Some(police)) => {
                    list.policed_hosts.push((host, police));
                    Form::PolicedHost4(index(list.policed_hosts.len() - 1))
                }
                (None, police) => {
                    list.full.push(Full {
                        matcher: f.matcher,
                        police,
                    });
                    Form::Full(index(list.full.len() - 1))
                }
            };
            list.records.push(Record {
                class: f.class,
                form,
            });
        }
        list.prios.shrink_to_fit();
        list.policed_hosts.shrink_to_fit();
        list.full.shrink_to_fit();
        list
    }

    /// How many filters it holds.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The class of the filter at `i`.
    #[inline]
    pub(crate) fn class(&self, i: usize) -> Option<ClassId> {
        self.records.get(i).map(|r| r.class)
    }

    /// The policer of the filter at `i`, if it has one.
    #[inline]
    pub(crate) fn police(&self, i: usize) -> Option<&Police> {
        match self.records.get(i)?.form {
            Form::Host4(_) => None,
            Form::PolicedHost4(at) => Some(&self.policed_hosts[at as usize].1),
            Form::Full(at) => self.full[at as usize].police.as_ref(),
        }
    }

    /// `f` of the match of the filter at `i` (`None` past the end): a full filter's match is
    /// lent where it lies, a host's made on the stack.
    #[inline]
    pub(crate) fn with_match<R>(&self, i: usize, f: impl FnOnce(&Match) -> R) -> Option<R> {
        Some(match self.records.get(i)?.form {
            Form::Host4(host) => f(&host.matcher()),
            Form::PolicedHost4(at) => f(&self.policed_hosts[at as usize].0.matcher()),
            Form::Full(at) => f(&self.full[at as usize].matcher),
        })
    }

    /// The filter at `i`, as it was given.
    pub(crate) fn get(&self, i: usize) -> Option<Filter> {
        let record = self.records.get(i)?;
        let (matcher, police) = match record.form {
            Form::Host4(host) => (host.matcher(), None),
            Form::PolicedHost4(at) => {
                let (host, police) = &self.policed_hosts[at as usize];
                (host.matcher(), Some(police.clone()))
            }
            Form::Full(at) => {
                let full = &self.full[at as usize];
                (full.matcher, full.police.clone())
            }
        };
        // The run holding `i`: the last one starting at or before it (the first starts at 0).
        let run = self
            .prios
            .partition_point(|&(first, _)| first as usize <= i);
        let prio = self.prios[run - 1].1;
        Some(Filter {
            prio,
            matcher,
            class: record.class,
            police,
        })
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use core::net::Ipv6Addr;

    use proptest::prelude::*;

    use super::*;
    use crate::classifier::{Classifier, Verdict};
    use crate::matcher::PortRange;
    use crate::packet::PacketInfo;
    use crate::police::PoliceConfig;
    use crate::raw_key::Headers;

    fn filter(prio: u32, matcher: Match, minor: u32, police: Option<Police>) -> Filter {
        Filter {
            prio,
            matcher,
            class: ClassId::new(1, minor),
            police,
        }
    }

    #[test]
    fn a_host_filter_is_sixteen_bytes() {
        assert_eq!(size_of::<Record>(), 16);
    }

    /// Every form comes back as it was given, in its place, with its prio; only plain IPv4
    /// /32s are held as hosts.
    #[test]
    fn filters_come_back_as_given() {
        let host: IpPrefix = "10.0.0.7/32".parse().unwrap();
        let police = Police::new(PoliceConfig::default());
        let plain = Match {
            family: Some(Family::V4),
            dst: Some(host),
            ..Match::default()
        };
        let filters = vec![
            filter(1, plain, 10, None),
            filter(1, plain, 11, Some(police.clone())),
            // No family given (`protocol all`): a host too, which comes back without one.
            filter(
                2,
                Match {
                    dst: Some(host),
                    ..Match::default()
                },
                12,
                None,
            ),
            filter(
                2,
                Match {
                    dst: Some("10.0.0.0/24".parse().unwrap()),
                    family: Some(Family::V4),
                    ..Match::default()
                },
                13,
                None,
            ),
            filter(
                5,
                Match {
                    proto: Some(6),
                    ..plain
                },
                14,
                Some(police),
            ),
            filter(7, Match::default(), 15, None),
        ];
        let list = FilterList::new(filters.clone());
        assert_eq!(list.len(), filters.len());
        for (i, f) in filters.iter().enumerate() {
            assert_eq!(list.get(i).as_ref(), Some(f), "filter {i}");
            assert_eq!(list.class(i), Some(f.class));
            assert_eq!(list.police(i), f.police.as_ref());
            assert_eq!(list.with_match(i, |m| *m), Some(f.matcher));
        }
        assert_eq!(list.get(filters.len()), None);
        assert_eq!(list.with_match(filters.len(), |_| ()), None);
        assert_eq!(
            list.records
                .iter()
                .filter(|r| matches!(r.form, Form::Full(_)))
                .count(),
            3,
            "three hosts held compactly"
        );
        assert_eq!(list.prios, vec![(0, 1), (2, 2), (4, 5), (5, 7)]);
    }

    /// Hosts (with `protocol ip` or without, policed or not) among prefixes, ports and
    /// duplicates: the shapes at scale and what sits around them.
    fn matcher() -> impl Strategy<Value = Match> {
        let v4 = |i: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
        (
            0u8..4,
            prop::sample::select(vec![32u8, 32, 32, 24, 31]),
            prop::option::weighted(0.5, Just(Family::V4)),
            prop::option::weighted(0.2, prop::sample::select(vec![6u8, 17])),
            prop::option::weighted(
                0.1,
                Just(PortRange {
                    first: 80,
                    last: 90,
                }),
            ),
            prop::bool::weighted(0.1),
        )
            .prop_map(move |(i, len, family, proto, dport, v6)| Match {
                family: if v6 { None } else { family },
                dst: IpPrefix::new(
                    if v6 {
                        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i.into()))
                    } else {
                        v4(i)
                    },
                    if v6 { 128 } else { len },
                ),
                proto,
                dport,
                ..Match::default()
            })
    }

    fn packet() -> impl Strategy<Value = PacketInfo> {
        (
            0u8..5,
            prop::sample::select(vec![6u8, 17]),
            prop::sample::select(vec![80u16, 85, 99]),
        )
            .prop_map(|(i, proto, dport)| PacketInfo {
                src: Some(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))),
                dst: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
                proto: Some(proto),
                sport: Some(40_000),
                dport: Some(dport),
                ..PacketInfo::default()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The classifier gives back the filters it was given (sorted by prio, stably), and
        /// finds for each packet the first of *those* that matches, policers included: the
        /// compact form neither changes a filter nor a verdict.
        #[test]
        fn the_compact_list_is_the_list_given(
            given in prop::collection::vec((1u32..4, matcher(), prop::bool::weighted(0.2)), 0..30),
            packets in prop::collection::vec(packet(), 1..20),
        ) {
            // One policer per filter that has one, passing everything: its presence is what
            // the list must keep.
            let mut given: Vec<Filter> = given
                .into_iter()
                .enumerate()
                .map(|(i, (prio, matcher, policed))| {
                    let police = policed.then(|| Police::new(PoliceConfig::default()));
                    filter(prio, matcher, i as u32 + 1, police)
                })
                .collect();
            let c = Classifier::new(given.clone());
            given.sort_by_key(|f| f.prio);
            prop_assert_eq!(c.len(), given.len());
            prop_assert_eq!(&c.filters(), &given);
            let h = Headers::default();
            for p in &packets {
                let want = given.iter().position(|f| f.matcher.matches_headers(p, &h));
                prop_assert_eq!(c.classify_index_headers(p, &h), want);
                prop_assert_eq!(c.classify(p), want.map(|i| given[i].class));
                prop_assert_eq!(
                    c.classify_policed(p, &h, htb_core::Instant::ZERO, 100),
                    want.map_or(Verdict::Unclassified, Verdict::Filter)
                );
            }
        }
    }
}
