//! Reading what a previous run left in `state_dir`: the snapshot's header facts and the
//! journal's batches, without changing anything (`htbd --check` reads through here too).

use std::fs;
use std::io;
use std::path::Path;

use htb_ipc::Command;
use serde::{Deserialize, Serialize};

use super::{JOURNAL, META_PREFIX, SNAPSHOT, StoreError, io_error};

/// One journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JournalLine {
    pub(super) seq: u64,
    #[serde(deserialize_with = "htb_ipc::deserialize_commands")]
    pub(super) commands: Vec<Command>,
}

/// The snapshot's machine-read facts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The last journal batch the snapshot contains (0: none yet).
    pub last_seq: u64,
    /// Hash of the config file's trees the state started from ([`trees_hash`]); `None` in a
    /// snapshot from before it was recorded.
    pub config_hash: Option<String>,
}

impl SnapshotMeta {
    pub(super) fn line(&self) -> String {
        let mut line = format!("{META_PREFIX} last-batch={}", self.last_seq);
        if let Some(hash) = &self.config_hash {
            line.push_str(&format!(" config-trees={hash}"));
        }
        line
    }

    fn parse(text: &str) -> Self {
        let mut meta = Self::default();
        let Some(line) = text.lines().find_map(|l| l.strip_prefix(META_PREFIX)) else {
            return meta;
        };
        for field in line.split_whitespace() {
            match field.split_once('=') {
                Some(("last-batch", n)) => meta.last_seq = n.parse().unwrap_or(0),
                Some(("config-trees", h)) => meta.config_hash = Some(h.to_owned()),
                _ => {}
            }
        }
        meta
    }
}

/// A stable hash (FNV-1a, 64 bits, hex) of the config file's trees in their canonical form, so
/// that a changed comment or log level does not count as a changed config.
#[must_use]
pub fn trees_hash(canonical: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// What a previous run left.
#[derive(Debug, Default)]
pub struct Saved {
    /// The snapshot's text, if there is one.
    pub snapshot: Option<String>,
    /// The snapshot's first line, which records when and from what it was written.
    pub header: Option<String>,
    /// The snapshot's machine-read facts.
    pub meta: SnapshotMeta,
    /// Journal batches after the snapshot, in order, with their sequence numbers.
    pub journal: Vec<(u64, Vec<Command>)>,
    /// Journal batches skipped because the snapshot already contains them.
    pub already_in_snapshot: usize,
    /// A torn last line (from a crash mid-write) was found: its 1-based line number.
    pub torn_line: Option<usize>,
}

impl Saved {
    /// Reads what is saved in `dir`, changing nothing (`htbd --check`, and [`Store::open`](crate::persist::Store::open)).
    /// Returns the saved state and the journal's complete length in bytes.
    ///
    /// # Errors
    /// A file cannot be read, or the journal is damaged before its last line.
    pub fn read(dir: &Path) -> Result<(Self, u64), StoreError> {
        let snapshot_path = dir.join(SNAPSHOT);
        let snapshot = match fs::read_to_string(&snapshot_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("read", &snapshot_path)(e)),
        };
        let header = snapshot
            .as_deref()
            .and_then(|s| s.lines().next())
            .filter(|l| l.starts_with('#') && !l.starts_with(META_PREFIX))
            .map(|l| l.trim_start_matches('#').trim().to_owned());
        let meta = snapshot
            .as_deref()
            .map(SnapshotMeta::parse)
            .unwrap_or_default();
        let journal_path = dir.join(JOURNAL);
        let bytes = match fs::read(&journal_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error("read", &journal_path)(e)),
        };
        let mut saved = Self {
            snapshot,
            header,
            meta,
            ..Self::default()
        };
        let journal = parse_journal(&bytes, saved.meta.last_seq).map_err(|(line, reason)| {
            StoreError::Damaged {
                path: journal_path.clone(),
                line,
                reason,
            }
        })?;
        saved.journal = journal.batches;
        saved.already_in_snapshot = journal.already_in_snapshot;
        saved.torn_line = journal.torn_line;
        let complete = journal.complete;
        Ok((saved, complete))
    }

    /// The sequence number the next batch gets.
    pub(super) fn next_seq(&self) -> u64 {
        let last = self.journal.last().map_or(0, |(seq, _)| *seq);
        last.max(self.meta.last_seq) + 1
    }
}

/// A journal's content, read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Journal {
    /// Batches after the snapshot, with their sequence numbers.
    pub batches: Vec<(u64, Vec<Command>)>,
    /// Batches the snapshot already contains.
    pub already_in_snapshot: usize,
    /// The 1-based line number of a torn last line.
    pub torn_line: Option<usize>,
    /// Bytes up to the end of the last complete line.
    pub complete: u64,
}

/// Reads journal `bytes` whose snapshot holds batches up to `snapshot_last_seq`.
///
/// # Errors
/// `(line, reason)` for a damaged or out-of-order line before the last.
pub fn parse_journal(bytes: &[u8], snapshot_last_seq: u64) -> Result<Journal, (usize, String)> {
    let mut journal = Journal::default();
    // Everything after the last newline is a write that never completed.
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut last_seq = 0;
    for (n, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let entry: JournalLine =
            serde_json::from_slice(line).map_err(|e| (n + 1, e.to_string()))?;
        if entry.seq <= last_seq {
            return Err((
                n + 1,
                format!("batch {} follows batch {last_seq}: out of order", entry.seq),
            ));
        }
        last_seq = entry.seq;
        if entry.seq <= snapshot_last_seq {
            journal.already_in_snapshot += 1;
        } else {
            journal.batches.push((entry.seq, entry.commands));
        }
    }
    if complete < bytes.len() {
        journal.torn_line = Some(bytes[..complete].iter().filter(|&&b| b == b'\n').count() + 1);
    }
    journal.complete = complete as u64;
    Ok(journal)
}
