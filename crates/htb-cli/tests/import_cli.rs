//! `htb-cli import --shard K/N --print`: several boxes import the same ShapedDevices.csv and
//! each gets its own circuits, every circuit on exactly one box (no htbd needed: `--print`).

use std::collections::BTreeSet;
use std::process::Command;

const HEADER: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
                      Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n";

/// The circuits (by their `# circuit "ID"` comment) of one box's printed batch.
fn circuits_of(file: &std::path::Path, shard: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_htb-cli"))
        .args(["import", file.to_str().unwrap(), "--download-dev", "r2"])
        .args(["--parent", "1:1", "--print", "--shard", shard])
        .output()
        .expect("htb-cli runs");
    assert!(
        out.status.success(),
        "--shard {shard}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("# circuit \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn three_boxes_share_the_circuits_each_on_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ShapedDevices.csv");
    let mut csv = String::from(HEADER);
    for i in 0..300 {
        csv += &format!(
            "c{i},Sub {i},d{i},cpe{i},,,100.64.{}.{},,1,1,10,5,\n",
            i / 250,
            i % 250 + 1
        );
    }
    std::fs::write(&file, csv).unwrap();
    let boxes: Vec<BTreeSet<String>> = (1..=3)
        .map(|k| circuits_of(&file, &format!("{k}/3")))
        .collect();
    let all: BTreeSet<String> = boxes.iter().flatten().cloned().collect();
    assert_eq!(all.len(), 300, "every circuit is on a box");
    assert_eq!(
        boxes.iter().map(BTreeSet::len).sum::<usize>(),
        300,
        "no circuit is on two boxes"
    );
    assert!(
        boxes.iter().all(|b| (70..130).contains(&b.len())),
        "{:?}",
        boxes.iter().map(BTreeSet::len).collect::<Vec<_>>()
    );
    // The same file again: the same split (the hash is fixed).
    assert_eq!(circuits_of(&file, "2/3"), boxes[1]);
    // A bad shard is refused before anything is read.
    let out = Command::new(env!("CARGO_BIN_EXE_htb-cli"))
        .args(["import", file.to_str().unwrap(), "--download-dev", "r2"])
        .args(["--parent", "1:1", "--print", "--shard", "4/3"])
        .output()
        .expect("htb-cli runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected K/N"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The control socket's options may come before `import`, as before tc's objects: the import
/// then tries that socket (and says so when nothing answers there).
#[test]
fn socket_options_may_come_before_import() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ShapedDevices.csv");
    std::fs::write(
        &file,
        format!("{HEADER}c1,S,d1,D,,,100.64.0.1,,1,1,10,5,\n"),
    )
    .unwrap();
    let socket = dir.path().join("nothing.sock");
    for leading in [true, false] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_htb-cli"));
        let options = ["--socket", socket.to_str().unwrap(), "--timeout", "2"];
        if leading {
            cmd.args(options);
        }
        cmd.args(["import", file.to_str().unwrap(), "--download-dev", "r2"])
            .args(["--parent", "1:1"]);
        if !leading {
            cmd.args(options);
        }
        let out = cmd.output().expect("htb-cli runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "no htbd answers: {err}");
        assert!(
            err.contains("cannot reach htbd at") && err.contains("nothing.sock"),
            "options first: {leading}: {err}"
        );
    }
}
