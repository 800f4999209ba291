//! Live changes survive restarts: `state_dir` holds a snapshot and a journal.
//!
//! - `state.toml` — every port's tree and filters, in the config file's format (readable, and
//!   editable while htbd is stopped), under a header line that records the last journal batch
//!   it contains and a hash of the config file's trees it started from. Written to a temporary
//!   file, synced, then renamed over the old one, so it is always complete.
//! - `journal.jsonl` — one line per accepted batch since the snapshot, `{"seq":N,"commands":
//!   […]}`, appended and `fdatasync`ed before the batch is applied, so an acknowledged change is
//!   never lost. A write or sync that fails is cut back off the file and the batch refused.
//! - `lock` — held (`flock`) while htbd runs: a second htbd on the same `state_dir` is refused.
//!
//! Loading is strict where guessing would lose or invent changes: a torn last line (a crash
//! mid-write: that batch was never acknowledged) is cut off, but a damaged line anywhere else
//! stops the start with its line number. Batches the snapshot already contains (a crash between
//! the snapshot's rename and the journal's truncation) are recognised by their sequence number
//! and not replayed twice. At start the journal is folded into a new snapshot; it is folded
//! again once it holds [`COMPACT_AFTER`] batches.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use htb_ipc::{Command, RawCommands};

mod saved;

pub use self::saved::{Journal, Saved, SnapshotMeta, parse_journal, trees_hash};

/// Batches in the journal that trigger a new snapshot.
pub const COMPACT_AFTER: usize = 10_000;

const SNAPSHOT: &str = "state.toml";
const JOURNAL: &str = "journal.jsonl";
const LOCK: &str = "lock";
/// The snapshot's machine-read header line.
const META_PREFIX: &str = "# htbd-state";

/// Why the saved state cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// The operation.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Another process holds the lock.
    #[error(
        "{} is in use by another htbd{holder} (one state_dir per htbd: set [daemon] state_dir)",
        dir.display()
    )]
    Locked {
        /// `state_dir`.
        dir: PathBuf,
        /// `" (pid N)"` when the lock file says.
        holder: String,
    },
    /// A journal line other than a torn last one cannot be read.
    #[error(
        "{}: line {line} is damaged ({reason}); htbd will not guess which changes it held. \
         Repair or remove the line, or start with --fresh-state to set the saved state aside",
        path.display()
    )]
    Damaged {
        /// The journal.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An earlier failure could not be cut back off the journal: nothing more is written.
    #[error("the journal could not be repaired after an earlier failure ({0}); restart htbd")]
    Poisoned(String),
    /// A compaction was stopped at a test hook.
    #[error("compaction stopped after {0:?}")]
    Interrupted(CompactStep),
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// A batch's commands as the journal writes them (a JSON list), for
/// [`Store::append_encoded`].
#[derive(Debug)]
pub struct Encoded(List);

#[derive(Debug)]
enum List {
    /// `[…]`, encoded here.
    Encoded(Vec<u8>),
    /// The items of each message's list as the client sent them, written as one list.
    Received(Vec<RawCommands>),
}

impl Encoded {
    /// Encodes `batch`.
    ///
    /// # Errors
    /// serde_json's (none for these types).
    pub fn new(batch: &[Command]) -> Result<Self, serde_json::Error> {
        serde_json::to_vec(batch).map(|json| Self(List::Encoded(json)))
    }

    /// The batch as it came: the text of its messages' commands, in order
    /// ([`htb_ipc::read_incoming`]), written as it is (a million subscribers' commands are
    /// not encoded a second time). A replay reads it as any journal line.
    #[must_use]
    pub fn received(messages: Vec<RawCommands>) -> Self {
        Self(List::Received(messages))
    }

    /// Writes the list to `w`; returns its length in bytes.
    fn write_to(&self, w: &mut impl Write) -> io::Result<u64> {
        match &self.0 {
            List::Encoded(json) => w.write_all(json).map(|()| json.len() as u64),
            List::Received(messages) => {
                let mut len = 2;
                w.write_all(b"[")?;
                let items = messages.iter().map(RawCommands::items);
                for (i, text) in items.filter(|t| !t.is_empty()).enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                        len += 1;
                    }
                    w.write_all(text)?;
                    len += text.len() as u64;
                }
                w.write_all(b"]")?;
                Ok(len)
            }
        }
    }
}

/// A batch on disk, until the data plane has taken it: [`Store::retract`] consumes it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a batch the data plane refuses must be retracted"]
pub struct Appended {
    seq: u64,
    start: u64,
}

impl Appended {
    /// The batch's sequence number.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// A step of [`Store::compact`], where the test hook may stop it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactStep {
    /// The new snapshot is written to `state.toml.tmp`.
    TmpWritten,
    /// … and synced.
    TmpSynced,
    /// … and renamed over `state.toml`.
    Renamed,
    /// The directory is synced (the rename is durable).
    DirSynced,
    /// The journal is emptied.
    JournalTruncated,
}

impl CompactStep {
    /// Every step, in order.
    pub const ALL: [Self; 5] = [
        Self::TmpWritten,
        Self::TmpSynced,
        Self::Renamed,
        Self::DirSynced,
        Self::JournalTruncated,
    ];

    /// The name `HTBD_FAULTS=crash-in-compaction:NAME` uses.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::TmpWritten => "tmp-written",
            Self::TmpSynced => "tmp-synced",
            Self::Renamed => "renamed",
            Self::DirSynced => "dir-synced",
            Self::JournalTruncated => "journal-truncated",
        }
    }
}

/// The state directory, locked for this process.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    journal: File,
    /// Held for the `flock`.
    _lock: File,
    /// Complete bytes in the journal (where a failed append is cut back to).
    end: u64,
    batches: usize,
    next_seq: u64,
    /// The snapshot's config hash, kept for the next compaction.
    config_hash: Option<String>,
    poisoned: Option<String>,
}

impl Store {
    /// Opens (creating, mode 0700) `dir`, locks it, cuts a torn journal tail off, and reads
    /// what is saved there.
    ///
    /// # Errors
    /// Another htbd holds the lock, a file cannot be read, or the journal is damaged.
    pub fn open(dir: &Path) -> Result<(Self, Saved), StoreError> {
        create_private_dir(dir)?;
        let lock = lock(dir)?;
        let (saved, complete) = Saved::read(dir)?;
        let journal_path = dir.join(JOURNAL);
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&journal_path)
            .map_err(io_error("open", &journal_path))?;
        if saved.torn_line.is_some() {
            journal
                .set_len(complete)
                .and_then(|()| journal.sync_all())
                .map_err(io_error("cut the torn tail off", &journal_path))?;
        }
        let store = Self {
            dir: dir.to_owned(),
            journal,
            _lock: lock,
            end: complete,
            batches: saved.journal.len() + saved.already_in_snapshot,
            next_seq: saved.next_seq(),
            config_hash: saved.meta.config_hash.clone(),
            poisoned: None,
        };
        Ok((store, saved))
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The config hash the next snapshot records.
    pub fn set_config_hash(&mut self, hash: String) {
        self.config_hash = Some(hash);
    }

    /// Appends one accepted batch and waits until it is on disk. A failed write or sync is cut
    /// back off the file, so the journal holds exactly the batches that were acknowledged.
    /// The returned receipt takes the batch back ([`retract`](Self::retract)) should the data
    /// plane refuse it.
    ///
    /// # Errors
    /// The write or sync failed; the batch must not be applied.
    pub fn append(&mut self, batch: &[Command]) -> Result<Appended, StoreError> {
        let encoded = Encoded::new(batch)
            .map_err(|e| io_error("encode a batch for", &self.dir.join(JOURNAL))(e.into()))?;
        self.append_encoded(&encoded)
    }

    /// As [`append`](Self::append), the batch encoded already (by the caller's thread: a
    /// million subscribers' batch is not copied to be written on another).
    ///
    /// # Errors
    /// As [`append`](Self::append).
    pub fn append_encoded(&mut self, batch: &Encoded) -> Result<Appended, StoreError> {
        if let Some(why) = &self.poisoned {
            return Err(StoreError::Poisoned(why.clone()));
        }
        let seq = self.next_seq;
        // A `JournalLine` as serde writes one (`{"seq":N,"commands":[…]}`), around the
        // commands' encoding.
        let head = format!("{{\"seq\":{seq},\"commands\":");
        let tail = b"}\n";
        let written = self
            .journal
            .write_all(head.as_bytes())
            .and_then(|()| batch.write_to(&mut self.journal))
            .and_then(|list| {
                self.journal.write_all(tail)?;
                self.journal.sync_data()?;
                Ok(list)
            });
        let list = match written {
            Ok(list) => list,
            Err(e) => {
                let path = self.dir.join(JOURNAL);
                self.cut_back(self.end);
                return Err(io_error("append to", &path)(e));
            }
        };
        let start = self.end;
        self.end += (head.len() + tail.len()) as u64 + list;
        self.next_seq += 1;
        self.batches += 1;
        Ok(Appended { seq, start })
    }

    /// Takes the last appended batch back off the journal: the data plane refused it.
    ///
    /// # Errors
    /// It is not the last batch, or the journal cannot be cut (then nothing more is written).
    pub fn retract(&mut self, appended: Appended) -> Result<(), StoreError> {
        if appended.seq + 1 != self.next_seq || self.batches == 0 {
            return Err(StoreError::Poisoned(format!(
                "batch {} is not the last one in the journal",
                appended.seq
            )));
        }
        self.cut_back(appended.start);
        if let Some(why) = &self.poisoned {
            return Err(StoreError::Poisoned(why.clone()));
        }
        self.end = appended.start;
        self.next_seq -= 1;
        self.batches -= 1;
        Ok(())
    }

    fn cut_back(&mut self, len: u64) {
        let cut = self
            .journal
            .set_len(len)
            .and_then(|()| self.journal.sync_data());
        if let Err(e) = cut {
            tracing::error!(
                "cannot cut the journal back to {len} bytes ({e}): no further change is accepted"
            );
            self.poisoned = Some(e.to_string());
        }
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
    pub fn compact(&mut self, header: &str, state: &str) -> Result<(), StoreError> {
        self.compact_observed(header, state, |_| ControlFlow::Continue(()))
    }

    /// [`compact`](Self::compact), calling `at` after every step; a `Break` stops it there (the
    /// fault-injection hook: the files are left as a crash at that point would leave them).
    ///
    /// # Errors
    /// Writing failed, or `at` stopped it.
    pub fn compact_observed(
        &mut self,
        header: &str,
        state: &str,
        mut at: impl FnMut(CompactStep) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let mut step = |s: CompactStep| match at(s) {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(()) => Err(StoreError::Interrupted(s)),
        };
        let meta = SnapshotMeta {
            last_seq: self.next_seq - 1,
            config_hash: self.config_hash.clone(),
        };
        let tmp = self.dir.join(format!("{SNAPSHOT}.tmp"));
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_error("write", &tmp))?;
        let text = format!(
            "# {header}\n{}\n\
             # htbd's live state: the trees below replace the config file's while this file exists\n\
             # and the config file's trees are unchanged. Stop htbd before editing it; remove it (or\n\
             # start htbd with --fresh-state) to go back to the config file.\n\n{state}",
            meta.line()
        );
        let written = f.write_all(text.as_bytes());
        if let Err(e) = written {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(io_error("write", &tmp)(e));
        }
        step(CompactStep::TmpWritten)?;
        if let Err(e) = f.sync_all() {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(io_error("sync", &tmp)(e));
        }
        drop(f);
        step(CompactStep::TmpSynced)?;
        let path = self.dir.join(SNAPSHOT);
        fs::rename(&tmp, &path).map_err(io_error("replace", &path))?;
        step(CompactStep::Renamed)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("sync", &self.dir))?;
        step(CompactStep::DirSynced)?;
        // The snapshot now holds every batch up to `last_seq`: a crash before the truncation
        // leaves batches that replay skips by their sequence number.
        let journal = self.dir.join(JOURNAL);
        self.journal
            .set_len(0)
            .and_then(|()| self.journal.sync_all())
            .map_err(io_error("empty", &journal))?;
        self.end = 0;
        self.batches = 0;
        step(CompactStep::JournalTruncated)?;
        Ok(())
    }

    /// Moves the saved state aside (`--fresh-state`, or a changed config file), returning where
    /// it went; the journal starts empty.
    ///
    /// # Errors
    /// The rename failed.
    pub fn set_aside(&mut self) -> Result<Option<PathBuf>, StoreError> {
        let snapshot = self.dir.join(SNAPSHOT);
        let journal = self.dir.join(JOURNAL);
        let has_journal = fs::metadata(&journal).is_ok_and(|m| m.len() > 0);
        if !snapshot.exists() && !has_journal {
            return Ok(None);
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut aside = self.dir.join(format!("set-aside-{stamp}"));
        let mut n = 1;
        while aside.exists() {
            aside = self.dir.join(format!("set-aside-{stamp}-{n}"));
            n += 1;
        }
        create_private_dir(&aside)?;
        if snapshot.exists() {
            fs::rename(&snapshot, aside.join(SNAPSHOT)).map_err(io_error("move", &snapshot))?;
        }
        fs::copy(&journal, aside.join(JOURNAL)).map_err(io_error("copy", &journal))?;
        self.journal
            .set_len(0)
            .and_then(|()| self.journal.sync_all())
            .map_err(io_error("empty", &journal))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("sync", &self.dir))?;
        self.end = 0;
        self.batches = 0;
        Ok(Some(aside))
    }
}

/// Creates `dir` (mode 0700) if needed; tightens an existing one that others may write to.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error("create", dir))?;
    let mode = fs::metadata(dir)
        .map_err(io_error("read", dir))?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        tracing::warn!(
            "{} was writable by others (mode {:o}): now 0700",
            dir.display(),
            mode & 0o777
        );
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io_error("chmod", dir))?;
    }
    Ok(())
}

/// Takes the exclusive lock on `dir`, writing this process's id into the lock file.
fn lock(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK);
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io_error("open", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default();
            return Err(StoreError::Locked {
                dir: dir.to_owned(),
                holder,
            });
        }
        Err(fs::TryLockError::Error(e)) => return Err(io_error("lock", &path)(e)),
    }
    file.set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .map_err(io_error("write", &path))?;
    Ok(file)
}

#[cfg(test)]
mod tests;
