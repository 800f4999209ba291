//! `htb-cli import ShapedDevices.csv`: LibreQoS's subscriber list ([`shaped_devices`]) turned
//! into circuits and one tc batch ([`circuits`]), sent to htbd as one atomic request: every
//! circuit appears in both trees at once, or nothing changes.

pub mod circuits;
pub mod shaped_devices;
pub mod shard;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use htb_ipc::{Object, ReplyBody, RequestBody, Show};

use crate::client::{Client, ClientError, DEFAULT_TIMEOUT, socket_path};
use crate::tc::parse::{Action, parse_batch};
use circuits::{CircuitError, Placement};
use shaped_devices::CsvError;

/// What `htb-cli import` was asked to do.
#[derive(Debug, Clone)]
pub struct Import {
    /// The CSV file.
    pub file: PathBuf,
    /// Ports, parent and node classes, prio.
    pub placement: Placement,
    /// The lowest class minor circuits may take.
    pub first_minor: u32,
    /// Print the batch instead of sending it.
    pub print: bool,
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
    /// A generated line did not parse (a port name tc's grammar cannot carry, say).
    #[error("{}: line {csv_line}: the generated command \"{command}\" is not valid: {message}", file.display())]
    Generated {
        /// The file.
        file: PathBuf,
        /// The CSV line it came from.
        csv_line: u64,
        /// The tc command.
        command: String,
        /// The parser's complaint.
        message: String,
    },
    /// htbd refused a command of the batch.
    #[error("{}: line {csv_line}: htbd refused \"{command}\": {message} (nothing was imported)", file.display())]
    Refused {
        /// The file.
        file: PathBuf,
        /// The CSV line the refused command came from.
        csv_line: u64,
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
    /// Node names not mapped by `--node`, whose circuits went under `--parent`.
    pub unmapped_nodes: BTreeSet<String>,
}

/// Runs the import; with `print`, writes the batch to `out` and sends nothing.
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
    let file = &import.file;
    let text = std::fs::read_to_string(file).map_err(|source| ImportError::Read {
        path: file.clone(),
        source,
    })?;
    let devices = shaped_devices::read(&text).map_err(|e| ImportError::Csv {
        error: e,
        file: file.clone(),
    })?;
    let mut circuits = circuits::group(devices).map_err(|e| ImportError::Circuits {
        error: e,
        file: file.clone(),
    })?;
    if let Some(shard) = import.shard {
        circuits.retain(|c| shard.contains(&c.id));
    }
    let unmapped_nodes = circuits
        .iter()
        .filter(|c| !c.node.is_empty() && !placement.nodes.contains_key(&c.node))
        .map(|c| c.node.clone())
        .collect();
    let mut client = None;
    let mut used = BTreeSet::new();
    if !import.print {
        let mut c = Client::connect(
            &socket_path(import.socket.as_deref()),
            import.timeout.unwrap_or(DEFAULT_TIMEOUT),
        )?;
        used = used_minors(&mut c, placement)?;
        client = Some(c);
    }
    let ids =
        circuits::allocate(circuits.len(), major, import.first_minor, &used).map_err(|e| {
            ImportError::Circuits {
                error: e,
                file: file.clone(),
            }
        })?;
    let (batch, origin) = circuits::batch(&circuits, &ids, placement);
    let actions = parse_batch(&batch).map_err(|(line, e)| ImportError::Generated {
        file: file.clone(),
        csv_line: origin[line - 1],
        command: batch.lines().nth(line - 1).unwrap_or_default().to_owned(),
        message: e.to_string(),
    })?;
    let summary = Summary {
        circuits: circuits.len(),
        filters: actions
            .iter()
            .filter(|(_, a)| matches!(a, Action::Change(htb_ipc::Command::FilterAdd(_))))
            .count(),
        classes: ids
            .first()
            .zip(ids.last())
            .map(|(a, b)| (a.to_string(), b.to_string())),
        unmapped_nodes,
    };
    let Some(mut client) = client else {
        let _ = out.write_all(batch.as_bytes());
        return Ok(summary);
    };
    let (lines, commands): (Vec<usize>, Vec<_>) = actions
        .into_iter()
        .filter_map(|(line, action)| match action {
            Action::Change(c) => Some((line, c)),
            _ => None,
        })
        .unzip();
    match client.call(RequestBody::Apply { commands }) {
        Ok(ReplyBody::Applied { .. }) => Ok(summary),
        Ok(_) => Err(ClientError::Unexpected.into()),
        Err(ClientError::Daemon(e)) => {
            let line = e.command.and_then(|i| lines.get(i)).copied().unwrap_or(1);
            Err(ImportError::Refused {
                file: file.clone(),
                csv_line: origin[line - 1],
                command: batch.lines().nth(line - 1).unwrap_or_default().to_owned(),
                message: e.message,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The minors of `parent`'s qdisc in use on any of the ports; also checks that the parent and
/// node classes exist on each.
fn used_minors(client: &mut Client, placement: &Placement) -> Result<BTreeSet<u32>, ImportError> {
    let major = placement.parent.major();
    let mut used = BTreeSet::new();
    for (dev, _) in placement.devs() {
        let ReplyBody::Shown(shown) = client.call(RequestBody::Show(Show {
            object: Some(Object::Class),
            dev: Some(dev.to_owned()),
            ..Show::default()
        }))?
        else {
            return Err(ClientError::Unexpected.into());
        };
        let ids: BTreeSet<htb_core::ClassId> = shown
            .classes
            .iter()
            .filter_map(|c| c.id.parse().ok())
            .collect();
        let wanted = std::iter::once(("--parent".to_owned(), placement.parent)).chain(
            placement
                .nodes
                .iter()
                .map(|(name, id)| (format!("node {name}"), *id)),
        );
        for (role, class) in wanted {
            if !ids.contains(&class) {
                return Err(ImportError::MissingClass {
                    dev: dev.to_owned(),
                    class: class.to_string(),
                    role,
                });
            }
        }
        used.extend(
            ids.iter()
                .filter(|id| id.major() == major)
                .map(|id| id.minor()),
        );
    }
    Ok(used)
}
