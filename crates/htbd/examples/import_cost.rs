//! Where a large import's time goes on its way through htbd's control path, in-process and
//! without root: a stand-in for `htb-lab scale`'s import (which needs root, a lab and
//! AF_XDP), to measure changes to the path before the lab run.
//!
//! `cargo run --release -p htbd --example import_cost -- [CIRCUITS] [ROUNDS]` (200 000 by
//! default) makes the lab's `ShapedDevices.csv` (`htb_lab::scale::shaped_devices`: one device
//! and one address a circuit), then times each stage the real import runs, in order:
//!
//! - `cli`: htb-cli's import making the batch (read, group, sync: a class, a filter and a
//!   label per circuit, under r2's `1:1`, as `htb-lab scale` imports it);
//! - `encode`: the messages `Client::apply` sends (staged chunks, then the apply);
//! - `decode`: htbd reading them back (`crate::ipc`: each frame's body read by
//!   `htb_ipc::read_incoming`, which keeps a batch's text) and joining the staged commands;
//! - `model`: `Model::apply` (checks, the shadow scheduler, labels), after which the decoded
//!   commands are freed;
//! - `ops+journal`: the data plane's operations built (`PlaneChange::compile`, one worker)
//!   while another thread appends the batch, as it came, to a journal in a temporary
//!   `state_dir` with its `fdatasync` (as `Control::apply` does); each one's own time is
//!   printed after it.
//!
//! With each of htbd's stages, the heap it holds (a counting allocator, the allocations of
//! htbd's thread: the journal's thread hands the batch back to be freed there): what the stage
//! kept and the highest the heap reached during it, from the staged messages' bodies on (what
//! htbd's connection reads), and the process's peak and final resident size
//! (`/proc/self/status`: `VmHWM`, reset before htbd's part by `/proc/self/clear_refs`, and
//! `VmRSS`) after it, everything but the model freed. The peak is what stays resident after an
//! import: glibc returns little of a freed heap to the kernel.
//!
//! Not timed: the socket itself, the data plane applying the operations (it needs AF_XDP
//! sockets; the lab measured it at about 1.1 s of a million subscribers' 20 s), the answer.
//! Each round starts from the same empty tree.
//!
//! `-- CIRCUITS ROUNDS socket` times the socket too: `encode`, `read` and `decode` become one
//! stage, `send`: htb-cli's `Client::apply` writing the messages to a Unix socket in a
//! temporary directory, and a thread reading and decoding them as htbd's connection does
//! (`htb_ipc::read_incoming` per body, an answer per message), overlapped as they are in the
//! real import. That thread's heap is not htbd's thread's, so the heap is not printed then.
//! `socket-serial` sends the same messages as the client did before it overlapped them: each
//! staged message encoded, written, and its answer awaited before the next is encoded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use anyhow::Context;
use htb_cli::import::{circuits, shaped_devices, sync};
use htb_ipc::{Command, RawCommands, ReplyBody, Request, RequestBody, Response};
use htbd::model::Model;
use htbd::persist::{Encoded, Store};
use std::sync::mpsc;

/// r2's tree as `htb-lab scale` runs it (the lab's config, without its `[daemon]`).
const TREES: &str = "[[interface]]\nname = \"r1\"\n\
     [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nparent = \"1:1\"\nrate = \"1gbit\"\n";

/// The stages' times of one round, and htbd's heap.
#[derive(Default)]
struct Round {
    stages: Vec<(&'static str, Duration)>,
    /// The operations' and the journal's own times, overlapped in `ops+journal`.
    alone: Option<(Duration, Duration)>,
    heap: Heap,
    /// What the model holds after the import (counted).
    model_bytes: i64,
    /// The process's peak and final resident size (bytes).
    hwm: i64,
    rss: i64,
    /// The resident size when htbd's part began (htb-cli's part, in this process, left it).
    rss_before: i64,
}

/// htbd's heap through its stages, counted on this thread.
#[derive(Default)]
struct Heap {
    /// Bytes allocated now, since htbd's part began.
    current: i64,
    /// The most allocated at once.
    peak: i64,
    /// Per stage: the bytes it left allocated, and the heap's peak during it.
    stages: Vec<(&'static str, i64, i64)>,
}

impl Heap {
    fn count<T>(&mut self, stage: &'static str, f: impl FnOnce() -> T) -> T {
        let mut out = None;
        let info = allocation_counter::measure(|| out = Some(f()));
        let peak = self.current + i64::try_from(info.bytes_max).unwrap_or(i64::MAX);
        self.peak = self.peak.max(peak);
        self.current += info.bytes_current;
        self.stages.push((stage, info.bytes_current, peak));
        out.expect("measured")
    }
}

impl Round {
    fn time<T>(&mut self, stage: &'static str, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = f();
        self.stages.push((stage, started.elapsed()));
        out
    }

    /// Times and counts one of htbd's stages.
    fn htbd<T>(&mut self, stage: &'static str, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = self.heap.count(stage, f);
        self.stages.push((stage, started.elapsed()));
        out
    }

    fn total(&self) -> Duration {
        self.stages.iter().map(|(_, d)| *d).sum()
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let circuits: u32 = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let rounds: u32 = args.next().map_or(Ok(1), |a| a.parse())?;
    let mode = args.next().unwrap_or_default();
    let socket = match mode.as_str() {
        "socket" => Some(false),
        "socket-serial" => Some(true),
        _ => None,
    };
    let csv = htb_lab::scale::shaped_devices("", circuits);
    for round in 1..=rounds {
        let r = one_round(&csv, socket)?;
        let stages: Vec<String> = r
            .stages
            .iter()
            .map(|(name, d)| format!("{name} {:.2} s", d.as_secs_f64()))
            .collect();
        let alone = r.alone.map_or_else(String::new, |(ops, journal)| {
            format!(
                " (ops {:.2} s, journal {:.2} s)",
                ops.as_secs_f64(),
                journal.as_secs_f64()
            )
        });
        println!(
            "{circuits} circuits, round {round}: {}{alone} (htbd's part {:.2} s, total {:.2} s)",
            stages.join(", "),
            r.stages
                .iter()
                .filter(|(name, _)| !matches!(*name, "cli" | "encode" | "send"))
                .map(|(_, d)| d.as_secs_f64())
                .sum::<f64>(),
            r.total().as_secs_f64()
        );
        if socket.is_some() {
            continue;
        }
        let per = |bytes: i64| bytes as f64 / f64::from(circuits);
        let heap: Vec<String> = r
            .heap
            .stages
            .iter()
            .map(|(name, kept, peak)| {
                format!("{name} kept {:.0} B (peak {:.0} B)", per(*kept), per(*peak))
            })
            .collect();
        println!(
            "  htbd's heap per circuit: {}; peak {:.0} B, the model after {:.0} B",
            heap.join(", "),
            per(r.heap.peak),
            per(r.model_bytes),
        );
        println!(
            "  process: VmRSS {:.0} MB before htbd's part, VmHWM {:.0} MB during it, VmRSS {:.0} MB \
             after it with only the model left ({:.0}, {:.0} and {:.0} B per circuit)",
            r.rss_before as f64 / 1e6,
            r.hwm as f64 / 1e6,
            r.rss as f64 / 1e6,
            per(r.rss_before),
            per(r.hwm),
            per(r.rss),
        );
    }
    Ok(())
}

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> anyhow::Result<i64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kb: i64 = line.trim().trim_end_matches("kB").trim().parse()?;
    Ok(kb * 1024)
}

/// `socket`: `None` in-process; else over a socket, one message at a time when `Some(true)`.
fn one_round(csv: &str, socket: Option<bool>) -> anyhow::Result<Round> {
    let mut r = Round::default();
    let placement = circuits::Placement {
        download_dev: Some("r2".parse()?),
        upload_dev: None,
        parent: "1:1".parse()?,
        nodes: BTreeMap::new(),
        prio: 10,
    };
    let commands = r.time("cli", || -> anyhow::Result<Vec<Command>> {
        let devices = shaped_devices::read(csv).map_err(|e| anyhow::anyhow!("{e}"))?;
        let circuits = circuits::group(devices)?;
        Ok(sync::batch_to_send(&circuits, None, &placement, &BTreeMap::new(), 0x100)?.commands)
    })?;
    let mut model = Model::from_trees(htbd::parse_state(TREES)?, &|_| 1)?;
    let (commands, received) = if let Some(serial) = socket {
        std::fs::write("/proc/self/clear_refs", "5")?;
        r.rss_before = status_bytes("VmRSS")?;
        r.time("send", || over_socket(commands, serial))?
    } else {
        let frames = r.time("encode", || encode(commands))?;
        // htbd's part starts here: the peak resident size from now on.
        std::fs::write("/proc/self/clear_refs", "5")?;
        r.rss_before = status_bytes("VmRSS")?;
        // The connection reads each body alone, without its header.
        let bodies = r.htbd("read", || {
            frames.iter().map(|f| f[4..].to_vec()).collect::<Vec<_>>()
        });
        // The client's frames are not htbd's.
        allocation_counter::opt_out(|| drop(frames));
        r.htbd("decode", || decode(bodies))?
    };
    let mut plan = r.htbd("model", || model.apply(&commands))?;
    let effects = std::mem::take(&mut plan.effects);
    // Freed once the model has them, as `Control::apply` does (the journal writes the text).
    r.heap.count("commands freed", || drop(commands));
    let dir = tempfile::tempdir()?;
    let (mut store, _) = Store::open(dir.path())?;
    let (journaled_tx, journaled) = mpsc::channel();
    let both = Instant::now();
    let ops = r.heap.count("ops+journal", || {
        std::thread::scope(|s| {
            s.spawn(move || {
                let started = Instant::now();
                let batch = Encoded::received(received);
                let appended = store.append_encoded(&batch).map(|_| ());
                // Freed by htbd's thread, where it was counted.
                let _ = journaled_tx.send((appended, started.elapsed(), batch));
            });
            let started = Instant::now();
            let ops = effects
                .into_iter()
                .map(|(_, effect)| effect.compile(1))
                .collect::<Result<Vec<_>, _>>();
            (ops, started.elapsed())
        })
    });
    r.stages.push(("ops+journal", both.elapsed()));
    let (ops, ops_took) = ops;
    let (appended, journal_took, batch) = journaled.recv()?;
    appended?;
    let ops = ops?;
    r.alone = Some((ops_took, journal_took));
    // Freed as htbd frees them after answering (the operations once the data plane ran them).
    r.heap.count("freed ops", || drop(ops));
    r.heap
        .count("freed results", || drop(std::mem::take(&mut plan.results)));
    r.heap.count("freed undo", || drop(plan));
    r.heap.count("freed text", || drop(batch));
    r.model_bytes = r.heap.current;
    r.hwm = status_bytes("VmHWM")?;
    r.rss = status_bytes("VmRSS")?;
    drop(model);
    Ok(r)
}

/// The frames `Client::apply` writes: staged chunks, then the apply, taken off the front of
/// one iterator as the client takes them (each command moves once).
fn encode(commands: Vec<Command>) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut frames = Vec::new();
    let mut rest = commands.into_iter();
    loop {
        let n = htb_cli::client::chunk_len(rest.as_slice());
        if rest.len() <= n {
            break;
        }
        let chunk: Vec<Command> = rest.by_ref().take(n).collect();
        frames.push(htb_ipc::encode(&Request::new(RequestBody::Stage {
            commands: chunk,
        }))?);
    }
    frames.push(htb_ipc::encode(&Request::new(RequestBody::Apply {
        commands: rest.collect(),
    }))?);
    Ok(frames)
}

/// `Client::apply` over a Unix socket to a thread reading each message as htbd's connection
/// task does (the body read to its announced length, `read_incoming`, the commands staged, an
/// answer); the batch and its text as that thread has them at the `Apply`.
fn over_socket(
    commands: Vec<Command>,
    serial: bool,
) -> anyhow::Result<(Vec<Command>, Vec<RawCommands>)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("htbd.sock");
    let listener = UnixListener::bind(&path)?;
    let htbd = std::thread::spawn(move || -> anyhow::Result<_> {
        let (mut stream, _) = listener.accept()?;
        let (mut all, mut received) = (Vec::new(), Vec::new());
        loop {
            let mut header = [0u8; 4];
            stream.read_exact(&mut header)?;
            let len = htb_ipc::body_len(header)?;
            let mut body = Vec::new();
            (&mut stream).take(len as u64).read_to_end(&mut body)?;
            let incoming = htb_ipc::read_incoming(body)?;
            received.push(incoming.raw.context("a batch on one line keeps its text")?);
            let (commands, last) = match incoming.request.request {
                RequestBody::Stage { commands } => (commands, false),
                RequestBody::Apply { commands } => (commands, true),
                _ => anyhow::bail!("not a batch"),
            };
            all.extend(commands);
            let reply = if last {
                ReplyBody::Applied {
                    results: Vec::new(),
                }
            } else {
                ReplyBody::Staged {
                    commands: all.len() as u64,
                }
            };
            stream.write_all(&htb_ipc::encode(&Response::new(Ok(reply)))?)?;
            if last {
                return Ok((all, received));
            }
        }
    });
    let sent = if serial {
        one_at_a_time(&path, commands)
    } else {
        let mut client = htb_cli::client::Client::connect(&path, Duration::from_secs(600))?;
        client
            .apply(commands)
            .map(|_| ())
            .map_err(anyhow::Error::from)
    };
    let batch = htbd
        .join()
        .map_err(|_| anyhow::anyhow!("the reading thread panicked"))??;
    sent?;
    Ok(batch)
}

/// The messages [`encode`] makes, each written and its answer read before the next is made.
fn one_at_a_time(path: &std::path::Path, commands: Vec<Command>) -> anyhow::Result<()> {
    let mut stream = std::os::unix::net::UnixStream::connect(path)?;
    let mut rest = commands.into_iter();
    loop {
        let n = htb_cli::client::chunk_len(rest.as_slice());
        let last = rest.len() <= n;
        let chunk: Vec<Command> = rest.by_ref().take(n).collect();
        let body = if last {
            RequestBody::Apply { commands: chunk }
        } else {
            RequestBody::Stage { commands: chunk }
        };
        htb_ipc::write_frame(&mut stream, &Request::new(body))?;
        let answer: Response = htb_ipc::read_frame(&mut stream)?;
        answer.result?;
        if last {
            return Ok(());
        }
    }
}

/// What htbd's connection task makes of them: one batch, and the text of its commands.
fn decode(bodies: Vec<Vec<u8>>) -> anyhow::Result<(Vec<Command>, Vec<RawCommands>)> {
    let mut all = Vec::new();
    let mut received = Vec::new();
    for body in bodies {
        let incoming = htb_ipc::read_incoming(body)?;
        received.push(incoming.raw.context("a batch on one line keeps its text")?);
        match incoming.request.request {
            RequestBody::Stage { commands } | RequestBody::Apply { commands } => {
                all.extend(commands);
            }
            _ => anyhow::bail!("not a batch"),
        }
    }
    Ok((all, received))
}
