//! The import's batch: the typed commands htbd is sent, each with where it comes from (for
//! errors), and the `# …` comments that only the printed batch carries (`--print`,
//! `--dry-run`), written as tc's lines by htb-tc's one writer ([`htb_tc::write`]).

use std::io::Write;

use htb_core::ClassId;
use htb_ipc::{Command, InterfaceName};
use htb_tc::write::{WriteError, command_line};

/// Where a command of the batch comes from, for errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A line of the CSV file.
    Csv(u64),
    /// A node of network.json.
    Node(String),
    /// What runs: a class or filter the files no longer have.
    Running,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Csv(line) => write!(f, "line {line}"),
            Self::Node(name) => write!(f, "network.json node \"{name}\""),
            Self::Running => f.write_str("the running trees"),
        }
    }
}

/// What the batch does, for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Classes added (circuits and nodes, per port).
    pub added: usize,
    /// Classes changed in place.
    pub changed: usize,
    /// Classes deleted.
    pub deleted: usize,
    /// Filters added.
    pub filters_added: usize,
    /// Filters deleted.
    pub filters_deleted: usize,
    /// Leaf qdiscs added, replaced or deleted.
    pub leaves: usize,
    /// Labels set or taken away.
    pub labels: usize,
}

/// The batch: commands in the order htbd applies them and, per command, where it comes from.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The commands.
    pub commands: Vec<Command>,
    /// Per command of `commands`.
    pub origin: Vec<Origin>,
    /// `# …` lines of the printed batch, each before the command at its index (the text
    /// without the `#`).
    pub comments: Vec<(usize, String)>,
    /// The counts.
    pub changes: Changes,
    /// Per circuit (file order), its class id.
    pub circuit_ids: Vec<ClassId>,
}

/// Why the batch could not be printed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrintError {
    /// A command tc's grammar has no words for (a port name holding both kinds of quote).
    #[error("command {index}: {source}")]
    Words {
        /// Its index in [`Batch::commands`].
        index: usize,
        /// The writer's reason.
        #[source]
        source: WriteError,
    },
    /// The output could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Batch {
    /// An empty batch with room for `commands` commands.
    pub(super) fn with_capacity(commands: usize) -> Self {
        Self {
            commands: Vec::with_capacity(commands),
            origin: Vec::with_capacity(commands),
            ..Self::default()
        }
    }

    /// Adds `command`, from `origin`.
    pub(super) fn push(&mut self, origin: Origin, command: Command) {
        self.commands.push(command);
        self.origin.push(origin);
    }

    /// A `# text` line before the next command.
    pub(super) fn comment(&mut self, text: String) {
        self.comments.push((self.commands.len(), text));
    }

    /// Whether it changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The batch as a tc batch file (`tc -batch`, `htb-cli -batch`): one command a line, as
    /// htb-tc writes it, the comments before theirs.
    ///
    /// # Errors
    /// [`PrintError`]: what has no words, or the output's error; what came before it is
    /// written.
    pub fn print(&self, out: &mut impl Write) -> Result<(), PrintError> {
        let mut comments = self.comments.iter().peekable();
        for (index, command) in self.commands.iter().enumerate() {
            while let Some((_, text)) = comments.next_if(|(at, _)| *at <= index) {
                writeln!(out, "# {text}")?;
            }
            let line =
                command_line(command).map_err(|source| PrintError::Words { index, source })?;
            writeln!(out, "{line}")?;
        }
        for (_, text) in comments {
            writeln!(out, "# {text}")?;
        }
        Ok(())
    }
}

/// A port's name as a command's `dev`: the one place the import makes one.
pub(super) fn dev(port: &InterfaceName) -> InterfaceName {
    port.clone()
}
