//! The daemon's life: the config and saved state in, the data plane started, the control side
//! (signals, the control socket, the control task) run until SIGTERM, and everything stopped
//! in order.

use htb_xdp::Mode;

use crate::{
    DaemonConfig, DaemonError, DataPlane, control, faults, flow_export, forwarding, ipc, netfilter,
    persist, service, signals, startup, web,
};

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
pub fn run(config: DaemonConfig, options: &RunOptions) -> Result<(), DaemonError> {
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
    // The running trees and filters go to the data plane only: `config` keeps the file's
    // (a saved million subscribers' trees and filters, put in `config` and cloned for the data
    // plane, were held twice more for as long as htbd ran).
    let mut engine = config.engine.clone();
    for (port, state) in engine.ports.iter_mut().zip(&model.ports) {
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
    let mut dataplane = DataPlane::start(engine)?;
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
