//! `htbd --config FILE`: see the crate documentation.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use htbd::DaemonConfig;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "htbd",
    version,
    about = "htb: userspace HTB shaping router (AF_XDP)"
)]
struct Args {
    /// Config file (TOML).
    #[arg(long, short)]
    config: PathBuf,
    /// Check the config, say whether a start would use the saved live state or the file's
    /// trees, and exit.
    #[arg(long)]
    check: bool,
    /// Print the config's trees and filters as tc commands for the kernel's HTB, and exit.
    #[arg(long)]
    print_tc: bool,
    /// Set the saved live state aside and start from the config file's trees.
    #[arg(long)]
    fresh_state: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("htbd: cannot read {}: {e}", args.config.display());
            return ExitCode::FAILURE;
        }
    };
    let config = match DaemonConfig::parse(&text) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("htbd: {}: {e}", args.config.display());
            return ExitCode::FAILURE;
        }
    };
    if args.print_tc {
        return match htbd::tc_export::commands(&config) {
            Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("htbd: {}: {e}", args.config.display());
                ExitCode::FAILURE
            }
        };
    }
    if args.check {
        println!("{}: ok", args.config.display());
        return match htbd::startup::check(&config, args.fresh_state) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("htbd: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
    let options = htbd::RunOptions {
        config_path: args.config.clone(),
        fresh_state: args.fresh_state,
    };
    match htbd::run(config, &options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("htbd: {e}");
            ExitCode::FAILURE
        }
    }
}
