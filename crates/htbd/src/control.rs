//! The control task: one request at a time, in arrival order, from every client.
//!
//! A batch of commands is validated against the [`Model`], written to the journal, then sent
//! to the data-plane thread in jobs of `PLANE_SLICE` operations, each applied between two
//! packet batches (filters take effect with their batch's last slice, which swaps in the
//! compiled classifier). Only after the last does the client get its answer, and only then is
//! the next request served: an acknowledged change is live and durable, and no client sees
//! half a batch.
//! Every batch is all or nothing: a journal write that fails reverts the model; a data-plane
//! step that fails (a bug: the model validated it) stops the job there, and the batch is taken
//! back everywhere — model, journal, and the touched ports' trees, reloaded from the model.
//! Disk I/O (`fdatasync`, compaction) runs on a blocking thread, so that a slow disk holds up
//! the changes waiting behind it but not the clients being read or accepted.

mod explain;
mod flows;
mod heap;
mod query;
mod show;

pub use query::{ClassKey, Query};

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use htb_config::filter::Classifier;
use htb_ipc::{
    CommandResult, ErrorCode, Generation, IpcError, ReplyBody, Request, RequestBody, Response,
};
use htb_xdp::{Engine, EngineHandle, IngressHook, JobError, PlaneOp};
use tokio::sync::{mpsc, oneshot};

use crate::InterfaceTrees;
use crate::faults::Faults;
use crate::metrics::Scrape;
use crate::metrics::requests::{self, RequestMetrics};
use crate::model::Model;
use crate::persist::{Encoded, Store, StoreError};
use crate::reload;

/// Who sent a request (from `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Process id, when known.
    pub pid: Option<i32>,
}

/// What the control task is asked to do.
#[derive(Debug)]
pub enum Call {
    /// A client's request, with where its answer goes.
    Client {
        /// The request.
        request: Request,
        /// For a batch, the text its commands came in, message by message
        /// ([`htb_ipc::read_incoming`]): the journal writes it as it is.
        received: Option<Vec<htb_ipc::RawCommands>>,
        /// Who sent it.
        peer: Peer,
        /// Where the answer goes.
        reply: oneshot::Sender<Response>,
    },
    /// SIGHUP: make the running trees the config file's (`trees`, whose hash is `hash`).
    Reload {
        /// The config file's trees.
        trees: Vec<InterfaceTrees>,
        /// Their hash, recorded in the next snapshot.
        hash: String,
        /// The outcome.
        reply: oneshot::Sender<Result<Reloaded, IpcError>>,
    },
    /// A Prometheus scrape: every port's and class's statistics.
    Metrics(oneshot::Sender<Result<Scrape, IpcError>>),
    /// A read for the web console.
    Query(Query),
}

/// What a reload changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Commands in the batch (0: the trees were already the file's).
    pub commands: usize,
    /// Packets the changes dropped (deleted classes' backlogs).
    pub dropped_packets: u64,
}

/// The control task's state.
#[derive(Debug)]
pub struct Control {
    model: Model,
    store: Arc<Mutex<Store>>,
    engine: EngineHandle,
    header: String,
    faults: Faults,
    requests: RequestMetrics,
    /// The generation of the state the model holds, published for `/health`; `None` (here
    /// and there) while changes have not been hashed yet.
    generation: tokio::sync::watch::Sender<Option<Generation>>,
    hashed: Option<Generation>,
    /// `[flows]` and the exporter's counters, when flows are kept.
    flows: Option<crate::flow_export::FlowExportState>,
    /// The trim after a large batch.
    heap: heap::HeapReturn,
    /// Commands in the last batch applied, for [`heap::HeapReturn::after_batch`].
    last_batch: usize,
}

/// Data-plane operations per job and worker. A class add with its filter costs the live data
/// plane 2.5 µs when nothing else runs (512 per job measured 1.26 ms at 100 000 subscribers,
/// `htb-lab scale`), but 4–14 µs while the import's client and htbd's control thread share the
/// machine with it (page faults and the allocator, 2-vCPU VM, 200 000 subscribers, one worker:
/// jobs of 256 took up to 3.5 ms of CPU), so a slice of 128 keeps a job near 0.5 ms and under
/// 2 ms at worst. With several workers a job takes this many over the number of workers (a
/// class op goes to the workers holding the class, a new subtree to its owner alone).
const PLANE_SLICE: usize = 128;

/// Frees what the data plane replaced (old compiled filters: milliseconds for 100 000) on a
/// blocking thread, neither on the data plane nor on the control plane's.
fn free_elsewhere(retired: htb_xdp::Retired) {
    if !retired.is_empty() {
        tokio::task::spawn_blocking(move || drop(retired));
    }
}

fn internal(message: impl Into<String>) -> IpcError {
    IpcError::new(ErrorCode::Internal, message)
}

impl Control {
    /// A control task over `model`, persisting into `store`, driving `engine`. `header` is
    /// written at the top of every snapshot; `faults` are the test hooks (none in service).
    #[must_use]
    pub fn new(
        model: Model,
        store: Store,
        engine: EngineHandle,
        header: String,
        faults: Faults,
    ) -> Self {
        Self {
            model,
            store: Arc::new(Mutex::new(store)),
            engine,
            header,
            faults,
            requests: RequestMetrics::default(),
            generation: tokio::sync::watch::Sender::new(None),
            hashed: None,
            flows: None,
            heap: heap::HeapReturn::default(),
            last_batch: 0,
        }
    }

    /// Flows are kept as `flows` says (`htb-cli flows`, and their counters in the status).
    #[must_use]
    pub fn with_flows(mut self, flows: crate::flow_export::FlowExportState) -> Self {
        self.flows = Some(flows);
        self
    }

    /// The generation as published (for `/health`): `None` from a change until something
    /// asks for it (`htb-cli status`, a scrape).
    #[must_use]
    pub fn generation_watch(&self) -> tokio::sync::watch::Receiver<Option<Generation>> {
        self.generation.subscribe()
    }

    /// The generation as last hashed: `None` since a change until something asks for it.
    pub(crate) fn hashed_generation(&self) -> Option<Generation> {
        self.hashed
    }

    /// The generation of the state now, hashing it if it changed since it was last hashed.
    fn generation_now(&mut self) -> Generation {
        if let Some(g) = self.hashed {
            return g;
        }
        let g = self.model.generation();
        self.hashed = Some(g);
        self.generation.send_replace(Some(g));
        g
    }

    /// `n` units of data-plane work per job divided among the workers, at least one: every
    /// worker applies each operation to (and gives the statistics of) its own copy of the trees.
    fn per_worker(&self, n: usize) -> usize {
        (n / self.engine.workers().max(1)).max(1)
    }

    /// The control socket's request counters, shared with the metrics endpoint.
    #[must_use]
    pub fn request_metrics(&self) -> RequestMetrics {
        self.requests.clone()
    }

    /// Serves calls until every sender is gone.
    pub async fn run(mut self, mut calls: mpsc::Receiver<Call>) {
        self.generation_now();
        while let Some(call) = calls.recv().await {
            let changed = match call {
                Call::Client {
                    request,
                    received,
                    peer,
                    reply,
                } => {
                    let applies = matches!(request.request, RequestBody::Apply { .. });
                    let kind = requests::Request::of(&request.request);
                    let started = std::time::Instant::now();
                    let response = self.handle(request, received, peer).await;
                    let outcome = match response.result {
                        Ok(_) => requests::Outcome::ok,
                        Err(_) => requests::Outcome::error,
                    };
                    self.requests.observe(kind, outcome, started.elapsed());
                    let changed = applies && response.result.is_ok();
                    // The client may have gone; the change (if any) stands regardless.
                    let _ = reply.send(response);
                    changed
                }
                Call::Reload { trees, hash, reply } => {
                    let reloaded = self.reload(&trees, hash).await;
                    let changed = reloaded.is_ok();
                    let _ = reply.send(reloaded);
                    changed
                }
                Call::Metrics(reply) => {
                    let generation = self.generation_now();
                    let scrape = self.scrape().await.map(|s| Scrape {
                        generation: Some(generation),
                        flows: self.flow_status(crate::status::flow_status(&s.engine)),
                        ..s
                    });
                    let _ = reply.send(scrape);
                    false
                }
                Call::Query(query) => {
                    self.query(query).await;
                    false
                }
            };
            // Answered: a large batch's freed memory goes back now.
            self.heap.after_batch(std::mem::take(&mut self.last_batch));
            if changed {
                // Hashed again when asked (status, a scrape), not after every change: the
                // hash reads the whole state (0.75 s at 100 000 subscribers both ways with
                // labels, on this VM), which would hold the control task after each one.
                self.hashed = None;
                self.generation.send_replace(None);
                crate::service::status(&self.model);
            }
        }
    }

    /// Ports and classes, for the service manager's status line.
    #[must_use]
    pub fn model(&self) -> &Model {
        &self.model
    }

    async fn handle(
        &mut self,
        request: Request,
        received: Option<Vec<htb_ipc::RawCommands>>,
        peer: Peer,
    ) -> Response {
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
            RequestBody::Ping {} => Ok(ReplyBody::Pong {
                daemon: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
            }),
            RequestBody::Show(show) => self.show(&show).await.map(ReplyBody::Shown),
            RequestBody::Apply { commands } => {
                tracing::debug!(
                    "{} command(s) from uid {} (pid {:?})",
                    commands.len(),
                    peer.uid,
                    peer.pid
                );
                self.apply(commands, received, None)
                    .await
                    .map(|results| ReplyBody::Applied { results })
            }
            RequestBody::Status {} => {
                let generation = self.generation_now();
                self.on_engine(|engine| engine.stats()).await.map(|stats| {
                    let mut status = crate::status::status(&stats, &self.model.ports);
                    status.flows = self.flow_status(status.flows.take());
                    status.generation = Some(generation);
                    ReplyBody::Status(status)
                })
            }
            RequestBody::Explain(ask) => self.explain(&ask).await.map(ReplyBody::Explained),
            RequestBody::Flows(ask) => self.flows(&ask).await.map(ReplyBody::Flows),
            // The connection keeps what it stages (crate::ipc); only its Apply comes here.
            RequestBody::Stage { .. } => Err(IpcError::new(
                ErrorCode::BadRequest,
                "stage is a connection's request: send it on the control socket",
            )),
        };
        Response::new(result)
    }

    /// Runs `f` on the store on a blocking thread (disk I/O stays off the runtime).
    async fn on_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> Result<T, IpcError> {
        store_done(self.start_on_store(f)).await
    }

    /// Starts `f` on the store on a blocking thread now; [`store_done`] waits for it.
    fn start_on_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || {
            let mut store = store
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut store)
        })
    }

    /// SIGHUP: the difference between the running trees and `trees`, as one batch.
    async fn reload(
        &mut self,
        trees: &[InterfaceTrees],
        hash: String,
    ) -> Result<Reloaded, IpcError> {
        let commands = reload::commands(&self.model, trees)?;
        let results = self.apply(commands, None, Some(trees)).await?;
        // The running trees are the file's now: a restart with this file keeps them (and the
        // live changes made after this), so the snapshot records the file's hash.
        let state = self.model.to_toml();
        let header = self.header.clone();
        let compacted = self
            .on_store(move |store| {
                store.set_config_hash(hash);
                store.compact(&header, &state)
            })
            .await
            .and_then(|r| r.map_err(|e| internal(e.to_string())));
        if let Err(e) = compacted {
            tracing::warn!(
                "reloaded, but the snapshot recording the new config file failed ({e}): a \
                 restart will treat the file as changed and start from it"
            );
        }
        Ok(Reloaded {
            // One result per command.
            commands: results.len(),
            dropped_packets: results.iter().map(|r| r.dropped_packets).sum(),
        })
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

    /// Applies one batch all or nothing: model, journal, data plane. `expect`: the trees the
    /// batch must produce (a reload's check of its own difference).
    /// `received`: the text the commands came in, which the journal writes instead of
    /// encoding them again. The commands are freed as soon as the model and the journal
    /// have them, before the data plane's operations are built: a million subscribers'
    /// decoded commands (some 1.7 kB each, counted) are the largest part of the batch.
    async fn apply(
        &mut self,
        commands: Vec<htb_ipc::Command>,
        received: Option<Vec<htb_ipc::RawCommands>>,
        expect: Option<&[InterfaceTrees]>,
    ) -> Result<Vec<CommandResult>, IpcError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        // Where a big batch's time goes, logged at debug level: the model's checks, the
        // journal, the data plane's jobs.
        let started = std::time::Instant::now();
        let mut plan = self.model.apply(&commands)?;
        let count = commands.len();
        self.last_batch = count;
        let modelled = started.elapsed();
        if expect.is_some_and(|trees| !reload::matches(&self.model, trees)) {
            self.model.revert(plan);
            return Err(internal(
                "the reload's changes do not reproduce the config file's trees (a bug, please \
                 report it): nothing was changed",
            ));
        }
        // The journal is written on the store's thread while the data plane's operations are
        // built here; they go to the data plane only once both are done. Written as the
        // client sent it when it can be (a million subscribers' batch encoded again took
        // longer than the write), else encoded here, from the request's own commands (a copy
        // for the writing thread cost more than the encoding).
        let batch = match received {
            Some(received) => Encoded::received(received),
            None => match Encoded::new(&commands) {
                Ok(batch) => batch,
                Err(e) => {
                    self.model.revert(plan);
                    return Err(internal(format!("cannot encode the batch: {e}")));
                }
            },
        };
        drop(commands);
        let journal = self.start_on_store(move |store| {
            let appended = store.append_encoded(&batch)?;
            Ok::<_, StoreError>((appended, store.wants_compaction()))
        });
        // The effects are moved out of the plan, which only its undo is needed of from here
        // (copied, a million subscribers' batch held its class changes and the flat filter
        // list twice until it was done).
        let effects = std::mem::take(&mut plan.effects);
        let mut owners = Vec::with_capacity(effects.len());
        let mut ops = Vec::with_capacity(effects.len());
        let mut failed = None;
        for (command, effect) in effects {
            match effect.compile(self.engine.workers()) {
                Ok(op) => {
                    owners.push(command);
                    ops.push(op);
                }
                Err(e) => {
                    failed = Some(internal(e.to_string()));
                    break;
                }
            }
        }
        let appended = store_done(journal).await;
        let (appended, wants_compaction) = match appended {
            Ok(Ok(appended)) => appended,
            Ok(Err(e)) => {
                self.model.revert(plan);
                return Err(failed.unwrap_or_else(|| persist_error(&e)));
            }
            Err(e) => {
                self.model.revert(plan);
                return Err(failed.unwrap_or(e));
            }
        };
        if let Some(e) = failed {
            // Nothing reached the data plane: the batch comes off the journal and the model.
            self.take_back(plan, appended, Vec::new()).await;
            return Err(e);
        }
        let journaled = started.elapsed();
        self.faults.poison_plane_ops(&mut ops);
        let mut touched: Vec<String> = ops.iter().map(|op| op.port().to_owned()).collect();
        touched.sort();
        touched.dedup();
        // In slices: the data plane forwards a packet batch between two jobs, so a
        // 100 000-class batch never stops forwarding for long. Clients still see the batch
        // whole: they are answered, and other requests served, only after its last slice.
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut rest = ops.into_iter();
        let slice_len = self.per_worker(PLANE_SLICE);
        let mut jobs = 0usize;
        loop {
            let slice: Vec<PlaneOp> = rest.by_ref().take(slice_len).collect();
            if slice.is_empty() {
                break;
            }
            jobs += 1;
            match self.on_engine(move |engine| engine.apply(slice)).await {
                Ok((done, retired)) => {
                    free_elsewhere(retired);
                    let refused = done.iter().any(Result::is_err);
                    outcomes.extend(done);
                    if refused {
                        break;
                    }
                }
                Err(e) => {
                    // This slice did not run (the data plane is busy or stopping); the
                    // earlier ones did, and their ports are rebuilt from the model.
                    let ports = if outcomes.is_empty() {
                        Vec::new()
                    } else {
                        touched.clone()
                    };
                    self.take_back(plan, appended, ports).await;
                    return Err(e);
                }
            }
        }
        tracing::debug!(
            "batch of {} commands: model {} ms, operations and journal {} ms, data plane {} ms \
             in {jobs} jobs",
            count,
            modelled.as_millis(),
            (journaled - modelled).as_millis(),
            (started.elapsed() - journaled).as_millis()
        );
        let mut results = plan.results.clone();
        let mut refused = None;
        for (owner, outcome) in owners.into_iter().zip(outcomes) {
            match outcome {
                Ok(dropped) => {
                    if let Some(i) = owner {
                        results[i].dropped_packets += dropped;
                    }
                }
                Err(e) => refused = Some(e),
            }
        }
        if let Some(e) = refused {
            tracing::error!("the data plane refused a validated change: {e}");
            self.take_back(plan, appended, touched.clone()).await;
            return Err(internal(format!(
                "the data plane refused a validated change ({e}; a bug, please report it): the \
                 batch was taken back, and the trees of {} were reloaded from the control \
                 plane's model (their counters restart)",
                touched.join(", ")
            )));
        }
        drop(appended);
        if wants_compaction {
            let state = self.model.to_toml();
            let header = self.header.clone();
            let faults = self.faults.clone();
            let compacted = self
                .on_store(move |store| {
                    store.compact_observed(&header, &state, |step| faults.compaction_step(step))
                })
                .await;
            // The batch is live and journaled either way: a failed compaction is retried
            // after the next batch.
            match compacted {
                Ok(Ok(())) => tracing::info!("saved state compacted into a snapshot"),
                Ok(Err(e)) => tracing::warn!("cannot compact the saved state: {e}"),
                Err(e) => tracing::warn!("cannot compact the saved state: {e}"),
            }
        }
        Ok(results)
    }

    /// Takes a batch back after the journal accepted it: the model reverted, the journal line
    /// cut off, and `ports`' trees (which the data plane changed in part) rebuilt from the
    /// model.
    async fn take_back(
        &mut self,
        plan: crate::model::Plan,
        appended: crate::persist::Appended,
        ports: Vec<String>,
    ) {
        self.model.revert(plan);
        match self.on_store(move |store| store.retract(appended)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("cannot take the refused batch off the journal: {e}"),
            Err(e) => tracing::error!("cannot take the refused batch off the journal: {e}"),
        }
        // Per port, its trees as the model has them and its filters; the data plane's trees
        // (whichever it has now) go first.
        let mut rebuild: Vec<(String, Vec<PlaneOp>)> = Vec::new();
        'ports: for name in ports {
            let Some(port) = self.model.ports.iter().find(|p| p.name == name) else {
                continue;
            };
            let filters = match port.data_filters() {
                Ok(filters) => filters,
                Err(e) => {
                    tracing::error!("cannot rebuild the filters of {name}: {e}");
                    continue;
                }
            };
            let mut ops = Vec::new();
            for tree in port.port_trees() {
                let major = tree.tree.config.major;
                match PlaneOp::set_tree(name.clone(), major, Some(tree), self.engine.workers()) {
                    Ok(set_tree) => ops.push(set_tree),
                    Err(e) => {
                        tracing::error!("cannot rebuild the tree of {name}: {e}");
                        continue 'ports;
                    }
                }
            }
            ops.push(PlaneOp::SetFilters {
                port: name.clone(),
                filters: Arc::new(Classifier::new(filters)),
            });
            ops.push(PlaneOp::SetIngress {
                port: name.clone(),
                ingress: port.ingress_hook().map(|f| Arc::new(IngressHook::new(f))),
            });
            rebuild.push((name, ops));
        }
        if rebuild.is_empty() {
            return;
        }
        let apply = move |engine: &mut Engine| {
            let mut ops = Vec::new();
            for (name, set) in rebuild {
                for major in engine.tree_majors(&name) {
                    ops.push(PlaneOp::SetTree {
                        port: name.clone(),
                        major,
                        tree: None,
                        schedulers: Vec::new(),
                    });
                }
                ops.extend(set);
            }
            engine.apply(ops)
        };
        match self.on_engine(apply).await {
            Ok((outcomes, retired)) => {
                free_elsewhere(retired);
                for e in outcomes.into_iter().filter_map(Result::err) {
                    tracing::error!("rebuilding a tree on the data plane failed: {e}");
                }
            }
            Err(e) => tracing::error!("cannot rebuild the trees on the data plane: {e}"),
        }
    }
}

/// Waits for a job [`Control::start_on_store`] started.
async fn store_done<T>(job: tokio::task::JoinHandle<T>) -> Result<T, IpcError> {
    job.await
        .map_err(|e| internal(format!("the state store's thread failed: {e}")))
}

fn persist_error(e: &StoreError) -> IpcError {
    IpcError::new(
        ErrorCode::Persist,
        format!("cannot save the change ({e}); nothing was changed"),
    )
}
