//! Control-socket requests counted and timed as the control task serves them
//! (`htb_ipc_requests_total`, `htb_ipc_request_duration_seconds`).

use std::time::Duration;

use htb_ipc::RequestBody;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Which request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values as Prometheus users write them
pub enum Request {
    /// `Ping`.
    ping,
    /// `show`.
    show,
    /// A batch of changes.
    apply,
    /// `status`.
    status,
    /// Commands staged for a connection's next batch.
    stage,
    /// `explain`.
    explain,
    /// `flows`.
    flows,
}

impl Request {
    /// The label of `body`.
    #[must_use]
    pub fn of(body: &RequestBody) -> Self {
        match body {
            RequestBody::Ping {} => Self::ping,
            RequestBody::Show(_) => Self::show,
            RequestBody::Apply { .. } => Self::apply,
            RequestBody::Status {} => Self::status,
            RequestBody::Stage { .. } => Self::stage,
            RequestBody::Explain(_) => Self::explain,
            RequestBody::Flows(_) => Self::flows,
        }
    }
}

/// How it ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// Answered.
    ok,
    /// Refused or failed.
    error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CountLabels {
    request: Request,
    outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimeLabels {
    request: Request,
}

/// The counters; cheap to clone (they share their values).
#[derive(Clone, Debug)]
pub struct RequestMetrics {
    count: Family<CountLabels, Counter>,
    time: Family<TimeLabels, Histogram>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self {
            count: Family::default(),
            // 100 µs … ~6.5 s: a ping to a 100 000-class batch.
            time: Family::new_with_constructor(|| {
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    1e-4, 4.0, 9,
                ))
            }),
        }
    }
}

impl RequestMetrics {
    /// Counts one request that took `took`.
    pub fn observe(&self, request: Request, outcome: Outcome, took: Duration) {
        self.count
            .get_or_create(&CountLabels { request, outcome })
            .inc();
        self.time
            .get_or_create(&TimeLabels { request })
            .observe(took.as_secs_f64());
    }

    /// Adds them to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "htb_ipc_requests",
            "Requests served on the control socket",
            self.count.clone(),
        );
        registry.register(
            "htb_ipc_request_duration_seconds",
            "Time from a request's arrival at the control task to its answer",
            self.time.clone(),
        );
    }
}
