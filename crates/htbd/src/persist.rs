//! Live changes survive restarts: `state_dir` holds a snapshot and a journal.
//!
//! - `state.toml` — every port's tree and filters, in the config file's format (readable, and
//!   editable while htbd is stopped). Written to a temporary file, synced, then renamed over
//!   the old one, so it is always complete.
//! - `journal.jsonl` — one line per accepted batch of commands since the snapshot, appended and
//!   `fdatasync`ed before the batch is applied, so an acknowledged change is never lost (a
//!   torn last line, from a crash mid-write, is ignored at load: that batch was never
//!   acknowledged).
//!
//! At start the snapshot is loaded and the journal replayed, then both are compacted into a
//! new snapshot. The journal is compacted again once it holds [`COMPACT_AFTER`] batches.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use htb_ipc::Command;

/// Batches in the journal that trigger a new snapshot.
pub const COMPACT_AFTER: usize = 10_000;

const SNAPSHOT: &str = "state.toml";
const JOURNAL: &str = "journal.jsonl";

/// What a previous run left.
#[derive(Debug)]
pub struct Saved {
    /// The snapshot's text, if there is one.
    pub snapshot: Option<String>,
    /// Journal batches after it, in order.
    pub journal: Vec<Vec<Command>>,
    /// Lines that could not be read (a torn last write, or damage), with their line number.
    pub skipped: Vec<(usize, String)>,
    /// The snapshot's first line, which records when and from what it was written.
    pub header: Option<String>,
}

/// The state directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    journal: File,
    batches: usize,
}

fn io_context(what: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

impl Store {
    /// Opens (creating) `dir` and reads what is saved there.
    ///
    /// # Errors
    /// The directory cannot be created or read.
    pub fn open(dir: &Path) -> io::Result<(Self, Saved)> {
        fs::create_dir_all(dir).map_err(|e| io_context("cannot create", dir, e))?;
        let snapshot_path = dir.join(SNAPSHOT);
        let snapshot = match fs::read_to_string(&snapshot_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_context("cannot read", &snapshot_path, e)),
        };
        let header = snapshot
            .as_deref()
            .and_then(|s| s.lines().next())
            .filter(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim().to_owned());
        let journal_path = dir.join(JOURNAL);
        let mut journal = Vec::new();
        let mut skipped = Vec::new();
        let bytes = match fs::read(&journal_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_context("cannot read", &journal_path, e)),
        };
        // Everything after the last newline is a write that never completed.
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for (n, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Vec<Command>>(line) {
                Ok(batch) => journal.push(batch),
                Err(e) => skipped.push((n + 1, e.to_string())),
            }
        }
        if complete < bytes.len() {
            let line = bytes[..complete].iter().filter(|&&b| b == b'\n').count() + 1;
            skipped.push((line, "incomplete write (cut off by a crash)".into()));
            let f = OpenOptions::new()
                .write(true)
                .open(&journal_path)
                .map_err(|e| io_context("cannot open", &journal_path, e))?;
            f.set_len(complete as u64)?;
            f.sync_all()?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal_path)
            .map_err(|e| io_context("cannot open", &journal_path, e))?;
        let batches = journal.len();
        Ok((
            Self {
                dir: dir.to_owned(),
                journal: file,
                batches,
            },
            Saved {
                snapshot,
                journal,
                skipped,
                header,
            },
        ))
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one accepted batch and waits until it is on disk.
    ///
    /// # Errors
    /// The write or sync failed; the batch must not be applied.
    pub fn append(&mut self, batch: &[Command]) -> io::Result<()> {
        let mut line = serde_json::to_vec(batch).map_err(io::Error::other)?;
        line.push(b'\n');
        self.journal.write_all(&line)?;
        self.journal.sync_data()?;
        self.batches += 1;
        Ok(())
    }

    /// Whether the journal is long enough to be folded into a snapshot.
    #[must_use]
    pub fn wants_compaction(&self) -> bool {
        self.batches >= COMPACT_AFTER
    }

    /// Replaces the snapshot with `state` (which must include every journaled batch) and
    /// empties the journal.
    ///
    /// # Errors
    /// Writing failed; the previous snapshot and journal are intact.
    pub fn compact(&mut self, header: &str, state: &str) -> io::Result<()> {
        let tmp = self.dir.join(format!("{SNAPSHOT}.tmp"));
        {
            let mut f = File::create(&tmp).map_err(|e| io_context("cannot write", &tmp, e))?;
            writeln!(f, "# {header}")?;
            writeln!(
                f,
                "# htbd's live state: the trees below replace the config file's while this file exists.\n\
                 # Stop htbd before editing it; remove it (or start htbd with --fresh-state) to go back to\n\
                 # the config file.\n"
            )?;
            f.write_all(state.as_bytes())?;
            f.sync_all()?;
        }
        let path = self.dir.join(SNAPSHOT);
        fs::rename(&tmp, &path).map_err(|e| io_context("cannot replace", &path, e))?;
        File::open(&self.dir)?.sync_all()?;
        self.journal.set_len(0)?;
        self.journal.sync_all()?;
        self.batches = 0;
        Ok(())
    }

    /// Moves the saved state aside (`--fresh-state`), returning where it went.
    ///
    /// # Errors
    /// The rename failed.
    pub fn set_aside(dir: &Path) -> io::Result<Option<PathBuf>> {
        let path = dir.join(SNAPSHOT);
        let journal = dir.join(JOURNAL);
        if !path.exists() && !journal.exists() {
            return Ok(None);
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = dir.join(format!("set-aside-{stamp}"));
        fs::create_dir_all(&aside)?;
        for p in [path, journal] {
            if p.exists()
                && let Some(name) = p.file_name()
            {
                fs::rename(&p, aside.join(name))?;
            }
        }
        Ok(Some(aside))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_ipc::Command;

    fn batch(id: &str) -> Vec<Command> {
        vec![Command::ClassDelete {
            dev: "r2".into(),
            id: id.into(),
        }]
    }

    #[test]
    fn journal_survives_reopen_and_a_torn_tail_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, saved) = Store::open(dir.path()).unwrap();
        assert!(saved.snapshot.is_none() && saved.journal.is_empty());
        store.append(&batch("1:10")).unwrap();
        store.append(&batch("1:20")).unwrap();
        drop(store);
        // A crash in the middle of a third write.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"[{\"op\":\"class_del").unwrap();
        drop(f);
        let (mut store, saved) = Store::open(dir.path()).unwrap();
        assert_eq!(saved.journal, vec![batch("1:10"), batch("1:20")]);
        assert_eq!(saved.skipped.len(), 1);
        assert_eq!(saved.skipped[0].0, 3);
        // The torn bytes were cut off: the next batch lands on a line of its own.
        store.append(&batch("1:30")).unwrap();
        let (mut store, saved) = Store::open(dir.path()).unwrap();
        assert_eq!(saved.journal.len(), 3);
        assert!(saved.skipped.is_empty());

        store
            .compact("written by a test", "[[interface]]\nname = \"r2\"\n")
            .unwrap();
        let (_, saved) = Store::open(dir.path()).unwrap();
        assert!(saved.journal.is_empty() && saved.skipped.is_empty());
        assert_eq!(saved.header.as_deref(), Some("written by a test"));
        let text = saved.snapshot.unwrap();
        assert!(text.ends_with("[[interface]]\nname = \"r2\"\n"), "{text}");
        assert!(crate::config::parse_state(&text).is_ok());

        let aside = Store::set_aside(dir.path()).unwrap().unwrap();
        assert!(aside.join(SNAPSHOT).exists());
        let (_, saved) = Store::open(dir.path()).unwrap();
        assert!(saved.snapshot.is_none());
    }
}
