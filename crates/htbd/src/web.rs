//! The HTTP listener (`[daemon] http = "127.0.0.1:9469"`): the operator's console, its JSON
//! API, Prometheus's `/metrics` and the health check's `/health`, on axum and hyper.
//!
//! | path | what | token |
//! |---|---|---|
//! | `/` , `/assets/…` | the console's page and its scripts (no data in them) | no |
//! | `/health` | 200 while the data plane passes, 503 otherwise ([`health`]) | no |
//! | `/metrics` | OpenMetrics text ([`crate::metrics`]) | yes |
//! | `/api/v1/…` | JSON ([`api`], documented in `docs/api.md`) | yes |
//!
//! The console is read-only: changes stay with `htb-cli` and the config file. A listener on
//! a non-loopback address needs `http_token` (a file holding the token), and then every
//! request for data carries `Authorization: Bearer TOKEN` or gets 401 ([`auth`]). Clients are
//! bounded as the control socket's are ([`server`]).

pub mod api;
pub mod assets;
pub mod auth;
pub mod health;
pub mod history;
pub mod rates;
pub mod sampler;
pub mod server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::sync::mpsc;

use crate::control::Call;
use crate::metrics::requests::RequestMetrics;
use history::History;

/// How long ago every data-plane worker last passed (`None`: not yet).
pub type Liveness = Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// What the handlers share.
pub struct Web {
    /// The control task.
    pub calls: mpsc::Sender<Call>,
    /// The control socket's request counters (for `/metrics`).
    pub requests: RequestMetrics,
    /// The data plane's last pass.
    pub liveness: Liveness,
    /// The generation of the state the box runs, as the control task publishes it.
    pub generation: tokio::sync::watch::Receiver<Option<htb_ipc::Generation>>,
    /// The token data requests must carry (`None`: a loopback listener without one).
    pub token: Option<auth::Token>,
    /// The charts' samples.
    pub history: Arc<Mutex<History>>,
    /// Counters last seen by lists, for their rates.
    pub rates: Mutex<rates::RateMemo>,
    /// Two-port classes' counters at the last scrape, and those it found carried one way.
    pub one_way: Mutex<crate::metrics::one_way::OneWayMemo>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Web {
    /// The history, whoever panicked while holding it (its rings stay consistent: every
    /// change is one push).
    pub(crate) fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The one-way classes' memo (whoever panicked while holding it: it is rebuilt by the
    /// next scrape).
    pub(crate) fn one_way(&self) -> std::sync::MutexGuard<'_, crate::metrics::one_way::OneWayMemo> {
        self.one_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The counters lists last saw (one lock for a whole list).
    pub(crate) fn rates(&self) -> std::sync::MutexGuard<'_, rates::RateMemo> {
        self.rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Every route.
pub fn router(web: Arc<Web>) -> Router {
    let data = Router::new()
        .route("/metrics", get(api::metrics))
        .route("/api/v1/overview", get(api::overview))
        .route("/api/v1/status", get(api::status))
        .route("/api/v1/classes", get(api::classes))
        .route("/api/v1/class/{dev}/{id}", get(api::class))
        .route("/api/v1/search", get(api::search))
        .route("/api/v1/explain", get(api::explain))
        .route("/api/v1/flows", get(api::flows))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&web),
            auth::require,
        ));
    Router::new()
        .merge(data)
        .route("/health", get(health::get))
        .route("/", get(assets::index))
        .route("/assets/{file}", get(assets::file))
        .fallback(server::not_found)
        .layer(axum::middleware::from_fn(server::limit_body))
        .with_state(web)
}

#[cfg(test)]
mod tests;
