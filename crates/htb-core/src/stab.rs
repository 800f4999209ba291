//! Size tables (`tc qdisc … stab …`): the length a qdisc counts for each packet, so that a
//! shaper on an Ethernet port can shape the bytes of the link behind it (DSL's ATM cells,
//! PPPoE and VLAN headers, the frame's preamble and gap).
//!
//! iproute2 turns the options into a table (`tc_calc_size_table`, `tc_core.c`) and the kernel
//! looks each packet's length up in it (`__qdisc_calculate_pkt_len`, `sch_api.c`). Every entry
//! of that table is a pure function of its index, so [`SizeTable`] computes the entry a packet
//! lands on instead of storing 512 of them: the same lengths, cell rounding included, in a
//! `Copy` value of a few words.

use core::fmt;

use crate::LinkLayer;

/// The largest table tc can send: its entries travel as one netlink attribute (16-bit length,
/// 4 of them its header) of 16-bit slots.
pub const MAX_TSIZE: u32 = (u16::MAX as u32 - 4) / 2;

/// The kernel's `STAB_SIZE_LOG_MAX`: the largest `cell_log` and `size_log` it accepts.
const SIZE_LOG_MAX: u32 = 30;

/// `tc … stab [mtu BYTES] [tsize SLOTS] [mpu BYTES] [overhead BYTES] [linklayer TYPE]`
/// (`struct tc_sizespec`).
///
/// As given, zero fields mean "not given". Once made into a [`SizeTable`], [`SizeTable::spec`]
/// holds what the kernel keeps and `tc -d qdisc show` prints: `mtu` and `tsize` filled in
/// (2047 and 512 by default) when a table is needed, both zero when only `overhead` is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct SizeSpec {
    /// Bytes added to every packet's length; may be negative (a packet counts at least 1).
    pub overhead: i32,
    /// Minimum packet unit: shorter packets count as this many bytes.
    pub mpu: u32,
    /// The largest length the table covers in its cells (longer packets are counted by
    /// wrapping around it, as the kernel does).
    pub mtu: u32,
    /// Slots of the table.
    pub tsize: u32,
    /// The link's framing (`None`: not given, which tc treats as Ethernet but does not print).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "linklayer", skip_serializing_if = "Option::is_none")
    )]
    pub link_layer: Option<LinkLayer>,
}

/// Why a size table was refused. Nothing changes when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizeTableError {
    /// None of `overhead`, `mpu` and `linklayer` was given: the table would change nothing
    /// (`check_size_table_opts`, where tc gives up without a word).
    Empty,
    /// More slots than one netlink attribute carries.
    TooManySlots(u32),
    /// `mtu` over `tsize` needs cells of more than 2^30 bytes (`STAB_SIZE_LOG_MAX`).
    CellTooLarge {
        /// The `mtu` given.
        mtu: u32,
        /// The `tsize` given.
        tsize: u32,
    },
}

impl fmt::Display for SizeTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str(
                "stab needs overhead, mpu or linklayer (with none of them it changes no length)",
            ),
            Self::TooManySlots(n) => write!(
                f,
                "stab tsize {n}: a size table has at most {MAX_TSIZE} slots"
            ),
            Self::CellTooLarge { mtu, tsize } => write!(
                f,
                "stab mtu {mtu} tsize {tsize}: cells of more than 2^{SIZE_LOG_MAX} bytes (Invalid logarithmic size of size table)"
            ),
        }
    }
}

impl core::error::Error for SizeTableError {}

/// A size table as the kernel holds it (`struct qdisc_size_table`): what
/// [`pkt_len`](Self::pkt_len) charges for each packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SizeTable {
    spec: SizeSpec,
    cell_log: u8,
    size_log: u8,
    /// 0 or -1: the kernel's `cell_align` (-1 whenever there is a table, so that a length
    /// of exactly one cell lands in slot 0).
    cell_align: i8,
}

impl SizeSpec {
    /// `tc_calc_size_table` and `qdisc_get_stab`'s checks: the table these options make.
    ///
    /// # Errors
    /// [`SizeTableError`] when tc or the kernel refuses the options.
    pub fn table(self) -> Result<SizeTable, SizeTableError> {
        if self.link_layer.is_none() && self.mpu == 0 && self.overhead == 0 {
            return Err(SizeTableError::Empty);
        }
        let mut spec = self;
        if spec.link_layer != Some(LinkLayer::Atm) && spec.mpu == 0 {
            // Only an overhead: no table (tc clears mtu and tsize it may have been given).
            spec.mtu = 0;
            spec.tsize = 0;
            return Ok(SizeTable {
                spec,
                cell_log: 0,
                size_log: 0,
                cell_align: 0,
            });
        }
        if spec.mtu == 0 {
            spec.mtu = 2047;
        }
        if spec.tsize == 0 {
            spec.tsize = 512;
        }
        if spec.tsize > MAX_TSIZE {
            return Err(SizeTableError::TooManySlots(spec.tsize));
        }
        let mut cell_log = 0;
        while (u64::from(spec.mtu) >> cell_log) > u64::from(spec.tsize - 1) {
            cell_log += 1;
        }
        if cell_log > SIZE_LOG_MAX {
            return Err(SizeTableError::CellTooLarge {
                mtu: spec.mtu,
                tsize: spec.tsize,
            });
        }
        // The largest entry is the last slot's; `size_log` shrinks entries to 16 bits.
        let largest = adjust(u64::from(spec.tsize) << cell_log, spec);
        let mut size_log = 0;
        while (largest >> size_log) > u64::from(u16::MAX) {
            size_log += 1;
        }
        Ok(SizeTable {
            spec,
            cell_log: cell_log as u8,
            size_log,
            cell_align: -1,
        })
    }
}

/// `tc_adjust_size`: the length one slot stands for, `mpu` and ATM cells applied.
fn adjust(size: u64, spec: SizeSpec) -> u64 {
    let size = size.max(u64::from(spec.mpu));
    match spec.link_layer {
        // `tc_align_to_atm`: 48 payload bytes in each 53-byte cell.
        Some(LinkLayer::Atm) => size.div_ceil(48) * 53,
        _ => size,
    }
}

impl SizeTable {
    /// The options as the kernel keeps them (what `tc -d qdisc show` prints).
    #[must_use]
    pub fn spec(&self) -> SizeSpec {
        self.spec
    }

    /// `__qdisc_calculate_pkt_len`: the length counted for a packet of `len` bytes.
    #[must_use]
    pub fn pkt_len(&self, len: u32) -> u32 {
        let mut pkt_len = i64::from(len) + i64::from(self.spec.overhead);
        if self.spec.tsize != 0 {
            let tsize = u64::from(self.spec.tsize);
            let slot = (pkt_len + i64::from(self.cell_align)).max(0) as u64 >> self.cell_log;
            let entry = |slot: u64| adjust((slot + 1) << self.cell_log, self.spec) >> self.size_log;
            let cells = if slot < tsize {
                entry(slot)
            } else {
                // Past the table: whole tables of the last entry, plus the rest.
                entry(tsize - 1)
                    .saturating_mul(slot / tsize)
                    .saturating_add(entry(slot % tsize))
            };
            let bytes = cells.saturating_mul(1 << self.size_log);
            pkt_len = i64::try_from(bytes).unwrap_or(i64::MAX);
        }
        pkt_len.clamp(1, i64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    fn spec(overhead: i32, mpu: u32, link_layer: Option<LinkLayer>) -> SizeSpec {
        SizeSpec {
            overhead,
            mpu,
            link_layer,
            ..SizeSpec::default()
        }
    }

    /// The kernel's table, built as `tc_calc_size_table` builds it, looked up as
    /// `__qdisc_calculate_pkt_len` looks it up: the reference the computed entries must match.
    fn kernel_pkt_len(given: SizeSpec, len: u32) -> u32 {
        let t = given.table().unwrap();
        let s = t.spec();
        let mut pkt_len = i64::from(len) + i64::from(s.overhead);
        if s.tsize != 0 {
            let mut size_log = 0;
            let data: Vec<u64> = loop {
                let data: Vec<u64> = (0..u64::from(s.tsize))
                    .map(|i| adjust((i + 1) << t.cell_log, s) >> size_log)
                    .collect();
                if data.iter().all(|&d| d <= u64::from(u16::MAX)) {
                    break data;
                }
                size_log += 1;
            };
            let slot = ((pkt_len - 1).max(0) as u64) >> t.cell_log;
            let n = data.len() as u64;
            let v = if slot < n {
                data[slot as usize]
            } else {
                data[n as usize - 1] * (slot / n) + data[(slot % n) as usize]
            };
            pkt_len = (v << size_log) as i64;
        }
        pkt_len.max(1) as u32
    }

    #[test]
    fn an_ethernet_overhead_needs_no_table() {
        // sqm-scripts' default: stab mtu 2047 tsize 512 mpu 0 overhead 34 linklayer ethernet.
        let t = SizeSpec {
            overhead: 34,
            mtu: 2047,
            tsize: 512,
            link_layer: Some(LinkLayer::Ethernet),
            ..SizeSpec::default()
        }
        .table()
        .unwrap();
        // tc shows " linklayer ethernet overhead 34": mtu and tsize are dropped.
        assert_eq!(
            t.spec(),
            SizeSpec {
                overhead: 34,
                link_layer: Some(LinkLayer::Ethernet),
                ..SizeSpec::default()
            }
        );
        assert_eq!(t.pkt_len(1514), 1548);
        assert_eq!(t.pkt_len(60), 94);
        // A negative overhead never makes a packet count less than one byte.
        let t = spec(-100, 0, None).table().unwrap();
        assert_eq!(t.pkt_len(64), 1);
        assert_eq!(t.pkt_len(1514), 1414);
    }

    #[test]
    fn atm_counts_whole_cells_of_the_table() {
        // stab overhead 40 linklayer atm: tc fills in mtu 2047 tsize 512 (cells of 4 bytes).
        let t = spec(40, 0, Some(LinkLayer::Atm)).table().unwrap();
        assert_eq!((t.spec().mtu, t.spec().tsize, t.cell_log), (2047, 512, 2));
        // 1500 + 40 = 1540 B: 33 cells of 48 bytes, 1749 B on the wire.
        assert_eq!(t.pkt_len(1500), 33 * 53);
        // 8 + 40 = 48: exactly one cell (cell_align -1 keeps it in slot 11, not 12).
        assert_eq!(t.pkt_len(8), 53);
        assert_eq!(t.pkt_len(9), 106);
    }

    #[test]
    fn the_computed_entries_are_the_kernels_table() {
        let specs = [
            spec(40, 0, Some(LinkLayer::Atm)),
            spec(-4, 64, None),
            spec(0, 1, Some(LinkLayer::Ethernet)),
            spec(10, 96, Some(LinkLayer::Atm)),
            SizeSpec {
                mtu: 1500,
                tsize: 128,
                ..spec(10, 0, Some(LinkLayer::Atm))
            },
            SizeSpec {
                mtu: 9000,
                ..spec(-4, 64, None)
            },
            // One slot: every length wraps around the table.
            SizeSpec {
                tsize: 1,
                ..spec(0, 1, None)
            },
            // Entries over 16 bits: size_log > 0.
            SizeSpec {
                mtu: 200_000,
                tsize: 2,
                ..spec(0, 0, Some(LinkLayer::Atm))
            },
        ];
        for s in specs {
            let t = s.table().unwrap();
            for len in (0..20_000)
                .step_by(7)
                .chain([1, 47, 48, 49, 1514, 9018, 65_535])
            {
                assert_eq!(t.pkt_len(len), kernel_pkt_len(s, len), "{s:?} len {len}");
            }
        }
    }

    #[test]
    fn tc_and_the_kernel_refuse_what_they_refuse() {
        assert_eq!(SizeSpec::default().table(), Err(SizeTableError::Empty));
        assert_eq!(
            SizeSpec {
                mtu: 1500,
                tsize: 64,
                ..SizeSpec::default()
            }
            .table(),
            Err(SizeTableError::Empty)
        );
        assert_eq!(
            SizeSpec {
                tsize: 40_000,
                ..spec(0, 64, None)
            }
            .table(),
            Err(SizeTableError::TooManySlots(40_000))
        );
        assert!(matches!(
            SizeSpec {
                mtu: u32::MAX,
                tsize: 1,
                ..spec(0, 64, None)
            }
            .table(),
            Err(SizeTableError::CellTooLarge { .. })
        ));
        // A table is idempotent: what the kernel keeps makes the same table again.
        let t = spec(40, 0, Some(LinkLayer::Atm)).table().unwrap();
        assert_eq!(t.spec().table(), Ok(t));
    }
}
