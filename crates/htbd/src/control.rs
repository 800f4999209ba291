//! The control task: one request at a time, in arrival order, from every client.
//!
//! A batch of commands is validated against the [`Model`], written to the journal, then sent
//! to the data-plane thread as one job, which applies it between two packet batches. Only
//! after that does the client get its answer: an acknowledged change is live and durable.
//! Statistics are read from the data plane in chunks, so that even a 100 000-class `show`
//! never holds the packets up for long.

use std::time::Duration as StdDuration;

use htb_core::ClassId;
use htb_ipc::{
    ClassInfo, ClassStats, CommandResult, ErrorCode, FilterInfo, IpcError, LeafQdiscInfo,
    LeafQdiscStats, Object, QdiscInfo, QueueStats, ReplyBody, Request, RequestBody, Response, Show,
    Shown,
};
use htb_xdp::{Engine, EngineHandle, JobError, PlaneOp, PortSnapshot, new_scheduler};
use tokio::sync::{mpsc, oneshot};

use crate::model::{Effect, Model, match_spec};
use crate::persist::Store;

/// Classes whose statistics one data-plane job copies.
const STATS_CHUNK: usize = 4096;

/// Who sent a request (from `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Process id, when known.
    pub pid: Option<i32>,
}

/// A request with where its answer goes.
pub type Call = (Request, Peer, oneshot::Sender<Response>);

/// The control task's state.
#[derive(Debug)]
pub struct Control {
    model: Model,
    store: Store,
    engine: EngineHandle,
    header: String,
}

fn internal(message: impl Into<String>) -> IpcError {
    IpcError::new(ErrorCode::Internal, message)
}

impl Control {
    /// A control task over `model`, persisting into `store`, driving `engine`. `header` is
    /// written at the top of every snapshot.
    #[must_use]
    pub fn new(model: Model, store: Store, engine: EngineHandle, header: String) -> Self {
        Self {
            model,
            store,
            engine,
            header,
        }
    }

    /// Serves calls until every sender is gone.
    pub async fn run(mut self, mut calls: mpsc::Receiver<Call>) {
        while let Some((request, peer, reply)) = calls.recv().await {
            let response = self.handle(request, peer).await;
            // The client may have gone; the change (if any) stands regardless.
            let _ = reply.send(response);
        }
    }

    async fn handle(&mut self, request: Request, peer: Peer) -> Response {
        if request.version != htb_ipc::PROTOCOL_VERSION {
            return Response::new(Err(IpcError::new(
                ErrorCode::Version,
                format!(
                    "protocol version {} is not this daemon's ({}): use the htb-cli that came with htbd {}",
                    request.version,
                    htb_ipc::PROTOCOL_VERSION,
                    env!("CARGO_PKG_VERSION")
                ),
            )));
        }
        let result = match request.request {
            RequestBody::Ping => Ok(ReplyBody::Pong {
                daemon: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
            }),
            RequestBody::Show(show) => self.show(&show).await.map(ReplyBody::Shown),
            RequestBody::Apply { commands } => self
                .apply(&commands, peer)
                .await
                .map(|results| ReplyBody::Applied { results }),
            RequestBody::Status => self
                .on_engine(|engine| engine.stats())
                .await
                .map(|stats| ReplyBody::Status(crate::status::status(&stats))),
        };
        Response::new(result)
    }

    /// Runs `f` on the data-plane thread and waits for its result.
    async fn on_engine<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Engine) -> T + Send + 'static,
    ) -> Result<T, IpcError> {
        let (tx, rx) = oneshot::channel();
        let mut job: htb_xdp::Job = Box::new(move |engine: &mut Engine| {
            let _ = tx.send(f(engine));
        });
        let deadline = tokio::time::Instant::now() + StdDuration::from_secs(5);
        loop {
            match self.engine.execute(job) {
                Ok(()) => break,
                Err((JobError::Busy, back)) if tokio::time::Instant::now() < deadline => {
                    job = back;
                    tokio::time::sleep(StdDuration::from_micros(100)).await;
                }
                Err((JobError::Busy, _)) => {
                    return Err(IpcError::new(
                        ErrorCode::Busy,
                        "the data plane is not taking requests",
                    ));
                }
                Err((JobError::Stopped, _)) => {
                    return Err(IpcError::new(ErrorCode::ShuttingDown, "htbd is stopping"));
                }
            }
        }
        rx.await
            .map_err(|_| IpcError::new(ErrorCode::ShuttingDown, "htbd is stopping"))
    }

    async fn apply(
        &mut self,
        commands: &[htb_ipc::Command],
        peer: Peer,
    ) -> Result<Vec<CommandResult>, IpcError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let plan = self.model.apply(commands)?;
        if let Err(e) = self.store.append(commands) {
            self.model.revert(plan);
            return Err(IpcError::new(
                ErrorCode::Persist,
                format!(
                    "cannot save the change in {} ({e}); nothing was changed",
                    self.store.dir().display()
                ),
            ));
        }
        let mut owners = Vec::with_capacity(plan.effects.len());
        let mut ops = Vec::with_capacity(plan.effects.len());
        for (command, effect) in &plan.effects {
            owners.push(*command);
            ops.push(plane_op(effect)?);
        }
        let mut results = plan.results.clone();
        let outcomes = self.on_engine(move |engine| engine.apply(ops)).await?;
        for (owner, outcome) in owners.into_iter().zip(outcomes) {
            match outcome {
                Ok(dropped) => {
                    if let Some(i) = owner {
                        results[i].dropped_packets += dropped;
                    }
                }
                Err(e) => {
                    tracing::error!("the data plane refused a validated change: {e}");
                    return Err(internal(format!(
                        "the data plane refused a validated change ({e}); please report this"
                    )));
                }
            }
        }
        tracing::debug!(
            "applied {} command(s) for uid {} (pid {:?})",
            commands.len(),
            peer.uid,
            peer.pid
        );
        if self.store.wants_compaction() {
            let state = self.model.to_toml();
            match self.store.compact(&self.header, &state) {
                Ok(()) => tracing::info!("saved state compacted into a snapshot"),
                Err(e) => tracing::warn!("cannot compact the saved state: {e}"),
            }
        }
        Ok(results)
    }

    async fn show(&self, show: &Show) -> Result<Shown, IpcError> {
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
                    let mut snapshot = self.snapshot(&dev, Vec::new()).await?;
                    if show.stats {
                        for chunk in ids.chunks(STATS_CHUNK) {
                            let part = self.snapshot(&dev, chunk.to_vec()).await?;
                            snapshot.classes.extend(part.classes);
                            snapshot.leaves.extend(part.leaves);
                        }
                    }
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
                    let mut stats = Vec::with_capacity(ids.len());
                    if show.stats {
                        for chunk in ids.chunks(STATS_CHUNK) {
                            stats.extend(self.snapshot(&dev, chunk.to_vec()).await?.classes);
                        }
                    }
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
                            linklayer: if c.adjust.link_layer == htb_core::LinkLayer::Atm {
                                "atm".into()
                            } else {
                                "ethernet".into()
                            },
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
                    for f in &qdisc.filters {
                        shown.filters.push(FilterInfo {
                            dev: dev.clone(),
                            parent: format!("{:x}:", qdisc.config.major),
                            protocol: f.protocol.name().into(),
                            prio: f.prio,
                            kind: f.kind.name().into(),
                            handle: f.kind.format_handle(f.handle),
                            class: f.class.to_string(),
                            matcher: match_spec(&f.matcher),
                        });
                    }
                }
            }
        }
        Ok(shown)
    }

    async fn snapshot(&self, dev: &str, ids: Vec<ClassId>) -> Result<PortSnapshot, IpcError> {
        let port = dev.to_owned();
        self.on_engine(move |engine| engine.class_stats(&port, &ids))
            .await?
            .ok_or_else(|| internal(format!("the data plane has no port {dev}")))
    }
}

fn parse_id(s: &str) -> Result<ClassId, IpcError> {
    s.parse()
        .map_err(|e| IpcError::new(ErrorCode::Invalid, format!("invalid class id {s:?}: {e}")))
}

/// An effect as the data plane's operation (a new tree is built here, off its thread).
fn plane_op(effect: &Effect) -> Result<PlaneOp, IpcError> {
    Ok(match effect.clone() {
        Effect::SetTree { port, tree } => PlaneOp::SetTree {
            port,
            scheduler: Box::new(new_scheduler(tree.as_ref()).map_err(|e| internal(e.to_string()))?),
        },
        Effect::SetQdisc { port, config } => PlaneOp::SetQdisc {
            port,
            default_minor: config.default_minor,
            r2q: config.r2q,
            direct_qlen: config.direct_qlen,
        },
        Effect::AddClass { port, def } => PlaneOp::AddClass {
            port,
            id: def.id,
            parent: def.parent,
            spec: def.spec,
        },
        Effect::ChangeClass { port, def } => PlaneOp::ChangeClass {
            port,
            id: def.id,
            spec: def.spec,
        },
        Effect::DeleteClass { port, id } => PlaneOp::DeleteClass { port, id },
        Effect::SetLeaf { port, id, leaf } => PlaneOp::SetLeaf { port, id, leaf },
        Effect::ChangeLeaf { port, id, leaf } => PlaneOp::ChangeLeaf { port, id, leaf },
        Effect::SetFilters { port, filters } => PlaneOp::SetFilters { port, filters },
    })
}
