//! What a qdisc reads of its port when it is given no option: the MTU its quanta and buffers
//! start from (`psched_mtu(qdisc_dev(sch))`). Every kind sizes something by it, so it is kept
//! once, here, rather than with one kind that the others would then depend on.

/// `psched_mtu` of an Ethernet port with MTU 1500: 1514 bytes. The default `quantum` of
/// `sfq` and `fq_codel` and CoDel's `mtu`.
pub const DEFAULT_PSCHED_MTU: u32 = 1514;
