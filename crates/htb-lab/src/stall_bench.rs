//! `htb-lab stalls bench`: one class at 10, 100 and 500 Mbit/s, full, through htbd with stall
//! credit, htbd without, and the kernel's HTB, while every CPU is taken for 4 ms every 50 ms
//! ([`crate::stalls`]): the delivered rate against the class's, and what the credit sends
//! downstream after a stall (the most bytes node-2 received in any 1 ms and 5 ms, against what
//! the class's rate and burst allow there). Writes `stalls.json` and `stalls.svg`.
//!
//! The imitated stalls take processes off the CPUs: htbd's workers and the generators, not the
//! kernel's softirqs, where the kernel's HTB runs. A host's real stall freezes those too; the
//! kernel's figures here are therefore what it does when only processes stall.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use htb_cli::plot::{LineChart, Series};
use serde_json::{Value, json};

use crate::shaper::{apply_tc, one_class_tree, uninstall};
use crate::stalls::{Injector, Pattern, cpus};
use crate::{Htbd, Lab, N1, N2, Reaped, gen_bin};

/// What to run.
#[derive(Clone, Debug)]
pub struct StallBenchOptions {
    /// Where stalls.json and stalls.svg go.
    pub out: PathBuf,
    /// The stalls to imitate.
    pub pattern: Pattern,
    /// Seconds each rate is measured over.
    pub seconds: u32,
    /// Namespace prefix of the lab.
    pub lab: String,
}

/// Who shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    /// htbd with its default stall credit (10 ms).
    Credit,
    /// htbd with `stall_credit = "0s"`.
    NoCredit,
    /// The kernel's HTB with the same tree.
    Kernel,
}

impl Who {
    const ALL: [Self; 3] = [Self::Credit, Self::NoCredit, Self::Kernel];

    fn key(self) -> &'static str {
        match self {
            Self::Credit => "htbd_credit",
            Self::NoCredit => "htbd_no_credit",
            Self::Kernel => "kernel_htb",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Credit => "htbd, stall credit 10 ms",
            Self::NoCredit => "htbd, no stall credit",
            Self::Kernel => "kernel HTB",
        }
    }
}

/// The most bytes received in any window of `width` seconds, from `(time, bytes)` in order.
fn densest(packets: &[(f64, f64)], width: f64) -> f64 {
    let (mut start, mut sum, mut best) = (0, 0.0, 0.0f64);
    for &(t, bytes) in packets {
        sum += bytes;
        while packets[start].0 < t - width {
            sum -= packets[start].1;
            start += 1;
        }
        best = best.max(sum);
    }
    best
}

/// Node-2's UDP packets to `port` for `secs` seconds: `(time in s, L2 bytes)`, timed by the
/// kernel as they arrived (tcpdump).
fn arrivals(lab: &Lab, port: u16, secs: f64) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut dump = lab
        .cmd(N2, "tcpdump")
        .args([
            "-i", "eth0", "-n", "-tt", "-l", "-q", "udp", "and", "dst", "port",
        ])
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("tcpdump (scripts/setup.sh installs it)")?;
    let stdout = dump.stdout.take().context("tcpdump's output")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| {
                let t = l.split_whitespace().next()?.parse::<f64>().ok()?;
                let len = l.rsplit_once("length ")?.1.trim().parse::<f64>().ok()?;
                // UDP payload, plus UDP, IPv4 and Ethernet headers.
                Some((t, len + 42.0))
            })
            .collect::<Vec<(f64, f64)>>()
    });
    std::thread::sleep(Duration::from_secs_f64(secs));
    let _ = lab.exec(N2, &["pkill", "-INT", "tcpdump"]);
    let _ = dump.wait();
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("the tcpdump reader panicked"))
}

/// One shaper at one rate.
fn measure(
    lab: &Lab,
    who: Who,
    (rate, bps): (&str, f64),
    options: &StallBenchOptions,
) -> anyhow::Result<(Value, Vec<(f64, f64)>)> {
    let mut config = one_class_tree(rate, Some("pfifo"));
    if who == Who::NoCredit {
        config = config.replacen("realtime = 1\n", "realtime = 1\nstall_credit = \"0s\"\n", 1);
    }
    let installed = match who {
        Who::Kernel => {
            let parsed = htbd::DaemonConfig::parse(
                &config
                    .replace("@SOCKET@", "/tmp/x")
                    .replace("@STATE@", "/tmp/x"),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            apply_tc(lab, &htbd::tc_export::commands(&parsed)?)?;
            crate::shaper::Installed::Tc
        }
        _ => crate::shaper::Installed::Htbd(Box::new(Htbd::start(lab, &config))),
    };
    let secs = options.seconds;
    let run = secs + 5;
    // 1.2× the class: iperf3 below 500 Mbit/s, the AF_XDP generator from there (iperf3 cannot
    // offer 600 Mbit/s beside a shaper on two vCPUs).
    let _server = lab.iperf_server(N2, 5201);
    let _generator = if bps < 500e6 {
        Reaped(lab.udp_flow(5201, &format!("{:.0}", bps * 1.2), run))
    } else {
        Reaped(
            lab.cmd(N1, gen_bin().to_str().unwrap_or("htb-xdp-gen"))
                .args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
                .args(["--dst-mac", "02:00:0a:c9:01:01", "--src-ip", "10.201.1.2"])
                .args([
                    "--dst-ip",
                    "10.201.2.2",
                    "--dport",
                    "5201",
                    "--size",
                    "1442",
                ])
                .args(["--rate", &format!("{:.0}", bps * 1.3), "--seconds"])
                .arg(run.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("htb-xdp-gen")?,
        )
    };
    let injector = Injector::start(options.pattern, &cpus())?;
    let window = Duration::from_secs(u64::from(secs));
    let (load, stalls) = match installed.htbd() {
        Some(htbd) => {
            let (load, stalls) =
                htbd.accounted(|| lab.measure_load(Duration::from_millis(1500), window));
            (load, Some(stalls))
        }
        None => (lab.measure_load(Duration::from_millis(1500), window), None),
    };
    let packets = arrivals(lab, 5201, 1.5)?;
    let taken = injector.stop();
    uninstall(lab, installed);
    std::thread::sleep(Duration::from_millis(500));

    let delivered = load.delivered_bps();
    let error = (delivered - bps) / bps;
    // What a class may send in a window of w: w of its rate and its burst (1 ms of rate + an
    // MTU for htbd; the kernel's default is about an MTU), and with credit one stall's worth.
    let burst = |w: f64| bps / 8.0 * w;
    let ms1 = densest(&packets, 1e-3);
    let ms5 = densest(&packets, 5e-3);
    let kept = stalls
        .as_ref()
        .map_or(0.0, |s| s.kept().as_secs_f64() * 1e3);
    println!(
        "  {:<26} {:>9} {:>10.3} {:>+9.3} % {:>8.1} {:>9.2} {:>9.2} {:>9.1}",
        who.label(),
        rate,
        delivered / 1e6,
        error * 100.0,
        load.offered_bps() / bps,
        ms1 / burst(1e-3),
        ms5 / burst(5e-3),
        kept
    );
    let result = json!({
        "shaper": who.key(),
        "rate_bps": bps,
        "delivered_bps": delivered,
        "error_pct": error * 100.0,
        "window_s": [load.delivered.shortest, load.delivered.longest],
        "offered_bps": load.offered_bps(),
        "stalls_imitated": taken,
        "kept_from_forwarding_ms": kept,
        "densest_1ms_bytes": ms1,
        "densest_1ms_over_rate": ms1 / burst(1e-3),
        "densest_5ms_bytes": ms5,
        "densest_5ms_over_rate": ms5 / burst(5e-3),
    });
    Ok((result, packets))
}

/// Node-2's arrivals as Mbit/s per ms over the first `span_ms` of `packets`.
fn per_ms(packets: &[(f64, f64)], span_ms: usize) -> Vec<(f64, f64)> {
    let Some(&(t0, _)) = packets.first() else {
        return Vec::new();
    };
    let mut slots = vec![0.0; span_ms];
    for &(t, bytes) in packets {
        let slot = ((t - t0) * 1e3) as usize;
        if slot < span_ms {
            slots[slot] += bytes;
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, b)| (i as f64, b * 8.0 / 1e-3 / 1e6))
        .collect()
}

/// Runs the benchmark in a lab of its own; prints the table and writes `stalls.json` and
/// `stalls.svg` into `options.out`.
///
/// # Errors
/// When the lab cannot run here (root, tools), a shaper cannot be installed, or the results
/// cannot be written.
pub fn run(options: &StallBenchOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up(&options.lab, "router").map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "one full class, every CPU taken for {} ({} s per point); densest: the most node-2 \
         received in any 1 or 5 ms, over what the rate allows there",
        options.pattern, options.seconds
    );
    println!(
        "  {:<26} {:>9} {:>10} {:>11} {:>8} {:>9} {:>9} {:>9}",
        "shaper", "class", "Mbit/s", "error", "offered", "1 ms ×", "5 ms ×", "kept ms"
    );
    let mut results = Vec::new();
    let mut errors: Vec<Series> = Vec::new();
    let mut trace: Vec<Series> = Vec::new();
    for who in Who::ALL {
        errors.push(Series {
            name: who.label().into(),
            points: Vec::new(),
            dashed: who == Who::Kernel,
        });
    }
    for (rate, bps) in [("10mbit", 10e6), ("100mbit", 100e6), ("500mbit", 500e6)] {
        for (i, who) in Who::ALL.into_iter().enumerate() {
            let (result, packets) = measure(&lab, who, (rate, bps), options)?;
            errors[i]
                .points
                .push((bps / 1e6, result["error_pct"].as_f64().unwrap_or(0.0).abs()));
            if bps == 100e6 && who != Who::Kernel {
                trace.push(Series {
                    name: format!("{} at 100 Mbit/s", who.label()),
                    points: per_ms(&packets, 200),
                    dashed: who == Who::NoCredit,
                });
            }
            results.push(result);
        }
    }
    let value = json!({
        "method": "one class (pfifo leaf) offered 1.2× its rate (iperf3; htb-xdp-gen 1.3× at 500 Mbit/s), L2 at node-2 over the window; every CPU taken by SCHED_FIFO spinners for the pattern's stall every period (htb-lab stalls); densest: tcpdump at node-2 for 1.5 s",
        "pattern": options.pattern.to_string(),
        "seconds": options.seconds,
        "machine": crate::machine(),
        "results": results,
    });
    std::fs::create_dir_all(&options.out)?;
    let json_path = options.out.join("stalls.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&value)?)?;
    let chart = LineChart {
        title: format!(
            "Rate error of a full class, every CPU taken for {}",
            options.pattern
        ),
        x_label: "class rate (Mbit/s, log scale)".into(),
        y_label: "|delivered − rate| (% of the rate)".into(),
        x_log: true,
        series: errors,
    }
    .to_svg();
    let trace_chart = LineChart {
        title: "What node-2 receives, per ms, through a 100 Mbit/s class under the stalls".into(),
        x_label: "ms".into(),
        y_label: "Mbit/s in each ms".into(),
        x_log: false,
        series: trace,
    }
    .to_svg();
    let svg_path = options.out.join("stalls.svg");
    std::fs::write(&svg_path, chart)?;
    let trace_path = options.out.join("stalls-trace.svg");
    std::fs::write(&trace_path, trace_chart)?;
    println!(
        "wrote {}, {} and {}",
        json_path.display(),
        svg_path.display(),
        trace_path.display()
    );
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_densest_window_holds_the_burst() {
        // 1500 bytes every ms, and a burst of ten packets at 5 ms.
        let mut packets: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i) * 1e-3, 1500.0)).collect();
        packets.extend((0..10).map(|i| (5e-3 + f64::from(i) * 1e-6, 1500.0)));
        packets.sort_by(|a, b| a.0.total_cmp(&b.0));
        // [5 ms, 6 ms], ends included: the burst and both regular packets.
        assert_eq!(densest(&packets, 1e-3), 1500.0 * 12.0);
        assert_eq!(densest(&packets, 0.0), 1500.0 * 2.0);
        let slots = per_ms(&packets, 10);
        assert_eq!(slots.len(), 10);
        assert!((slots[5].1 - 11.0 * 1500.0 * 8.0 / 1e3).abs() < 1e-9);
    }
}
