//! devik's HTB3 complexity experiment (seed 000), and the per-packet cost of the scheduler at
//! scale. `cargo bench --bench complexity` (criterion), `HTB_BENCH_QUICK=1` for a short run.
//!
//! Benches:
//! - `complexity`: root + n leaves at 8 kbit (ceil = rate, or ceil = root rate), root 30 Mbit
//!   (50 Mbit for n = 5000), k of them backlogged, k log-spaced 1..n: CPU ns per dequeued
//!   packet on the virtual clock, event processing and the packet's enqueue included.
//! - `scale`: n leaves under √n sites under one root, all backlogged, every class borrowing.
//! - `hotpath`: enqueue + dequeue pairs at rates that never throttle: pure overhead, with
//!   pfifo leaves (the kernel's default), fq_codel leaves (htbd's) and cake leaves (LibreQoS's),
//!   four flows per class.
//! - memory per leaf class (counting allocator), idle and with a packet queued, per leaf kind,
//!   and the time to add 100 000 classes.
//!
//! Every tree but the hot path's pfifo one has htbd's default leaf, fq_codel.
//!
//! Writes `target/htb-bench/complexity.json` and `target/htb-bench/complexity.svg`.

#[path = "support/mod.rs"]
mod support;

use std::time::Instant as WallInstant;

use support::{Samples, quick};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use htb_cli::plot::{LineChart, Series};
use htb_core::{
    CakeConfig, ClassHandle, ClassId, ClassSpec, Instant, LeafConfig, Packet, Rate, Scheduler,
    SchedulerConfig,
};

/// A packet that remembers which leaf it came from, so the bench can keep that leaf backlogged,
/// and carries its flow's hash (as the engine's frames do).
#[derive(Clone, Copy, Debug)]
struct Pkt {
    leaf: u32,
    len: u32,
    hash: u32,
}

impl Pkt {
    /// A packet of flow `flow` (0..4) of leaf `leaf`.
    fn new(leaf: u32, flow: u32, len: u32) -> Self {
        // Fibonacci hashing spreads the flows over fq_codel's buckets (it uses the high bits).
        let hash = (leaf.wrapping_mul(4).wrapping_add(flow & 3)).wrapping_mul(0x9E37_79B1);
        Self { leaf, len, hash }
    }
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    fn flow_hash(&self) -> u32 {
        self.hash
    }
    /// One subscriber host per leaf, talking to as many servers as it has flows.
    fn host_hashes(&self) -> (u32, u32) {
        (self.hash ^ 0x5bd1_e995, self.leaf.wrapping_mul(0x85eb_ca6b))
    }
}

/// The leaf kinds compared: pfifo (the kernel's default, 1000 packets), htbd's default and
/// cake (triple-isolate, diffserv3, unlimited: LibreQoS's leaf).
fn leaves() -> [(&'static str, LeafConfig); 3] {
    [
        ("pfifo", LeafConfig::Pfifo { limit: 1000 }),
        ("fq_codel", LeafConfig::default()),
        ("cake", LeafConfig::Cake(CakeConfig::default())),
    ]
}

#[derive(Clone, Debug, serde::Serialize)]
struct Run {
    bench: &'static str,
    leaves: usize,
    backlogged: usize,
    ceil: &'static str,
    leaf: &'static str,
    ns_per_packet: f64,
}

/// A tree driven on its own virtual clock: `leaves[i]` are kept backlogged with `depth`
/// packets of `len` bytes.
struct Workload {
    htb: Scheduler<Pkt>,
    leaves: Vec<ClassHandle>,
    now: Instant,
    len: u32,
}

impl Workload {
    fn backlog(&mut self, active: usize, depth: usize) {
        for (i, &leaf) in self.leaves.iter().take(active).enumerate() {
            for flow in 0..depth {
                self.htb
                    .enqueue(self.now, leaf, Pkt::new(i as u32, flow as u32, self.len))
                    .expect("room");
            }
        }
    }

    /// Dequeues `packets` packets, jumping the clock to each wake-up, refilling each packet's
    /// leaf so the backlog stays constant.
    fn run(&mut self, packets: u64) {
        let mut done = 0;
        while done < packets {
            match self.htb.dequeue(self.now) {
                Some(p) => {
                    let leaf = self.leaves[p.leaf as usize];
                    let _ = self.htb.enqueue(self.now, leaf, p);
                    done += 1;
                }
                None => self.now = self.htb.next_wakeup().expect("backlogged"),
            }
        }
    }
}

/// The root class of every workload.
const ROOT: ClassId = ClassId::new(1, 1);

impl Workload {
    /// A scheduler of `config` with room for `classes`, holding the root 1:1 at `root_rate`;
    /// its packets are `len` bytes.
    fn rooted(config: SchedulerConfig, classes: usize, root_rate: Rate, len: u32) -> Self {
        let mut htb = Scheduler::new(config);
        htb.reserve_classes(classes);
        let _ = htb
            .add_class(Instant::ZERO, ROOT, None, &ClassSpec::new(root_rate))
            .unwrap();
        Self {
            htb,
            leaves: Vec::new(),
            now: Instant::ZERO,
            len,
        }
    }

    /// Adds class `id` under `parent`; a leaf is also one of the classes packets go to.
    fn add(&mut self, id: ClassId, parent: ClassId, spec: &ClassSpec, leaf: bool) {
        let _ = self
            .htb
            .add_class(Instant::ZERO, id, Some(parent), spec)
            .unwrap();
        if leaf {
            self.leaves.push(self.htb.handle(id).unwrap());
        }
    }
}

/// Seed 000: root + n leaves at 8 kbit.
fn devik_tree(n: usize, ceil_is_root: bool) -> Workload {
    let root_rate = if n >= 5000 {
        Rate::from_mbit(50)
    } else {
        Rate::from_mbit(30)
    };
    let mut w = Workload::rooted(SchedulerConfig::default(), n + 1, root_rate, 1000);
    for i in 0..n {
        let mut spec = ClassSpec::new(Rate::from_kbit(8));
        if ceil_is_root {
            spec = spec.with_ceil(root_rate);
        }
        w.add(ClassId::new(1, 0x10 + i as u32), ROOT, &spec, true);
    }
    w
}

/// n leaves under √n sites under one root, every class able to borrow.
fn sites_tree(n: usize) -> Workload {
    let sites = (n as f64).sqrt().round().max(1.0) as usize;
    let root_rate = Rate::from_gbit(10);
    let site_rate = Rate::from_bits_per_sec(root_rate.bits_per_sec() / sites as u64);
    let leaf_rate = Rate::from_bits_per_sec((root_rate.bits_per_sec() / n as u64 / 2).max(1));
    let mut w = Workload::rooted(SchedulerConfig::default(), n + sites + 1, root_rate, 1500);
    let site = |i: usize| ClassId::new(1, 2 + (i % sites) as u32);
    for s in 0..sites {
        let spec = ClassSpec::new(site_rate).with_ceil(root_rate);
        w.add(site(s), ROOT, &spec, false);
    }
    for i in 0..n {
        let spec = ClassSpec::new(leaf_rate).with_ceil(site_rate);
        w.add(ClassId::new(1, 0x100000 + i as u32), site(i), &spec, true);
    }
    w
}

/// n leaves at rates nothing reaches, under `leaf`: every enqueue/dequeue pair is pure
/// scheduling overhead.
fn unthrottled_tree(n: usize, leaf: LeafConfig) -> Workload {
    let config = SchedulerConfig {
        default_leaf: leaf,
        ..SchedulerConfig::default()
    };
    let fast = Rate::from_gbit(1_000_000);
    let mut w = Workload::rooted(config, n + 1, fast, 1500);
    let spec = ClassSpec::new(fast).with_quantum(1500);
    for i in 0..n {
        w.add(ClassId::new(1, 0x10 + i as u32), ROOT, &spec, true);
    }
    w
}

fn log_points(n: usize) -> Vec<usize> {
    let mut points = Vec::new();
    let mut decade = 1;
    while decade <= n {
        for m in if quick() { &[1][..] } else { &[1, 2, 5][..] } {
            if m * decade <= n {
                points.push(m * decade);
            }
        }
        decade *= 10;
    }
    if points.last() != Some(&n) {
        points.push(n);
    }
    points
}

/// Benchmarks `work.run` (dequeue with backlog top-up) as `id`; returns the median ns/packet.
fn bench_run(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    work: &mut Workload,
) -> f64 {
    let samples = Samples::default();
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let start = WallInstant::now();
            work.run(iters);
            let elapsed = start.elapsed();
            samples.record(elapsed, iters);
            elapsed
        });
    });
    samples.median()
}

fn bench_complexity(c: &mut Criterion, runs: &mut Vec<Run>) {
    let mut group = c.benchmark_group("complexity");
    for n in [1200usize, 5000] {
        for (ceil, ceil_is_root) in [("rate", false), ("root", true)] {
            for k in log_points(n) {
                let mut work = devik_tree(n, ceil_is_root);
                work.backlog(k, 2);
                work.run(2 * k as u64); // reach steady state
                let id = BenchmarkId::new(format!("n{n}/ceil_{ceil}"), k);
                runs.push(Run {
                    bench: "complexity",
                    leaves: n,
                    backlogged: k,
                    ceil,
                    leaf: "fq_codel",
                    ns_per_packet: bench_run(&mut group, id, &mut work),
                });
            }
        }
    }
    group.finish();
}

fn bench_scale(c: &mut Criterion, runs: &mut Vec<Run>) {
    let mut group = c.benchmark_group("scale");
    for n in [100usize, 1_000, 10_000, 100_000, 1_000_000] {
        let mut work = sites_tree(n);
        work.backlog(n, 2);
        work.run(2 * n as u64);
        // Criterion's own report (its calls are short: see `whole_periods`).
        bench_run(&mut group, BenchmarkId::from_parameter(n), &mut work);
        runs.push(Run {
            bench: "scale",
            leaves: n,
            backlogged: n,
            ceil: "root",
            leaf: "fq_codel",
            ns_per_packet: whole_periods(&mut work, n),
        });
    }
    group.finish();
}

/// The median ns per packet of `scale`'s workload over rounds of whole periods.
///
/// Every leaf of this tree runs at half its share of the root and sends its first packet on
/// its burst at the same instant, so the leaves fall due together: every period (2.4 s of the
/// virtual clock at 1 000 000 leaves, about 2n packets) one dequeue processes an event per leaf
/// (1 000 000 events, 97 ms here, then nothing for ~2n packets). Criterion's calls, a few
/// hundred packets each in quick mode, either miss that storm or are made of it, so their
/// median said 137–160 µs per packet at 1 000 000 (sessions 6–7) where the cost over whole
/// periods is 200–370 ns. Rounds of 2n packets (at least 200 000) each hold one storm.
fn whole_periods(work: &mut Workload, n: usize) -> f64 {
    let packets = (2 * n as u64).max(200_000);
    let samples = Samples::default();
    for _ in 0..if quick() { 3 } else { 7 } {
        let start = WallInstant::now();
        work.run(packets);
        samples.record(start.elapsed(), packets);
    }
    samples.median()
}

/// Enqueue + dequeue pairs at rates nothing reaches, in two patterns: one packet in flight
/// (each pair enqueues into the next class, round robin, and dequeues it at once: queues hover at
/// empty, as for unthrottled traffic), and every class backlogged with one packet (each pair
/// enqueues into the next class and dequeues whatever DRR picks).
fn bench_hotpath(c: &mut Criterion, runs: &mut Vec<Run>) {
    let mut group = c.benchmark_group("hotpath");
    // The two leaves of one point run back to back, so that the machine's drift between
    // points does not enter their ratio.
    for n in [1usize, 100, 10_000, 100_000, 1_000_000] {
        for backlogged in if n == 1 { vec![1] } else { vec![1, n] } {
            // At 100 000 classes with one in flight, pfifo again with stall credit on (a
            // driver has reported a stall, as htbd's workers do on a VM): what the credited
            // caps cost when no stall is spanned.
            let credited = (n == 100_000 && backlogged == 1)
                .then_some(("pfifo_stall_credit", LeafConfig::Pfifo { limit: 1000 }));
            for (leaf_name, leaf) in leaves().into_iter().chain(credited) {
                let mut work = unthrottled_tree(n, leaf);
                if backlogged == n {
                    work.backlog(n, 1);
                }
                if leaf_name.ends_with("_stall_credit") {
                    work.htb.credit_stall(
                        Instant::ZERO,
                        Instant::from_nanos(4_000_000),
                        htb_core::Duration::from_millis(10),
                    );
                }
                let samples = Samples::default();
                let (mut next, mut flow) = (0usize, 0u32);
                let id = BenchmarkId::new(
                    format!(
                        "{leaf_name}/backlogged_{}",
                        if backlogged == 1 { "1" } else { "all" }
                    ),
                    n,
                );
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let start = WallInstant::now();
                        for _ in 0..iters {
                            // The clock advances by one packet time at 10 Gbit/s.
                            work.now += htb_core::Duration::from_nanos(1200);
                            let leaf = work.leaves[next];
                            let _ =
                                work.htb
                                    .enqueue(work.now, leaf, Pkt::new(next as u32, flow, 1500));
                            next = if next + 1 == n { 0 } else { next + 1 };
                            if next == 0 {
                                flow = flow.wrapping_add(1);
                            }
                            let p = work.htb.dequeue(work.now);
                            assert!(p.is_some(), "never throttled");
                        }
                        let elapsed = start.elapsed();
                        samples.record(elapsed, iters);
                        elapsed
                    });
                });
                runs.push(Run {
                    bench: "hotpath",
                    leaves: n,
                    backlogged,
                    ceil: "rate",
                    leaf: leaf_name,
                    ns_per_packet: samples.median(),
                });
            }
        }
    }
    group.finish();
}

/// Memory and build time of a 100 000-class tree under one leaf kind.
#[derive(Clone, Debug, serde::Serialize)]
struct Memory {
    leaf: &'static str,
    /// Heap bytes per class of the built tree, every leaf idle.
    idle_bytes_per_class: u64,
    /// Further heap bytes per class once every leaf holds one packet (the packet's slot in
    /// the pool, fq_codel's flow record).
    busy_bytes_per_class: u64,
    /// Median time to add the 100 000 classes.
    add_100k_classes_ms: f64,
}

fn memory_and_add_time(leaf_name: &'static str, leaf: LeafConfig) -> Memory {
    const N: usize = 100_000;
    let build = || {
        let mut htb: Scheduler<Pkt> = Scheduler::new(SchedulerConfig {
            default_leaf: leaf,
            ..SchedulerConfig::default()
        });
        htb.reserve_classes(N + 1);
        let root = ClassId::new(1, 1);
        let _ = htb
            .add_class(
                Instant::ZERO,
                root,
                None,
                &ClassSpec::new(Rate::from_gbit(10)),
            )
            .unwrap();
        let spec = ClassSpec::new(Rate::from_mbit(50)).with_ceil(Rate::from_mbit(500));
        for i in 0..N {
            let _ = htb
                .add_class(
                    Instant::ZERO,
                    ClassId::new(1, 0x10 + i as u32),
                    Some(root),
                    &spec,
                )
                .unwrap();
        }
        htb
    };
    let mut kept = None;
    let idle = allocation_counter::measure(|| kept = Some(build()));
    let mut htb = kept.expect("built");
    let busy = allocation_counter::measure(|| {
        for i in 0..N {
            let id = htb.handle(ClassId::new(1, 0x10 + i as u32)).expect("class");
            htb.enqueue(Instant::ZERO, id, Pkt::new(i as u32, 0, 1500))
                .expect("room");
        }
    });
    drop(htb);
    let mut times: Vec<f64> = (0..if quick() { 3 } else { 9 })
        .map(|_| {
            let start = WallInstant::now();
            let htb = build();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            drop(htb);
            ms
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Memory {
        leaf: leaf_name,
        idle_bytes_per_class: idle.bytes_current as u64 / (N as u64 + 1),
        busy_bytes_per_class: busy.bytes_current as u64 / N as u64,
        add_100k_classes_ms: times[times.len() / 2],
    }
}

/// The hot path's ratios of leaf `of` to leaf `to`, point by point: `(leaves, backlogged,
/// ratio)`.
fn hotpath_ratios(runs: &[Run], of: &str, to: &str) -> Vec<(usize, usize, f64)> {
    runs.iter()
        .filter(|r| r.bench == "hotpath" && r.leaf == of)
        .filter_map(|r| {
            let base = runs.iter().find(|f| {
                f.bench == "hotpath"
                    && f.leaf == to
                    && (f.leaves, f.backlogged) == (r.leaves, r.backlogged)
            })?;
            Some((r.leaves, r.backlogged, r.ns_per_packet / base.ns_per_packet))
        })
        .collect()
}

/// The median and the worst of `ratios`.
fn median_worst(ratios: &[(usize, usize, f64)]) -> (f64, f64) {
    let mut sorted: Vec<f64> = ratios.iter().map(|r| r.2).collect();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    (median, sorted.last().copied().unwrap_or(f64::NAN))
}

fn summarize(runs: &[Run], memory: &[Memory]) {
    let dir = support::out_dir();
    let ratios = hotpath_ratios(runs, "fq_codel", "pfifo");
    let (median, worst) = median_worst(&ratios);
    let cake = hotpath_ratios(runs, "cake", "fq_codel");
    let (cake_median, cake_worst) = median_worst(&cake);
    let listed = |ratios: &[(usize, usize, f64)]| {
        ratios
            .iter()
            .map(|(n, k, r)| serde_json::json!({"leaves": n, "backlogged": k, "ratio": r}))
            .collect::<Vec<_>>()
    };
    let idle_bytes = |leaf: &str| {
        memory
            .iter()
            .find(|m| m.leaf == leaf)
            .map(|m| m.idle_bytes_per_class)
    };
    let json = serde_json::json!({
        "runs": runs,
        "memory_100k_classes": memory,
        "goals": {
            "hotpath_fq_codel_over_pfifo": listed(&ratios),
            "hotpath_fq_codel_over_pfifo_median": median,
            "hotpath_fq_codel_over_pfifo_worst": worst,
            "idle_fq_codel_leaf_bytes": idle_bytes("fq_codel"),
            "hotpath_cake_over_fq_codel": listed(&cake),
            "hotpath_cake_over_fq_codel_median": cake_median,
            "hotpath_cake_over_fq_codel_worst": cake_worst,
            "idle_cake_leaf_bytes": idle_bytes("cake"),
        },
    });
    std::fs::write(
        dir.join("complexity.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();

    let mut series: Vec<Series> = Vec::new();
    for run in runs.iter().filter(|r| r.bench == "complexity") {
        let name = format!("n={} ceil={}", run.leaves, run.ceil);
        if series.last().is_none_or(|s| s.name != name) {
            series.push(Series {
                name: name.clone(),
                points: Vec::new(),
                dashed: run.ceil == "rate",
            });
        }
        series
            .last_mut()
            .unwrap()
            .points
            .push((run.backlogged as f64, run.ns_per_packet));
    }
    let chart = LineChart {
        title: "HTB complexity (devik's HTB3 experiment): 8 kbit leaves under one root".into(),
        x_label: "backlogged classes".into(),
        y_label: "CPU ns per packet".into(),
        x_log: true,
        series,
    };
    std::fs::write(dir.join("complexity.svg"), chart.to_svg()).unwrap();

    println!(
        "\n{:<11} {:>7} {:>10} {:>5} {:>9} {:>12}",
        "bench", "leaves", "backlogged", "ceil", "leaf", "ns/packet"
    );
    for r in runs {
        println!(
            "{:<11} {:>7} {:>10} {:>5} {:>9} {:>12.1}",
            r.bench, r.leaves, r.backlogged, r.ceil, r.leaf, r.ns_per_packet
        );
    }
    for m in memory {
        println!(
            "100 000 {} leaf classes: {} bytes per class idle, +{} with a packet queued; added in {:.1} ms (median)",
            m.leaf, m.idle_bytes_per_class, m.busy_bytes_per_class, m.add_100k_classes_ms
        );
    }
    for (n, k, r) in &ratios {
        println!("hot path, {n} classes, {k} backlogged: fq_codel / pfifo = {r:.2}");
    }
    println!("hot path, fq_codel over pfifo: median {median:.2}x, worst {worst:.2}x");
    for (n, k, r) in &cake {
        println!("hot path, {n} classes, {k} backlogged: cake / fq_codel = {r:.2}");
    }
    println!("hot path, cake over fq_codel: median {cake_median:.2}x, worst {cake_worst:.2}x");
    println!("wrote {}/complexity.json and complexity.svg", dir.display());
}

fn main() {
    let mut criterion = support::criterion();
    let mut runs = Vec::new();
    bench_complexity(&mut criterion, &mut runs);
    bench_scale(&mut criterion, &mut runs);
    bench_hotpath(&mut criterion, &mut runs);
    // LibreQoS's cake has four tins (diffserv4): a row of its own for memory.
    let diffserv4 = LeafConfig::Cake(CakeConfig {
        diffserv: htb_core::DiffservMode::Diffserv4,
        ..CakeConfig::default()
    });
    let memory: Vec<Memory> = leaves()
        .into_iter()
        .chain([("cake_diffserv4", diffserv4)])
        .map(|(name, leaf)| memory_and_add_time(name, leaf))
        .collect();
    criterion.final_summary();
    summarize(&runs, &memory);
}
