//! `htb-cli import --shard K/N`: the circuits box K of N imports, when several boxes each shape
//! their own share of the same ShapedDevices.csv (and routes, ECMP or BGP, send each
//! subscriber's traffic to its box). A circuit belongs to box `FNV-1a(circuit id) mod N + 1`:
//! a fixed hash of the id alone, so every box and every version of htb-cli agree, a circuit
//! stays on its box whatever else the file holds, and adding a box moves only the circuits
//! the new count sends elsewhere.

use std::fmt;
use std::str::FromStr;

/// Box `index` (1-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// Why `--shard` was not `K/N`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--shard {0:?}: expected K/N with 1 <= K <= N, such as 2/3 (box 2 of 3)")]
pub struct ShardError(String);

impl FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, ShardError> {
        let bad = || ShardError(s.to_owned());
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            k.trim().parse::<u32>().map_err(|_| bad())?,
            n.trim().parse::<u32>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// 64-bit FNV-1a: fixed, so the split never depends on a version or a machine.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Shard {
    /// The box (1-based, of `count`) a circuit id belongs to.
    #[must_use]
    pub fn box_of(circuit_id: &str, count: u32) -> u32 {
        (fnv1a(circuit_id.as_bytes()) % u64::from(count.max(1))) as u32 + 1
    }

    /// Whether this box imports `circuit_id`.
    #[must_use]
    pub fn contains(self, circuit_id: &str) -> bool {
        Self::box_of(circuit_id, self.count) == self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_of_n_parses_and_nothing_else_does() {
        assert_eq!("2/3".parse(), Ok(Shard { index: 2, count: 3 }));
        assert_eq!(
            "1/1".parse::<Shard>().map(|s| s.to_string()),
            Ok("1/1".into())
        );
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", "", "/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn each_circuit_is_on_exactly_one_box_and_the_split_is_fixed_and_even() {
        // Fixed values (FNV-1a of the id): a box of any version agrees with these.
        assert_eq!(fnv1a(b"c1"), 0x08a2_7f07_b54a_6859);
        assert_eq!(Shard::box_of("c1", 4), 2);
        assert_eq!(Shard::box_of("lab", 4), 1);
        let shards: Vec<Shard> = (1..=4).map(|k| format!("{k}/4").parse().unwrap()).collect();
        let mut per_box = [0u32; 4];
        for i in 0..10_000 {
            let id = format!("circuit-{i}");
            let on: Vec<usize> = (0..4).filter(|&b| shards[b].contains(&id)).collect();
            assert_eq!(on.len(), 1, "{id} is on boxes {on:?}");
            per_box[on[0]] += 1;
        }
        assert!(
            per_box.iter().all(|&n| (2300..2700).contains(&n)),
            "{per_box:?}"
        );
    }
}
