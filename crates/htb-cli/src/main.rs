//! `htb-cli`: see the crate documentation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use htb_cli::import::circuits::Placement;
use htb_cli::import::{self, Import, ImportError};
use htb_cli::sim::{Scenario, run};
use htb_core::ClassId;
use htb_ipc::InterfaceName;

#[derive(Parser)]
#[command(
    name = "htb-cli",
    version,
    about = "Control htbd with tc's grammar; simulate HTB trees"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario on the deterministic simulator.
    Sim {
        /// Scenario file (TOML).
        scenario: PathBuf,
        /// Print the JSON report instead of a table.
        #[arg(long)]
        json: bool,
        /// Also draw per-class rate over time into this SVG file.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
    },
    /// Make LibreQoS's ShapedDevices.csv (and network.json) what runs, as one atomic batch of
    /// the differences: per circuit a class (rate = min, ceil = max) under its node in each
    /// tree, one u32 filter per address; untouched circuits keep their classes and counters.
    Import {
        /// The CSV file (LibreQoS's ShapedDevices.csv columns).
        file: PathBuf,
        /// LibreQoS's network.json: its nodes become classes between --parent and the
        /// circuits (rate = min, else max; ceil = max; capped by the parent's).
        #[arg(long, value_name = "FILE")]
        network: Option<PathBuf>,
        /// Port towards the subscribers: the download tree, filters on the destination.
        #[arg(long, value_name = "DEV")]
        download_dev: Option<InterfaceName>,
        /// Port towards the upstream: the upload tree, filters on the source.
        #[arg(long, value_name = "DEV")]
        upload_dev: Option<InterfaceName>,
        /// The class circuits hang under unless their Parent Node is mapped with --node
        /// (the same class id in both trees).
        #[arg(long, value_name = "CLASSID")]
        parent: ClassId,
        /// Map a Parent Node name to its class: `--node AP_A=1:10` (repeatable).
        #[arg(long = "node", value_name = "NAME=CLASSID", value_parser = node_mapping)]
        nodes: Vec<(String, ClassId)>,
        /// The IPv4 filters' prio; IPv6 filters use the next one.
        #[arg(long, default_value_t = 10)]
        prio: u32,
        /// The lowest class minor (hex, as tc writes minors) a circuit may take; minors in
        /// use on either port are skipped.
        #[arg(long, value_name = "HEX", default_value = "100", value_parser = hex_minor)]
        first_minor: u32,
        /// Print the whole tc batch, as if nothing ran, instead of sending it (htbd is not
        /// asked).
        #[arg(long, conflicts_with = "dry_run")]
        print: bool,
        /// Print the batch of differences to what runs instead of sending it.
        #[arg(long)]
        dry_run: bool,
        /// htbd's control socket; given several times, the file is synced to each box in
        /// turn (atomically on each) and every box's outcome reported.
        #[arg(long, value_name = "PATH")]
        socket: Vec<String>,
        /// Seconds to wait for htbd's answer.
        #[arg(long, value_name = "SECS", default_value_t = 60.0)]
        timeout: f64,
        /// Only the circuits of box K of N (a fixed hash of the circuit id), when several
        /// boxes shape the same file: `--shard 2/3`.
        #[arg(long, value_name = "K/N")]
        shard: Option<import::shard::Shard>,
    },
    /// Poll htbd's /health and tell the routing daemons whether this box carries its
    /// subscribers: a command for BIRD (`birdc enable|disable PROTOCOL`), a track_file for
    /// keepalived. Down after --fall failed checks, up after a --hold-down of passing ones.
    HealthWatch {
        /// htbd's /health (`[daemon] http`).
        #[arg(long, default_value = "http://127.0.0.1:9469/health")]
        url: String,
        /// Between checks (tc's time units: 100ms, 1s).
        #[arg(long, default_value = "100ms", value_parser = time)]
        interval: Duration,
        /// The most one check may take.
        #[arg(long, default_value = "200ms", value_parser = time)]
        timeout: Duration,
        /// Failed checks in a row that take the box down.
        #[arg(long, default_value_t = 2)]
        fall: u32,
        /// How long /health must pass before the box is announced again (and at start).
        #[arg(long, default_value = "5s", value_parser = time)]
        hold_down: Duration,
        /// Run by `sh -c` when the box goes up, e.g. "birdc enable htbd_subscribers".
        #[arg(long, value_name = "CMD")]
        on_up: Option<String>,
        /// Run by `sh -c` when the box goes down, e.g. "birdc disable htbd_subscribers".
        #[arg(long, value_name = "CMD")]
        on_down: Option<String>,
        /// A file holding 0 while up and 1 while down (keepalived's track_file, weight 0).
        #[arg(long, value_name = "PATH")]
        state_file: Option<PathBuf>,
        /// The most a command may take before it is killed and retried.
        #[arg(long, default_value = "5s", value_parser = time)]
        command_timeout: Duration,
        /// An interface that must be up as well, e.g. the uplink (repeatable): a link that
        /// returns then waits out the hold-down, routes and gateway together.
        #[arg(long = "uplink", value_name = "DEV")]
        uplinks: Vec<String>,
    },
}

/// A time in tc's units (`100ms`, `5s`); a bare number is microseconds, as in tc.
fn time(s: &str) -> Result<Duration, String> {
    htb_core::units::parse_time(s)
        .map(|d| Duration::from_nanos(d.as_nanos()))
        .map_err(|e| format!("\"{s}\": {e} (a time such as 100ms or 5s)"))
}

fn node_mapping(s: &str) -> Result<(String, ClassId), String> {
    let (name, id) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expected NAME=CLASSID such as AP_A=1:10, got \"{s}\""))?;
    let id: ClassId = id.parse().map_err(|e| format!("\"{id}\": {e}"))?;
    if id.is_qdisc() {
        return Err(format!("\"{id}\" names a qdisc, not a class"));
    }
    Ok((name.to_owned(), id))
}

fn hex_minor(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u32::from_str_radix(digits, 16).map_err(|e| format!("\"{s}\": {e} (a hex minor such as 100)"))
}

/// Exit status as for tc commands: 1 when the input was wrong (nothing sent), 2 when htbd
/// refused or could not be asked.
fn import(import: &Import) -> ExitCode {
    let mut stdout = std::io::stdout();
    let summary = match import::run(import, &mut stdout) {
        Ok(s) => s,
        Err(e) => {
            // The messages carry their causes; `{e:#}` would repeat them.
            eprintln!("htb-cli: {e}");
            return ExitCode::from(match e {
                ImportError::Client(_)
                | ImportError::Refused { .. }
                | ImportError::MissingClass { .. } => htb_cli::tc::EXIT_DAEMON,
                _ => htb_cli::tc::EXIT_USAGE,
            });
        }
    };
    if !summary.unmapped_nodes.is_empty() {
        let names: Vec<&str> = summary.unmapped_nodes.iter().map(String::as_str).collect();
        eprintln!(
            "htb-cli: circuits of {} parent node(s) without --node went under {}: {}",
            names.len(),
            import.placement.parent,
            names.join(", ")
        );
    }
    if !import.print {
        let (first, last) = summary.classes.unwrap_or_default();
        let c = summary.changes;
        eprintln!(
            "htb-cli: {} {} circuits (classes {first}..{last}): {} classes added, {} changed, \
             {} deleted; {} filters added, {} deleted; {} leaf qdiscs set; {} labels set",
            if import.dry_run {
                "would sync"
            } else {
                "synced"
            },
            summary.circuits,
            c.added,
            c.changed,
            c.deleted,
            c.filters_added,
            c.filters_deleted,
            c.leaves,
            c.labels
        );
        if let Some(t) = summary.applied_in {
            eprintln!(
                "htb-cli: htbd applied the batch in {:.1} ms",
                t.as_secs_f64() * 1e3
            );
        }
    }
    ExitCode::SUCCESS
}

/// The import, box by box (`--socket` given several times): each box syncs to the file on its
/// own, so a box that refuses keeps what it ran and is named; exit status 2 if any did.
fn import_to_boxes(template: &Import, sockets: &[String]) -> ExitCode {
    let mut failed = Vec::new();
    for socket in sockets {
        eprintln!("htb-cli: box {socket}:");
        let one = Import {
            socket: Some(socket.clone()),
            ..template.clone()
        };
        let status = import(&one);
        if status != ExitCode::SUCCESS {
            failed.push(socket.as_str());
        }
    }
    if failed.is_empty() {
        eprintln!("htb-cli: all {} boxes synced", sockets.len());
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "htb-cli: {} of {} boxes did not sync: {}",
            failed.len(),
            sockets.len(),
            failed.join(", ")
        );
        ExitCode::from(htb_cli::tc::EXIT_DAEMON)
    }
}

fn sim(path: &PathBuf, json: bool, svg: Option<&PathBuf>) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let scenario =
        Scenario::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let report = run(&scenario);
    if let Some(out) = svg {
        let title = format!("{} — rate per class", path.display());
        std::fs::write(out, report.to_svg(&title))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

/// `htb-cli [--socket PATH] [--timeout SECS] import …`: the control socket's options may come
/// before `import`, as they do before tc's objects; they are moved after its arguments.
fn leading_options_moved(args: &[String]) -> Option<Vec<String>> {
    let mut leading = Vec::new();
    let mut at = 0;
    loop {
        match args.get(at).map(String::as_str) {
            Some("--socket" | "--timeout") => {
                leading.extend(args.get(at..at + 2)?.iter().cloned());
                at += 2;
            }
            Some("import") if at > 0 => {
                let mut moved = args[at..].to_vec();
                moved.extend(leading);
                return Some(moved);
            }
            _ => return None,
        }
    }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(moved) = leading_options_moved(&args) {
        args = moved;
    }
    if !matches!(
        args.first().map(String::as_str),
        Some("sim" | "import" | "health-watch")
    ) {
        // Everything but `sim` is tc's grammar, parsed by hand as tc parses it.
        let status = htb_cli::tc::main(&args, &mut std::io::stdout(), &mut std::io::stderr());
        return ExitCode::from(status);
    }
    let cli = Cli::parse_from(std::iter::once("htb-cli".to_owned()).chain(args));
    let result = match &cli.command {
        Command::Sim {
            scenario,
            json,
            svg,
        } => sim(scenario, *json, svg.as_ref()),
        Command::Import {
            file,
            network,
            download_dev,
            upload_dev,
            parent,
            nodes,
            prio,
            first_minor,
            print,
            dry_run,
            socket,
            timeout,
            shard,
        } => {
            if parent.is_qdisc() {
                eprintln!("htb-cli: --parent {parent} names a qdisc; circuits hang under a class");
                return ExitCode::from(htb_cli::tc::EXIT_USAGE);
            }
            let template = Import {
                file: file.clone(),
                network: network.clone(),
                placement: Placement {
                    download_dev: download_dev.clone(),
                    upload_dev: upload_dev.clone(),
                    parent: *parent,
                    nodes: nodes.iter().cloned().collect::<BTreeMap<_, _>>(),
                    prio: *prio,
                },
                first_minor: *first_minor,
                print: *print,
                dry_run: *dry_run,
                socket: socket.first().cloned(),
                timeout: Some(Duration::from_secs_f64(timeout.max(0.1))),
                shard: *shard,
            };
            if socket.len() <= 1 || *print {
                return import(&template);
            }
            return import_to_boxes(&template, socket);
        }
        Command::HealthWatch {
            url,
            interval,
            timeout,
            fall,
            hold_down,
            on_up,
            on_down,
            state_file,
            command_timeout,
            uplinks,
        } => match htb_cli::health_watch::HealthUrl::parse(url) {
            Ok(url) => htb_cli::health_watch::run(
                &htb_cli::health_watch::Options {
                    url,
                    interval: *interval,
                    timeout: *timeout,
                    fall: *fall,
                    hold_down: *hold_down,
                    on_up: on_up.clone(),
                    on_down: on_down.clone(),
                    state_file: state_file.clone(),
                    command_timeout: *command_timeout,
                    uplinks: uplinks.clone(),
                },
                &mut std::io::stderr(),
            ),
            Err(e) => {
                eprintln!("htb-cli: {e}");
                return ExitCode::from(htb_cli::tc::EXIT_USAGE);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("htb-cli: {e:#}");
            ExitCode::FAILURE
        }
    }
}
