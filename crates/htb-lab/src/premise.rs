//! Windows the host took: a lab test whose measurement could not judge the shaper measures
//! again, and one that never gets a window it can judge is reported as ignored, not passed
//! and not failed.
//!
//! Two premises depend on the host, not on the shaper: that the data plane (or, for the
//! kernel's baseline, the host's CPUs) was not kept from forwarding for so much of the window
//! that what the class owed means little ([`crate::owed::MAX_LOST_SHARE`]), and that the
//! generator offered enough to fill the class. On a VM whose host takes vCPUs away for
//! milliseconds, either can fail now and then in a window where the shaper did everything
//! right. Such a failure calls [`unmeasured`], which abandons the attempt; [`remeasured`],
//! around every lab test's body, runs the test again from a fresh lab, up to [`ATTEMPTS`]
//! times. A test whose every attempt was unmeasured passes nothing: `scripts/test-summary.sh`
//! counts it as ignored, with its reason, from the run's report file ([`REPORT_ENV`]).
//!
//! Premises about the setup (a class that never reached its limit, frames that were not jumbo,
//! TCP that did not fill a class) stay failures: the host cannot cause them.

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// How many times a lab test is run before an unmeasured window ends it as ignored.
pub const ATTEMPTS: u32 = 3;

/// The environment variable naming a file every rate check's report is appended to, one line
/// each with its test's name (`scripts/test.sh` sets it, prints the file in its summary and
/// counts its `ignored` lines as ignored tests): the raw and accounted errors of every rate
/// test of a run, passed or failed, and every window the host took.
pub const REPORT_ENV: &str = "HTB_LAB_REPORT";

/// Why a window could not judge a shaper: the host took it (the report says how much).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unmeasured(pub String);

/// Abandons this attempt of the running test: its window measured the host, not the shaper.
/// Under [`remeasured`] the test runs again; outside it, the test fails with `report`.
///
/// # Panics
/// Always, with an [`Unmeasured`] payload.
pub fn unmeasured(report: String) -> ! {
    show_unmeasured_panics();
    panic::panic_any(Unmeasured(report))
}

/// Runs a lab test's `body` until one attempt's windows could all be judged, at most
/// [`ATTEMPTS`] times. Any other failure fails the test at once, as it would have without
/// this.
///
/// When every attempt was unmeasured the test returns without a verdict, noted as `ignored`
/// in the report file (which `scripts/test-summary.sh` counts as an ignored test) and on the
/// test run's own stderr, outside libtest's capture, so that no log shows it as a plain "ok".
///
/// # Panics
/// When `body` fails for any reason but an unmeasured window.
pub fn remeasured(body: impl FnMut()) {
    let Err(last) = attempts(ATTEMPTS, body, |why| note("unmeasured", &why.0)) else {
        return;
    };
    // The last line says which premise failed (a rate report's figures come before it).
    let why = last.0.lines().last().unwrap_or("");
    let reason = format!("all {ATTEMPTS} attempts unmeasured; the last: {why}");
    note("ignored", &reason);
    let _ = writeln!(
        std::io::stderr(),
        "\n{}: ignored at run time: {reason}",
        test_name()
    );
}

/// Runs `body` up to `max` times, until an attempt is not [`unmeasured`], telling `each` of
/// every one that was. The last unmeasured report when none measured.
fn attempts(
    max: u32,
    mut body: impl FnMut(),
    mut each: impl FnMut(&Unmeasured),
) -> Result<(), Unmeasured> {
    show_unmeasured_panics();
    let mut last = Unmeasured(String::new());
    for attempt in 1..=max {
        match panic::catch_unwind(AssertUnwindSafe(&mut body)) {
            Ok(()) => return Ok(()),
            Err(payload) => match payload.downcast::<Unmeasured>() {
                Ok(why) => {
                    eprintln!(
                        "attempt {attempt} of {max}: the host took the window, measuring again \
                         from a fresh lab"
                    );
                    each(&why);
                    last = *why;
                }
                Err(other) => panic::resume_unwind(other),
            },
        }
    }
    Err(last)
}

/// The running test's name: libtest names each test's thread after it.
fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// Appends `mark test: report` to `HTB_LAB_REPORT`'s file as one line, if set (a report that
/// cannot be written is not a test's failure).
pub(crate) fn note(mark: &str, report: &str) {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    let report = report.lines().collect::<Vec<_>>().join(" / ");
    let line = format!("{mark} {}: {report}\n", test_name());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Makes a panic with an [`Unmeasured`] payload print its report as a message would be
/// printed (the default hook prints only `Box<dyn Any>` for a payload that is not a string),
/// so that a test failing with one says why; every other panic goes to the hook before.
fn show_unmeasured_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let before = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if let Some(why) = info.payload().downcast_ref::<Unmeasured>() {
                let at = info
                    .location()
                    .map_or_else(String::new, |l| format!(" at {l}"));
                eprintln!("\nthread '{}' panicked{at}:\n{why}", test_name());
            } else {
                before(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn an_unmeasured_attempt_is_run_again_until_one_measures() {
        let runs = Cell::new(0);
        let mut told = 0;
        let verdict = attempts(
            3,
            || {
                runs.set(runs.get() + 1);
                if runs.get() < 2 {
                    unmeasured("the host took it".to_owned());
                }
            },
            |_| told += 1,
        );
        assert!(verdict.is_ok());
        assert_eq!((runs.get(), told), (2, 1));
    }

    #[test]
    fn a_test_never_measured_stops_after_its_attempts_with_the_last_report() {
        let runs = Cell::new(0);
        let verdict = attempts(
            3,
            || {
                runs.set(runs.get() + 1);
                unmeasured(format!("the host took attempt {}", runs.get()));
            },
            |_| {},
        );
        assert_eq!(runs.get(), 3);
        assert_eq!(verdict.unwrap_err().0, "the host took attempt 3");
    }

    #[test]
    fn any_other_failure_fails_at_once() {
        let runs = Cell::new(0);
        let failed = panic::catch_unwind(AssertUnwindSafe(|| {
            remeasured(|| {
                runs.set(runs.get() + 1);
                panic!("the shaper was 2 % off");
            });
        }));
        let message = failed.unwrap_err();
        assert_eq!(
            message.downcast_ref::<&str>(),
            Some(&"the shaper was 2 % off")
        );
        assert_eq!(runs.get(), 1);
    }

    #[test]
    fn a_measured_test_runs_once() {
        let runs = Cell::new(0);
        remeasured(|| runs.set(runs.get() + 1));
        assert_eq!(runs.get(), 1);
    }

    #[test]
    fn an_unmeasured_window_outside_remeasured_fails_with_its_report() {
        let failed = panic::catch_unwind(|| unmeasured("the host took 40 %".to_owned()));
        let why = failed.unwrap_err().downcast::<Unmeasured>().unwrap();
        assert_eq!(why.0, "the host took 40 %");
    }
}
