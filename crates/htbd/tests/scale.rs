//! 200 000 subscribers against a live htbd in the netns lab (issue 23): one `htb-cli import` of a
//! ShapedDevices.csv adds a class and a filter per circuit, a second import of a file that keeps
//! one circuit deletes the other 200 000 in one batch, and node-2's circuit is shaped to its plan
//! before and after, and `class show -s` lists every class (in pages); htbd's own account of
//! its data-plane jobs (`htb-cli status`) bounds the longest stall throughout, each job judged
//! by its own time: what a witness saw the host take from its CPU meanwhile does not count, nor
//! more than the CPU time its thread was charged (`StallWitness::own_us`).
//! Needs root and network namespaces, so the test is `#[ignore]`d; `scripts/test.sh` includes
//! it as root.

use htb_lab::stall_witness::StallWitness;
use htb_lab::{Htbd, Lab, N1, Promise};

/// Router mode; r2 (towards node-2: the download direction) has the circuits' parent 1:1 and
/// the default 1:99.
const CONFIG: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n\
     [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nparent = \"1:1\"\nrate = \"1gbit\"\n";

/// Circuits besides node-2's.
const SUBSCRIBERS: u32 = 200_000;

/// The longest a data-plane job may run of its own. The goal is 1 ms, which `htb-lab scale`
/// measures (0.26 ms at this size); jobs here took 0.2–0.55 ms of their own over runs on this
/// 2-vCPU VM. Storage that grows by copying took 9.8 ms at 100 000 subscribers before it was
/// chunked, twice that at 200 000. A CI machine's host once froze a job for 11.75 ms, which
/// its guest kernel counted as the thread's CPU time too: hence the witness.
const STALL_BOUND_US: u64 = 5000;

/// node-2's download plan.
const PLAN_MBIT: f64 = 5.0;

/// node-2 as circuit "lab" (its class is 1:100), then `others` subscribers in 100.64.0.0/10.
fn shaped_devices(others: u32) -> String {
    htb_lab::scale::shaped_devices("lab,node-2,d-lab,node-2,,,10.201.2.2,,1,1,5,5,\n", others)
}

fn import(htbd: &Htbd, file: &std::path::Path) -> String {
    let out = htbd.cli(&[
        "import",
        file.to_str().unwrap(),
        "--download-dev",
        "r2",
        "--parent",
        "1:1",
        "--timeout",
        "300",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}\n{}", htbd.log_text());
    err
}

/// node-2's download through its circuit's class: at its plan, and the class was full.
fn assert_shaped(lab: &Lab, htbd: &Htbd, when: &str) {
    htbd.assert_shapes(
        &format!("node-2's download {when}"),
        ("r2", "1:100"),
        &Promise::class(PLAN_MBIT * 1e6),
        0.03,
        || lab.udp_load(5201, "10M", 3),
    );
}

/// Every job htbd ran so far took at most [`STALL_BOUND_US`] of its own: its time less what
/// `witness` saw taken from its CPU while it ran.
fn assert_no_long_job(htbd: &Htbd, witness: &StallWitness, during: &str) {
    let status = htbd.status();
    let seen = witness.seen();
    let slowest: Vec<(u64, u64)> = status
        .slowest_jobs
        .iter()
        .map(|job| (job.took_us, seen.own_us(job)))
        .collect();
    eprintln!(
        "after {during}: {} data-plane jobs, the longest {} µs ({} µs of CPU at most); \
         the slowest as (took, own) µs: {slowest:?}",
        status.jobs, status.longest_job_us, status.longest_job_cpu_us
    );
    // Premise: htbd said when its slowest jobs ran, and none it left unsaid may be long.
    assert!(
        !slowest.is_empty() && status.slowest_jobs[0].took_us == status.longest_job_us,
        "htbd lists its slowest jobs: {:?}",
        status.slowest_jobs
    );
    if let Some(last) = status.slowest_jobs.last().filter(|_| slowest.len() == 16) {
        assert!(
            last.took_us <= STALL_BOUND_US,
            "more than 16 jobs ran over {STALL_BOUND_US} µs by the end of {during}: {slowest:?}"
        );
    }
    let own = slowest.iter().map(|&(_, own)| own).max().unwrap_or(0);
    assert!(
        own <= STALL_BOUND_US,
        "a data-plane job ran {own} µs of its own (bound {STALL_BOUND_US}) by the end of \
         {during}: {slowest:?}"
    );
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn two_hundred_thousand_subscribers_come_and_go_in_one_batch_each_without_a_long_stall() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbm", "router");
        let witness = StallWitness::start().expect("root may run the witness at SCHED_FIFO");
        let htbd = Htbd::start(&lab, CONFIG);
        let file = htbd.dir().join("ShapedDevices.csv");
        std::fs::write(&file, shaped_devices(SUBSCRIBERS)).unwrap();
        assert_eq!(lab.ping(N1, "10.201.2.2", 1, "0.2"), 1);
        let jobs_before = htbd.status().jobs;

        let started = std::time::Instant::now();
        let summary = import(&htbd, &file);
        eprintln!(
            "{} circuits imported in {:?}",
            SUBSCRIBERS + 1,
            started.elapsed()
        );
        let all = SUBSCRIBERS + 1;
        assert!(
        summary.contains(&format!(
            "synced {all} circuits (classes 1:100..1:{:x}): {all} classes added, 0 changed, 0 deleted; {all} filters added, 0 deleted",
            0x100 + SUBSCRIBERS
        )),
        "{summary}"
    );
        // The premise of the stall bound: the batch reached the data plane in many jobs.
        let jobs = htbd.status().jobs - jobs_before;
        assert!(
            u64::from(2 * SUBSCRIBERS) / 512 <= jobs,
            "the import ran {jobs} data-plane jobs"
        );
        assert_no_long_job(&htbd, &witness, "the import");
        assert_shaped(&lab, &htbd, "among 200 000 subscribers");

        // Every class with its counters, in pages far below the message limit (one answer would
        // be some 120 MB).
        let started = std::time::Instant::now();
        let shown = htbd.cli_ok(&["-s", "class", "show", "dev", "r2"]);
        let listed = shown
            .lines()
            .filter(|l| l.starts_with("class htb "))
            .count();
        eprintln!(
            "class show -s of {listed} classes in {:?}",
            started.elapsed()
        );
        assert_eq!(listed as u32, all + 2, "1:1, 1:99 and a class per circuit");
        assert!(
            shown.contains("class htb 1:100 parent 1:1 prio 0 rate 1Mbit ceil 5Mbit"),
            "node-2's class"
        );
        assert_no_long_job(&htbd, &witness, "class show -s");

        // Every other circuit goes: one batch of 200 000 filter and 200 000 class deletes.
        std::fs::write(&file, shaped_devices(0)).unwrap();
        let started = std::time::Instant::now();
        let summary = import(&htbd, &file);
        eprintln!("{SUBSCRIBERS} circuits deleted in {:?}", started.elapsed());
        assert!(
        summary.contains(&format!(
            "synced 1 circuits (classes 1:100..1:100): 0 classes added, 0 changed, {SUBSCRIBERS} deleted; 0 filters added, {SUBSCRIBERS} deleted"
        )),
        "{summary}"
    );
        let classes: serde_json::Value =
            serde_json::from_str(&htbd.cli_ok(&["-j", "class", "show", "dev", "r2"])).unwrap();
        assert_eq!(
            classes.as_array().map(Vec::len),
            Some(3),
            "1:1, 1:99 and node-2's 1:100 are left"
        );
        assert_no_long_job(&htbd, &witness, "the delete");
        assert_shaped(&lab, &htbd, "alone again");
    });
}
