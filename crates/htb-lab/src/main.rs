//! `htb-lab`: the lab demo and the lab benchmark (see the crate documentation).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use htb_lab::demo::{DemoOptions, run};

#[derive(Parser)]
#[command(
    name = "htb-lab",
    about = "htbd in a network-namespace lab, side by side with the kernel's HTB"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Same tree, same UDP flows through htbd and through kernel HTB; per-class table and chart.
    Demo {
        /// htbd config (router mode on the lab's r1/r2).
        #[arg(long, default_value = "examples/lab.toml")]
        config: PathBuf,
        /// Seconds of traffic per shaper.
        #[arg(long, default_value_t = 12)]
        seconds: u32,
        /// Output directory for demo.svg and demo.json.
        #[arg(long, default_value = "target/demo")]
        out: PathBuf,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbdemo")]
        lab: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            config,
            seconds,
            out,
            lab,
        } => run(&DemoOptions {
            config,
            seconds,
            out,
            lab,
        })
        .map(|_| ()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("htb-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}
