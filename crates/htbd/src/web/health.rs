//! `/health`: 200 while every data-plane worker keeps passing (seen within [`STALE_AFTER`])
//! and 503 otherwise (a hung worker, a job holding the data plane, a start not finished), for
//! a BGP speaker or keepalived to withdraw the box; a killed htbd answers nothing, which
//! checkers count as down too. It never waits on the data plane: it reads the time of the
//! last pass the engine noted. It needs no token: it says nothing but up or down, and the
//! generation of the state the box runs (`generation 0123456789abcdef` on a second line; it is
//! hashed when `htb-cli status` or a scrape asks, so right after a change it says so instead).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::Web;

/// A data plane none of whose passes covered every worker for this long is down: with the
/// default liveness timeout each worker passes every 5 ms, and a control job longer than this
/// holds the forwarding of every port.
pub const STALE_AFTER: Duration = Duration::from_millis(500);

/// Whether a data plane last seen passing `since` ago is up, and the sentence saying so.
#[must_use]
pub fn health(since: Option<Duration>) -> (bool, String) {
    match since {
        None => (false, "starting: the data plane has not passed yet".into()),
        Some(age) if age > STALE_AFTER => (
            false,
            format!(
                "down: the data-plane workers have not all passed for {} ms",
                age.as_millis()
            ),
        ),
        Some(age) => (
            true,
            format!(
                "ok: every data-plane worker passed {} ms ago",
                age.as_millis()
            ),
        ),
    }
}

/// `GET /health`.
pub async fn get(State(web): State<Arc<Web>>) -> impl IntoResponse {
    let (up, text) = health((web.liveness)());
    let status = if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let generation = *web.generation.borrow();
    match generation {
        Some(g) => (status, format!("{text}\ngeneration {g}\n")),
        None => (
            status,
            format!(
                "{text}\ngeneration not yet hashed since the last change (htb-cli status hashes it)\n"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_up_only_while_the_workers_keep_passing() {
        assert!(!health(None).0);
        assert_eq!(
            health(Some(Duration::from_millis(3))),
            (true, "ok: every data-plane worker passed 3 ms ago".into())
        );
        assert!(health(Some(STALE_AFTER)).0);
        let (up, text) = health(Some(Duration::from_millis(1200)));
        assert!(!up);
        assert!(text.contains("not all passed for 1200 ms"), "{text}");
    }
}
