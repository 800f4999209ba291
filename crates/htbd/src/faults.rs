//! Fault injection for the tests, from `HTBD_FAULTS` (comma-separated; unset in service):
//!
//! - `crash-in-compaction:STEP` — abort the process right after that step of a compaction
//!   (`tmp-written`, `tmp-synced`, `renamed`, `dir-synced`, `journal-truncated`), as `kill -9`
//!   there would leave the files;
//! - `refuse-plane-op:N` — in every batch, the data plane's operation N fails (as a bug
//!   between the model and the data plane would), to prove batches are all or nothing;
//! - `hang-data-plane-after:MS` — MS milliseconds after start, the data-plane thread blocks
//!   for good (in a job that never returns), to prove the watchdog stops being fed.
//!
//! htbd logs a warning naming the faults when any is set.

use std::ops::ControlFlow;

use htb_core::ClassId;
use htb_xdp::PlaneOp;

use crate::persist::CompactStep;

/// Why [`VAR`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultsError {
    /// `crash-in-compaction:` names no step.
    #[error("{VAR}: crash-in-compaction:{0}: steps are {steps}", steps = step_names())]
    NoSuchStep(String),
    /// A fault's argument is not the number it needs.
    #[error("{VAR}: {fault}:{arg}: not a number{unit}")]
    NotANumber {
        /// The fault.
        fault: &'static str,
        /// Its argument.
        arg: String,
        /// What the number counts, if anything (` of ms`).
        unit: &'static str,
    },
    /// No such fault.
    #[error("{VAR}: unknown fault {0:?}")]
    Unknown(String),
}

fn step_names() -> String {
    let names: Vec<_> = CompactStep::ALL.map(CompactStep::name).into();
    names.join(", ")
}

/// The faults to inject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    crash_in_compaction: Option<CompactStep>,
    refuse_plane_op: Option<usize>,
    hang_data_plane_after: Option<u64>,
}

/// The environment variable.
pub const VAR: &str = "HTBD_FAULTS";

impl Faults {
    /// Reads [`VAR`].
    ///
    /// # Errors
    /// An unknown fault or a bad argument.
    pub fn from_env() -> Result<Self, FaultsError> {
        std::env::var(VAR).map_or_else(|_| Ok(Self::default()), |v| Self::parse(&v))
    }

    /// Parses a fault list.
    ///
    /// # Errors
    /// An unknown fault or a bad argument.
    pub fn parse(text: &str) -> Result<Self, FaultsError> {
        let mut faults = Self::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, arg) = item.split_once(':').unwrap_or((item, ""));
            match name {
                "crash-in-compaction" => {
                    let step = CompactStep::ALL
                        .into_iter()
                        .find(|s| s.name() == arg)
                        .ok_or_else(|| FaultsError::NoSuchStep(arg.to_owned()))?;
                    faults.crash_in_compaction = Some(step);
                }
                "refuse-plane-op" => {
                    let n = arg.parse().map_err(|_| FaultsError::NotANumber {
                        fault: "refuse-plane-op",
                        arg: arg.to_owned(),
                        unit: "",
                    })?;
                    faults.refuse_plane_op = Some(n);
                }
                "hang-data-plane-after" => {
                    let ms = arg.parse().map_err(|_| FaultsError::NotANumber {
                        fault: "hang-data-plane-after",
                        arg: arg.to_owned(),
                        unit: " of ms",
                    })?;
                    faults.hang_data_plane_after = Some(ms);
                }
                other => return Err(FaultsError::Unknown(other.to_owned())),
            }
        }
        Ok(faults)
    }

    /// Whether any fault is set.
    #[must_use]
    pub fn any(&self) -> bool {
        *self != Self::default()
    }

    /// Called after each compaction step: aborts the process at the chosen one.
    pub fn compaction_step(&self, step: CompactStep) -> ControlFlow<()> {
        if self.crash_in_compaction == Some(step) {
            eprintln!(
                "htbd: {VAR}: crashing after compaction step {}",
                step.name()
            );
            std::process::abort();
        }
        ControlFlow::Continue(())
    }

    /// After the configured delay, blocks the data-plane thread for good.
    pub async fn hang_data_plane(&self, engine: htb_xdp::EngineHandle) {
        let Some(ms) = self.hang_data_plane_after else {
            return;
        };
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        eprintln!("htbd: {VAR}: hanging the data plane");
        let job: htb_xdp::Job = Box::new(|_engine: &mut htb_xdp::Engine| {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
        let _ = engine.execute(job);
    }

    /// Replaces operation N of a batch with one the data plane refuses (deleting a class that
    /// does not exist).
    pub fn poison_plane_ops(&self, ops: &mut [PlaneOp]) {
        if let Some(n) = self.refuse_plane_op
            && let Some(op) = ops.get_mut(n)
        {
            *op = PlaneOp::DeleteClass {
                port: op.port().to_owned(),
                id: ClassId::new(0xffff, 0xfffe),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_refuse_unknown_ones() {
        assert!(!Faults::parse("").unwrap().any());
        let f = Faults::parse("crash-in-compaction:renamed, refuse-plane-op:1").unwrap();
        assert_eq!(f.crash_in_compaction, Some(CompactStep::Renamed));
        assert_eq!(f.refuse_plane_op, Some(1));
        assert!(
            Faults::parse("crash-in-compaction:nope")
                .unwrap_err()
                .to_string()
                .contains("renamed")
        );
        assert!(Faults::parse("refuse-plane-op:x").is_err());
        assert!(Faults::parse("explode").is_err());
        let f = Faults::parse("hang-data-plane-after:1500").unwrap();
        assert_eq!(f.hang_data_plane_after, Some(1500));
    }
}
