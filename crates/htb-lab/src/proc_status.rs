//! A process's memory figures from `/proc/PID/status`, for the benchmarks that watch htbd's
//! resident set (`scale`, `soak`).

/// Why a `/proc/PID/status` figure could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The process is gone (or `/proc` is not readable).
    #[error("cannot read /proc/{pid}/status (the process is gone?): {source}")]
    Gone {
        /// The process.
        pid: u32,
        /// Why.
        source: std::io::Error,
    },
    /// The file has no such line, or its value is not `N kB`.
    #[error("/proc/{pid}/status has no readable `{field}` line")]
    Missing {
        /// The process.
        pid: u32,
        /// The field, with its colon (`VmRSS:`).
        field: &'static str,
    },
}

/// The resident set now, in KiB.
///
/// # Errors
/// When `/proc/PID/status` cannot be read or has no such line ([`StatusError`]).
pub fn rss_kib(pid: u32) -> Result<u64, StatusError> {
    kib(pid, "VmRSS:")
}

/// The resident set's high-water mark, in KiB: what the machine must have had free at the
/// process's peak, which the RSS after it (freed memory the allocator keeps, or locked pages)
/// can understate.
///
/// # Errors
/// When `/proc/PID/status` cannot be read or has no such line ([`StatusError`]).
pub fn peak_rss_kib(pid: u32) -> Result<u64, StatusError> {
    kib(pid, "VmHWM:")
}

/// A `/proc/PID/status` figure given in kB (`VmRSS:`, `VmHWM:`), in KiB.
///
/// # Errors
/// When the file cannot be read or has no such line.
fn kib(pid: u32, field: &'static str) -> Result<u64, StatusError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|source| StatusError::Gone { pid, source })?;
    parse(&text, field).ok_or(StatusError::Missing { pid, field })
}

/// `field`'s value in `status`'s text (`VmRSS:\t  12345 kB`).
fn parse(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_its_figures() {
        let pid = std::process::id();
        let rss = rss_kib(pid).unwrap();
        assert!(rss > 0);
        assert!(peak_rss_kib(pid).unwrap() >= rss);
    }

    #[test]
    fn a_missing_or_odd_line_is_an_error() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  lots\n";
        assert_eq!(parse(text, "VmHWM:"), Some(2048));
        assert_eq!(parse(text, "VmRSS:"), None);
        assert_eq!(parse(text, "VmSwap:"), None);
        assert!(matches!(
            kib(u32::MAX, "VmRSS:"),
            Err(StatusError::Gone { .. })
        ));
    }
}
