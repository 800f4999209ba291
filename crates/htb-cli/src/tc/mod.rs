//! `htb-cli` speaking tc: parse a command line ([`parse`], htb-tc's grammar with this
//! machine's link speeds), send it to htbd, print the answer as tc would
//! ([`format`](mod@format)).
//!
//! Exit status: 0 on success, 1 for a usage error (nothing was sent), 2 when htbd refused the
//! request or could not be reached.

mod explain;
mod fleet;
mod flows;
pub mod format;
mod monitor;
pub mod parse;
mod status;

/// tc's argument cursor, usage errors and number parsers ([`htb_tc::args`]), here where
/// htb-cli's callers have always found them.
pub use htb_tc::args;

use std::io::{Read, Write};

use htb_ipc::{Command, IpcError, Object, ReplyBody, Show};

use crate::client::{Client, ClientError, DEFAULT_TIMEOUT, socket_path};
use format::Style;
use parse::{Action, Invocation, Options};

/// Exit status for usage errors.
pub const EXIT_USAGE: u8 = 1;
/// Exit status when htbd refused or was not there.
pub const EXIT_DAEMON: u8 = 2;

/// Runs a tc-style command line; returns the exit status.
pub fn main(args: &[String], out: &mut impl Write, err: &mut impl Write) -> u8 {
    let invocation = match parse::parse_command_line(args) {
        Ok(i) => i,
        Err(e) => {
            let _ = writeln!(err, "{e}");
            return EXIT_USAGE;
        }
    };
    run(invocation, out, err)
}

fn style(options: &Options, show: &Show) -> Style {
    Style {
        stats: options.stats,
        details: options.details,
        raw: options.raw,
        iec: options.iec,
        json: options.json,
        pretty: options.pretty,
        show_dev: show.dev.is_none(),
        hide_parent: show.object == Some(Object::Filter) && show.parent.is_some(),
    }
}

fn daemon_error(err: &mut impl Write, e: &ClientError) -> u8 {
    match e {
        ClientError::Daemon(IpcError { message, .. }) => {
            let _ = writeln!(err, "Error: {message}");
        }
        other => {
            let _ = writeln!(err, "htb-cli: {other}");
        }
    }
    EXIT_DAEMON
}

fn run(invocation: Invocation, out: &mut impl Write, err: &mut impl Write) -> u8 {
    let Invocation { options, action } = invocation;
    if !options.more_sockets.is_empty()
        && !matches!(action, Some(Action::Help(_) | Action::Version))
    {
        return fleet::run(&options, action, out, err);
    }
    let action = match action {
        None => return batch(&options, out, err),
        Some(Action::Help(text)) => {
            let _ = writeln!(out, "{text}");
            return 0;
        }
        Some(Action::Version) => {
            let _ = writeln!(out, "htb-cli {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Some(action) => action,
    };
    let mut client = match Client::connect(
        &socket_path(options.socket.as_deref()),
        options.timeout.unwrap_or(DEFAULT_TIMEOUT),
    ) {
        Ok(c) => c,
        Err(e) => return daemon_error(err, &e),
    };
    let result = match action {
        Action::Show(show) => print_show(&mut client, &options, show, out),
        Action::Change(command) => apply(&mut client, vec![command], err).map(|_| ()),
        Action::Monitor(m) => monitor::run(&mut client, &m, out),
        Action::Status => status::run(&mut client, &options, out),
        Action::Explain(ask) => explain::run(&mut client, &options, ask, out),
        Action::Flows(ask) => flows::run(&mut client, &options, ask, out),
        Action::Help(_) | Action::Version => Ok(()),
    };
    match result {
        Ok(()) => 0,
        Err(e) => daemon_error(err, &e),
    }
}

fn print_show(
    client: &mut Client,
    options: &Options,
    mut show: Show,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    show.stats = options.stats;
    let style = style(options, &show);
    let shown = client.show(show.clone())?;
    let text = match show.object {
        Some(Object::Qdisc) => format::qdiscs(&shown, style),
        Some(Object::Class) => format::classes(&shown, style),
        Some(Object::Filter) => format::filters(&shown.filters, style),
        None => String::new(),
    };
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

/// Sends `commands` as one atomic batch; reports warnings and dropped packets on `err`.
fn apply(
    client: &mut Client,
    commands: Vec<Command>,
    err: &mut impl Write,
) -> Result<Vec<htb_ipc::CommandResult>, ClientError> {
    let ReplyBody::Applied { results } = client.apply(commands)? else {
        return Err(ClientError::Unexpected);
    };
    for r in &results {
        for w in &r.warnings {
            let _ = writeln!(err, "Warning: htb: {w}");
        }
        if r.dropped_packets > 0 {
            let _ = writeln!(
                err,
                "htb-cli: {} queued packet(s) dropped by this change",
                r.dropped_packets
            );
        }
    }
    Ok(results)
}

/// A batch file, read and parsed.
struct Batch {
    /// Its name (`-` for stdin).
    file: String,
    /// The line of each change.
    lines: Vec<usize>,
    /// Its changes, in order.
    commands: Vec<Command>,
    /// Its shows, in order.
    shows: Vec<Show>,
}

/// Reads and parses `-b FILE`; on failure, says why on `err` and returns the exit status.
fn read_batch(options: &Options, err: &mut impl Write) -> Result<Batch, u8> {
    let file = options.batch.clone().unwrap_or_default();
    let text = if file == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(&file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "Cannot open file \"{file}\" for reading: {e}");
            return Err(EXIT_USAGE);
        }
    };
    let actions = match parse::parse_batch(&text) {
        Ok(a) => a,
        Err((line, e)) => {
            let _ = writeln!(err, "{e}\nCommand failed {file}:{line}");
            return Err(EXIT_USAGE);
        }
    };
    let mut batch = Batch {
        file,
        lines: Vec::new(),
        commands: Vec::new(),
        shows: Vec::new(),
    };
    for (line, action) in actions {
        match action {
            Action::Change(c) => {
                batch.lines.push(line);
                batch.commands.push(c);
            }
            Action::Show(s) => batch.shows.push(s),
            Action::Monitor(_)
            | Action::Status
            | Action::Explain(_)
            | Action::Flows(_)
            | Action::Help(_)
            | Action::Version => {}
        }
    }
    Ok(batch)
}

/// `-b FILE`: every change in one atomic request, then the shows in order.
fn batch(options: &Options, out: &mut impl Write, err: &mut impl Write) -> u8 {
    let Batch {
        file,
        lines,
        commands,
        shows,
    } = match read_batch(options, err) {
        Ok(b) => b,
        Err(status) => return status,
    };
    let mut client = match Client::connect(
        &socket_path(options.socket.as_deref()),
        options.timeout.unwrap_or(DEFAULT_TIMEOUT),
    ) {
        Ok(c) => c,
        Err(e) => return daemon_error(err, &e),
    };
    if !commands.is_empty() {
        match apply(&mut client, commands, err) {
            Ok(_) => {}
            Err(ClientError::Daemon(e)) => {
                let _ = writeln!(err, "Error: {}", e.message);
                if let Some(line) = e.command.and_then(|i| lines.get(i)) {
                    let _ = writeln!(err, "Command failed {file}:{line}");
                }
                let _ = writeln!(err, "htb-cli: the batch was not applied (nothing changed)");
                return EXIT_DAEMON;
            }
            Err(e) => return daemon_error(err, &e),
        }
    }
    for show in shows {
        if let Err(e) = print_show(&mut client, options, show, out) {
            return daemon_error(err, &e);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    /// Several boxes take status, changes and batches; anything else is refused before any
    /// box is asked, and a batch's shows too.
    #[test]
    fn several_boxes_take_only_status_changes_and_batches() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let args: Vec<String> = [
            "--socket",
            "/nonexistent/a",
            "--socket",
            "/nonexistent/b",
            "class",
            "show",
            "dev",
            "eth0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(super::main(&args, &mut out, &mut err), super::EXIT_USAGE);
        let said = String::from_utf8_lossy(&err);
        assert!(said.contains("only status, changes and -batch"), "{said}");
        // Status to boxes that are not there: each is named, and the exit status says so.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args: Vec<String> = [
            "--socket",
            "/nonexistent/a",
            "--socket",
            "/nonexistent/b",
            "status",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(super::main(&args, &mut out, &mut err), super::EXIT_DAEMON);
        let said = String::from_utf8_lossy(&out);
        assert!(
            said.contains("/nonexistent/a: not asked: ")
                && said.contains("/nonexistent/b: not asked: ")
                && said.contains("the boxes differ: 2 not asked"),
            "{said}"
        );
    }
}
