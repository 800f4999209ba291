//! Several boxes at once (`--socket` given more than once): `status` asks each and compares the
//! generations of the state they run; a change or a batch goes to each box in turn, atomically
//! on each (not across them: a box that refuses keeps its state while the others apply), and
//! every box's outcome is reported by its socket. Exit status 2 when a box could not be asked,
//! refused, or (for `status`) runs another generation than the first.

use std::collections::BTreeMap;
use std::io::Write;

use htb_ipc::{Command, Generation, ReplyBody, RequestBody};

use super::parse::Action;
use super::parse::Options;
use super::{Batch, EXIT_DAEMON, EXIT_USAGE};
use crate::client::{Client, ClientError, DEFAULT_TIMEOUT};

/// Every socket named, in order.
fn sockets(options: &Options) -> Vec<String> {
    options
        .socket
        .iter()
        .chain(&options.more_sockets)
        .cloned()
        .collect()
}

fn connect(options: &Options, socket: &str) -> Result<Client, ClientError> {
    Client::connect(
        std::path::Path::new(socket),
        options.timeout.unwrap_or(DEFAULT_TIMEOUT),
    )
}

/// A box's answer to `status`: its generation, or why it gave none.
fn generation_of(options: &Options, socket: &str) -> Result<Generation, String> {
    let mut client = connect(options, socket).map_err(|e| e.to_string())?;
    match client.call(RequestBody::Status {}) {
        Ok(ReplyBody::Status(status)) => status
            .generation
            .ok_or_else(|| "this htbd reports no generation (an older version)".into()),
        Ok(_) => Err(ClientError::Unexpected.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `action` (or the batch) on every box; returns the exit status.
pub(super) fn run(
    options: &Options,
    action: Option<Action>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    match action {
        Some(Action::Status) => status(options, out),
        Some(Action::Change(command)) => apply(options, &[command], None, err),
        None => match super::read_batch(options, err) {
            Ok(batch) if !batch.shows.is_empty() => {
                let _ = writeln!(
                    err,
                    "htb-cli: a batch for several boxes holds changes only (its shows would \
                     print once per box): nothing was sent"
                );
                EXIT_USAGE
            }
            Ok(batch) => apply(options, &batch.commands, Some(&batch), err),
            Err(status) => status,
        },
        Some(_) => {
            let _ = writeln!(
                err,
                "htb-cli: --socket given {} times: only status, changes and -batch go to several \
                 boxes",
                1 + options.more_sockets.len()
            );
            EXIT_USAGE
        }
    }
}

/// `status` on every box: each one's generation, then whether they agree.
fn status(options: &Options, out: &mut impl Write) -> u8 {
    let answers: Vec<(String, Result<Generation, String>)> = sockets(options)
        .into_iter()
        .map(|s| {
            let g = generation_of(options, &s);
            (s, g)
        })
        .collect();
    let mut by_generation: BTreeMap<Generation, Vec<&str>> = BTreeMap::new();
    for (socket, answer) in &answers {
        if let Ok(g) = answer {
            by_generation.entry(*g).or_default().push(socket);
        }
    }
    let unreachable = answers.iter().filter(|(_, a)| a.is_err()).count();
    let agree = unreachable == 0 && by_generation.len() == 1;
    if options.json {
        let boxes: Vec<serde_json::Value> = answers
            .iter()
            .map(|(socket, answer)| match answer {
                Ok(g) => serde_json::json!({ "socket": socket, "generation": g }),
                Err(e) => serde_json::json!({ "socket": socket, "error": e }),
            })
            .collect();
        let text = serde_json::json!({ "boxes": boxes, "agree": agree });
        let _ = writeln!(out, "{text}");
    } else {
        for (socket, answer) in &answers {
            let _ = match answer {
                Ok(g) => writeln!(out, "{socket}: generation {g}"),
                Err(e) => writeln!(out, "{socket}: not asked: {e}"),
            };
        }
        if agree {
            let g = by_generation
                .keys()
                .next()
                .copied()
                .unwrap_or(Generation(0));
            let _ = writeln!(out, "all {} boxes run generation {g}", answers.len());
        } else {
            let mut parts: Vec<String> = by_generation
                .iter()
                .map(|(g, s)| format!("{g} on {}", s.join(", ")))
                .collect();
            if unreachable > 0 {
                parts.push(format!("{unreachable} not asked"));
            }
            let _ = writeln!(out, "the boxes differ: {}", parts.join("; "));
        }
    }
    if agree { 0 } else { EXIT_DAEMON }
}

/// A batch of `commands` to every box in turn; `batch` names the file's lines for refusals.
fn apply(
    options: &Options,
    commands: &[Command],
    batch: Option<&Batch>,
    err: &mut impl Write,
) -> u8 {
    let mut failed = Vec::new();
    for socket in sockets(options) {
        let outcome = connect(options, &socket)
            .and_then(|mut client| super::apply(&mut client, commands.to_vec(), err));
        match outcome {
            Ok(results) => {
                let dropped: u64 = results.iter().map(|r| r.dropped_packets).sum();
                let _ = writeln!(
                    err,
                    "htb-cli: {socket}: applied {} command(s){}",
                    commands.len(),
                    if dropped > 0 {
                        format!(", {dropped} queued packet(s) dropped")
                    } else {
                        String::new()
                    }
                );
            }
            Err(ClientError::Daemon(e)) => {
                let at = batch
                    .and_then(|b| e.command.and_then(|i| b.lines.get(i)).map(|l| (b, l)))
                    .map_or(String::new(), |(b, line)| format!(" ({}:{line})", b.file));
                let _ = writeln!(
                    err,
                    "htb-cli: {socket}: refused{at}: {} (nothing changed there)",
                    e.message
                );
                failed.push(socket);
            }
            Err(e) => {
                let _ = writeln!(err, "htb-cli: {socket}: not asked: {e}");
                failed.push(socket);
            }
        }
    }
    if failed.is_empty() {
        0
    } else {
        let _ = writeln!(
            err,
            "htb-cli: {} of {} boxes did not apply it: {}",
            failed.len(),
            1 + options.more_sockets.len(),
            failed.join(", ")
        );
        EXIT_DAEMON
    }
}
