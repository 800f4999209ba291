//! tc's global options (iproute2 `tc/tc.c`'s `main`: `-s`, `-d`, `-j`, …), set before the object
//! and read by every command's printer.

/// Global options (before the object).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-s`: statistics.
    pub stats: bool,
    /// `-d`: details.
    pub details: bool,
    /// `-r`: raw buffer values.
    pub raw: bool,
    /// `-j`: JSON.
    pub json: bool,
    /// `-p`: pretty JSON.
    pub pretty: bool,
    /// `-iec`: rates in IEC units.
    pub iec: bool,
    /// `--socket PATH`.
    pub socket: Option<String>,
    /// `--socket` given again: the other boxes of a fleet (`status`, changes and batches go to
    /// each; see `fleet`).
    pub more_sockets: Vec<String>,
    /// `--timeout SECS`: how long to wait for htbd's answer.
    pub timeout: Option<std::time::Duration>,
    /// `-b FILE` / `batch FILE`.
    pub batch: Option<String>,
}
