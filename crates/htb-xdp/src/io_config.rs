//! The UMEM's and rings' sizes, and what they allow: frames per packet, the largest MTU, the
//! frames the rings take. Pure arithmetic, kept out of `umem` (the module allowed `unsafe`) so
//! that it is checked as safe code.

use crate::error::{ConfigError, XdpError};

/// UMEM and ring sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoConfig {
    /// Frames in the UMEM (every queued packet holds one, a jumbo packet several).
    pub frames: u32,
    /// `frames` is the default, not the operator's: the engine raises it where the sockets'
    /// rings would take it all ([`fit_frames`](Self::fit_frames)), instead of refusing to start
    /// on a machine with many queues.
    pub frames_default: bool,
    /// Bytes per frame: 2048 carries frames up to 1792 bytes, 4096 up to 3840; larger packets
    /// need [`multi_buffer`](Self::multi_buffer). The kernel takes no more than its page size.
    pub frame_size: u32,
    /// Entries of each RX, TX, fill and completion ring (a power of two).
    pub ring_size: u32,
    /// Bind in zero-copy mode (needs driver support; veth has none).
    pub zero_copy: bool,
    /// Receive and send packets larger than one frame as chains of up to [`MAX_CHAIN`] frames
    /// (AF_XDP multi-buffer: `XDP_USE_SG` and an `xdp.frags` program). The engine turns it on
    /// when a port's MTU does not fit one frame.
    pub multi_buffer: bool,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self {
            frames: 32_768,
            frames_default: true,
            frame_size: 2048,
            ring_size: 2048,
            zero_copy: false,
            multi_buffer: false,
        }
    }
}

/// The kernel's headroom before a packet in every frame (`XDP_PACKET_HEADROOM`).
const XDP_PACKET_HEADROOM: u32 = 256;

/// An Ethernet header with two VLAN tags: what a frame holds beyond the MTU.
const L2_OVERHEAD: u32 = 18;

/// The most frames one packet may span with multi-buffer. Copy-mode TX builds one skb per
/// packet, its first frame the linear part and each further one a page fragment, and
/// `xsk_build_skb` refuses (`-EOVERFLOW`) a packet with more fragments than `MAX_SKB_FRAGS`
/// (17) allows; 17 frames in all stays below that.
pub const MAX_CHAIN: u32 = 17;

/// Frames kept for queued packets beyond what the rings and the receive reserve take: a UMEM
/// with fewer would drop nearly every packet it receives.
pub(crate) const QUEUE_FRAMES_MIN: u32 = 1024;

impl IoConfig {
    /// The frames the data plane needs with `channels` sockets moving `batch` frames at a time:
    /// every fill, RX and TX ring full (the fill rings are kept full while the RX rings wait
    /// to be read), the receive reserve (two batches per socket, below which received frames
    /// are dropped so the fill rings never starve), and `QUEUE_FRAMES_MIN` (1024) for the queues.
    #[must_use]
    pub fn frames_needed(&self, channels: u32, batch: u32) -> u64 {
        let channels = u64::from(channels);
        3 * channels * u64::from(self.ring_size)
            + channels * u64::from(batch) * 2
            + u64::from(QUEUE_FRAMES_MIN)
    }

    /// The packet bytes one frame holds: the frame less the kernel's 256-byte XDP headroom.
    #[must_use]
    pub fn frame_room(&self) -> u32 {
        self.frame_size.saturating_sub(XDP_PACKET_HEADROOM)
    }

    /// The largest interface MTU whose frames fit one UMEM frame: its room less an Ethernet
    /// header with two VLAN tags (18 bytes). Above it, packets need multi-buffer.
    #[must_use]
    pub fn max_single_mtu(&self) -> u32 {
        self.frame_room().saturating_sub(L2_OVERHEAD)
    }

    /// The largest frame (L2 bytes) the sockets take: one frame's room, or [`MAX_CHAIN`] of
    /// them with multi-buffer. The XDP program hands larger ones to the kernel.
    #[must_use]
    pub fn max_frame_len(&self) -> u32 {
        if self.multi_buffer {
            self.frame_room() * MAX_CHAIN
        } else {
            self.frame_room()
        }
    }

    /// The largest interface MTU htbd can shape with multi-buffer on, at this frame size.
    #[must_use]
    pub fn max_chained_mtu(&self) -> u32 {
        (self.frame_room() * MAX_CHAIN).saturating_sub(L2_OVERHEAD)
    }

    /// The largest interface MTU whose frames reach htbd with these settings.
    #[must_use]
    pub fn max_mtu(&self) -> u32 {
        self.max_frame_len().saturating_sub(L2_OVERHEAD)
    }

    /// Frames per packet at most (1 without multi-buffer).
    #[must_use]
    pub fn max_chain(&self) -> u32 {
        if self.multi_buffer { MAX_CHAIN } else { 1 }
    }

    /// Checks the frame size, and the MTU of every port (`(name, mtu)`), against what the
    /// kernel takes, before any socket is made, and says whether multi-buffer is needed: the
    /// kernel refuses UMEM chunks larger than a page (`xdp_umem_reg`; the support for larger
    /// chunks on hugepages was reverted), so a jumbo frame is received as a chain of frames.
    ///
    /// # Errors
    /// [`XdpError::Config`] for a frame size above the page size, or an MTU that even a chain
    /// of [`MAX_CHAIN`] frames cannot hold, naming the fix.
    pub fn check_mtus(&self, page_size: u32, ports: &[(&str, u32)]) -> Result<bool, XdpError> {
        if self.frame_size > page_size {
            return Err(ConfigError::FrameTooLarge {
                frame_size: self.frame_size,
                page_size,
                suggested: page_size.min(4096),
            }
            .into());
        }
        let mut multi_buffer = false;
        for &(name, mtu) in ports {
            if mtu <= self.max_single_mtu() {
                continue;
            }
            if mtu > self.max_chained_mtu() {
                return Err(ConfigError::MtuTooLarge {
                    port: name.to_owned(),
                    mtu,
                    chain: MAX_CHAIN,
                    frame_size: self.frame_size,
                    max_mtu: self.max_chained_mtu(),
                    suggested: page_size.min(4096),
                }
                .into());
            }
            multi_buffer = true;
        }
        Ok(multi_buffer)
    }

    /// Frames kept for queues beyond the rings when the default is raised: what the default
    /// leaves on two sockets with the default rings, about.
    pub const QUEUE_FRAMES_AUTO: u32 = 16_384;

    /// Where `frames` is the default and `channels` sockets' rings need more than it leaves for
    /// queues, raises it to their need plus [`QUEUE_FRAMES_AUTO`](Self::QUEUE_FRAMES_AUTO);
    /// returns the new count when it did. An operator's own `frames` is left alone (and checked
    /// by [`check_budget`](Self::check_budget)).
    pub fn fit_frames(&mut self, channels: u32, batch: u32) -> Option<u32> {
        let wanted = self.frames_needed(channels, batch) + u64::from(Self::QUEUE_FRAMES_AUTO);
        if !self.frames_default || wanted <= u64::from(self.frames) {
            return None;
        }
        self.frames = u32::try_from(wanted).unwrap_or(u32::MAX);
        Some(self.frames)
    }

    /// Refuses a UMEM too small for its rings (with every ring full, nothing would be left to
    /// queue, and every packet would be dropped: a silent blackhole).
    ///
    /// # Errors
    /// [`XdpError::Config`] naming the sizes and what they need.
    pub fn check_budget(&self, channels: u32, batch: u32) -> Result<(), XdpError> {
        let needed = self.frames_needed(channels, batch);
        if u64::from(self.frames) >= needed {
            return Ok(());
        }
        Err(ConfigError::TooFewFrames {
            frames: self.frames,
            channels,
            ring_size: self.ring_size,
            in_rings: 3 * u64::from(channels) * u64::from(self.ring_size),
            held_back: u64::from(channels) * u64::from(batch) * 2,
            for_queues: QUEUE_FRAMES_MIN,
            needed,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_2048_bytes_hold_an_mtu_of_1774() {
        assert_eq!(IoConfig::default().max_mtu(), 1774);
        let jumbo = IoConfig {
            frame_size: 4096,
            ..IoConfig::default()
        };
        assert_eq!(jumbo.max_mtu(), 3822);
    }

    #[test]
    fn multi_buffer_chains_up_to_17_frames() {
        let chained = IoConfig {
            multi_buffer: true,
            ..IoConfig::default()
        };
        assert_eq!(chained.max_single_mtu(), 1774);
        assert_eq!(chained.max_frame_len(), 17 * 1792);
        assert_eq!(chained.max_mtu(), 17 * 1792 - 18);
        assert_eq!(chained.max_chain(), 17);
        assert_eq!(IoConfig::default().max_chain(), 1);
        let pages = IoConfig {
            frame_size: 4096,
            ..chained
        };
        assert_eq!(pages.max_mtu(), 17 * 3840 - 18);
    }

    #[test]
    fn jumbo_mtus_turn_multi_buffer_on_and_impossible_ones_are_refused_with_the_fix() {
        let io = IoConfig::default();
        assert_eq!(
            io.check_mtus(4096, &[("r1", 1500), ("r2", 1500)]).ok(),
            Some(false)
        );
        assert_eq!(
            io.check_mtus(4096, &[("r1", 1500), ("r2", 9000)]).ok(),
            Some(true)
        );
        // Seed 001's setup before: frame_size = 16384 for MTU 9000 (the kernel refuses it).
        let big = IoConfig {
            frame_size: 16384,
            ..io
        };
        let err = big
            .check_mtus(4096, &[("r1", 9000)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("frame_size = 16384 is larger than the page size (4096 bytes)")
                && err.contains("chains of frames")
                && err.contains("Set frame_size to 2048 or 4096"),
            "{err}"
        );
        // 64 KiB packets do not fit 17 frames of 2048 bytes; they fit 17 of 4096.
        let err = io
            .check_mtus(4096, &[("r1", 65000)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("r1: MTU 65000 does not fit 17 frames of 2048 bytes")
                && err.contains("MTU 30446 at most")
                && err.contains("ip link set r1 mtu 30446")
                && err.contains("raise frame_size to 4096"),
            "{err}"
        );
        let pages = IoConfig {
            frame_size: 4096,
            ..io
        };
        assert_eq!(pages.check_mtus(4096, &[("r1", 65000)]).ok(), Some(true));
    }

    #[test]
    fn a_umem_too_small_for_its_rings_is_refused_with_the_sizes() {
        let default = IoConfig::default();
        // Two veth ports (one queue each), batch 64: 2 × 3 × 2048 + 256 + 1024 frames.
        assert_eq!(default.frames_needed(2, 64), 13568);
        assert!(default.check_budget(2, 64).is_ok());
        // The default grows with the sockets (7 queues on 2 ports); an operator's count does not.
        let mut many = IoConfig::default();
        assert_eq!(many.fit_frames(2, 64), None, "two sockets fit the default");
        let grown = many
            .fit_frames(14, 64)
            .expect("14 sockets outgrow 32 768 frames");
        assert_eq!(u64::from(grown), many.frames_needed(14, 64) + 16_384);
        assert!(many.check_budget(14, 64).is_ok());
        let mut given = IoConfig {
            frames_default: false,
            ..IoConfig::default()
        };
        assert_eq!(given.fit_frames(14, 64), None);
        assert!(given.check_budget(14, 64).is_err());
        // The blackhole of the issue: rings of 16384 on two ports fill all 32768 frames.
        let big_rings = IoConfig {
            ring_size: 16384,
            ..default
        };
        let err = big_rings.check_budget(2, 64).unwrap_err().to_string();
        assert!(
            err.contains("frames = 32768 is too few")
                && err.contains("ring_size = 16384")
                && err.contains("fill, RX and TX rings")
                && err.contains("99584 in all"),
            "{err}"
        );
        // Enough frames for them is accepted.
        let enough = IoConfig {
            frames: 99584,
            ..big_rings
        };
        assert!(enough.check_budget(2, 64).is_ok());
    }
}
