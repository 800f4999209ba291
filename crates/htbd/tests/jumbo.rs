//! Seed 001's setup: MTU 9000 on every link. htbd receives jumbo frames as chains of 2048-byte
//! UMEM frames (AF_XDP multi-buffer), shapes them whole and sends them whole, in router and
//! bridge mode; a frame size the kernel refuses is named at start, before anything is attached.
//!
//! Every test needs root and network namespaces, so each is `#[ignore]`d (see `lab.rs`). Each
//! rate measurement proves its premise: the generator offered at least 1.1× the class's rate,
//! the class dropped or hit its limit, and the frames that crossed were jumbo frames.

use std::time::Duration;

use htb_lab::{Counted, Htbd, Lab, N1, N2, Promise, R, assert_filled, htbd_fails};

const MTU: u32 = 9000;
/// iperf3's UDP payload that fills a 9000-byte IP packet (less 20 + 8 bytes of headers).
const DATAGRAM: usize = 8972;

/// Router mode, r2 shaped by one class at `rate` that takes all traffic.
fn one_class(rate: &str) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n\
         [interface.qdisc]\ndefault = \"1\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"{rate}\"\n"
    )
}

/// The mean size of the packets class 1:1 of r2 sent since `before` (iperf3's control packets
/// among them): above 8000 bytes only if they were jumbo frames (chains), as no frame of a
/// 1500-byte MTU passes 1514.
fn mean_packet(htbd: &Htbd, before: &serde_json::Value) -> f64 {
    let after = htbd.class_stats("r2", "1:1");
    let delta = |key: &str| after[key].as_u64().unwrap_or(0) - before[key].as_u64().unwrap_or(0);
    let (bytes, packets) = (delta("bytes"), delta("packets"));
    assert!(packets > 0, "class 1:1 sent nothing: {after}");
    bytes as f64 / packets as f64
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn mtu_9000_udp_is_shaped_within_1_percent_and_tcp_fills_the_class() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbj", "router");
        lab.set_mtu(MTU);
        for (rate, bps) in [("100mbit", 100e6), ("500mbit", 500e6)] {
            let mut htbd = Htbd::start(&lab, &one_class(rate));
            htbd.wait_for_log(
                "chains of frames (AF_XDP multi-buffer)",
                Duration::from_secs(5),
            );
            let before = htbd.class_stats("r2", "1:1");
            // htbd's default burst: 1 ms of the rate and a (jumbo) MTU.
            let promise = Promise::class(bps).with_burst(bps / 8.0 * 1e-3 + 9018.0);
            htbd.assert_shapes(
                &format!("MTU 9000 UDP, class at {rate}, L2 at node-2's veth"),
                ("r2", "1:1"),
                &promise,
                0.01,
                || lab.udp_loads_sized(&[(5201, &format!("{:.0}", bps * 1.2))], 6, DATAGRAM),
            );
            let size = mean_packet(&htbd, &before);
            assert!(
                size > 8000.0,
                "premise failed: the class sent {size:.0}-byte packets on average, not jumbo frames"
            );

            // TCP at MSS 8948 through chained frames: one stream's goodput over the whole run
            // (slow start and CoDel's control included, as in lab.rs's TCP checks) fills at least
            // 85 % of what the class owed and is never above the class.
            let _server = lab.iperf_server(N2, 5202);
            let (tcp, stalls) =
                htbd.accounted(|| lab.iperf(N1, "10.201.2.2", 5202, 4, None, false));
            let received = &tcp["end"]["sum_received"];
            let (Some(bytes), Some(secs)) =
                (received["bytes"].as_f64(), received["seconds"].as_f64())
            else {
                panic!("iperf3 TCP: {tcp}");
            };
            let goodput = bytes * 8.0 / secs;
            assert_filled(
                &format!("MTU 9000 TCP through {rate} (goodput)"),
                &Counted::exact(bytes, secs),
                &promise,
                &stalls,
                0.85,
            );
            assert!(
                goodput < 1.001 * bps,
                "MTU 9000 TCP through a {rate} class: {goodput} bit/s"
            );
            let status = htbd.status();
            let too_big = status.xdp.pass_too_big;
            assert_eq!(
                too_big, 0,
                "no frame was too long for the sockets: {status:?}"
            );
            drop(htbd);
            std::thread::sleep(Duration::from_millis(300));
        }
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn bridge_mode_forwards_jumbo_frames_whole() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbj", "bridge");
        lab.set_mtu(MTU);
        let config = "[daemon]\nmode = \"bridge\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
                  [[interface]]\nname = \"r1\"\npeer = \"r2\"\n\
                  [[interface]]\nname = \"r2\"\npeer = \"r1\"\n[interface.qdisc]\ndefault = \"1\"\n\
                  [[interface.class]]\nid = \"1:1\"\nrate = \"50mbit\"\n";
        let htbd = Htbd::start(&lab, config);
        // The kernel bridge is down: frames can only cross through htbd.
        assert!(
            lab.exec(R, &["ip", "link", "set", "br0", "down"])
                .status
                .success()
        );
        // A whole 9000-byte packet, not fragmented on the way (DF set).
        let ping = lab.exec(
            N1,
            &[
                "ping",
                "-c",
                "3",
                "-i",
                "0.2",
                "-M",
                "do",
                "-s",
                "8972",
                "10.201.0.2",
            ],
        );
        assert!(
            ping.status.success(),
            "9000-byte pings through the bridge: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        let before = htbd.class_stats("r2", "1:1");
        let _server = lab.iperf_server(N2, 5201);
        let tcp = lab.iperf(N1, "10.201.0.2", 5201, 3, None, false);
        let goodput = tcp["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or_else(|| panic!("iperf3 TCP: {tcp}"));
        assert!(
            (45e6..50.1e6).contains(&goodput),
            "MTU 9000 TCP through the bridge's 50 Mbit/s class: {goodput} bit/s"
        );
        let size = mean_packet(&htbd, &before);
        assert!(
            size > 8000.0,
            "the class sent {size:.0}-byte packets on average"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_frame_size_the_kernel_refuses_is_named_before_anything_is_attached() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbj", "router");
        lab.set_mtu(MTU);
        // Seed 001's first attempt: frames large enough for a 9000-byte packet. The kernel takes
        // no UMEM chunk above a page; htbd says so and what to set instead.
        let config =
            one_class("100mbit").replace("realtime = 1\n", "realtime = 1\nframe_size = 16384\n");
        let err = htbd_fails(&lab, &config);
        assert!(
            err.contains("frame_size = 16384 is larger than the page size")
                && err.contains("Set frame_size to 2048 or 4096"),
            "{err}"
        );
        assert!(!lab.xdp_attached(R, "r1") && !lab.xdp_attached(R, "r2"));
        // An MTU no chain of 17 frames of 2048 bytes holds: named with both fixes.
        lab.set_mtu(40000);
        let err = htbd_fails(&lab, &one_class("100mbit"));
        assert!(
            err.contains("MTU 40000 does not fit 17 frames of 2048 bytes")
                && err.contains("raise frame_size to 4096"),
            "{err}"
        );
        assert!(!lab.xdp_attached(R, "r1") && !lab.xdp_attached(R, "r2"));
    });
}
