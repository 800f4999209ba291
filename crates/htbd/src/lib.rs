//! # htbd: the htb shaping router daemon
//!
//! Reads a TOML config ([`DaemonConfig`]) and the saved live state ([`persist`]), starts the
//! AF_XDP data plane ([`htb_xdp::Engine`]) on its own thread, and runs the control side —
//! signals, the control socket (`ipc`) and the control task that validates, persists and
//! applies changes (`control`, [`model`]) — on a single-threaded tokio runtime. `main.rs` only
//! parses arguments and sets up logging.

mod config;
pub mod control;
pub mod faults;
pub mod flow_export;
mod forwarding;
pub mod ipc;
pub mod metrics;
pub mod model;
pub mod netfilter;
pub mod persist;
pub mod reload;
pub mod service;
pub mod signals;
pub mod startup;
mod status;
pub mod tc_export;
mod trees;
pub mod web;

use std::thread::JoinHandle;

pub use config::{DaemonConfig, FlowsConfig, HttpConfig, IpfixConfig, parse_state};
use htb_xdp::{Engine, EngineConfig, EngineHandle, Mode, XdpError};
pub use trees::{InterfaceTree, InterfaceTrees};

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] htb_config::ConfigError),
    /// The data plane could not start.
    #[error(transparent)]
    Engine(#[from] XdpError),
    /// Router mode needs the kernel to forward IPv4; htbd does not change sysctls.
    #[error(
        "router mode needs kernel IPv4 forwarding (htbd forwards through bpf_fib_lookup, which \
         honours it, and the kernel takes over when htbd stops), and net.ipv4.ip_forward is 0: \
         run sysctl -w net.ipv4.ip_forward=1, and set it in /etc/sysctl.d/ to keep it"
    )]
    Forwarding,
    /// The HTTP listener's token file is not usable.
    #[error("[daemon] http_token: {0}")]
    Token(#[from] web::auth::TokenError),
    /// The saved state cannot be used.
    #[error(transparent)]
    Store(#[from] persist::StoreError),
    /// The saved filters' u32 links cannot be followed.
    #[error("saved filters: {0}")]
    Links(#[from] model::LinkError),
    /// Router mode would bypass netfilter rules, and the config does not allow it.
    #[error(
        "router mode forwards in XDP, before netfilter, so these rules would not see the traffic \
         htbd forwards: {rules}. Move them elsewhere, use bridge mode, or set [daemon] netfilter = \
         \"bypass\" to run anyway"
    )]
    NetfilterBypassed {
        /// The chains, `family table chain (hook, rules)`.
        rules: String,
    },
    /// An I/O step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The data-plane thread died.
    #[error("the data-plane thread panicked")]
    DataPlanePanicked,
    /// The control socket or its permissions could not be set up.
    #[error(transparent)]
    Socket(#[from] ipc::SocketError),
    /// `HTBD_FAULTS` is malformed.
    #[error(transparent)]
    Faults(#[from] faults::FaultsError),
    /// The saved state cannot be used.
    #[error("saved state in {dir}: {message}", dir = dir.display())]
    State {
        /// `state_dir`.
        dir: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A running data plane: its thread and the handle to talk to it.
#[derive(Debug)]
pub struct DataPlane {
    /// Stops the engine and runs jobs on its thread.
    pub handle: EngineHandle,
    /// The export ring's receiving end, with flows on (`[flows]`), until taken.
    pub flow_records: Option<std::sync::mpsc::Receiver<htb_xdp::flow_table::FlowRecord>>,
    thread: JoinHandle<()>,
}

impl DataPlane {
    /// Starts the engine on its own thread; returns once it is attached and running, or with
    /// the reason it could not start (then nothing is left attached).
    ///
    /// # Errors
    /// [`DaemonError::Engine`] from [`Engine::start`].
    pub fn start(config: EngineConfig) -> Result<Self, DaemonError> {
        Self::start_with(config, exit_after_panic)
    }

    /// As [`start`](Self::start), with what to do once the data plane has panicked and been
    /// detached (`start` ends the process; tests observe instead).
    ///
    /// # Errors
    /// [`DaemonError::Engine`] from [`Engine::start`].
    pub fn start_with(config: EngineConfig, after_panic: fn()) -> Result<Self, DaemonError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("htbd-dataplane".into())
            .spawn(move || match Engine::start(&config) {
                Ok((mut engine, handle)) => {
                    let _ = tx.send(Ok((handle, engine.take_flow_records())));
                    let Some(engine) = supervise(engine, Engine::run, after_panic) else {
                        return;
                    };
                    let stats = engine.stats();
                    for p in &stats.ports {
                        tracing::info!(
                            "{}: rx {} pkts {} B, tx {} pkts {} B, dropped: queue {} pool {} no-egress {}, \
                             kernel: rx_ring_full {} fill_empty {} rx_dropped {} invalid {}/{}",
                            p.name, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes, p.drops_queue,
                            p.drops_pool, p.drops_no_egress, p.xdp.rx_ring_full, p.xdp.rx_fill_ring_empty,
                            p.xdp.rx_dropped, p.xdp.rx_invalid, p.xdp.tx_invalid
                        );
                    }
                    tracing::info!(
                        "frames {:?}, queued {}, XDP verdicts {:?}, loops {} sleeps {}",
                        stats.frames, stats.queued, stats.verdicts, stats.loops, stats.sleeps
                    );
                    if let Some(f) = stats.flows {
                        tracing::info!(
                            "flows: {} started, {} ended and handed to the exporter, {} evicted, \
                             {} lost to a full export ring",
                            f.started,
                            f.exported,
                            f.evicted,
                            f.export_drops
                        );
                    }
                    tracing::info!("data plane stopped; detaching");
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(|source| DaemonError::Io {
                what: "cannot start the data-plane thread".into(),
                source,
            })?;
        match rx.recv() {
            Ok(Ok((handle, flow_records))) => Ok(Self {
                handle,
                flow_records,
                thread,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e.into())
            }
            Err(_) => {
                let _ = thread.join();
                Err(DaemonError::DataPlanePanicked)
            }
        }
    }

    /// Stops the engine and waits for its thread (which detaches XDP and closes the sockets).
    ///
    /// # Errors
    /// [`DaemonError::DataPlanePanicked`].
    pub fn stop(self) -> Result<(), DaemonError> {
        self.handle.stop();
        self.thread
            .join()
            .map_err(|_| DaemonError::DataPlanePanicked)
    }
}

/// Runs `run` on `engine`. Should it panic, drops the engine (for the engine: detaches XDP and
/// closes the sockets, so the kernel forwards unshaped — fail-open), then calls `after_panic`
/// and returns `None`.
fn supervise<E>(mut engine: E, run: impl FnOnce(&mut E), after_panic: fn()) -> Option<E> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut engine)));
    if ran.is_ok() {
        return Some(engine);
    }
    drop(engine);
    tracing::error!(
        "the data plane panicked (message above); XDP detached, traffic goes through the \
         kernel unshaped"
    );
    after_panic();
    None
}

/// What htbd does once its data plane has panicked: it exits with status 70 (`EX_SOFTWARE`),
/// so that the service manager restarts it (`dist/htbd.service`: `Restart=on-failure`). A process
/// that stayed up with a dead data plane would answer `htb-cli` and shape nothing.
fn exit_after_panic() {
    tracing::error!("exiting (status 70) so that the service manager restarts htbd");
    std::process::exit(70);
}

/// How [`run`] starts.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The config file's path (recorded in the saved state's header).
    pub config_path: std::path::PathBuf,
    /// Set the saved state aside and start from the config file's trees.
    pub fresh_state: bool,
}

/// Runs the daemon until SIGTERM or SIGINT; SIGHUP reloads the config file's trees.
///
/// # Errors
/// [`DaemonError`] when the data plane cannot start; then nothing stays attached.
pub fn run(mut config: DaemonConfig, options: &RunOptions) -> Result<(), DaemonError> {
    let faults = faults::Faults::from_env()?;
    if faults.any() {
        tracing::warn!(
            "{} is set, faults will be injected: {faults:?}",
            faults::VAR
        );
    }
    let ports: Vec<String> = config.engine.ports.iter().map(|p| p.name.clone()).collect();
    let policy = ipc::PeerPolicy::new(config.socket_group.as_deref())?;
    // The lock first: a second htbd on this state_dir stops here, before touching anything.
    let (mut store, saved) = persist::Store::open(&config.state_dir)?;
    let mut socket = ipc::Socket::bind(&config.socket, policy.gid())?;
    let http = config
        .http
        .as_ref()
        .map(|http| {
            let token = http
                .token
                .as_deref()
                .map(web::auth::Token::read)
                .transpose()?;
            let listener = web::server::bind(http.addr).map_err(|source| DaemonError::Io {
                what: format!("cannot listen on {} ([daemon] http)", http.addr),
                source,
            })?;
            Ok::<_, DaemonError>((listener, token))
        })
        .transpose()?;

    let (file_model, hash) = startup::file_model(&config)?;
    let source = startup::choose(&saved, &hash, options.fresh_state);
    if let Some(line) = saved.torn_line {
        tracing::warn!(
            "journal.jsonl line {line} was cut off by a crash mid-write (never acknowledged): removed"
        );
    }
    let model = match &source {
        startup::Source::Saved { .. } => startup::load_saved(&config, &saved)?,
        startup::Source::File { set_aside, .. } => {
            if *set_aside && let Some(aside) = store.set_aside()? {
                tracing::warn!(
                    "the saved live state was set aside in {} (its changes are not applied; \
                     copy what you need back into the config file)",
                    aside.display()
                );
            }
            file_model
        }
    };
    tracing::info!("starting from {}", source.describe());
    store.set_config_hash(hash);
    let header = format!(
        "written by htbd {} (config {}) at unix time {}",
        env!("CARGO_PKG_VERSION"),
        options.config_path.display(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    for (port, state) in config.engine.ports.iter_mut().zip(&model.ports) {
        port.trees = state.port_trees();
        port.filters = state.data_filters()?;
        port.ingress = state.ingress_hook();
    }

    match config.engine.mode {
        Mode::Router => {
            netfilter::check(config.netfilter)?;
            forwarding::check_kernel_forwarding()?;
        }
        Mode::Bridge => forwarding::check_bridge_fail_open(&ports),
    }
    let mut dataplane = DataPlane::start(config.engine.clone())?;
    let exporter = match (config.flows, dataplane.flow_records.take()) {
        (Some(flows), Some(records)) => {
            let ifindexes = config
                .engine
                .ports
                .iter()
                .map(|p| if p.ifb { 0 } else { ifindex(&p.name) })
                .collect();
            match flow_export::FlowExporter::start(
                records,
                flows,
                ifindexes,
                dataplane.handle.epoch(),
            ) {
                Ok(exporter) => Some(exporter),
                Err(source) => {
                    let _ = dataplane.stop();
                    return Err(DaemonError::Io {
                        what: "cannot start the flow exporter ([flows])".into(),
                        source,
                    });
                }
            }
        }
        _ => None,
    };
    // Fold the replayed journal into a fresh snapshot, now that the trees are known to run.
    if let Err(e) = store.compact_observed(&header, &model.to_toml(), |step| {
        faults.compaction_step(step)
    }) {
        let _ = dataplane.stop();
        return Err(e.into());
    }
    tracing::info!(
        "htbd running in {:?} mode on {}; control socket {}",
        config.engine.mode,
        ports.join(", "),
        config.socket.display()
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| DaemonError::Io {
            what: "cannot start the control runtime".into(),
            source,
        })?;
    service::ready(&model);
    let hang_faults = faults.clone();
    let mut control = control::Control::new(model, store, dataplane.handle.clone(), header, faults);
    if let Some(exporter) = &exporter {
        control = control.with_flows(exporter.state());
    }
    let requests = control.request_metrics();
    let generation = control.generation_watch();
    let engine = dataplane.handle.clone();
    let served = runtime.block_on(async {
        let (calls_tx, calls) = tokio::sync::mpsc::channel(64);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let control = tokio::spawn(control.run(calls));
        let watchdog = tokio::spawn(service::watchdog(engine.clone()));
        let hang = tokio::spawn(async move { hang_faults.hang_data_plane(engine).await });
        let policy = std::sync::Arc::new(policy);
        let exporter = http.map(|(listener, token)| {
            tracing::info!(
                "console at http://{0}/ (metrics at /metrics, health at /health){1}",
                listener
                    .local_addr()
                    .map_or_else(|e| e.to_string(), |a| a.to_string()),
                if token.is_some() {
                    ", token required"
                } else {
                    ""
                }
            );
            let liveness_of = dataplane.handle.clone();
            let web = std::sync::Arc::new(web::Web {
                calls: calls_tx.clone(),
                requests,
                liveness: std::sync::Arc::new(move || liveness_of.since_all_workers_passed()),
                generation,
                token,
                history: std::sync::Arc::default(),
                rates: std::sync::Mutex::default(),
                one_way: std::sync::Mutex::default(),
            });
            let sampler = tokio::spawn(web::sampler::run(std::sync::Arc::clone(&web)));
            let serving = web::server::serve(listener, web, stop.clone());
            let server = tokio::spawn(async move {
                if let Err(e) = serving.await {
                    tracing::error!("http listener stopped: {e}");
                }
            });
            (server, sampler)
        });
        let server = ipc::serve(&mut socket, policy, calls_tx.clone(), stop);
        let signals = signals::handle(&options.config_path, calls_tx, stop_tx);
        let (served, handled) = tokio::join!(server, signals);
        if let Some((server, sampler)) = exporter {
            server.abort();
            sampler.abort();
        }
        watchdog.abort();
        hang.abort();
        control.abort();
        handled?;
        served.map_err(|source| DaemonError::Io {
            what: "control socket".into(),
            source,
        })
    });
    drop(socket);
    let stopped = dataplane.stop();
    // The data plane forced its flows out as it stopped: they go to the collector first.
    if let Some(exporter) = exporter {
        exporter.join();
    }
    served?;
    stopped
}

/// `name`'s interface index (0 when the kernel does not say): what flow records name a port by.
fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::supervise;

    /// What happened, in order.
    static EVENTS: Mutex<Vec<&str>> = Mutex::new(Vec::new());

    struct Plane;

    impl Drop for Plane {
        fn drop(&mut self) {
            EVENTS.lock().unwrap().push("detached");
        }
    }

    #[test]
    fn a_panicking_data_plane_is_cleaned_up_then_reported() {
        static REPORTED: AtomicBool = AtomicBool::new(false);
        let after = || {
            EVENTS.lock().unwrap().push("after_panic");
            REPORTED.store(true, Ordering::SeqCst);
        };
        let left = supervise(Plane, |_| panic!("a test panic"), after);
        assert!(left.is_none());
        assert!(REPORTED.load(Ordering::SeqCst));
        // Detached first, so that traffic flows through the kernel before htbd exits.
        assert_eq!(*EVENTS.lock().unwrap(), ["detached", "after_panic"]);
        // A data plane that returns is handed back, and nothing is reported.
        EVENTS.lock().unwrap().clear();
        let back = supervise(Plane, |_| {}, || panic!("not called"));
        assert!(back.is_some() && EVENTS.lock().unwrap().is_empty());
    }
}
