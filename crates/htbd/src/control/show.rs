//! `show` requests: the model's objects with the data plane's statistics, read in chunks of
//! [`STATS_CHUNK`] classes so that even a 100 000-class `show -s` never holds packets up long.

use htb_core::{ClassId, LeafStats};
use htb_ipc::{
    ClassInfo, ClassStats, ErrorCode, FilterHandle, FilterInfo, IngressInfo, InterfaceName,
    IpcError, LeafQdiscInfo, LeafQdiscStats, MqClassInfo, MqInfo, Object, Parent, QdiscInfo,
    QueueStats, RttStats, Show, Shown,
};
use htb_xdp::PortSnapshot;

use super::{Control, internal};
use crate::metrics::{ClassScrape, Scrape, TreeScrape};
use crate::model::{ClassEntry, INGRESS_MAJOR, MqModel, QdiscModel, Root, on_wire};

/// A tree's totals as `qdisc show -s` prints them, with `pool` drops of its port's frame
/// pool.
fn queue_stats(s: &htb_core::SchedulerStats, pool: u64) -> QueueStats {
    QueueStats {
        bytes: s.bytes_sent,
        packets: s.packets_sent,
        drops: s.drops + pool,
        overlimits: s.overlimits,
        requeues: 0,
        backlog_bytes: s.backlog_bytes,
        backlog_packets: s.qlen + u64::from(s.direct_qlen),
    }
}

/// A class's round trips as the wire carries them.
fn rtt_stats(r: &htb_xdp::rtt::ClassRtt) -> RttStats {
    RttStats {
        p50_us: r.quantile(0.5),
        p95_us: r.quantile(0.95),
        samples: r.samples,
        retransmits: r.retransmits,
    }
}

/// Classes whose statistics one data-plane job copies: 4 096 took 1.46 ms at 100 000
/// subscribers (`htb-lab scale`), over the 1 ms goal; 2 048 up to 1.7 ms on a busy moment of
/// this 2-vCPU VM. A quarter of that kept a margin until, at 200 000 subscribers with
/// `class show -s` and the import's client sharing the two vCPUs, a job of 1 024 ran 7.6 ms of
/// its own (the scale test): 256 keeps even such a job near 2 ms. Per worker: each class's
/// statistics are read from every worker's copy and merged, so a job takes this many over the
/// workers.
const STATS_CHUNK: usize = 256;

/// The part of the listed classes or filters a paged show answers ([`htb_ipc::Page`]): items
/// are offered in list order, and the window admits those from `from`, `limit` of them.
struct Window {
    skip: u64,
    left: u64,
    from: u64,
    taken: u64,
    /// An item after the window was offered: another page follows.
    more: bool,
}

impl Window {
    fn new(page: Option<htb_ipc::Page>) -> Self {
        let (from, left) = page.map_or((0, u64::MAX), |p| (p.from, u64::from(p.limit.max(1))));
        Self {
            skip: from,
            left,
            from,
            taken: 0,
            more: false,
        }
    }

    /// Whether the next item of the list is in the window.
    fn admit(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            false
        } else if self.left == 0 {
            self.more = true;
            false
        } else {
            self.left -= 1;
            self.taken += 1;
            true
        }
    }

    /// The items of `list` in the window, pulled only as far as the first one after it (which
    /// marks that more follow).
    fn take<T>(&mut self, list: impl Iterator<Item = T>) -> Vec<T> {
        let mut taken = Vec::new();
        for item in list {
            if self.admit() {
                taken.push(item);
            } else if self.more {
                break;
            }
        }
        taken
    }

    /// Whether this is the first page (or no paging): what precedes the list comes with it.
    fn first(&self) -> bool {
        self.from == 0
    }

    /// Where the next page starts, when more follow.
    fn next(&self) -> Option<u64> {
        self.more.then_some(self.from + self.taken)
    }
}

/// A tree's part of a port's counters: its classes from `offset` on in `snapshot`.
#[derive(Clone, Copy)]
struct TreeStats<'a> {
    snapshot: &'a PortSnapshot,
    offset: usize,
}

impl TreeStats<'_> {
    fn class(&self, i: usize) -> Option<htb_core::ClassStats> {
        self.snapshot
            .classes
            .get(self.offset + i)
            .copied()
            .flatten()
    }

    fn rtt(&self, i: usize) -> Option<RttStats> {
        let r = self.snapshot.rtt.get(self.offset + i)?.as_ref()?;
        Some(rtt_stats(r))
    }

    /// Class `i`'s counters as `class show -s` lists them.
    fn class_info_stats(&self, i: usize) -> Option<ClassStats> {
        self.class(i).map(|s| ClassStats {
            queue: s.queue,
            lended: s.lends,
            borrowed: s.borrows,
            giants: s.giants,
            tokens: s.tokens,
            ctokens: s.ctokens,
            rtt: self.rtt(i),
        })
    }

    fn leaf(&self, i: usize) -> Option<LeafStats> {
        self.snapshot.leaves.get(self.offset + i).cloned().flatten()
    }

    fn scheduler(&self, major: u16) -> htb_core::SchedulerStats {
        self.snapshot
            .schedulers
            .iter()
            .find(|(m, _)| *m == major)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }
}

/// The classes of `qdisc` whose counters a `show` of `object` prints: for `qdisc show` its leaf
/// classes that have a leaf qdisc (all of them with `invisible`), for `class show` those the
/// show selects that fall in `window` (a page of a million classes walks the classes before it
/// and stops after it, instead of listing all of them per page).
fn tree_ids(
    show: &Show,
    object: Object,
    qdisc: &QdiscModel,
    only: Option<ClassId>,
    window: &mut Window,
) -> Vec<ClassId> {
    match object {
        Object::Qdisc => qdisc
            .classes
            .iter()
            .filter(|c| qdisc.class_info(c.id()).is_some_and(|i| i.level == 0))
            .filter(|c| c.leaf().is_some() || show.invisible)
            .map(ClassEntry::id)
            .collect(),
        Object::Class => {
            // `parent root` and `parent 1:` (the qdisc) both ask for the root classes.
            let parent = show.parent.map(|p| p.id().filter(|id| !id.is_qdisc()));
            window.take(
                qdisc
                    .classes
                    .iter()
                    .filter(|c| only.is_none_or(|o| o == c.id()))
                    .filter(|c| parent.is_none_or(|p| p == c.parent()))
                    .map(ClassEntry::id),
            )
        }
        Object::Filter => Vec::new(),
    }
}

/// `mq`'s line and its classes, each with its tree's totals from `snapshot` (`-s`).
fn mq_info(dev: &InterfaceName, mq: &MqModel, snapshot: Option<&PortSnapshot>) -> MqInfo {
    let tree_stats = |major: u16| {
        let (_, s) = snapshot?.schedulers.iter().find(|(m, _)| *m == major)?;
        Some(queue_stats(s, 0))
    };
    let classes: Vec<MqClassInfo> = mq
        .trees
        .iter()
        .map(|(&minor, q)| MqClassInfo {
            id: ClassId::new(mq.handle, u32::from(minor)),
            leaf: Some(ClassId::new(q.config.major, 0)),
            stats: tree_stats(q.config.major),
        })
        .collect();
    // As the kernel's `mq_dump`: the sum of its queues' qdiscs; the frame pool's drops (a
    // frame without a tree yet) are the root's.
    let stats = snapshot.map(|snapshot| {
        let mut sum = QueueStats {
            drops: snapshot.port.drops_pool + snapshot.port.drops_police,
            ..QueueStats::default()
        };
        // `gnet_stats_add_queue` adds every counter, requeues included.
        for c in classes.iter().filter_map(|c| c.stats) {
            sum.add(&c);
        }
        sum
    });
    MqInfo {
        dev: dev.to_owned(),
        handle: ClassId::new(mq.handle, 0),
        classes,
        stats,
    }
}

/// The `k`-th requested class's counters in `snapshot`, as the wire carries them.
pub(super) fn class_stats(snapshot: &PortSnapshot, k: usize) -> Option<ClassStats> {
    TreeStats {
        snapshot,
        offset: 0,
    }
    .class_info_stats(k)
}

/// A leaf qdisc's counters: what its class sent, what the leaf holds and dropped, and
/// `dropped_before` (frames dropped before they reached it).
pub(super) fn leaf_qdisc_stats(
    class: Option<htb_core::ClassStats>,
    leaf: Option<LeafStats>,
    dropped_before: u64,
) -> LeafQdiscStats {
    let cake = leaf.as_ref().and_then(|l| l.cake.clone());
    LeafQdiscStats {
        queue: QueueStats {
            bytes: class.map_or(0, |c| c.queue.bytes),
            packets: class.map_or(0, |c| c.queue.packets),
            drops: leaf.as_ref().map_or(0, |l| l.drops) + dropped_before,
            overlimits: leaf.as_ref().map_or(0, |l| l.overlimits),
            requeues: 0,
            backlog_bytes: leaf.as_ref().map_or(0, |l| l.backlog),
            backlog_packets: leaf.as_ref().map_or(0, |l| u64::from(l.qlen)),
        },
        fq_codel: leaf.as_ref().and_then(|l| l.fq_codel),
        cake,
    }
}

/// A classless root qdisc (`qdisc cake 1: root …`): the one class of the tree that carries it
/// is not shown, its counters are the qdisc's.
fn show_root_leaf(
    dev: &InterfaceName,
    qdisc: &QdiscModel,
    stats: Option<TreeStats<'_>>,
    shown: &mut Shown,
) {
    let Some(def) = qdisc.root_leaf() else {
        return;
    };
    let stats = stats.map(|t| {
        // The frame pool's and policers' drops happen before a frame reaches a qdisc: the
        // root's.
        let before = t.snapshot.port.drops_pool + t.snapshot.port.drops_police;
        leaf_qdisc_stats(t.class(0), t.leaf(0), before)
    });
    shown.leaf_qdiscs.push(LeafQdiscInfo {
        dev: dev.to_owned(),
        handle: Some(ClassId::new(qdisc.config.major, 0)),
        parent: None,
        config: def.config,
        stab: qdisc.config.stab.map(|t| t.spec()),
        stats,
    });
}

/// One HTB qdisc's part of a `show` of `object`: `ids` are its classes [`tree_ids`] chose,
/// `stats` their counters.
#[allow(clippy::too_many_arguments)]
fn show_tree(
    show: &Show,
    object: Object,
    dev: &InterfaceName,
    parent: Option<ClassId>,
    qdisc: &QdiscModel,
    ids: &[ClassId],
    stats: Option<TreeStats<'_>>,
    shown: &mut Shown,
    window: &mut Window,
) -> Result<(), IpcError> {
    let dev = dev.clone();
    match object {
        Object::Qdisc => {
            let c = qdisc.config;
            let s = stats.map(|t| t.scheduler(c.major)).unwrap_or_default();
            // The frame pool's and policers' drops happen before a frame has a tree: the
            // root's (the kernel counts a policer's drop in the qdisc that classified it).
            let pool = match (parent, stats) {
                (None, Some(t)) => t.snapshot.port.drops_pool + t.snapshot.port.drops_police,
                _ => 0,
            };
            shown.qdiscs.push(QdiscInfo {
                dev: dev.clone(),
                handle: ClassId::new(c.major, 0),
                parent,
                default_minor: c.default_minor,
                r2q: c.r2q,
                direct_qlen: c.direct_qlen,
                direct_packets: s.direct_packets,
                stab: c.stab.map(|t| t.spec()),
                stats: show.stats.then(|| queue_stats(&s, pool)),
            });
            // Leaf qdiscs follow their HTB qdisc, by class; a class's default leaf only with
            // `invisible`, as the kernel hides its default pfifo leaves.
            for (i, &class) in ids.iter().enumerate() {
                let Some(config) = qdisc.class_info(class).and_then(|c| c.leaf) else {
                    continue;
                };
                let handle = qdisc.leaf_handle(class);
                let stats = stats
                    .filter(|_| show.stats)
                    .map(|t| leaf_qdisc_stats(t.class(i), t.leaf(i), 0));
                shown.leaf_qdiscs.push(LeafQdiscInfo {
                    dev: dev.clone(),
                    handle,
                    parent: Some(class),
                    config,
                    stab: None,
                    stats,
                });
            }
        }
        Object::Class => {
            for (i, id) in ids.iter().enumerate() {
                let info = qdisc
                    .class_info(*id)
                    .ok_or_else(|| internal(format!("class {id} missing")))?;
                let c = info.config;
                let stats = stats.and_then(|t| t.class_info_stats(i));
                shown.classes.push(ClassInfo {
                    dev: dev.clone(),
                    id: *id,
                    parent: info.parent,
                    level: info.level,
                    leaf: info.children == 0,
                    prio: c.prio,
                    quantum: c.quantum,
                    rate: c.rate,
                    ceil: c.ceil,
                    burst: c.burst,
                    cburst: c.cburst,
                    buffer_ns: c.buffer.as_nanos(),
                    cbuffer_ns: c.cbuffer.as_nanos(),
                    overhead: c.adjust.overhead,
                    mpu: c.adjust.mpu,
                    linklayer: c.adjust.link_layer,
                    leaf_qdisc: qdisc.leaf_handle(*id),
                    label: qdisc.classes.label(*id).and_then(|l| l.unpack()),
                    stats,
                });
            }
        }
        Object::Filter => {
            let wanted = show.prio.zip(show.handle);
            let selected = (&qdisc.filters).into_iter().filter(|f| {
                wanted.is_none_or(|(prio, handle)| f.prio == prio && handle.0 == f.handle)
            });
            for f in window.take(selected) {
                shown.filters.push(FilterInfo {
                    dev: dev.clone(),
                    parent: ClassId::new(qdisc.config.major, 0),
                    protocol: f.protocol,
                    prio: f.prio,
                    kind: f.kind,
                    handle: FilterHandle(f.handle),
                    class: f.class,
                    matcher: on_wire(&f.matcher()),
                    hashing: f.hashing(),
                    police: f.police().map(|p| htb_ipc::PoliceInfo {
                        // The mtu in force, as the kernel keeps it.
                        config: htb_ipc::PoliceConfig {
                            mtu: p.config().effective_mtu(),
                            ..*p.config()
                        },
                        stats: show.stats.then(|| p.stats()),
                    }),
                    redirect: f.redirect().cloned(),
                });
            }
        }
    }
    Ok(())
}

impl Control {
    pub(super) async fn show(&self, show: &Show) -> Result<Shown, IpcError> {
        let object = show.object.ok_or_else(|| {
            IpcError::new(
                ErrorCode::BadRequest,
                "show needs an object (qdisc, class, filter)",
            )
        })?;
        let ports: Vec<usize> = match &show.dev {
            Some(dev) => vec![self.model.port_index(dev)?],
            None => (0..self.model.ports.len()).collect(),
        };
        let only_tree = match (object, show.parent) {
            (Object::Filter, Some(Parent::Id(p))) => Some(p.major()),
            (Object::Filter, Some(Parent::Root)) => {
                return Err(IpcError::new(
                    ErrorCode::Invalid,
                    "filters hang on a qdisc: filter show parent 1:, not root",
                ));
            }
            _ => None,
        };
        let only_class = show.class;
        let mut shown = Shown::default();
        let mut window = Window::new(show.page.filter(|_| object != Object::Qdisc));
        for index in ports {
            let port = &self.model.ports[index];
            let dev = &port.name;
            let trees: Vec<(Option<ClassId>, &QdiscModel)> = port
                .trees()
                .into_iter()
                .filter(|(_, q)| only_tree.is_none_or(|m| m == q.config.major))
                .map(|(minor, q)| {
                    let parent = match &port.root {
                        Root::Mq(mq) => minor.map(|m| ClassId::new(mq.handle, u32::from(m))),
                        _ => None,
                    };
                    (parent, q)
                })
                .collect();
            // A classless root shows as one qdisc, with its one class's counters.
            let classless = matches!(port.root, Root::Leaf(_));
            // A paged class show: only the window's classes are looked up and counted.
            let ids: Vec<Vec<ClassId>> = trees
                .iter()
                .map(|(_, q)| match (classless, object) {
                    (true, Object::Qdisc) => vec![ClassId::new(q.config.major, 1)],
                    (true, _) => Vec::new(),
                    (false, _) => tree_ids(show, object, q, only_class, &mut window),
                })
                .collect();
            // One copy of the port's counters serves every tree and the mq line: what they
            // print adds up.
            let snapshot = match object {
                Object::Qdisc => Some(
                    self.snapshot(dev, &if show.stats { ids.concat() } else { Vec::new() })
                        .await?,
                ),
                Object::Class if show.stats => Some(self.snapshot(dev, &ids.concat()).await?),
                _ => None,
            };
            if let Root::Mq(mq) = &port.root
                && object != Object::Filter
                && window.first()
            {
                let mut info = mq_info(dev, mq, snapshot.as_ref().filter(|_| show.stats));
                if object == Object::Class {
                    // mq's classes are roots: listed unless the show names another class or
                    // parent.
                    let roots = show.parent.is_none_or(|p| p == Parent::Root);
                    info.classes
                        .retain(|c| roots && only_class.is_none_or(|o| o == c.id));
                }
                shown.mq.push(info);
            }
            let mut offset = 0;
            for ((parent, qdisc), ids) in trees.into_iter().zip(&ids) {
                let part = snapshot.as_ref().map(|s| TreeStats {
                    snapshot: s,
                    offset,
                });
                if classless {
                    if object == Object::Qdisc {
                        show_root_leaf(dev, qdisc, part.filter(|_| show.stats), &mut shown);
                    }
                } else {
                    show_tree(
                        show,
                        object,
                        dev,
                        parent,
                        qdisc,
                        ids,
                        part,
                        &mut shown,
                        &mut window,
                    )?;
                }
                offset += ids.len();
            }
            // The ingress qdisc: a line of its own in `qdisc show`, its filters under
            // `parent ffff:` in `filter show`.
            if let Some(ingress) = &port.ingress {
                match object {
                    Object::Qdisc => shown.ingress.push(IngressInfo {
                        dev: dev.to_owned(),
                        stats: None,
                    }),
                    Object::Filter if only_tree.is_none_or(|m| m == INGRESS_MAJOR) => {
                        show_tree(
                            show,
                            object,
                            dev,
                            None,
                            ingress,
                            &[],
                            None,
                            &mut shown,
                            &mut window,
                        )?;
                    }
                    _ => {}
                }
            }
        }
        if let (Object::Filter, Some(prio), Some(handle)) = (object, show.prio, show.handle)
            && shown.filters.is_empty()
        {
            return Err(IpcError::new(
                ErrorCode::NotFound,
                format!(
                    "no filter with prio {prio} and handle {:#x} on {}",
                    handle.0,
                    show.dev.as_deref().unwrap_or("any interface")
                ),
            ));
        }
        shown.next = window.next();
        Ok(shown)
    }

    /// A Prometheus scrape: the data plane's counters, then every tree's classes in chunks.
    /// Each chunk's statistics become the scrape's records as they arrive, into a list sized
    /// once: gathering every chunk's snapshot first (with the leaves' statistics, which a
    /// scrape does not show) and growing the lists by doubling left their freed generations in
    /// the arenas of the threads involved, which the memory lock keeps resident (with the
    /// inline labels of [`crate::metrics::exposition`]: 405 → 306 MB after a scrape of 200 000
    /// classes, `htb-lab scale`).
    pub(super) async fn scrape(&self) -> Result<Scrape, IpcError> {
        let started = std::time::Instant::now();
        let engine = self.on_engine(|engine| engine.stats()).await?;
        let mut trees = Vec::new();
        for port in &self.model.ports {
            let tree_list = port.trees();
            if tree_list.is_empty() {
                continue;
            }
            let ids: Vec<ClassId> = tree_list
                .iter()
                .flat_map(|(_, q)| q.classes.iter().map(ClassEntry::id))
                .collect();
            let mut classes = Vec::with_capacity(ids.len());
            let mut schedulers = None;
            // One job even without classes: the schedulers' counters come with it.
            let mut chunks = ids.chunks(self.per_worker(STATS_CHUNK));
            let first = chunks.next().unwrap_or_default();
            for chunk in std::iter::once(first).chain(chunks) {
                let snapshot = self.snapshot_job(&port.name, chunk.to_vec()).await?;
                schedulers.get_or_insert(snapshot.schedulers);
                let records = chunk
                    .iter()
                    .zip(snapshot.classes)
                    .zip(snapshot.rtt)
                    .filter_map(|((id, stats), rtt)| {
                        let info = port.tree(id.major())?.class_info(*id)?;
                        Some(ClassScrape {
                            id: *id,
                            parent: info.parent,
                            rate: info.config.rate.bits_per_sec(),
                            ceil: info.config.ceil.bits_per_sec(),
                            stats: stats?,
                            rtt: rtt.as_ref().map(rtt_stats),
                        })
                    });
                classes.extend(records);
            }
            trees.push(TreeScrape {
                dev: port.name.to_string(),
                schedulers: schedulers
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(_, s)| s)
                    .collect(),
                classes,
            });
        }
        Ok(Scrape {
            engine,
            trees,
            gather_seconds: started.elapsed().as_secs_f64(),
            generation: None,
            one_way_classes: None,
            flows: None,
        })
    }

    /// `dev`'s scheduler and port counters and the statistics of `ids`, copied
    /// [`STATS_CHUNK`] classes per data-plane job (over the number of workers).
    pub(super) async fn snapshot(
        &self,
        dev: &str,
        ids: &[ClassId],
    ) -> Result<PortSnapshot, IpcError> {
        let mut chunks = ids.chunks(self.per_worker(STATS_CHUNK));
        let first = chunks.next().unwrap_or_default();
        let mut snapshot = self.snapshot_job(dev, first.to_vec()).await?;
        for chunk in chunks {
            // Every per-class list grows by the chunk (named one by one, so that a new one
            // cannot be forgotten: the RTTs once were, and scrapes stopped at 4 096 classes).
            let PortSnapshot {
                classes,
                leaves,
                rtt,
                schedulers: _,
                port: _,
            } = self.snapshot_job(dev, chunk.to_vec()).await?;
            snapshot.classes.extend(classes);
            snapshot.leaves.extend(leaves);
            snapshot.rtt.extend(rtt);
        }
        Ok(snapshot)
    }

    async fn snapshot_job(&self, dev: &str, ids: Vec<ClassId>) -> Result<PortSnapshot, IpcError> {
        let port = dev.to_owned();
        self.on_engine(move |engine| engine.class_stats(&port, &ids))
            .await?
            .ok_or_else(|| internal(format!("the data plane has no port {dev}")))
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    /// Which of `items` a window admits, and where it says the next page starts.
    fn admitted(page: Option<htb_ipc::Page>, items: u64) -> (Vec<u64>, Option<u64>) {
        let mut window = Window::new(page);
        let kept = (0..items).filter(|_| window.admit()).collect();
        (kept, window.next())
    }

    /// Pages cover the list once, in order, and only the last says nothing follows.
    #[test]
    fn pages_cover_the_list_once() {
        assert_eq!(admitted(None, 5), (vec![0, 1, 2, 3, 4], None));
        let page = |from, limit| Some(htb_ipc::Page { from, limit });
        assert_eq!(admitted(page(0, 2), 5), (vec![0, 1], Some(2)));
        assert_eq!(admitted(page(2, 2), 5), (vec![2, 3], Some(4)));
        assert_eq!(admitted(page(4, 2), 5), (vec![4], None));
        assert_eq!(
            admitted(page(4, 1), 5),
            (vec![4], None),
            "exactly the last one"
        );
        assert_eq!(admitted(page(9, 2), 5), (vec![], None), "past the end");
        assert_eq!(
            admitted(page(0, 0), 2),
            (vec![0], Some(1)),
            "a limit of 0 is 1"
        );
        assert!(Window::new(page(0, 3)).first() && !Window::new(page(3, 3)).first());
    }

    /// A page taken from lists (one per tree) pulls no item past the one after the window,
    /// and pages across the lists' boundary as over one list.
    #[test]
    fn a_page_stops_pulling_after_its_window() {
        let pulled = std::cell::Cell::new(0);
        let list = |range: std::ops::Range<u64>| range.inspect(|_| pulled.set(pulled.get() + 1));
        let mut window = Window::new(Some(htb_ipc::Page { from: 3, limit: 2 }));
        assert_eq!(window.take(list(0..1_000_000)), [3, 4]);
        assert_eq!(pulled.get(), 6, "3 skipped, 2 taken, 1 to know more follow");
        assert_eq!(window.take(list(0..10)), Vec::<u64>::new());
        assert_eq!(pulled.get(), 7, "a later tree: one pulled, then stop");
        assert_eq!(window.next(), Some(5));
        // Across two trees of 3: items 2 (first tree's last) and 0 of the second.
        let mut window = Window::new(Some(htb_ipc::Page { from: 2, limit: 2 }));
        let (a, b) = (window.take(0..3), window.take(10..13));
        assert_eq!((a, b, window.next()), (vec![2], vec![10], Some(4)));
    }
}
