//! Where htbd's memory per subscriber goes (issue 23: "measure the daemon's own memory per
//! subscriber"): the batch `htb-cli import` sends for N LibreQoS subscribers (a class and a
//! filter each), applied to htbd's model as the control thread applies it, with a counting
//! allocator around each part:
//!
//! - the model, in three steps of the same batch (each command kind in the import's order):
//!   its classes with the shadow scheduler the model checks every change against (the same
//!   core one data-plane worker holds), then the filters with their u32 hash tables, then the
//!   labels;
//! - the core alone: a scheduler with the same classes (what each data-plane worker holds, and
//!   the shadow's share of the classes' step);
//! - the classifier compiled from the filters (one, shared by the workers through an `Arc`):
//!   what it keeps of the flat filter list the model builds for it at each filter batch (moved
//!   in; it holds the filters compactly and drops the list) and its tables.
//!
//! Each part is given in bytes and in live allocations per subscriber: the allocator adds its
//! own header and rounding to every allocation (glibc: 8 bytes and a 16-byte step, 32 bytes at
//! least), which the bytes leave out, as they leave out freed-but-kept pages: compare with the
//! RSS of `htb-lab scale` for those. Without labels is the same batch less its labels.
//!
//! `cargo bench --bench memory` (200 000 subscribers; `HTB_BENCH_QUICK=1`: 20 000;
//! `HTB_MEMORY_SUBSCRIBERS=N`), printed and saved as `target/htb-bench/memory.json`.

#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;

use htb_cli::import::circuits::Placement;
use htb_cli::import::{self, Import};
use htb_cli::tc::parse::{Action, parse_batch};
use htb_core::{ClassId, ClassSpec, Instant, Rate, Scheduler, SchedulerConfig};
use htb_ipc::Command;
use htbd::model::Model;

/// r2 with the scale benchmark's tree: the circuits go under 1:1.
const STATE: &str = "[[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nparent = \"1:1\"\nrate = \"1gbit\"\n";

/// Commands per `apply`, as htb-cli's staged messages carry them.
const STAGE: usize = 100_000;

/// What `f` left allocated: bytes and allocations (allocations minus frees).
#[derive(Clone, Copy, Default)]
struct Held {
    bytes: i64,
    blocks: i64,
}

impl std::ops::Add for Held {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            bytes: self.bytes + other.bytes,
            blocks: self.blocks + other.blocks,
        }
    }
}

impl std::ops::Sub for Held {
    type Output = Self;

    fn sub(self, other: Self) -> Self {
        Self {
            bytes: self.bytes - other.bytes,
            blocks: self.blocks - other.blocks,
        }
    }
}

fn held(f: impl FnOnce()) -> Held {
    let info = allocation_counter::measure(f);
    Held {
        bytes: info.bytes_current,
        blocks: info.count_current,
    }
}

/// The parts of the import's batch, each in the batch's order: classes (and anything else
/// that is not a filter or a label), filters, labels.
fn split(commands: Vec<Command>) -> [Vec<Command>; 3] {
    let mut parts: [Vec<Command>; 3] = Default::default();
    for c in commands {
        let part = match c {
            Command::FilterAdd(_) | Command::FilterChange(_) | Command::FilterReplace(_) => 1,
            Command::ClassLabel(_) => 2,
            _ => 0,
        };
        parts[part].push(c);
    }
    parts
}

/// The commands `htb-cli import` sends for `n` subscribers into an empty r2.
fn import_commands(n: u32) -> Vec<Command> {
    let csv = support::out_dir().join("memory-shaped-devices.csv");
    std::fs::write(&csv, htb_lab::scale::shaped_devices("", n)).expect("write the CSV");
    let import = Import {
        file: csv.clone(),
        network: None,
        placement: Placement {
            download_dev: Some("r2".parse().unwrap()),
            upload_dev: None,
            parent: ClassId::new(1, 1),
            nodes: BTreeMap::new(),
            prio: 10,
        },
        first_minor: 0x100,
        print: true,
        dry_run: false,
        socket: None,
        timeout: None,
        shard: None,
    };
    let mut text = Vec::new();
    import::run(&import, &mut text).expect("the import's batch");
    let _ = std::fs::remove_file(csv);
    let text = String::from_utf8(text).expect("UTF-8 batch");
    parse_batch(&text)
        .expect("htb-cli reads its own batch")
        .into_iter()
        .filter_map(|(_, action)| match action {
            Action::Change(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn main() {
    let n: u32 = std::env::var("HTB_MEMORY_SUBSCRIBERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if support::quick() { 20_000 } else { 200_000 });
    let commands = import_commands(n);
    let total = commands.len();
    let [classes, filters, labels] = split(commands);

    let trees = htbd::parse_state(STATE).expect("the state");
    let mut model = Model::from_trees(trees, &|_| 1).expect("the model");
    let mut apply = |part: &[Command]| {
        held(|| {
            for stage in part.chunks(STAGE) {
                let plan = model.apply(stage).expect("the import applies");
                drop(plan);
            }
        })
    };
    let class_part = apply(&classes);
    let filter_part = apply(&filters);
    let label_part = apply(&labels);

    let core = held(|| {
        let mut core: Scheduler<u32> = Scheduler::new(SchedulerConfig::default());
        let root = ClassId::new(1, 1);
        let _ = core
            .add_class(
                Instant::ZERO,
                root,
                None,
                &ClassSpec::new(Rate::from_gbit(10)),
            )
            .expect("root");
        for i in 0..n {
            let spec = ClassSpec::new(Rate::from_mbit(1)).with_ceil(Rate::from_mbit(100));
            let id = ClassId::new(1, 0x100 + i);
            let _ = core
                .add_class(Instant::ZERO, id, Some(root), &spec)
                .expect("class");
        }
        std::mem::forget(core);
    });

    let port = model.ports[0].htb().expect("r2's tree");
    let mut flat = Vec::new();
    let flat_part = held(|| flat = port.data_filters().expect("the filters flatten"));
    let flat_filters = flat.len();
    // The classifier takes the list as htbd's data plane gets it: moved in; what it keeps is
    // the list's part plus what building it left (the list dropped, its own records and
    // tables).
    let classifier = flat_part
        + held(|| {
            std::mem::forget(htb_classify::Classifier::new(flat));
        });

    let without_labels = class_part + filter_part;
    let model_part = without_labels + label_part;
    let per = |h: Held| h.bytes as f64 / f64::from(n);
    let blocks = |h: Held| h.blocks as f64 / f64::from(n);
    let rows = [
        ("model: classes and the shadow core", class_part),
        ("  of which the shadow core (one worker's)", core),
        ("  so the model's own class records", class_part - core),
        ("model: filters and their hash tables", filter_part),
        ("model: labels", label_part),
        ("model in all", model_part),
        ("classifier (what it keeps)", classifier),
        ("  the flat list the model builds for it", flat_part),
    ];
    println!("{n} subscribers, {total} commands, {flat_filters} flat filters:");
    println!(
        "  {:44} {:>8}  {:>6}  {:>6}",
        "part", "MB", "B/sub", "allocs/sub"
    );
    for (what, h) in rows {
        println!(
            "  {what:44} {:>8.1}  {:>6.0}  {:>6.2}",
            h.bytes as f64 / 1e6,
            per(h),
            blocks(h)
        );
    }
    // One worker: the model with its shadow, one more core, the classifier.
    let one_worker = model_part + core + classifier;
    let one_worker_bare = without_labels + core + classifier;
    let four_workers = |one: Held| per(one) + 3.0 * per(core);
    println!(
        "  counted for htbd with 1 worker: {:.0} B per subscriber ({:.0} without labels); \
         with 4: {:.0} ({:.0}) (every worker holds every class)",
        per(one_worker),
        per(one_worker_bare),
        four_workers(one_worker),
        four_workers(one_worker_bare),
    );
    let part = |h: Held| serde_json::json!({ "bytes": per(h), "allocations": blocks(h) });
    let json = serde_json::json!({
        "subscribers": n,
        "commands": total,
        "flat_filters": flat_filters,
        "per_subscriber": {
            "model_classes_with_shadow_core": part(class_part),
            "core_one_worker": part(core),
            "model_class_records": part(class_part - core),
            "model_filters": part(filter_part),
            "model_labels": part(label_part),
            "model": part(model_part),
            "model_without_labels": part(without_labels),
            "classifier_with_flat_list": part(classifier),
            "flat_list": part(flat_part),
            "counted_htbd_1_worker": part(one_worker),
            "counted_htbd_1_worker_without_labels": part(one_worker_bare),
        },
        "counted_htbd_4_workers_bytes": four_workers(one_worker),
        "counted_htbd_4_workers_without_labels_bytes": four_workers(one_worker_bare),
    });
    let path = support::out_dir().join("memory.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("JSON")).expect("write");
    println!("wrote {}", path.display());
}
