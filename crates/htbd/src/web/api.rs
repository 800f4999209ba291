//! The JSON API (`/api/v1/…`, documented in `docs/api.md`) and `/metrics`. Every answer comes
//! from the control task, as `htb-cli`'s do: a page's numbers are `class show -s`'s.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use htb_core::ClassId;
use htb_ipc::{
    ClassInfo, ErrorCode, InterfaceName, IpcError, LeafQdiscInfo, Object, Parent, Show, Status,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::Web;
use super::history::{ClassKey, Series};
use super::rates::{RateMemo, Rates};
use crate::control::{Call, Query as ControlQuery};
use crate::metrics::{chunks, exposition};

/// Classes a tree page lists at most (the busiest first).
pub const LIST_LIMIT: usize = 500;
/// Search results at most.
pub const SEARCH_LIMIT: usize = 50;

/// Why an API call has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The control task refused or failed.
    #[error("{0}")]
    Control(#[from] IpcError),
    /// The control task is gone.
    #[error("htbd is stopping")]
    Stopping,
    /// A parameter does not parse.
    #[error("{0}")]
    BadRequest(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = match self {
            Self::Control(e) => e,
            Self::Stopping => IpcError::new(ErrorCode::ShuttingDown, "htbd is stopping"),
            Self::BadRequest(m) => IpcError::new(ErrorCode::BadRequest, m),
        };
        let status = match error.code {
            ErrorCode::BadRequest | ErrorCode::Invalid => StatusCode::BAD_REQUEST,
            ErrorCode::NotFound | ErrorCode::NoDevice => StatusCode::NOT_FOUND,
            ErrorCode::Busy | ErrorCode::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, Json(error)).into_response()
    }
}

/// Sends a query to the control task and waits for its answer.
pub(crate) async fn ask<T>(
    web: &Web,
    query: impl FnOnce(oneshot::Sender<Result<T, IpcError>>) -> ControlQuery,
) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    web.calls
        .send(Call::Query(query(tx)))
        .await
        .map_err(|_| ApiError::Stopping)?;
    Ok(rx.await.map_err(|_| ApiError::Stopping)??)
}

fn class_id(text: &str) -> Result<ClassId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::BadRequest(format!("{text:?} is not a class id such as 1:10")))
}

/// `GET /metrics`: gathered through the control task, encoded on a blocking thread (a million
/// classes are 589 MB of text; the control runtime keeps serving meanwhile) and sent in chunks
/// as it is encoded ([`chunks`]).
pub async fn metrics(State(web): State<Arc<Web>>) -> Response {
    let (tx, rx) = oneshot::channel();
    let gathered = match web.calls.send(Call::Metrics(tx)).await {
        Ok(()) => rx
            .await
            .map_err(|_| ApiError::Stopping)
            .and_then(|r| Ok(r?)),
        Err(_) => Err(ApiError::Stopping),
    };
    let mut scrape = match gathered {
        Ok(scrape) => scrape,
        Err(e) => {
            tracing::warn!("metrics: scrape failed: {e}");
            return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response();
        }
    };
    scrape.one_way_classes = Some(web.one_way().observe(&scrape).len());
    let requests = web.requests.clone();
    let (mut writer, body) = chunks::channel();
    // Not awaited: the body below ends when the encoder is done or cut.
    drop(tokio::task::spawn_blocking(move || {
        let encoded = exposition::encode_into(&mut writer, scrape, &requests);
        if encoded.is_err() {
            tracing::debug!("metrics: the client left before the end of the exposition");
        }
        writer.finish(encoded);
    }));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        Body::from_stream(body),
    )
        .into_response()
}

/// `GET /api/v1/status`: what `htb-cli status -j` prints.
///
/// # Errors
/// [`ApiError`] from the control task.
pub async fn status(State(web): State<Arc<Web>>) -> Result<Json<Status>, ApiError> {
    Ok(Json(ask(&web, ControlQuery::Status).await?))
}

/// A port on the overview.
#[derive(Debug, Serialize)]
pub struct PortView {
    /// Interface.
    pub dev: InterfaceName,
    /// Received, bit/s over the last second (`None`: fewer than two samples yet).
    pub rx_bps: Option<u64>,
    /// Sent.
    pub tx_bps: Option<u64>,
    /// The last 10 minutes, a sample a second.
    pub history: Series,
}

/// `GET /api/v1/overview`.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// `/health`'s verdict.
    pub healthy: bool,
    /// And its sentence.
    pub health: String,
    /// The data plane's counters.
    pub status: Status,
    /// Ports with their rates and history.
    pub ports: Vec<PortView>,
    /// Classes whose history is kept.
    pub tracked_classes: usize,
    /// Bytes the history holds.
    pub history_bytes: usize,
    /// Classes the last scrape of `/metrics` found carried one way (at most
    /// [`ONE_WAY_SHOWN`], the most packets first) and how many there were.
    pub one_way: Vec<crate::metrics::one_way::OneWay>,
    /// How many classes were carried one way.
    pub one_way_total: usize,
}

/// One-way classes the overview lists.
pub const ONE_WAY_SHOWN: usize = 20;

/// `GET /api/v1/overview`: health, the data plane's counters, each port's rates.
///
/// # Errors
/// [`ApiError`] from the control task.
pub async fn overview(State(web): State<Arc<Web>>) -> Result<Json<Overview>, ApiError> {
    let status = ask(&web, ControlQuery::Status).await?;
    let (healthy, health) = super::health::health((web.liveness)());
    let history = web.history();
    let ports = status
        .ports
        .iter()
        .map(|p| {
            let series = history.port_series(&p.dev).cloned().unwrap_or_default();
            PortView {
                dev: p.dev.clone(),
                rx_bps: series.bits_per_second(1, |s| s.rx_bytes),
                tx_bps: series.bits_per_second(1, |s| s.bytes),
                history: Series {
                    seconds: series.seconds,
                    minutes: Default::default(),
                },
            }
        })
        .collect();
    let (tracked_classes, history_bytes) = (history.tracked().len(), history.bytes());
    drop(history);
    let (one_way, one_way_total) = {
        let memo = web.one_way();
        let all = memo.last();
        (all.iter().take(ONE_WAY_SHOWN).cloned().collect(), all.len())
    };
    Ok(Json(Overview {
        healthy,
        health,
        status,
        ports,
        tracked_classes,
        history_bytes,
        one_way,
        one_way_total,
    }))
}

/// A class with its rates.
#[derive(Debug, Serialize)]
pub struct ClassView {
    /// As `class show -s -j` gives it.
    #[serde(flatten)]
    pub info: ClassInfo,
    /// Rates since the class was last seen (`None`: not seen within 30 s, or just now).
    pub rates: Option<Rates>,
    /// Sent over ceil, 0 to 1 (`None` without rates).
    pub utilisation: Option<f64>,
}

impl ClassView {
    fn new(memo: &mut RateMemo, info: ClassInfo, at: Instant) -> Self {
        let key = (info.dev.clone(), info.id);
        let rates = info
            .stats
            .and_then(|s| memo.see(&key, at, s.queue.bytes, s.queue.packets, s.queue.drops));
        let utilisation = rates
            .filter(|_| !info.ceil.is_zero())
            .map(|r| r.bps as f64 / info.ceil.bits_per_sec() as f64);
        Self {
            info,
            rates,
            utilisation,
        }
    }
}

/// `/api/v1/classes`' parameters.
#[derive(Debug, Deserialize)]
pub struct ListParams {
    /// The port (all when absent).
    pub dev: Option<InterfaceName>,
    /// The parent whose children are listed: a class id, or `root` (the default).
    pub parent: Option<String>,
}

/// `GET /api/v1/classes`'s answer.
#[derive(Debug, Serialize)]
pub struct ClassList {
    /// The busiest first, then the most dropping, at most [`LIST_LIMIT`].
    pub classes: Vec<ClassView>,
    /// How many there are in all.
    pub total: usize,
}

/// `GET /api/v1/classes?dev=r2&parent=1:1`: a class's children (the root classes with
/// `parent=root`), busiest first.
///
/// # Errors
/// [`ApiError`]: a bad parameter, an unknown port.
pub async fn classes(
    State(web): State<Arc<Web>>,
    Query(params): Query<ListParams>,
) -> Result<Json<ClassList>, ApiError> {
    let parent = match params.parent.as_deref() {
        None | Some("root") => Parent::Root,
        Some(id) => Parent::Id(class_id(id)?),
    };
    let show = Show {
        object: Some(Object::Class),
        dev: params.dev,
        parent: Some(parent),
        stats: true,
        ..Show::default()
    };
    let shown = ask(&web, |tx| ControlQuery::Show(show, tx)).await?;
    let at = Instant::now();
    let mut memo = web.rates();
    let mut classes: Vec<ClassView> = shown
        .classes
        .into_iter()
        .map(|c| ClassView::new(&mut memo, c, at))
        .collect();
    drop(memo);
    let total = classes.len();
    let key = |c: &ClassView| {
        let r = c.rates.unwrap_or_default();
        (
            std::cmp::Reverse(r.bps),
            std::cmp::Reverse((r.drops_per_s * 1000.0) as u64),
        )
    };
    classes.sort_by_key(key);
    classes.truncate(LIST_LIMIT);
    Ok(Json(ClassList { classes, total }))
}

/// `GET /api/v1/class/{dev}/{id}`'s answer.
#[derive(Debug, Serialize)]
pub struct ClassPage {
    /// The class.
    pub class: ClassView,
    /// Its ancestors, the root first.
    pub path: Vec<ClassView>,
    /// Its leaf qdisc with statistics (cake's tins, fq_codel's counters), if a leaf.
    pub leaf: Option<LeafQdiscInfo>,
    /// Its history since it was first viewed.
    pub history: Series,
}

async fn one_class(web: &Web, dev: &InterfaceName, id: ClassId) -> Result<ClassInfo, ApiError> {
    let show = Show {
        object: Some(Object::Class),
        dev: Some(dev.clone()),
        class: Some(id),
        stats: true,
        ..Show::default()
    };
    let shown = ask(web, |tx| ControlQuery::Show(show, tx)).await?;
    shown.classes.into_iter().next().ok_or_else(|| {
        ApiError::Control(IpcError::new(
            ErrorCode::NotFound,
            format!("no class {id} on {dev}"),
        ))
    })
}

/// `/api/v1/class/…`'s parameters.
#[derive(Debug, Default, Deserialize)]
pub struct ClassParams {
    /// Also the day's one-minute samples (`?day=true`; a second's refresh needs only the last
    /// 10 minutes).
    #[serde(default)]
    pub day: bool,
}

/// `GET /api/v1/class/r2/1:10[?day=true]`: a class, its path to the root, its leaf and its history (from
/// now on tracked).
///
/// # Errors
/// [`ApiError`]: no such port or class.
pub async fn class(
    State(web): State<Arc<Web>>,
    Path((dev, id)): Path<(InterfaceName, String)>,
    Query(params): Query<ClassParams>,
) -> Result<Json<ClassPage>, ApiError> {
    let id = class_id(&id)?;
    let info = one_class(&web, &dev, id).await?;
    let key: ClassKey = (dev.clone(), id);
    web.history().view(key.clone());
    let mut path = Vec::new();
    let mut up = info.parent;
    while let Some(parent) = up {
        let p = one_class(&web, &dev, parent).await?;
        up = p.parent;
        path.push(p);
    }
    path.reverse();
    let leaf = ask(&web, |tx| ControlQuery::Leaf(key.clone(), tx)).await?;
    let at = Instant::now();
    let mut history = web
        .history()
        .class_series(&key)
        .cloned()
        .unwrap_or_default();
    if !params.day {
        history.minutes.clear();
    }
    let mut memo = web.rates();
    Ok(Json(ClassPage {
        class: ClassView::new(&mut memo, info, at),
        path: path
            .into_iter()
            .map(|p| ClassView::new(&mut memo, p, at))
            .collect(),
        leaf,
        history,
    }))
}

/// `/api/v1/search`'s parameter.
#[derive(Debug, Deserialize)]
pub struct SearchParams {
    /// A class id (`1:10`), an address (`10.0.3.7`, `2001:db8::7`) or a prefix; anything else
    /// is looked for in the classes' labels (name, circuit id, device, MAC, comment).
    pub q: String,
}

/// A search result.
#[derive(Debug, Serialize)]
pub struct Found {
    /// The port.
    pub dev: InterfaceName,
    /// The class (`None`: packets go unshaped, which `why` says).
    pub class: Option<ClassId>,
    /// Why it was found: `class id`, or the filter that names the address (`prio 1 handle
    /// 800::1 dst 10.0.3.0/24`), or the label that mentions the text.
    pub why: String,
    /// The class's label's title (its subscriber's name), when found by its label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `GET /api/v1/search?q=10.0.3.7`: classes by id, or the classes whose filters name an
/// address (a source or destination prefix holding it), first by prio, or the classes whose
/// labels mention the text (`?q=ann`, a circuit id, a MAC).
///
/// # Errors
/// [`ApiError`]: an empty query.
pub async fn search(
    State(web): State<Arc<Web>>,
    Query(params): Query<SearchParams>,
) -> Result<Json<Vec<Found>>, ApiError> {
    let q = params.q.trim();
    let mut found = Vec::new();
    // A class id has its colon (`1:10`): a bare `17` or `cafe`, which tc would read as a
    // handle, is looked for in the labels (circuit ids are often numbers).
    let class = q.contains(':').then(|| q.parse::<ClassId>().ok()).flatten();
    if let Some(id) = class {
        let show = Show {
            object: Some(Object::Class),
            class: Some(id),
            ..Show::default()
        };
        let shown = ask(&web, |tx| ControlQuery::Show(show, tx)).await?;
        found.extend(shown.classes.into_iter().map(|c| Found {
            dev: c.dev,
            class: Some(c.id),
            why: "class id".into(),
            name: c.label.map(|l| l.title().to_owned()),
        }));
    } else if let Some(addr) = q.split('/').next().and_then(|a| a.parse::<IpAddr>().ok()) {
        // First where the data plane sends packets to and from it, then every filter that
        // names it.
        let question = htb_ipc::Explain {
            addr,
            peer: None,
            dev: None,
            proto: None,
            addr_port: None,
            peer_port: None,
        };
        let explained = ask_explain(&web, question).await?;
        for e in explained.ports {
            let way = match e.direction {
                htb_ipc::Direction::ToAddr => "packets to it",
                htb_ipc::Direction::FromAddr => "packets from it",
            };
            // A port that sends everything unshaped says nothing about the address.
            if matches!(e.outcome, htb_ipc::Outcome::Unshaped) {
                continue;
            }
            found.push(Found {
                dev: e.dev,
                class: e.outcome.class(),
                why: format!("the data plane: {way}: {}", e.outcome.words()),
                name: None,
            });
        }
        let show = Show {
            object: Some(Object::Filter),
            ..Show::default()
        };
        let mut filters = ask(&web, |tx| ControlQuery::Show(show, tx)).await?.filters;
        filters.sort_by_key(|f| f.prio);
        for f in filters {
            let m = &f.matcher;
            let side = [("src", m.src), ("dst", m.dst)]
                .into_iter()
                .find(|(_, p)| p.is_some_and(|p| p.contains(addr)));
            if let (Some((side, Some(prefix))), Some(class)) = (side, f.class) {
                found.push(Found {
                    dev: f.dev,
                    class: Some(class),
                    why: format!(
                        "filter prio {} handle {:#x} names it: {side} {}/{}",
                        f.prio,
                        f.handle.0,
                        prefix.addr(),
                        prefix.prefix_len()
                    ),
                    name: None,
                });
            }
            if found.len() >= SEARCH_LIMIT {
                break;
            }
        }
    } else {
        if q.is_empty() {
            return Err(ApiError::BadRequest(
                "search for a class id (1:10), an address (10.0.3.7) or a name".into(),
            ));
        }
        let text = q.to_lowercase();
        let hits = ask(&web, |reply| ControlQuery::Labels {
            text,
            limit: SEARCH_LIMIT,
            reply,
        })
        .await?;
        found.extend(hits.into_iter().map(|((dev, class), title)| Found {
            dev,
            class: Some(class),
            why: format!("its label mentions {q:?}"),
            name: Some(title),
        }));
    }
    found.truncate(SEARCH_LIMIT);
    let mut history = web.history();
    for f in &found {
        if let Some(class) = f.class {
            history.view((f.dev.clone(), class));
        }
    }
    Ok(Json(found))
}

async fn ask_explain(
    web: &Web,
    question: htb_ipc::Explain,
) -> Result<htb_ipc::Explanation, ApiError> {
    ask(web, |tx| ControlQuery::Explain(question, tx)).await
}

/// `/api/v1/explain`'s parameters (as `htb-cli explain`'s).
#[derive(Debug, Deserialize)]
pub struct ExplainParams {
    /// The address.
    pub addr: IpAddr,
    /// The other end.
    pub peer: Option<IpAddr>,
    /// Only this port.
    pub dev: Option<InterfaceName>,
    /// IP protocol number (default 17).
    pub proto: Option<u8>,
    /// The address's port.
    pub addr_port: Option<u16>,
    /// The peer's port.
    pub peer_port: Option<u16>,
}

/// `GET /api/v1/explain?addr=10.0.3.7`: what `htb-cli -j explain` prints.
///
/// # Errors
/// [`ApiError`]: no such port, mixed address families.
pub async fn explain(
    State(web): State<Arc<Web>>,
    Query(p): Query<ExplainParams>,
) -> Result<Json<htb_ipc::Explanation>, ApiError> {
    let question = htb_ipc::Explain {
        addr: p.addr,
        peer: p.peer,
        dev: p.dev,
        proto: p.proto,
        addr_port: p.addr_port,
        peer_port: p.peer_port,
    };
    Ok(Json(ask_explain(&web, question).await?))
}

/// `/api/v1/flows`'s parameters (as `htb-cli flows`'s).
#[derive(Debug, Deserialize)]
pub struct FlowsParams {
    /// Only flows leaving through this port.
    pub dev: Option<InterfaceName>,
    /// Only flows of this class (`1:10`).
    pub class: Option<ClassId>,
    /// At most this many (default 20, at most 10 000).
    pub top: Option<u32>,
}

/// `GET /api/v1/flows?dev=r2&class=1:10&top=20`: what `htb-cli -j flows` prints.
///
/// # Errors
/// [`ApiError`]: no `[flows]`, no such port.
pub async fn flows(
    State(web): State<Arc<Web>>,
    Query(p): Query<FlowsParams>,
) -> Result<Json<htb_ipc::FlowList>, ApiError> {
    let question = htb_ipc::FlowsQuery {
        dev: p.dev,
        class: p.class,
        top: p.top.unwrap_or(20).clamp(1, 10_000),
    };
    Ok(Json(
        ask(&web, |tx| ControlQuery::Flows(question, tx)).await?,
    ))
}
