//! The shapers a lab measurement compares — htbd, the kernel forwarding unshaped, the kernel's
//! HTB given the same tree through `htbd --print-tc` — installed on the router's r2 and
//! removed again.

use std::time::Duration;

use anyhow::bail;

use crate::{Htbd, Lab, R};

/// Who forwards node-1 → node-2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shaper {
    /// htbd with the tree.
    Htbd,
    /// The kernel, routing without a shaper.
    Kernel,
    /// The kernel's HTB with the same tree (tc lines from `htbd::tc_export`).
    KernelHtb,
}

impl Shaper {
    /// Its key in the benchmark's JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Htbd => "htbd",
            Self::Kernel => "kernel",
            Self::KernelHtb => "kernel_htb",
        }
    }
}

/// A shaper set up in the lab; [`uninstall`] removes it.
#[derive(Debug)]
pub enum Installed {
    /// htbd, running.
    Htbd(Box<Htbd>),
    /// tc's tree on r2.
    Tc,
    /// Nothing to remove.
    Nothing,
}

impl Installed {
    /// The running htbd, if that is what was installed.
    #[must_use]
    pub fn htbd(&self) -> Option<&Htbd> {
        match self {
            Self::Htbd(htbd) => Some(htbd),
            _ => None,
        }
    }
}

/// An htbd config (with `@SOCKET@` and `@STATE@` for [`Htbd::start`]) of one class taking all
/// traffic to node-2 at `rate` (a tc rate), under leaf `leaf` (htbd's default, fq_codel, when
/// `None`).
#[must_use]
pub fn one_class_tree(rate: &str, leaf: Option<&str>) -> String {
    let leaf = leaf.map_or_else(String::new, |l| format!("leaf = \"{l}\"\n"));
    format!(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n[[interface]]\nname = \"r1\"\n\
         [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"10\"\n{leaf}\
         [[interface.class]]\nid = \"1:1\"\nrate = \"{rate}\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"{rate}\"\n"
    )
}

/// Installs `shaper` with the tree of `config` (an htbd config as [`one_class_tree`] writes).
///
/// # Errors
/// When the config does not parse or tc refuses a line.
pub fn install(lab: &Lab, shaper: Shaper, config: &str) -> anyhow::Result<Installed> {
    Ok(match shaper {
        Shaper::Htbd => Installed::Htbd(Box::new(Htbd::start(lab, config))),
        Shaper::Kernel => Installed::Nothing,
        Shaper::KernelHtb => {
            let config = htbd::DaemonConfig::parse(
                &config
                    .replace("@SOCKET@", "/tmp/x")
                    .replace("@STATE@", "/tmp/x"),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            let notes = apply_tc(lab, &htbd::tc_export::commands(&config)?)?;
            // The same notes at every install: once per process is enough.
            static NOTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !notes.is_empty() && !NOTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                for note in notes {
                    eprintln!("  note: {note}");
                }
            }
            Installed::Tc
        }
    })
}

/// Runs tc lines in the router. A leaf qdisc line whose kind this kernel lacks (this machine
/// has no sch_fq_codel or sch_sfq) is skipped — the class keeps the kernel's default pfifo —
/// and comes back as a note to print.
///
/// # Errors
/// When any other line fails.
pub fn apply_tc(lab: &Lab, commands: &[String]) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    for command in commands {
        let out = lab.exec(R, &["sh", "-c", command]);
        if out.status.success() || command.contains("|| true") {
            continue;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let leaf_line = command.starts_with("tc qdisc add") && command.contains(" parent ");
        if leaf_line && stderr.contains("qdisc kind is unknown") {
            let kind = command
                .split_whitespace()
                .find(|w| ["fq_codel", "sfq", "cake"].contains(w))
                .unwrap_or("this qdisc");
            notes.push(format!(
                "this kernel has no {kind}: `{command}` skipped, the class keeps pfifo"
            ));
            continue;
        }
        bail!("{command}: {}", stderr.trim());
    }
    Ok(notes)
}

/// Removes what [`install`] set up and waits for it to be gone.
pub fn uninstall(lab: &Lab, installed: Installed) {
    match installed {
        Installed::Htbd(htbd) => {
            // SIGTERM and wait for the exit, so that the next run never races the teardown.
            let _ = htbd.terminate();
        }
        Installed::Tc => {
            let _ = lab.exec(R, &["tc", "qdisc", "del", "dev", "r2", "root"]);
        }
        Installed::Nothing => {}
    }
    std::thread::sleep(Duration::from_millis(300));
}
