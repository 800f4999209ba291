//! `cake_ack_filter`: when a TCP ACK joins a queue, an older pure ACK of the same connection
//! that says nothing the new one does not (a lower or equal cumulative ACK, SACK ranges the
//! new one covers, no data, no flag or option that matters) is dropped. On an asymmetric link
//! the upstream then carries fewer ACKs for the same download.

use super::tcp::TcpAck;
use crate::Packet;
use crate::leaf::pool::{NONE, PacketList, PacketPool};

/// `before(a, b)` in sequence space.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `after(a, b)`.
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// `cake_tcph_may_drop`: the flags and options of `older` let it go, given the newer
/// segment's timestamps (only older timestamps may be dropped).
fn may_drop(older: &TcpAck, tsval: u32, tsecr: u32) -> bool {
    older.plain_ack()
        && older.options_droppable
        && !(older.has_timestamp && (after(older.tsval, tsval) || after(older.tsecr, tsecr)))
}

/// `cake_tcph_sack_compare(a, b)`: -1 if `a` SACKs something `b` does not (or carries a
/// DSACK), 1 if `b` SACKs more bytes, 0 if they SACK the same.
fn sack_compare(a: &TcpAck, b: &TcpAck) -> i32 {
    let (sa, sb) = (a.sacks(), b.sacks());
    match (sa.is_empty(), sb.is_empty()) {
        (false, true) => return -1,
        (true, false) => return 1,
        (true, true) => return 0,
        (false, false) => {}
    }
    let (mut bytes_a, mut bytes_b) = (0u32, 0u32);
    let mut first = true;
    for &(start_a, end_a) in sa {
        // A DSACK: always kept.
        if before(start_a, a.ack_seq) {
            return -1;
        }
        bytes_a = bytes_a.wrapping_add(end_a.wrapping_sub(start_a));
        let mut found = false;
        for &(start_b, end_b) in sb {
            if first {
                bytes_b = bytes_b.wrapping_add(end_b.wrapping_sub(start_b));
            }
            if !after(start_b, start_a) && !before(end_b, end_a) {
                found = true;
                if !first {
                    break;
                }
            }
        }
        if !found {
            return -1;
        }
        first = false;
    }
    i32::from(bytes_b > bytes_a)
}

/// The slot of the queued ACK that the packet just queued at the tail of `list` makes
/// redundant: the oldest eligible one once a second is found, or (`aggressive`) a single one
/// queued right before the new packet with the same ECN flags.
pub(crate) fn redundant<P: Packet>(
    pool: &PacketPool<P>,
    list: PacketList,
    aggressive: bool,
) -> Option<u32> {
    let trigger = pool.back(list)?.tcp_ack()?;
    if !trigger.acks_without_syn() {
        return None;
    }
    let (tsval, tsecr) = (trigger.tsval, trigger.tsecr);
    let mut eligible: Option<(u32, u8)> = None; // (slot, ECN flags)
    let mut found = 0i32;
    for (slot, packet) in pool.entries(list) {
        if pool.next_slot(slot) == NONE {
            break; // the trigger itself
        }
        let Some(check) = packet.tcp_ack() else {
            continue;
        };
        if check.tuple != trigger.tuple {
            continue;
        }
        // Flags that changed since the eligible ACK: dropping it would lose them.
        if let Some((_, flags)) = eligible
            && check.ecn_flags() != flags
        {
            eligible = None;
            found -= 1;
        }
        if !may_drop(check, tsval, tsecr) || check.payload || after(check.ack_seq, trigger.ack_seq)
        {
            continue;
        }
        let sack = sack_compare(check, trigger);
        if sack < 0 || (check.ack_seq == trigger.ack_seq && sack == 0) {
            continue;
        }
        if eligible.is_none() {
            eligible = Some((slot, check.ecn_flags()));
        }
        found += 1;
        if found > 1 {
            return eligible.map(|(slot, _)| slot);
        }
    }
    let (slot, flags) = eligible?;
    (aggressive && pool.next_slot(slot) == list.tail() && flags == trigger.ecn_flags())
        .then_some(slot)
}

#[cfg(test)]
mod tests {
    use super::super::tcp::tests::{sack, segment, ts};
    use super::super::tcp::{ACK, ECE};
    use super::*;
    use alloc::vec::Vec;

    #[derive(Debug)]
    struct Seg(Option<TcpAck>);

    impl Packet for Seg {
        fn len_bytes(&self) -> u32 {
            64
        }
        fn tcp_ack(&self) -> Option<&TcpAck> {
            self.0.as_ref()
        }
    }

    fn queue(segments: &[Vec<u8>]) -> (PacketPool<Seg>, PacketList) {
        let mut pool = PacketPool::default();
        let mut list = PacketList::EMPTY;
        for s in segments {
            pool.push_back(&mut list, Seg(TcpAck::parse(s)), 0).unwrap();
        }
        (pool, list)
    }

    fn position(pool: &PacketPool<Seg>, list: PacketList, slot: Option<u32>) -> Option<usize> {
        let slot = slot?;
        pool.entries(list).position(|(s, _)| s == slot)
    }

    #[test]
    fn the_oldest_of_two_redundant_acks_goes() {
        let acks = [
            segment(ACK, 1000, 0, &[]),
            segment(ACK, 2000, 0, &[]),
            segment(ACK, 3000, 0, &[]),
        ];
        let (pool, list) = queue(&acks);
        assert_eq!(
            position(&pool, list, redundant(&pool, list, false)),
            Some(0)
        );
        // One eligible ACK is not enough, except in aggressive mode when it is adjacent.
        let (pool, list) = queue(&acks[1..]);
        assert_eq!(redundant(&pool, list, false), None);
        assert_eq!(position(&pool, list, redundant(&pool, list, true)), Some(0));
    }

    #[test]
    fn data_higher_acks_flags_and_newer_timestamps_are_kept() {
        let trigger = segment(ACK, 5000, 0, &ts(100, 50));
        for older in [
            segment(ACK, 1000, 10, &[]),          // carries data
            segment(ACK, 6000, 0, &[]),           // acknowledges more than the trigger
            segment(ACK | 0x08, 1000, 0, &[]),    // PSH
            segment(ACK, 1000, 0, &ts(200, 50)),  // a newer TSval
            segment(ACK, 1000, 0, &[2, 4, 5, 0]), // an MSS option
            segment(ACK, 5000, 0, &[]),           // the same ACK and no more SACK: equal
        ] {
            let (pool, list) = queue(&[older.clone(), older, trigger.clone()]);
            assert_eq!(redundant(&pool, list, true), None);
        }
    }

    #[test]
    fn sack_decides_when_both_carry_it() {
        let newer = TcpAck::parse(&segment(ACK, 100, 0, &sack(&[(200, 400)]))).unwrap();
        let covered = TcpAck::parse(&segment(ACK, 100, 0, &sack(&[(200, 300)]))).unwrap();
        let beyond = TcpAck::parse(&segment(ACK, 100, 0, &sack(&[(200, 500)]))).unwrap();
        let dsack = TcpAck::parse(&segment(ACK, 100, 0, &sack(&[(50, 90)]))).unwrap();
        let none = TcpAck::parse(&segment(ACK, 100, 0, &[])).unwrap();
        assert_eq!(sack_compare(&covered, &newer), 1);
        assert_eq!(sack_compare(&newer, &newer), 0);
        assert_eq!(sack_compare(&beyond, &newer), -1);
        assert_eq!(sack_compare(&dsack, &newer), -1, "a DSACK is never dropped");
        assert_eq!(sack_compare(&none, &newer), 1);
        assert_eq!(sack_compare(&newer, &none), -1);
        // Same cumulative ACK, less SACKed: redundant.
        let (pool, list) = queue(&[
            segment(ACK, 100, 0, &sack(&[(200, 300)])),
            segment(ACK, 100, 0, &sack(&[(200, 350)])),
            segment(ACK, 100, 0, &sack(&[(200, 400)])),
        ]);
        assert_eq!(
            position(&pool, list, redundant(&pool, list, false)),
            Some(0)
        );
    }

    #[test]
    fn a_change_of_ecn_flags_restarts_the_search() {
        let (pool, list) = queue(&[
            segment(ACK, 1000, 0, &[]),
            segment(ACK | ECE, 2000, 0, &[]),
            segment(ACK | ECE, 3000, 0, &[]),
        ]);
        // The first eligible ACK lacks ECE: it is forgotten when the flags change, and the
        // ECE one alone does not make two.
        assert_eq!(redundant(&pool, list, false), None);
        assert_eq!(position(&pool, list, redundant(&pool, list, true)), Some(1));
    }

    #[test]
    fn other_connections_and_non_tcp_packets_are_passed_over() {
        let mut other = segment(ACK, 1000, 0, &[]);
        other[20] = 0x04; // another source port
        let (mut pool, mut list) = queue(&[other.clone(), other, segment(ACK, 3000, 0, &[])]);
        assert_eq!(redundant(&pool, list, true), None);
        pool.push_back(&mut list, Seg(None), 0).unwrap();
        assert_eq!(redundant(&pool, list, true), None, "the trigger is not TCP");
    }
}
