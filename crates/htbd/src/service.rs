//! The service manager's side (`sd_notify(3)`, through the `sd-notify` crate): `READY=1` once
//! XDP is attached and the trees are loaded, `RELOADING=1` around a SIGHUP reload,
//! `STOPPING=1` at shutdown, a `STATUS=` line with the ports and classes, and `WATCHDOG=1`
//! only while the data plane answers. Without `NOTIFY_SOCKET` (not under systemd) every call
//! does nothing.

use std::time::Duration;

use htb_xdp::{EngineHandle, JobError};
use sd_notify::NotifyState;
use tokio::sync::oneshot;

use crate::model::Model;

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("sd_notify: {e}");
    }
}

/// `ports 2 (r1, r2), classes 4`.
#[must_use]
pub fn summary(model: &Model) -> String {
    let classes: usize = model
        .ports
        .iter()
        .flat_map(|p| p.trees())
        .map(|(_, q)| q.classes.len())
        .sum();
    let names: Vec<&str> = model.ports.iter().map(|p| p.name.as_str()).collect();
    format!(
        "shaping: ports {} ({}), classes {classes}",
        names.len(),
        names.join(", ")
    )
}

/// Startup is complete.
pub fn ready(model: &Model) {
    notify(&[NotifyState::Ready, NotifyState::Status(&summary(model))]);
}

/// The status line after a change.
pub fn status(model: &Model) {
    notify(&[NotifyState::Status(&summary(model))]);
}

/// A reload starts (systemd ≥ 253 wants the monotonic time with it).
pub fn reloading() {
    let mut states = vec![NotifyState::Reloading];
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    notify(&states);
}

/// A reload is over (the control task sends the new status line).
pub fn reload_done() {
    notify(&[NotifyState::Ready]);
}

/// Shutdown starts.
pub fn stopping() {
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Feeds the watchdog (`WatchdogSec=`) at half its period, each time after a job has run on the
/// data-plane thread: a data plane that hangs stops the feeding and systemd restarts htbd (the
/// XDP program is detached with the process, so traffic flows unshaped meanwhile). Returns at
/// once when the watchdog is off.
pub async fn watchdog(engine: EngineHandle) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let every = period / 2;
    tracing::info!("watchdog: {period:?}, fed every {every:?} while the data plane answers");
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        if data_plane_answers(&engine, every).await {
            notify(&[NotifyState::Watchdog]);
        } else {
            tracing::error!(
                "the data plane did not answer within {every:?}: the watchdog is not fed"
            );
        }
    }
}

/// Whether a no-op job runs on the data-plane thread within `within`.
async fn data_plane_answers(engine: &EngineHandle, within: Duration) -> bool {
    let (tx, rx) = oneshot::channel();
    let job: htb_xdp::Job = Box::new(move |_engine: &mut htb_xdp::Engine| {
        let _ = tx.send(());
    });
    match engine.execute(job) {
        Ok(()) => {}
        Err((JobError::Busy | JobError::Stopped, _)) => return false,
    }
    matches!(tokio::time::timeout(within, rx).await, Ok(Ok(())))
}
