//! `show` requests: the model's objects with the data plane's statistics, read in chunks of
//! [`STATS_CHUNK`] classes so that even a 100 000-class `show -s` never holds packets up long.

use htb_core::ClassId;
use htb_ipc::{
    ClassInfo, ClassStats, ErrorCode, FilterInfo, IpcError, LeafQdiscInfo, LeafQdiscStats, Object,
    QdiscInfo, QueueStats, Show, Shown,
};
use htb_xdp::PortSnapshot;

use super::{Control, internal, parse_id};
use crate::metrics::{ClassScrape, Scrape, TreeScrape};
use crate::model::{link_layer_name, match_spec};

/// Classes whose statistics one data-plane job copies.
const STATS_CHUNK: usize = 4096;

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
        let mut shown = Shown::default();
        for index in ports {
            let port = &self.model.ports[index];
            let Some(qdisc) = &port.qdisc else {
                continue;
            };
            let dev = port.name.clone();
            match object {
                Object::Qdisc => {
                    // Leaf qdiscs follow their HTB qdisc, by class; a class's default leaf
                    // only with `invisible`, as the kernel hides its default pfifo leaves.
                    let leaves: Vec<(ClassId, Option<ClassId>)> = qdisc
                        .classes
                        .values()
                        .filter(|d| qdisc.class_info(d.id).is_some_and(|i| i.level == 0))
                        .filter(|d| d.leaf.is_some() || show.invisible)
                        .map(|d| {
                            let handle = d.leaf.and_then(|l| l.handle);
                            (d.id, handle.map(|h| ClassId::new(h, 0)))
                        })
                        .collect();
                    let ids: Vec<ClassId> = leaves.iter().map(|(id, _)| *id).collect();
                    let snapshot = self
                        .snapshot(&dev, if show.stats { &ids } else { &[] })
                        .await?;
                    let s = snapshot.scheduler;
                    let c = qdisc.config;
                    shown.qdiscs.push(QdiscInfo {
                        dev: dev.clone(),
                        handle: format!("{:x}:", c.major),
                        default_minor: c.default_minor,
                        r2q: c.r2q,
                        direct_qlen: c.direct_qlen,
                        direct_packets: s.direct_packets,
                        stats: show.stats.then_some(QueueStats {
                            bytes: s.bytes_sent,
                            packets: s.packets_sent,
                            drops: s.drops + snapshot.port.drops_pool,
                            overlimits: s.overlimits,
                            requeues: 0,
                            backlog_bytes: s.backlog_bytes,
                            backlog_packets: s.qlen + u64::from(s.direct_qlen),
                        }),
                    });
                    for (i, (parent, handle)) in leaves.into_iter().enumerate() {
                        let Some(config) = qdisc.class_info(parent).and_then(|c| c.leaf) else {
                            continue;
                        };
                        let stats = show.stats.then(|| {
                            let class = snapshot.classes.get(i).copied().flatten();
                            let leaf = snapshot.leaves.get(i).copied().flatten();
                            LeafQdiscStats {
                                bytes: class.map_or(0, |c| c.bytes),
                                packets: class.map_or(0, |c| c.packets),
                                drops: leaf.map_or(0, |l| l.drops),
                                overlimits: 0,
                                requeues: 0,
                                backlog_bytes: leaf.map_or(0, |l| l.backlog),
                                backlog_packets: leaf.map_or(0, |l| u64::from(l.qlen)),
                                fq_codel: leaf.and_then(|l| l.fq_codel),
                            }
                        });
                        shown.leaf_qdiscs.push(LeafQdiscInfo {
                            dev: dev.clone(),
                            handle,
                            parent,
                            config,
                            stats,
                        });
                    }
                }
                Object::Class => {
                    let only = show.class.as_deref().map(parse_id).transpose()?;
                    let parent = match show.parent.as_deref() {
                        None => None,
                        Some("root") => Some(None),
                        Some(p) => {
                            let p = parse_id(p)?;
                            Some((!p.is_qdisc()).then_some(p))
                        }
                    };
                    let ids: Vec<ClassId> = qdisc
                        .classes
                        .values()
                        .filter(|d| only.is_none_or(|o| o == d.id))
                        .filter(|d| parent.is_none_or(|p| p == d.parent))
                        .map(|d| d.id)
                        .collect();
                    let stats = if show.stats {
                        self.snapshot(&dev, &ids).await?.classes
                    } else {
                        Vec::new()
                    };
                    for (i, id) in ids.iter().enumerate() {
                        let info = qdisc
                            .class_info(*id)
                            .ok_or_else(|| internal(format!("class {id} missing")))?;
                        let c = info.config;
                        let stats = stats.get(i).copied().flatten().map(|s| ClassStats {
                            bytes: s.bytes,
                            packets: s.packets,
                            drops: s.drops,
                            overlimits: s.overlimits,
                            requeues: s.requeues,
                            backlog_bytes: s.backlog_bytes,
                            backlog_packets: u64::from(s.backlog_packets),
                            lended: s.lends,
                            borrowed: s.borrows,
                            giants: s.giants,
                            tokens: s.tokens,
                            ctokens: s.ctokens,
                        });
                        shown.classes.push(ClassInfo {
                            dev: dev.clone(),
                            id: id.to_string(),
                            parent: info.parent.map(|p| p.to_string()),
                            level: info.level,
                            leaf: info.children == 0,
                            prio: c.prio,
                            quantum: c.quantum,
                            rate: c.rate.bits_per_sec(),
                            ceil: c.ceil.bits_per_sec(),
                            burst: c.burst,
                            cburst: c.cburst,
                            buffer_ns: c.buffer.as_nanos(),
                            cbuffer_ns: c.cbuffer.as_nanos(),
                            overhead: c.adjust.overhead,
                            mpu: c.adjust.mpu,
                            linklayer: link_layer_name(c.adjust.link_layer).into(),
                            leaf_qdisc: qdisc
                                .classes
                                .get(id)
                                .and_then(|d| d.leaf)
                                .and_then(|l| l.handle)
                                .map(|h| ClassId::new(h, 0)),
                            stats,
                        });
                    }
                }
                Object::Filter => {
                    let wanted = match (show.prio, show.handle.as_deref()) {
                        (Some(prio), Some(handle)) => Some((prio, handle)),
                        _ => None,
                    };
                    let mut found = false;
                    for f in &qdisc.filters {
                        if let Some((prio, handle)) = wanted
                            && (f.prio != prio || f.kind.parse_handle(handle) != Ok(f.handle))
                        {
                            continue;
                        }
                        found = true;
                        shown.filters.push(FilterInfo {
                            dev: dev.clone(),
                            parent: format!("{:x}:", qdisc.config.major),
                            protocol: f.protocol.name().into(),
                            prio: f.prio,
                            kind: f.kind.name().into(),
                            handle: f.kind.format_handle(f.handle),
                            class: f.class.map(|c| c.to_string()).unwrap_or_default(),
                            matcher: match_spec(&f.matcher),
                            hashing: f.hashing(),
                        });
                    }
                    if let Some((prio, handle)) = wanted
                        && !found
                    {
                        return Err(IpcError::new(
                            ErrorCode::NotFound,
                            format!("no filter with prio {prio} and handle {handle} on {dev}"),
                        ));
                    }
                }
            }
        }
        Ok(shown)
    }

    /// A Prometheus scrape: the data plane's counters, then every tree's classes in chunks.
    pub(super) async fn scrape(&self) -> Result<Scrape, IpcError> {
        let started = std::time::Instant::now();
        let engine = self.on_engine(|engine| engine.stats()).await?;
        let mut trees = Vec::new();
        for port in &self.model.ports {
            let Some(qdisc) = &port.qdisc else {
                continue;
            };
            let ids: Vec<ClassId> = qdisc.classes.values().map(|d| d.id).collect();
            let snapshot = self.snapshot(&port.name, &ids).await?;
            let classes = ids
                .iter()
                .zip(snapshot.classes)
                .filter_map(|(id, stats)| {
                    let info = qdisc.class_info(*id)?;
                    Some(ClassScrape {
                        id: *id,
                        parent: info.parent,
                        rate: info.config.rate.bits_per_sec(),
                        ceil: info.config.ceil.bits_per_sec(),
                        stats: stats?,
                    })
                })
                .collect();
            trees.push(TreeScrape {
                dev: port.name.clone(),
                scheduler: snapshot.scheduler,
                classes,
            });
        }
        Ok(Scrape {
            engine,
            trees,
            gather_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// `dev`'s scheduler and port counters and the statistics of `ids`, copied
    /// [`STATS_CHUNK`] classes per data-plane job.
    async fn snapshot(&self, dev: &str, ids: &[ClassId]) -> Result<PortSnapshot, IpcError> {
        let mut chunks = ids.chunks(STATS_CHUNK);
        let first = chunks.next().unwrap_or_default();
        let mut snapshot = self.snapshot_job(dev, first.to_vec()).await?;
        for chunk in chunks {
            let part = self.snapshot_job(dev, chunk.to_vec()).await?;
            snapshot.classes.extend(part.classes);
            snapshot.leaves.extend(part.leaves);
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
