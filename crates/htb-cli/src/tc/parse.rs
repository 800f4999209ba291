//! tc's command line as htb-cli reads it: htb-tc's grammar ([`htb_tc::parse`]), with this
//! machine's link speeds for `rate N%` (tc's `get_percent_rate` reads
//! `/sys/class/net/DEV/speed`; htb-tc does no I/O and asks its caller).

use htb_core::Rate;
pub use htb_tc::parse::{
    Action, Invocation, Monitor, Options, UsageError, matches, no_link_speed, split_line,
};
use htb_tc::parse::{parse_batch_with, parse_command_line_with, parse_command_with};

/// A parse result.
pub type Result<T> = std::result::Result<T, UsageError>;

/// The link speed of `dev` for `N%` rates (tc reads `/sys/class/net/DEV/speed`, in Mbit/s).
fn link_speed(dev: &str) -> Option<Rate> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{dev}/speed")).ok()?;
    let mbit: u64 = text.trim().parse().ok().filter(|&m| m > 0)?;
    Some(Rate::from_mbit(mbit))
}

/// Parses a whole command line (without the program name).
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command_line(args: &[String]) -> Result<Invocation> {
    parse_command_line_with(args, &link_speed)
}

/// Parses one command: `OBJECT COMMAND ARGS…` (a command line after its options, or one line
/// of a batch file).
///
/// # Errors
/// tc-style usage errors.
pub fn parse_command(words: &[String]) -> Result<Action> {
    parse_command_with(words, &link_speed)
}

/// Reads a batch: one command per line, `\` continues a line, `#` starts a comment. Returns
/// each command with the number of the line it starts on.
///
/// # Errors
/// The first line that does not parse, with its number.
pub fn parse_batch(text: &str) -> std::result::Result<Vec<(usize, Action)>, (usize, UsageError)> {
    parse_batch_with(text, &link_speed)
}
