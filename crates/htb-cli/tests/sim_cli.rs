//! The `htb-cli sim` binary: output formats, SVG, and errors.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

fn htb_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_htb-cli"))
        .args(args)
        .output()
        .expect("htb-cli runs")
}

#[test]
fn json_output_is_one_object() {
    let path = example("prio.toml");
    let out = htb_cli(&["sim", path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rate = json["classes"][1]["rate_bps"].as_f64().unwrap();
    assert_eq!(json["classes"][1]["id"], "1:10");
    assert!((rate - 70e6).abs() / 70e6 < 0.005, "{rate}");
}

#[test]
fn table_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("rates.svg");
    let path = example("sharing.toml");
    let out = htb_cli(&[
        "sim",
        path.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("rate Mbit/s") && table.contains("1:12"),
        "{table}"
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.matches("<polyline").count() == 5,
        "one line per class"
    );
}

#[test]
fn malformed_scenarios_fail_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "duration = \"10s\"\n[[class]]\nid = \"1:1\"\nrate = \"fast\"\n",
    )
    .unwrap();
    let out = htb_cli(&["sim", bad.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no report on error");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("bad.toml: line 4, column 8: class[0].rate: invalid rate \"fast\""),
        "{stderr}"
    );

    let out = htb_cli(&["sim", "/nonexistent.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.toml"));

    let out = htb_cli(&["sim"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
}
