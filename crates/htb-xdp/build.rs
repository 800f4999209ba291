//! Compiles the XDP program (`src/bpf/htb_xdp.c`) with clang into `$OUT_DIR/htb_xdp.o`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "src/bpf/htb_xdp.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("htb_xdp.o");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The asm/*.h headers live in the multiarch include directory, which `-target bpf` misses.
    let multiarch = Command::new("gcc")
        .arg("-print-multiarch")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            format!(
                "{}-linux-gnu",
                env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default()
            )
        });
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", source, "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {clang} to build the XDP program (install clang: scripts/setup.sh): {e}"
            )
        });
    assert!(
        status.success(),
        "{clang} failed to compile {source} (needs clang, libbpf-dev)"
    );
}
