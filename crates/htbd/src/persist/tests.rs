//! The saved state under faults: torn writes, damaged lines, a full disk, a crash at every step
//! of compaction. In each case what loads afterwards is exactly the acknowledged batches.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::Command as Process;

use super::*;

/// `Store::open`, riding out a lock held for a moment by another test's child process.
///
/// The lock is an `flock` on an open file description. When another test in this process
/// forks to run a command while a store is open, the child shares that description until it
/// execs (`O_CLOEXEC` closes it only then): for those microseconds a store just dropped here is
/// still locked, and opening it again is refused. htbd opens its store once per process, so
/// only tests meet this; a lock held for longer than a second is still an error.
fn reopen(dir: &Path) -> Result<(Store, Saved), StoreError> {
    for _ in 0..100 {
        match Store::open(dir) {
            Err(StoreError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            result => return result,
        }
    }
    Store::open(dir)
}

fn batch(id: &str) -> Vec<Command> {
    vec![Command::ClassDelete(htb_ipc::ClassDelete {
        dev: "r2".parse().unwrap(),
        id: id.parse().unwrap(),
    })]
}

/// The batches a fresh load of `dir` would apply: the snapshot's (as recorded in the test's
/// snapshot text, one id per line) and then the journal's.
fn loaded(dir: &Path) -> Vec<Vec<Command>> {
    let (saved, _) = Saved::read(dir).unwrap();
    let mut all: Vec<Vec<Command>> = saved
        .snapshot
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.strip_prefix("applied "))
        .map(batch)
        .collect();
    all.extend(saved.journal.into_iter().map(|(_, b)| b));
    all
}

/// A snapshot text holding `batches` (the stand-in for `Model::to_toml`).
fn state_of(batches: &[Vec<Command>]) -> String {
    batches
        .iter()
        .map(|b| match &b[0] {
            Command::ClassDelete(htb_ipc::ClassDelete { id, .. }) => format!("applied {id}\n"),
            _ => unreachable!(),
        })
        .collect()
}

fn append_line(dir: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join(JOURNAL))
        .unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn journal_survives_reopen_and_a_torn_tail_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, saved) = reopen(dir.path()).unwrap();
    assert!(saved.snapshot.is_none() && saved.journal.is_empty());
    assert_eq!(store.append(&batch("1:10")).unwrap().seq(), 1);
    assert_eq!(store.append(&batch("1:20")).unwrap().seq(), 2);
    drop(store);
    // A crash in the middle of a third write.
    append_line(dir.path(), b"{\"seq\":3,\"commands\":[{\"op\":\"class_del");
    let (mut store, saved) = reopen(dir.path()).unwrap();
    assert_eq!(saved.torn_line, Some(3));
    assert_eq!(loaded(dir.path()), vec![batch("1:10"), batch("1:20")]);
    // The torn bytes were cut off: the next batch lands on a line of its own, numbered on.
    assert_eq!(store.append(&batch("1:30")).unwrap().seq(), 3);
    drop(store);
    let (_, saved) = reopen(dir.path()).unwrap();
    assert_eq!(saved.journal.len(), 3);
    assert_eq!(saved.torn_line, None);
}

/// The journal's lines are written around the commands' own encoding: each is exactly what
/// serde writes for a `JournalLine`, and reads back as one.
#[test]
fn journal_lines_are_journal_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = reopen(dir.path()).unwrap();
    let two = [batch("1:10"), batch("1:20")].concat();
    let _ = store.append(&batch("1:10")).unwrap();
    let _ = store.append_encoded(&Encoded::new(&two).unwrap()).unwrap();
    drop(store);
    let text = fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (line, (seq, commands)) in lines.iter().zip([(1, batch("1:10")), (2, two.clone())]) {
        let expected = serde_json::to_string(&saved::JournalLine { seq, commands }).unwrap();
        assert_eq!(*line, expected);
    }
    assert_eq!(loaded(dir.path()), vec![batch("1:10"), two]);
}

#[test]
fn a_damaged_line_before_the_end_stops_the_load_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = reopen(dir.path()).unwrap();
    let _ = store.append(&batch("1:10")).unwrap();
    drop(store);
    append_line(dir.path(), b"{\"seq\":2,\"commands\":[garbage]}\n");
    let (mut store, _) = reopen(dir.path())
        .map(|_| panic!("a damaged journal loaded"))
        .unwrap_or_else(|e| {
            let text = e.to_string();
            assert!(
                matches!(e, StoreError::Damaged { line: 2, .. }) && text.contains("line 2"),
                "{text}"
            );
            // Nothing was erased: the line is still there for the operator.
            let journal = fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
            assert!(journal.contains("garbage"));
            fs::write(dir.path().join(JOURNAL), "").unwrap();
            reopen(dir.path()).unwrap()
        });
    let _ = store.append(&batch("1:99")).unwrap();
    // Out-of-order sequence numbers are damage too.
    drop(store);
    append_line(dir.path(), b"{\"seq\":1,\"commands\":[]}\n");
    assert!(matches!(
        reopen(dir.path()),
        Err(StoreError::Damaged { line: 2, .. })
    ));
    // Unknown fields are refused, not ignored.
    fs::write(
        dir.path().join(JOURNAL),
        "{\"seq\":1,\"commands\":[],\"extra\":1}\n",
    )
    .unwrap();
    assert!(matches!(
        reopen(dir.path()),
        Err(StoreError::Damaged { line: 1, .. })
    ));
}

#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = reopen(dir.path()).unwrap();
    let e = Store::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    drop(store);
    let _ = reopen(dir.path()).unwrap();
}

#[test]
fn state_dir_and_files_are_private() {
    let parent = tempfile::tempdir().unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // Created by the store: 0700, files 0600.
    let dir = parent.path().join("new");
    let (mut store, _) = reopen(&dir).unwrap();
    let _ = store.append(&batch("1:10")).unwrap();
    store.compact("test", "").unwrap();
    drop(store);
    assert_eq!(mode(&dir), 0o700);
    for file in [JOURNAL, SNAPSHOT, LOCK] {
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    // An existing directory others may write to is tightened.
    let open = parent.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let _ = reopen(&open).unwrap();
    assert_eq!(mode(&open), 0o700);
}

#[test]
fn a_retracted_batch_is_gone_and_its_number_reused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = reopen(dir.path()).unwrap();
    let _ = store.append(&batch("1:10")).unwrap();
    let refused = store.append(&batch("1:20")).unwrap();
    store.retract(refused).unwrap();
    assert_eq!(store.append(&batch("1:30")).unwrap().seq(), 2);
    drop(store);
    assert_eq!(loaded(dir.path()), vec![batch("1:10"), batch("1:30")]);
}

/// A crash after each step of compaction — the files as the step left them, nothing more
/// written — loads exactly the acknowledged batches: none lost, none replayed twice.
#[test]
fn a_crash_at_every_step_of_compaction_loads_exactly_the_acknowledged_batches() {
    for crash_at in CompactStep::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = reopen(dir.path()).unwrap();
        let mut acknowledged = Vec::new();
        for id in ["1:10", "1:20"] {
            let _ = store.append(&batch(id)).unwrap();
            acknowledged.push(batch(id));
        }
        store.compact("test", &state_of(&acknowledged)).unwrap();
        for id in ["1:30", "1:40"] {
            let _ = store.append(&batch(id)).unwrap();
            acknowledged.push(batch(id));
        }
        let stopped = store.compact_observed("test", &state_of(&acknowledged), |step| {
            if step == crash_at {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert!(matches!(stopped, Err(StoreError::Interrupted(s)) if s == crash_at));
        drop(store);
        assert_eq!(loaded(dir.path()), acknowledged, "crash after {crash_at:?}");
        // And the next run numbers on from the last batch, so a later crash cannot confuse
        // old and new batches.
        let (mut store, saved) = reopen(dir.path()).unwrap();
        assert_eq!(
            saved.already_in_snapshot > 0,
            matches!(crash_at, CompactStep::Renamed | CompactStep::DirSynced),
            "{crash_at:?}"
        );
        assert_eq!(store.append(&batch("1:50")).unwrap().seq(), 5);
    }
}

/// A tmpfs of `kib` KiB mounted on a new directory, unmounted when dropped.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(kib: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Process::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(status.success(), "mount -t tmpfs failed (needs root)");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system but `leave` bytes.
    fn fill(&self, leave: usize) {
        let mut f = File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        drop(f);
        let len = fs::metadata(self.path().join("filler")).unwrap().len();
        let f = OpenOptions::new()
            .write(true)
            .open(self.path().join("filler"))
            .unwrap();
        f.set_len(len.saturating_sub(leave as u64)).unwrap();
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Process::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
#[ignore = "needs root: mounts a tiny tmpfs"]
fn a_full_disk_refuses_the_batch_and_leaves_exactly_the_acknowledged_ones() {
    let fs_ = TinyFs::mount(64);
    let dir = fs_.path().join("state");
    let (mut store, _) = reopen(&dir).unwrap();
    let mut acknowledged = Vec::new();
    let _ = store.append(&batch("1:10")).unwrap();
    acknowledged.push(batch("1:10"));
    // Room for a few bytes only: the next batch is written in part, then fails.
    fs_.fill(20);
    let big: Vec<Command> = (0..200).flat_map(|i| batch(&format!("1:{i}"))).collect();
    let e = store.append(&big).unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    // Compaction on a full disk fails too, and leaves the old snapshot and journal intact.
    let e = store
        .compact("test", &state_of(&acknowledged).repeat(2000))
        .unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    assert!(!dir.join(format!("{SNAPSHOT}.tmp")).exists());
    // Room again: the next batch is accepted and lands on its own line.
    fs::remove_file(fs_.path().join("filler")).unwrap();
    let _ = store.append(&batch("1:20")).unwrap();
    acknowledged.push(batch("1:20"));
    drop(store);
    assert_eq!(loaded(&dir), acknowledged);
    let (mut store, saved) = reopen(&dir).unwrap();
    assert_eq!(saved.torn_line, None);
    store.compact("test", &state_of(&acknowledged)).unwrap();
    drop(store);
    assert_eq!(loaded(&dir), acknowledged);
}

#[test]
fn set_aside_keeps_the_old_state_and_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = reopen(dir.path()).unwrap();
    let _ = store.append(&batch("1:10")).unwrap();
    store.compact("test", "applied 1:10\n").unwrap();
    let _ = store.append(&batch("1:20")).unwrap();
    let aside = store.set_aside().unwrap().unwrap();
    assert!(aside.join(SNAPSHOT).exists());
    assert!(
        fs::read_to_string(aside.join(JOURNAL))
            .unwrap()
            .contains("1:20")
    );
    assert_eq!(store.append(&batch("1:30")).unwrap().seq(), 3);
    drop(store);
    let (_, saved) = reopen(dir.path()).unwrap();
    assert!(saved.snapshot.is_none());
    assert_eq!(saved.journal, vec![(3, batch("1:30"))]);
}

#[test]
fn the_snapshot_records_its_last_batch_and_config_hash() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = reopen(dir.path()).unwrap();
    store.set_config_hash(trees_hash("[[interface]]"));
    let _ = store.append(&batch("1:10")).unwrap();
    store
        .compact("written by a test", "[[interface]]\nname = \"r2\"\n")
        .unwrap();
    drop(store);
    let (saved, _) = Saved::read(dir.path()).unwrap();
    assert_eq!(saved.header.as_deref(), Some("written by a test"));
    assert_eq!(saved.meta.last_seq, 1);
    assert_eq!(
        saved.meta.config_hash.as_deref(),
        Some(trees_hash("[[interface]]").as_str())
    );
    assert_ne!(trees_hash("a"), trees_hash("b"));
    assert!(crate::config::parse_state(saved.snapshot.as_deref().unwrap()).is_ok());
}

/// The text of `commands` as a client's message carries it (`htb_ipc::read_incoming`).
fn received(commands: Vec<Command>) -> RawCommands {
    let wire = serde_json::to_vec(&htb_ipc::Request::new(htb_ipc::RequestBody::Stage {
        commands,
    }))
    .unwrap();
    htb_ipc::read_incoming(wire).unwrap().raw.unwrap()
}

/// A batch journaled as its messages brought it (an empty one among them) is one line that
/// serde would have written the same, and loads as its commands; a torn line after it is cut
/// off, a garbled one stops the load with its number, and the batches before are kept.
#[test]
fn a_batch_journaled_as_received_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch("1:5");
    let two = [batch("1:6"), batch("1:7")].concat();
    let whole = [one.clone(), two.clone()].concat();
    let (mut store, _) = reopen(dir.path()).unwrap();
    let messages = vec![received(one), received(Vec::new()), received(two)];
    assert_eq!(
        store
            .append_encoded(&Encoded::received(messages))
            .unwrap()
            .seq(),
        1
    );
    let _ = store
        .append_encoded(&Encoded::received(vec![received(Vec::new())]))
        .unwrap();
    drop(store);
    let text = fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
    let first = text.lines().next().unwrap();
    let expected = serde_json::to_string(&saved::JournalLine {
        seq: 1,
        commands: whole.clone(),
    })
    .unwrap();
    assert_eq!(first, expected);
    assert_eq!(loaded(dir.path()), [whole.clone(), Vec::new()]);
    // A crash in the middle of the third batch's line: cut off, the two before kept, and the
    // next batch numbered on.
    let line = String::from_utf8(received(batch("1:8")).items().to_vec()).unwrap();
    append_line(
        dir.path(),
        format!("{{\"seq\":3,\"commands\":[{}", &line[..line.len() / 2]).as_bytes(),
    );
    let (mut store, saved) = reopen(dir.path()).unwrap();
    assert_eq!(saved.torn_line, Some(3));
    assert_eq!(loaded(dir.path()), [whole.clone(), Vec::new()]);
    let _ = store
        .append_encoded(&Encoded::received(vec![received(batch("1:8"))]))
        .unwrap();
    drop(store);
    assert_eq!(
        loaded(dir.path()),
        [whole.clone(), Vec::new(), batch("1:8")]
    );
    // A byte of the second line garbled: the load stops there, naming it, erasing nothing.
    let garbled = text.replacen("\"seq\":2,\"commands\":[", "\"seq\":2,\"commands\":{", 1);
    assert_ne!(garbled, text);
    fs::write(dir.path().join(JOURNAL), &garbled).unwrap();
    let e = reopen(dir.path()).map(|_| ()).unwrap_err();
    assert!(matches!(e, StoreError::Damaged { line: 2, .. }), "{e}");
    assert_eq!(
        fs::read_to_string(dir.path().join(JOURNAL)).unwrap(),
        garbled
    );
    let before = format!("{}\n", garbled.lines().next().unwrap());
    let journal = parse_journal(before.as_bytes(), 0);
    assert_eq!(
        journal.unwrap().batches,
        [(1, whole)],
        "the line before reads"
    );
}
