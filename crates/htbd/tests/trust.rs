//! What the data plane does when things go wrong, in the netns lab: frames the kernel would not
//! forward or must fragment, a data plane that stops (SIGSTOP), an egress link that goes down, a
//! port whose MAC address changes under htbd, netfilter rules router mode would bypass. (A
//! panic on the data plane is `htbd`'s unit test
//! `a_panicking_data_plane_is_cleaned_up_then_reported`.)
//!
//! Every test needs root and network namespaces, so each is `#[ignore]`d; `scripts/test.sh`
//! includes them as root.

use std::time::{Duration, Instant};

use htb_lab::{Htbd, Lab, N1, N2, Promise, R, Reaped, htbd_fails};

/// Router mode, r1 unshaped, r2 one class at `rate` taking everything.
fn one_class(rate: &str) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n[interface.qdisc]\n\
         default = \"1\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"{rate}\"\n"
    )
}

/// Sends `count` UDP frames of one `kind` from node-1 towards 10.201.2.2:7777, raw (see the
/// script for the kinds).
fn inject(lab: &Lab, kind: &str, count: u32) {
    let script = format!(
        r#"
import socket, struct
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s & 0xffff) + (s >> 16); s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
kind = "{kind}"
r1 = bytes.fromhex("02000ac90101"); me = bytes.fromhex("02000ac90102")
dst_mac = {{"broadcast": b"\xff" * 6, "other_host": bytes.fromhex("02000ac90199")}}.get(kind, r1)
src, dst = socket.inet_aton("10.201.1.2"), socket.inet_aton("10.201.2.2")
payload = b"htb" * 20
udp = struct.pack("!HHHH", 40000, 7777, 8 + len(payload), 0) + payload
options = b"\x01\x01\x01\x00" if kind == "options" else b""
ihl = 5 + len(options) // 4
total = 4 * ihl + len(udp) + (200 if kind == "long_total" else 0)
ttl = 1 if kind == "ttl_1" else 64
hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, 0, ttl, 17, 0, src, dst) + options
check = csum(hdr) ^ (0x5555 if kind == "bad_checksum" else 0)
hdr = hdr[:10] + struct.pack("!H", check) + hdr[12:]
frame = dst_mac + me + b"\x08\x00" + hdr + udp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
for _ in range({count}):
    s.send(frame)
print("sent")
"#
    );
    let out = lab.exec(N1, &["python3", "-c", &script]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sent"),
        "injecting {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Frames node-2's eth0 received while `kind` frames were injected (and a moment after).
fn arriving(lab: &Lab, kind: &str) -> u64 {
    let before = lab.rx_counters(N2, "eth0").1;
    inject(lab, kind, 100);
    std::thread::sleep(Duration::from_millis(400));
    lab.rx_counters(N2, "eth0").1 - before
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn router_mode_forwards_only_what_the_kernel_would() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, &one_class("100mbit"));
        // node-2 must know the router's MAC already: no ARP in the counts.
        assert_eq!(lab.ping(N1, "10.201.2.2", 3, "0.1"), 3);
        // Premise: well-formed frames to the router's MAC arrive, all of them.
        let good = arriving(&lab, "good");
        assert!(
            (100..=102).contains(&good),
            "{good} of 100 good frames arrived"
        );
        // Options go to the kernel, which forwards them.
        let options = arriving(&lab, "options");
        assert!((100..=102).contains(&options), "{options} with IP options");
        // What the kernel's ip_forward drops: not for our MAC (PACKET_BROADCAST, PACKET_OTHERHOST),
        // a bad header checksum, a total length beyond the frame, a TTL that expires here.
        for kind in [
            "broadcast",
            "other_host",
            "bad_checksum",
            "long_total",
            "ttl_1",
        ] {
            let n = arriving(&lab, kind);
            assert!(n <= 2, "{n} of 100 {kind} frames were forwarded");
        }
        drop(htbd);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn router_mode_refuses_to_bypass_netfilter_rules_unless_told() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let nft = |words: &str| {
            let args: Vec<&str> = std::iter::once("nft").chain(words.split(' ')).collect();
            let out = lab.exec(R, &args);
            assert!(
                out.status.success(),
                "nft {words} (scripts/setup.sh installs nftables): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // A rule only for the router itself is not bypassed: htbd starts.
        nft("add table inet fw");
        nft("add chain inet fw input { type filter hook input priority 0 ; }");
        nft("add rule inet fw input tcp dport 9 drop");
        drop(Htbd::start(&lab, &one_class("100mbit")));
        // A forwarding rule would be: htbd refuses, names it, attaches nothing.
        nft("add chain inet fw forward { type filter hook forward priority 0 ; }");
        nft("add rule inet fw forward ip saddr 10.9.9.9 drop");
        let error = htbd_fails(&lab, &one_class("100mbit"));
        assert!(
            error.contains("router mode forwards in XDP, before netfilter")
                && error.contains("nftables inet fw forward (hook forward, 1 rule)")
                && error.contains("netfilter = \"bypass\""),
            "{error}"
        );
        assert!(!lab.xdp_attached(R, "r1") && !lab.xdp_attached(R, "r2"));
        // Told to, it runs, warns and forwards.
        let config =
            one_class("100mbit").replace("realtime = 1", "realtime = 1\nnetfilter = \"bypass\"");
        let htbd = Htbd::start(&lab, &config);
        assert!(
            htbd.log_text()
                .contains("skips these rules: nftables inet fw forward (hook forward, 1 rule)"),
            "{}",
            htbd.log_text()
        );
        assert_eq!(lab.ping(N1, "10.201.2.2", 5, "0.1"), 5);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_packet_too_big_for_the_egress_mtu_goes_to_the_kernel() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, &one_class("100mbit"));
        assert_eq!(lab.ping(N1, "10.201.2.2", 3, "0.1"), 3);
        // The r2 <-> node-2 link's MTU becomes 1000 (both ends: veth drops what its peer's MTU
        // cannot take).
        let _ = lab.exec(R, &["ip", "link", "set", "r2", "mtu", "1000"]);
        let _ = lab.exec(N2, &["ip", "link", "set", "eth0", "mtu", "1000"]);
        let ping = |df: &str| {
            let out = lab.exec(
                N1,
                &[
                    "ping",
                    "-n",
                    "-c",
                    "5",
                    "-i",
                    "0.2",
                    "-W",
                    "1",
                    "-M",
                    df,
                    "-s",
                    "1200",
                    "10.201.2.2",
                ],
            );
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        // Don't fragment: the kernel answers "fragmentation needed" with r2's MTU; htbd must not
        // send the 1228-byte packet out of a 1000-byte link.
        let df = ping("do");
        assert!(
            df.contains("mtu = 1000") || df.contains("mtu=1000"),
            "no fragmentation-needed for a 1228-byte packet with DF: {df}"
        );
        assert!(df.contains(" 0 received"), "{df}");
        // May fragment: the kernel does (or node-1, which has learnt the path MTU), and every
        // echo is answered.
        let fragmented = ping("dont");
        assert!(fragmented.contains(" 5 received"), "{fragmented}");
        // The first DF packet went to the kernel (node-1 then knows the path MTU and sends none
        // that big again).
        assert!(
            htbd.status().xdp.pass_fib >= 1,
            "the XDP program did not hand the big packet to the kernel"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_port_whose_mac_changes_keeps_forwarding_and_shaping() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, &one_class("10mbit"));
        assert_eq!(lab.ping(N1, "10.201.2.2", 3, "0.1"), 3);
        let _ = lab.exec(
            R,
            &["ip", "link", "set", "r2", "address", "02:00:0a:c9:02:42"],
        );
        // node-2 learns the router's new MAC (the kernel does not announce it by itself).
        let _ = lab.exec(N2, &["ip", "neigh", "flush", "dev", "eth0"]);
        // htbd reads the ports once a second.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            htbd.log_text()
                .contains("r2: MAC address changed from 02:00:0a:c9:02:01 to 02:00:0a:c9:02:42"),
            "{}",
            htbd.log_text()
        );
        // Frames routed out of r2 now carry the new MAC as their source: htbd used to find no
        // egress for them and drop every one.
        assert!(
            lab.ping(N1, "10.201.2.2", 10, "0.1") >= 9,
            "no forwarding after r2's MAC changed"
        );
        htbd.assert_shapes(
            "10 Mbit/s class after the MAC change",
            ("r2", "1:1"),
            &Promise::class(10e6),
            0.02,
            || lab.udp_load(5201, "20M", 6),
        );
        let ports = htbd.status().ports;
        let no_egress: u64 = ports.iter().map(|p| p.drops_no_egress).sum();
        assert_eq!(
            no_egress, 0,
            "frames dropped for want of an egress: {ports:?}"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_stopped_data_plane_fails_open_and_shaping_resumes() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, &one_class("10mbit"));
        assert_eq!(lab.ping(N1, "10.201.2.2", 3, "0.1"), 3);
        // 120 pings, one every 50 ms; htbd is stopped for 3 s in the middle.
        let prompt = htbd.pings_answered_across_a_stop(&lab, "10.201.2.2");
        // The XDP program hands frames to the kernel once the heartbeat is 100 ms old: the pings in
        // that window, and those queued in htbd when it stopped, may be late or lost.
        assert!(
            prompt >= 115,
            "only {prompt} of 120 pings answered within 300 ms"
        );
        // Shaping resumes once htbd runs again.
        htbd.assert_shapes(
            "shaping after SIGCONT",
            ("r2", "1:1"),
            &Promise::class(10e6),
            0.02,
            || lab.udp_load(5201, "15M", 5),
        );
    });
}

/// CPU seconds (user + system) process `pid` has used.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the parenthesised command; utime and stime are the 14th and 15th fields.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
    ticks as f64 / 100.0
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn an_egress_link_down_does_not_spin_the_data_plane() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, &one_class("10mbit"));
        assert_eq!(lab.ping(N1, "10.201.2.2", 3, "0.1"), 3);
        let _server = lab.iperf_server(N2, 5201);
        // Twice the class: a backlog builds up in htbd for r2.
        let _flow = Reaped(lab.udp_flow(5201, "20M", 8));
        std::thread::sleep(Duration::from_secs(1));
        let queued = htbd.class_stats("r2", "1:1");
        assert!(
            queued["qlen"].as_u64().unwrap_or(0) > 100,
            "premise: no backlog for r2: {queued}"
        );
        // r2 goes down with frames queued for it: the kernel refuses them.
        let _ = lab.exec(R, &["ip", "link", "set", "r2", "down"]);
        std::thread::sleep(Duration::from_millis(500));
        let (c0, t0) = (cpu_secs(htbd.pid()), Instant::now());
        std::thread::sleep(Duration::from_secs(3));
        let share = (cpu_secs(htbd.pid()) - c0) / t0.elapsed().as_secs_f64();
        eprintln!(
            "htbd used {:.1} % of a core while r2 was down",
            share * 100.0
        );
        let _ = lab.exec(R, &["ip", "link", "set", "r2", "up"]);
        assert!(
            share < 0.3,
            "htbd used {:.0} % of a core while r2 was down",
            share * 100.0
        );
        // And forwards again once it is up.
        std::thread::sleep(Duration::from_secs(6));
        assert!(
            lab.ping(N1, "10.201.2.2", 10, "0.1") >= 9,
            "no forwarding after the link came back"
        );
        // The flow has ended: every frame the dead link held came back to the pool.
        let f = htbd.status().frames;
        assert!(
            f.held == 0 && f.queued == 0 && f.in_tx == 0,
            "frames not back after the link came up: {f:?}"
        );
        assert_eq!(f.free + f.in_fill, f.total, "{f:?}");
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_umem_too_small_for_its_rings_is_refused_at_start() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        // Rings of 16384 on two ports would hold every one of 32768 frames the operator asked
        // for: htbd used to start and forward nothing. (Left unset, frames grows to fit.)
        let config = one_class("100mbit").replace(
            "realtime = 1",
            "realtime = 1\nring_size = 16384\nframes = 32768",
        );
        let error = htbd_fails(&lab, &config);
        assert!(
            error.contains("frames = 32768 is too few") && error.contains("ring_size = 16384"),
            "{error}"
        );
        assert!(!lab.xdp_attached(R, "r1") && !lab.xdp_attached(R, "r2"));
        // With frames for them (every fill, RX and TX ring full: 3 × 2 × 16384, plus the receive
        // reserve and 1024 for queues), it starts and forwards.
        let explicit = config.replace("frames = 32768", "frames = 100000");
        let htbd = Htbd::start(&lab, &explicit);
        assert_eq!(lab.ping(N1, "10.201.2.2", 5, "0.1"), 5);
        drop(htbd);
        // Without frames, the default grows to the rings' need plus 16384 for queues, and says so.
        let unset = config.replace("\nframes = 32768", "");
        let htbd = Htbd::start(&lab, &unset);
        assert_eq!(lab.ping(N1, "10.201.2.2", 5, "0.1"), 5);
        assert_eq!(htbd.status().frames.total, 99_584 + 16_384);
    });
}
