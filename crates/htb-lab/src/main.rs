//! `htb-lab`: the lab demo and the lab benchmark (see the crate documentation).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use htb_lab::bench::BenchOptions;
use htb_lab::demo::DemoOptions;

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
enum StallsCommand {
    /// Spin a thread on every CPU and report how much of the time each lost in gaps over
    /// 200 µs: what this machine's host (or an injector) takes away now.
    Probe {
        /// Seconds to measure.
        #[arg(default_value_t = 10.0)]
        seconds: f64,
    },
    /// Imitate a noisy host: take every CPU (or those given) for STALL every PERIOD at
    /// SCHED_FIFO 99 (needs root), e.g. `inject 4/50` for 4 ms every 50 ms. Runs the lab tests
    /// beside it to see what a noisy machine does to them (`HTB_LAB_STALLS=4/50` does the same
    /// for each lab a test builds).
    Inject {
        /// STALL/PERIOD in ms.
        pattern: htb_lab::stalls::Pattern,
        /// How long, in seconds.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// CPUs to take (default: all).
        #[arg(long, value_delimiter = ',')]
        cpus: Vec<usize>,
    },
    /// One full class at 10, 100 and 500 Mbit/s through htbd with stall credit, without, and
    /// the kernel's HTB, while every CPU is taken for STALL every PERIOD: the rates, and the
    /// bursts the credit sends downstream. Writes stalls.json, stalls.svg and
    /// stalls-trace.svg.
    Bench {
        /// STALL/PERIOD in ms.
        #[arg(long, default_value = "4/50")]
        pattern: htb_lab::stalls::Pattern,
        /// Seconds each point is measured over.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
        /// Output directory.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbstall")]
        lab: String,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Measure, or imitate, a noisy host's CPU stalls.
    Stalls {
        #[command(subcommand)]
        what: StallsCommand,
    },
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
    /// Capacity (64 B pps, TCP), accuracy sweep and RTT: htbd, kernel forwarding, kernel HTB.
    Bench {
        /// Output directory for lab.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Fewer points and repetitions.
        #[arg(long)]
        quick: bool,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbbench")]
        lab: String,
    },
    /// Ping RTT through a class saturated by 4 TCP flows: htbd's leaves against kernel HTB.
    Latency {
        /// Output directory for latency.json and latency.svg.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// 100 pings per case instead of 200.
        #[arg(long)]
        quick: bool,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htblat")]
        lab: String,
    },
    /// Maximum-rate traffic through 1 003 classes with a change every second, watched for
    /// leaked frames, RSS growth and panics; ends with a verdict.
    Soak {
        /// How long: 3600, 90s, 10m, 1h.
        #[arg(long, default_value = "1h", value_parser = htb_lab::soak::parse_duration)]
        duration: Duration,
        /// Seconds between reports (default: 60, or a tenth of a shorter run).
        #[arg(long)]
        every: Option<u64>,
        /// Output directory for soak.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbsoak")]
        lab: String,
    },
    /// 10 000 subscriber filters against 1: packets/s and CPU per packet, htbd and the
    /// kernel's HTB (flat u32 and u32 hash tables).
    Filters {
        /// Output directory for filters.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// One repetition instead of three.
        #[arg(long)]
        quick: bool,
        /// Subscriber filters.
        #[arg(long, default_value_t = 10_000)]
        subscribers: u32,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbfilt")]
        lab: String,
    },
    /// One data-plane worker against two, and against the kernel's HTB, on 2-queue veths:
    /// packets/s and CPU per packet.
    Workers {
        /// Output directory for workers.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// One repetition instead of three.
        #[arg(long)]
        quick: bool,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbwork")]
        lab: String,
    },
    /// 100 000 subscribers: import time, forwarding gaps during the import, a scrape and
    /// `class show -s`, htbd's RSS.
    Scale {
        /// Output directory for scale.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Circuits to import.
        #[arg(long, default_value_t = 100_000)]
        subscribers: u32,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbscale")]
        lab: String,
        /// Data-plane workers (each holds its own subtrees and the classes at the top).
        #[arg(long, default_value_t = 1)]
        workers: u32,
    },
    /// Forwarding against cores: 1 … N pinned generators, htbd with as many pinned workers,
    /// kernel HTB with one root and kernel mq + HTB per queue; 64 and 1514-byte frames.
    Cores {
        /// Output directory for cores.json and cores.svg.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Shorter windows.
        #[arg(long)]
        quick: bool,
        /// The most generators (queues, htbd workers).
        #[arg(long, default_value_t = 2)]
        max: u32,
        /// Only these generator counts (comma-separated, e.g. 1,2,4,7), instead of 1 … max.
        #[arg(long, value_delimiter = ',')]
        generators: Vec<u32>,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbcores")]
        lab: String,
    },
    /// Seed 001's sweep: one class from 100 Mbit/s up at MTU 1500 and 9000, UDP (AF_XDP
    /// generator) and TCP (iperf3), htbd against kernel HTB; then a root shared by every worker.
    Sweep {
        /// Output directory for sweep.json and sweep.svg.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Three rates and shorter windows.
        #[arg(long)]
        quick: bool,
        /// Queues per veth: one generator and one htbd worker each.
        #[arg(long, default_value_t = 1)]
        queues: u32,
        /// The highest rate to try (a tc rate: 10gbit, 40gbit).
        #[arg(long, default_value = "40gbit", value_parser = parse_bps)]
        max_rate: f64,
        /// One class's rates (comma-separated tc rates), instead of 100mbit … 40gbit.
        #[arg(long, value_delimiter = ',', value_parser = parse_bps)]
        rates: Vec<f64>,
        /// The shared root's rates (comma-separated), instead of the one class's.
        #[arg(long, value_delimiter = ',', value_parser = parse_bps)]
        shared_rates: Vec<f64>,
        /// The MTUs to sweep (comma-separated, 1500 and 9000 by default).
        #[arg(long, value_delimiter = ',')]
        mtu: Vec<u32>,
        /// Seconds of traffic per point (4 with --quick, else 6); at least 4.
        #[arg(long, value_parser = clap::value_parser!(u32).range(4..=60))]
        seconds: Option<u32>,
        /// Pin htbd's workers to these CPUs (comma-separated).
        #[arg(long, value_delimiter = ',')]
        htbd_cpus: Vec<usize>,
        /// RPS mask for the endpoints' receive queues (hex, e.g. ff00): their TCP stacks run
        /// there, not inside htbd's sends (on veths a send runs the receiver's stack).
        #[arg(long)]
        endpoint_rps: Option<String>,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbsweep")]
        lab: String,
    },
    /// Live changes while traffic flows: changes/s, time to apply, packets lost.
    BenchIpc {
        /// Output directory for ipc.json.
        #[arg(long, default_value = "target/htb-bench")]
        out: PathBuf,
        /// Changes per phase.
        #[arg(long, default_value_t = 10_000)]
        changes: usize,
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "htbipc")]
        lab: String,
    },
}

/// A tc rate ("10gbit") as bit/s.
fn parse_bps(text: &str) -> Result<f64, htb_core::units::UnitError> {
    htb_core::units::parse_rate(text).map(|r| r.bits_per_sec() as f64)
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Stalls { what } => stalls(what),
        Command::Demo {
            config,
            seconds,
            out,
            lab,
        } => htb_lab::demo::run(&DemoOptions {
            config,
            seconds,
            out,
            lab,
        })
        .map(|_| ()),
        Command::Bench { out, quick, lab } => {
            htb_lab::bench::run(&BenchOptions { out, quick, lab }).map(|_| ())
        }
        Command::Latency { out, quick, lab } => htb_lab::latency::run(&out, quick, &lab),
        Command::Soak {
            duration,
            every,
            out,
            lab,
        } => {
            let every = every.map_or_else(
                || (duration / 10).clamp(Duration::from_secs(1), Duration::from_secs(60)),
                Duration::from_secs,
            );
            htb_lab::soak::run(&htb_lab::soak::SoakOptions {
                duration,
                every,
                out,
                lab,
            })
            .map(|_| ())
        }
        Command::Filters {
            out,
            quick,
            subscribers,
            lab,
        } => htb_lab::filter_bench::run(&htb_lab::filter_bench::FilterBenchOptions {
            out,
            quick,
            subscribers,
            lab,
        })
        .map(|_| ()),
        Command::Cores {
            out,
            quick,
            max,
            generators,
            lab,
        } => htb_lab::cores::run(&htb_lab::cores::CoresOptions {
            out,
            quick,
            lab,
            max,
            generators,
        })
        .map(|_| ()),
        Command::Sweep {
            out,
            quick,
            queues,
            max_rate,
            rates,
            shared_rates,
            mtu,
            seconds,
            htbd_cpus,
            endpoint_rps,
            lab,
        } => htb_lab::sweep::run(&htb_lab::sweep::SweepOptions {
            out,
            quick,
            lab,
            queues,
            max_bps: max_rate,
            rates,
            shared_rates,
            mtus: mtu,
            seconds,
            htbd_cpus,
            endpoint_rps,
        })
        .map(|_| ()),
        Command::Workers { out, quick, lab } => {
            htb_lab::workers_bench::run(&htb_lab::workers_bench::WorkersBenchOptions {
                out,
                quick,
                lab,
            })
            .map(|_| ())
        }
        Command::Scale {
            out,
            subscribers,
            lab,
            workers,
        } => htb_lab::scale::run(&htb_lab::scale::ScaleOptions {
            out,
            subscribers,
            lab,
            workers,
        })
        .map(|_| ()),
        Command::BenchIpc { out, changes, lab } => {
            htb_lab::ipc_bench::run(&htb_lab::ipc_bench::IpcBenchOptions { out, changes, lab })
                .map(|_| ())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("htb-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `htb-lab stalls …`.
fn stalls(what: StallsCommand) -> anyhow::Result<()> {
    use htb_lab::stalls;
    match what {
        StallsCommand::Probe { seconds } => {
            let taken = stalls::probe(seconds)?;
            for t in &taken {
                println!(
                    "cpu {}: {:.2} % of {seconds} s taken in {} gaps over 200 µs, longest {:.2} ms",
                    t.cpu,
                    t.share * 100.0,
                    t.gaps,
                    t.longest.as_secs_f64() * 1e3
                );
            }
            let worst = taken.iter().map(|t| t.share).fold(0.0, f64::max);
            println!("worst cpu: {:.2} % taken", worst * 100.0);
        }
        StallsCommand::Inject {
            pattern,
            seconds,
            cpus,
        } => {
            let cpus = if cpus.is_empty() {
                stalls::cpus()
            } else {
                cpus
            };
            let injector = stalls::Injector::start(pattern, &cpus)?;
            eprintln!(
                "htb-lab stalls: taking CPU(s) {cpus:?} for {pattern} for {seconds} s (Ctrl-C ends it)"
            );
            std::thread::sleep(Duration::from_secs(seconds));
            let taken = injector.stop();
            println!("htb-lab stalls: {taken} stalls of {pattern} taken");
        }
        StallsCommand::Bench {
            pattern,
            seconds,
            out,
            lab,
        } => {
            htb_lab::stall_bench::run(&htb_lab::stall_bench::StallBenchOptions {
                out,
                pattern,
                seconds,
                lab,
            })?;
        }
    }
    Ok(())
}
