//! What every benchmark here shares: the quick mode, Criterion's settings for it, per-packet
//! samples with their median, and where results are written.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use criterion::Criterion;

/// `HTB_BENCH_QUICK=1`: short runs (CI, a first look).
pub(crate) fn quick() -> bool {
    std::env::var_os("HTB_BENCH_QUICK").is_some_and(|v| v != "0")
}

/// Criterion from the command line, shortened in quick mode.
pub(crate) fn criterion() -> Criterion {
    let criterion = Criterion::default().configure_from_args();
    if quick() {
        criterion
            .warm_up_time(Duration::from_millis(100))
            .measurement_time(Duration::from_millis(300))
            .sample_size(10)
            .without_plots()
    } else {
        criterion
    }
}

/// `target/htb-bench`, created.
pub(crate) fn out_dir() -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/htb-bench");
    std::fs::create_dir_all(&dir).expect("create target/htb-bench");
    dir
}

/// Per-packet times of every routine call of one benchmark point; the median is reported.
#[derive(Clone, Default)]
pub(crate) struct Samples(Rc<RefCell<Vec<f64>>>);

impl Samples {
    /// One call that handled `packets` packets in `elapsed`.
    pub(crate) fn record(&self, elapsed: Duration, packets: u64) {
        self.0
            .borrow_mut()
            .push(elapsed.as_nanos() as f64 / packets.max(1) as f64);
    }

    /// The median ns per packet (NaN without samples).
    pub(crate) fn median(&self) -> f64 {
        let mut v = self.0.borrow().clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }
}
