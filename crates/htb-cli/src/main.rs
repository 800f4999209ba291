//! `htb-cli`: see the crate documentation.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use htb_cli::sim::{Scenario, run};

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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("sim") {
        // Everything but `sim` is tc's grammar, parsed by hand as tc parses it.
        let status = htb_cli::tc::main(&args, &mut std::io::stdout(), &mut std::io::stderr());
        return ExitCode::from(status);
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Sim {
            scenario,
            json,
            svg,
        } => sim(scenario, *json, svg.as_ref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("htb-cli: {e:#}");
            ExitCode::FAILURE
        }
    }
}
