//! `htb-cli import ShapedDevices.csv [--network network.json]`: LibreQoS's subscriber list
//! ([`shaped_devices`], grouped into [`circuits`]) and node hierarchy ([`network`]) made what
//! runs: [`sync`] compares them with htbd's trees and makes the [`batch`] of the differences
//! (typed commands; tc's text only when printed), sent as one atomic request — every change
//! appears in both trees at once, or nothing changes, and whatever did not change is not
//! touched.

pub mod batch;
pub mod circuits;
mod hashing;
pub mod network;
mod running;
pub mod shaped_devices;
pub mod shard;
pub mod sync;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use htb_ipc::{InterfaceName, Object, ReplyBody, Show, Shown};

use crate::client::{Client, ClientError, DEFAULT_TIMEOUT, socket_path};
use batch::{Changes, Origin, PrintError};
use circuits::{CircuitError, Placement};
use network::NetworkError;
use shaped_devices::CsvError;
use sync::Running;

/// What `htb-cli import` was asked to do.
#[derive(Debug, Clone)]
pub struct Import {
    /// The CSV file.
    pub file: PathBuf,
    /// LibreQoS's `network.json`: nodes as classes between `--parent` and the circuits.
    pub network: Option<PathBuf>,
    /// Ports, parent and node classes, prio.
    pub placement: Placement,
    /// The lowest class minor circuits may take.
    pub first_minor: u32,
    /// Print the whole batch, as if nothing ran, without asking htbd.
    pub print: bool,
    /// Ask htbd what runs and print the batch of differences; send nothing.
    pub dry_run: bool,
    /// `--socket`.
    pub socket: Option<String>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// `--shard K/N`: only this box's circuits.
    pub shard: Option<shard::Shard>,
}

/// Why an import did not happen (nothing was changed in every case).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A row or the header is malformed.
    #[error("{}: {error}", file.display())]
    Csv {
        /// The line, column and reason.
        error: CsvError,
        /// The file.
        file: PathBuf,
    },
    /// network.json is malformed.
    #[error("{}: {error}", file.display())]
    Network {
        /// The node and reason.
        error: NetworkError,
        /// The file.
        file: PathBuf,
    },
    /// The rows do not make consistent circuits.
    #[error("{}: {error}", file.display())]
    Circuits {
        /// The lines and reason.
        error: CircuitError,
        /// The file.
        file: PathBuf,
    },
    /// Neither `--download-dev` nor `--upload-dev`.
    #[error("nothing to do: give --download-dev, --upload-dev or both")]
    NoPort,
    /// A node class is not in `--parent`'s qdisc.
    #[error(
        "node {node}'s class {class} is not in qdisc {major:x}: (--parent's); one tree holds the circuits"
    )]
    OtherQdisc {
        /// The node.
        node: String,
        /// Its class.
        class: String,
        /// `--parent`'s major.
        major: u16,
    },
    /// A parent or node class is not in a tree.
    #[error("class {class} ({role}) does not exist on {dev}: create it before importing")]
    MissingClass {
        /// The port.
        dev: String,
        /// The class.
        class: String,
        /// `--parent` or the node's name.
        role: String,
    },
    /// A generated command has no tc words to print it with (a port name holding both kinds
    /// of quote, say).
    #[error("{}: {origin}: the generated command {command} cannot be printed: {message}", file.display())]
    Generated {
        /// The file.
        file: PathBuf,
        /// What it came from.
        origin: Origin,
        /// The command, as Rust writes it (tc's words are what failed).
        command: String,
        /// The writer's complaint.
        message: String,
    },
    /// htbd refused a command of the batch.
    #[error("{}: {origin}: htbd refused \"{command}\": {message} (nothing was imported)", file.display())]
    Refused {
        /// The file.
        file: PathBuf,
        /// What the refused command came from.
        origin: Origin,
        /// The tc command.
        command: String,
        /// htbd's reason.
        message: String,
    },
    /// htbd could not be asked.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Circuits (one class per port each).
    pub circuits: usize,
    /// Filters added over all ports.
    pub filters: usize,
    /// First and last class id given.
    pub classes: Option<(String, String)>,
    /// Node names not mapped by `--node` nor in network.json, whose circuits went under
    /// `--parent`.
    pub unmapped_nodes: BTreeSet<String>,
    /// What the batch changes.
    pub changes: Changes,
    /// How long htbd took to apply it (from the request to the answer).
    pub applied_in: Option<Duration>,
}

/// Runs the import: asks htbd what runs and sends the batch of differences; with `dry_run`
/// writes that batch to `out` instead, with `print` the whole batch without asking htbd.
///
/// # Errors
/// [`ImportError`]; nothing was changed.
pub fn run(import: &Import, out: &mut impl Write) -> Result<Summary, ImportError> {
    let placement = &import.placement;
    if placement.download_dev.is_none() && placement.upload_dev.is_none() {
        return Err(ImportError::NoPort);
    }
    let major = placement.parent.major();
    if let Some((node, class)) = placement.nodes.iter().find(|(_, c)| c.major() != major) {
        return Err(ImportError::OtherQdisc {
            node: node.clone(),
            class: class.to_string(),
            major,
        });
    }
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| ImportError::Read {
            path: path.clone(),
            source,
        })
    };
    let file = &import.file;
    let devices = shaped_devices::read(&read(file)?).map_err(|e| ImportError::Csv {
        error: e,
        file: file.clone(),
    })?;
    let nodes = match &import.network {
        None => None,
        Some(path) => Some(
            network::read(&read(path)?).map_err(|e| ImportError::Network {
                error: e,
                file: path.clone(),
            })?,
        ),
    };
    let mut circuits = circuits::group(devices).map_err(|e| ImportError::Circuits {
        error: e,
        file: file.clone(),
    })?;
    if let Some(shard) = import.shard {
        circuits.retain(|c| shard.contains(&c.id));
    }
    let known: BTreeSet<&str> = nodes
        .as_deref()
        .map(network::flatten)
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n.name.as_str())
        .collect();
    let unmapped_nodes = circuits
        .iter()
        .filter(|c| {
            !c.node.is_empty()
                && !placement.nodes.contains_key(&c.node)
                && !known.contains(c.node.as_str())
        })
        .map(|c| c.node.clone())
        .collect();
    let mut client = None;
    let mut running = BTreeMap::new();
    if !import.print {
        let mut c = Client::connect(
            &socket_path(import.socket.as_deref()),
            import.timeout.unwrap_or(DEFAULT_TIMEOUT),
        )?;
        running = running_trees(&mut c, placement)?;
        client = Some(c);
    }
    // Comments only for a printed batch.
    let make = if client.is_some() && !import.dry_run {
        sync::batch_to_send
    } else {
        sync::batch
    };
    let batch = make(
        &circuits,
        nodes.as_deref(),
        placement,
        &running,
        import.first_minor,
    )
    .map_err(|e| ImportError::Circuits {
        error: e,
        file: file.clone(),
    })?;
    let summary = Summary {
        circuits: circuits.len(),
        filters: batch
            .commands
            .iter()
            .filter(|c| matches!(c, htb_ipc::Command::FilterAdd(_)))
            .count(),
        classes: batch
            .circuit_ids
            .iter()
            .min()
            .zip(batch.circuit_ids.iter().max())
            .map(|(a, b)| (a.to_string(), b.to_string())),
        unmapped_nodes,
        changes: batch.changes,
        applied_in: None,
    };
    let origin_of = |index: usize| batch.origin.get(index).cloned().unwrap_or(Origin::Running);
    let mut client = match client {
        Some(c) if !import.dry_run => c,
        _ => {
            // Printed through a buffer: a million circuits are four million lines.
            let mut buffered = std::io::BufWriter::new(out);
            let printed = batch
                .print(&mut buffered)
                .and_then(|()| Ok(buffered.flush()?));
            return match printed {
                Ok(()) => Ok(summary),
                // The output's own error (a closed pipe, `| head`) is not the import's, as
                // before the batch was typed.
                Err(PrintError::Io(_)) => Ok(summary),
                Err(PrintError::Words { index, source }) => Err(ImportError::Generated {
                    file: file.clone(),
                    origin: origin_of(index),
                    command: batch
                        .commands
                        .get(index)
                        .map(|c| format!("{c:?}"))
                        .unwrap_or_default(),
                    message: source.to_string(),
                }),
            };
        }
    };
    if batch.is_empty() {
        return Ok(summary);
    }
    let started = std::time::Instant::now();
    // Sent as they are: htbd takes the typed commands. No copy is kept for the error's words
    // (a million circuits' commands are hundreds of MB): a refused command is made again, as
    // the same files over the same trees make it, and written as tc's words then.
    let sent = client.apply(batch.commands);
    match sent {
        Ok(ReplyBody::Applied { .. }) => Ok(Summary {
            applied_in: Some(started.elapsed()),
            ..summary
        }),
        Ok(_) => Err(ClientError::Unexpected.into()),
        Err(ClientError::Daemon(e)) => {
            let index = e.command.unwrap_or(0);
            let again = sync::batch_to_send(
                &circuits,
                nodes.as_deref(),
                placement,
                &running,
                import.first_minor,
            );
            let command = again
                .ok()
                .and_then(|b| b.commands.into_iter().nth(index))
                .map_or_else(String::new, |c| {
                    htb_tc::write::command_line(&c).unwrap_or_else(|_| format!("{c:?}"))
                });
            Err(ImportError::Refused {
                file: file.clone(),
                origin: batch.origin.get(index).cloned().unwrap_or(Origin::Running),
                command,
                message: e.message,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// One `show` request's answer.
fn shown(client: &mut Client, object: Object, dev: &InterfaceName) -> Result<Shown, ImportError> {
    Ok(client.show(Show {
        object: Some(object),
        dev: Some(dev.clone()),
        ..Show::default()
    })?)
}

/// What runs on each port: its classes, filters and leaf qdiscs; also checks that the parent
/// and node classes exist on each.
fn running_trees(
    client: &mut Client,
    placement: &Placement,
) -> Result<BTreeMap<InterfaceName, Running>, ImportError> {
    let mut all = BTreeMap::new();
    for (dev, _) in placement.devs() {
        let classes = shown(client, Object::Class, dev)?.classes;
        let ids: BTreeSet<htb_core::ClassId> = classes.iter().map(|c| c.id).collect();
        let wanted = std::iter::once(("--parent".to_owned(), placement.parent)).chain(
            placement
                .nodes
                .iter()
                .map(|(name, id)| (format!("node {name}"), *id)),
        );
        for (role, class) in wanted {
            if !ids.contains(&class) {
                return Err(ImportError::MissingClass {
                    dev: dev.to_string(),
                    class: class.to_string(),
                    role,
                });
            }
        }
        let running = Running::new(
            classes,
            shown(client, Object::Filter, dev)?.filters,
            shown(client, Object::Qdisc, dev)?.leaf_qdiscs,
        );
        all.insert(dev.to_owned(), running);
    }
    Ok(all)
}
