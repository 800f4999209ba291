//! Where htbd's memory per subscriber goes (issue 23: "measure the daemon's own memory per
//! subscriber"): the batch `htb-cli import` sends for N LibreQoS subscribers (a class and a
//! filter each), applied to htbd's model as the control thread applies it, with a counting
//! allocator around each part:
//!
//! - the model: its classes and filters, the undo-free state after each batch, and the shadow
//!   scheduler the model checks every change against (the same core one data-plane worker
//!   holds);
//! - the core alone: a scheduler with the same classes (what each data-plane worker holds);
//! - the classifier compiled from the filters (one, shared by the workers through an `Arc`) and
//!   the flat filter list the engine keeps to recompile it.
//!
//! `cargo bench --bench memory` (200 000 subscribers; `HTB_BENCH_QUICK=1`: 20 000;
//! `HTB_MEMORY_SUBSCRIBERS=N`), printed and saved as `target/htb-bench/memory.json`. The
//! allocator's own overhead and freed-but-kept pages are not counted: compare with the RSS of
//! `htb-lab scale` for those.

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

/// Bytes still held after `f` (allocations minus frees).
fn held(f: impl FnOnce()) -> i64 {
    allocation_counter::measure(f).bytes_current
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

    let trees = htbd::parse_state(STATE).expect("the state");
    let mut model = Model::from_trees(trees, &|_| 1).expect("the model");
    let model_bytes = held(|| {
        for stage in commands.chunks(STAGE) {
            let plan = model.apply(stage).expect("the import applies");
            drop(plan);
        }
    });

    let core_bytes = held(|| {
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
    let flat_bytes = held(|| flat = port.data_filters().expect("the filters flatten"));
    let filters = flat.len();
    let classifier_bytes = held(|| {
        std::mem::forget(htb_classify::Classifier::new(flat.clone()));
    });

    let per = |bytes: i64| bytes as f64 / f64::from(n);
    let rows = [
        ("model (classes, filters, shadow core)", model_bytes),
        ("  of which the shadow core (one worker's)", core_bytes),
        ("flat filter list (engine)", flat_bytes),
        ("classifier (shared by the workers)", classifier_bytes),
    ];
    println!(
        "{n} subscribers, {} commands, {filters} flat filters:",
        commands.len()
    );
    for (what, bytes) in rows {
        println!(
            "  {what:44} {:>8.1} MB  {:>6.0} B per subscriber",
            bytes as f64 / 1e6,
            per(bytes)
        );
    }
    // One worker: the model with its shadow, one more core, the engine's list, the classifier.
    let one_worker = model_bytes + core_bytes + flat_bytes + classifier_bytes;
    let four_workers = one_worker + 3 * core_bytes;
    println!(
        "  counted for htbd with 1 worker: {:.0} B per subscriber; with 4: {:.0} \
         (every worker holds every class)",
        per(one_worker),
        per(four_workers)
    );
    let json = serde_json::json!({
        "subscribers": n,
        "commands": commands.len(),
        "flat_filters": filters,
        "bytes_per_subscriber": {
            "model_with_shadow_core": per(model_bytes),
            "core_one_worker": per(core_bytes),
            "model_without_core": per(model_bytes - core_bytes),
            "flat_filters": per(flat_bytes),
            "classifier": per(classifier_bytes),
            "counted_htbd_1_worker": per(one_worker),
            "counted_htbd_4_workers": per(four_workers),
        },
    });
    let path = support::out_dir().join("memory.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("JSON")).expect("write");
    println!("wrote {}", path.display());
}
