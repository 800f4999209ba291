//! Split classes (`docs/several-cores.md`) against a live htbd in the netns lab: one subscriber
//! served by both workers at once on 2-queue veths, at its rate, with no frame handed between
//! the workers; and the same subscriber owned by one worker, as the control that shows the
//! traffic did reach both workers. Needs root and network namespaces, so each test is
//! `#[ignore]`d; `scripts/test.sh` includes them as root.

use htb_lab::{Htbd, Lab, Promise, R, assert_owed};

/// Two workers; on r2 a 40 Mbit/s subscriber (1:10, the default class) under a 200 Mbit/s
/// root, split or owned as `split` says.
fn config(split: bool) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         workers = 2\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n\
         [interface.qdisc]\ndefault = \"10\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"200mbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"40mbit\"\nceil = \"40mbit\"\n\
         split = {split}\n"
    )
}

/// What one run saw: frames each of r1's RX queues gave to htbd, and frames each worker
/// handed to the other.
struct Seen {
    per_queue: Vec<u64>,
    handed_out: Vec<u64>,
}

/// Offers 1:10 twice its rate, half on each of node-1's TX queues (so half to each worker),
/// and checks that the class delivered what it owed within 1 %.
fn run(lab: &Lab, split: bool) -> Seen {
    let htbd = Htbd::start(lab, &config(split));
    let status = htbd.status();
    assert_eq!(status.workers.len(), 2, "{status:?}");
    assert_eq!(
        status.split_subtrees,
        u32::from(split),
        "split = {split}: {status:?}"
    );
    let queues_before = lab.rx_queue_redirects(R, "r1");
    let what = if split {
        "1:10 split: served by both workers"
    } else {
        "1:10 owned by one worker"
    };
    let before = htbd.class_stats("r2", "1:10");
    let (load, stalls) =
        htbd.accounted(|| lab.xdp_loads(&[(0, 5201, "40mbit"), (1, 5202, "40mbit")], 1000, 6));
    load.assert_saturates(what, 40e6);
    htbd.assert_class_saturated("r2", "1:10", &before);
    assert_owed(what, &load.delivered, &Promise::class(40e6), &stalls, 0.01);
    let after = htbd.status();
    let per_queue: Vec<u64> = lab
        .rx_queue_redirects(R, "r1")
        .iter()
        .zip(&queues_before)
        .map(|(a, b)| a - b)
        .collect();
    let handed_out = after
        .workers
        .iter()
        .zip(&status.workers)
        .map(|(a, b)| a.handed_out - b.handed_out)
        .collect();
    let (status, _dir) = htbd.terminate();
    assert!(status.success(), "htbd stopped with {status}");
    Seen {
        per_queue,
        handed_out,
    }
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_split_class_is_served_by_both_workers_at_its_rate_without_handing_frames_over() {
    htb_lab::remeasured(|| {
        let lab = Lab::up_with_queues("htbsp", "router", 2);
        let owned = run(&lab, false);
        let split = run(&lab, true);
        eprintln!(
            "owned: frames per RX queue {:?}, handed to the other worker {:?}; split: {:?}, {:?}",
            owned.per_queue, owned.handed_out, split.per_queue, split.handed_out
        );
        for (what, seen) in [("owned", &owned), ("split", &split)] {
            // The premise: each worker's queue received a good part of the class's traffic.
            let total: u64 = seen.per_queue.iter().sum();
            assert!(
                seen.per_queue.len() == 2 && seen.per_queue.iter().all(|&n| n * 4 >= total),
                "{what}: r1's RX queues did not both carry the load: {:?}",
                seen.per_queue
            );
        }
        // Owned, what the other worker received is handed to the owner: about half of it.
        let owned_total: u64 = owned.per_queue.iter().sum();
        let owned_handed: u64 = owned.handed_out.iter().sum();
        assert!(
            owned_handed * 4 >= owned_total,
            "owned: only {owned_handed} of {owned_total} frames were handed over: {:?}",
            owned.handed_out
        );
        // Split, each worker queues what it received: nothing is handed over.
        assert_eq!(
            split.handed_out,
            vec![0, 0],
            "split: frames were handed between the workers"
        );
    });
}
