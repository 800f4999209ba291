//! Classes carried one way: on a box that shapes both directions of a subscriber (the same
//! class id on two ports, as `htb-cli import --download-dev … --upload-dev …` builds them), a
//! class whose packets grew on one port and not at all on the other between two scrapes means
//! the other direction took another path. With several boxes that is routes and shaping
//! disagreeing (a gateway on one box, the prefix announced by another), so each scrape counts
//! them (`htb_one_way_classes`) and the console lists them. TCP always answers, so a class
//! with real traffic is never one way for long; a class fed only by one-way UDP would be
//! listed too, which is why a class needs [`MIN_PACKETS`] in a scrape interval to count.

use std::collections::HashMap;

use htb_core::ClassId;
use serde::Serialize;

use super::Scrape;

/// Packets one direction must carry between two scrapes, with none the other way, for a
/// class to count as one way.
pub const MIN_PACKETS: u64 = 10;

/// A class carried one way since the previous scrape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OneWay {
    /// The class id, on both ports.
    pub class: ClassId,
    /// The port whose class carried packets.
    pub carried_on: String,
    /// How many.
    pub packets: u64,
    /// The port whose class carried none.
    pub silent_on: String,
}

/// Each two-port class's packet counters at the previous scrape.
#[derive(Debug, Default)]
pub struct OneWayMemo {
    last: HashMap<ClassId, [(String, u64); 2]>,
    found: Vec<OneWay>,
}

impl OneWayMemo {
    /// Compares `scrape` with the previous one; returns the classes carried one way between
    /// them (none at the first scrape), and keeps them for [`last`](Self::last).
    pub fn observe(&mut self, scrape: &Scrape) -> &[OneWay] {
        let mut on_ports: HashMap<ClassId, Vec<(&str, u64)>> = HashMap::new();
        for tree in &scrape.trees {
            for class in &tree.classes {
                on_ports
                    .entry(class.id)
                    .or_default()
                    .push((tree.dev.as_str(), class.stats.queue.packets));
            }
        }
        let mut now = HashMap::new();
        let mut found = Vec::new();
        for (id, ports) in on_ports {
            let [(a, pa), (b, pb)] = ports[..] else {
                continue;
            };
            let counters = [(a.to_owned(), pa), (b.to_owned(), pb)];
            if let Some([(la, lpa), (lb, lpb)]) = self.last.get(&id)
                && la == a
                && lb == b
            {
                let (da, db) = (pa.saturating_sub(*lpa), pb.saturating_sub(*lpb));
                let one_way = match (da, db) {
                    (d, 0) if d >= MIN_PACKETS => Some((a, d, b)),
                    (0, d) if d >= MIN_PACKETS => Some((b, d, a)),
                    _ => None,
                };
                if let Some((carried, packets, silent)) = one_way {
                    found.push(OneWay {
                        class: id,
                        carried_on: carried.to_owned(),
                        packets,
                        silent_on: silent.to_owned(),
                    });
                }
            }
            now.insert(id, counters);
        }
        found.sort_by(|x, y| y.packets.cmp(&x.packets).then(x.class.cmp(&y.class)));
        self.last = now;
        self.found = found;
        &self.found
    }

    /// What the last scrape found.
    #[must_use]
    pub fn last(&self) -> &[OneWay] {
        &self.found
    }
}

#[cfg(test)]
mod tests {
    use htb_core::ClassStats;
    use htb_xdp::EngineStats;

    use super::super::{ClassScrape, TreeScrape};
    use super::*;

    fn scrape(counts: &[(&str, &str, u64)]) -> Scrape {
        let mut trees: Vec<TreeScrape> = Vec::new();
        for &(dev, id, packets) in counts {
            let id: ClassId = id.parse().unwrap();
            let class = ClassScrape {
                id,
                parent: None,
                rate: 0,
                ceil: 0,
                stats: ClassStats {
                    id,
                    queue: htb_core::QueueCounters {
                        packets,
                        ..Default::default()
                    },
                    lends: 0,
                    borrows: 0,
                    giants: 0,
                    tokens: 0,
                    ctokens: 0,
                    mode: htb_core::Mode::CanSend,
                    level: 0,
                },
                rtt: None,
            };
            match trees.iter_mut().find(|t| t.dev == dev) {
                Some(t) => t.classes.push(class),
                None => trees.push(TreeScrape {
                    dev: dev.into(),
                    schedulers: Vec::new(),
                    classes: vec![class],
                }),
            }
        }
        Scrape {
            engine: EngineStats::default(),
            trees,
            gather_seconds: 0.0,
            generation: None,
            one_way_classes: None,
            flows: None,
        }
    }

    #[test]
    fn a_class_that_grew_one_way_only_is_found_at_the_next_scrape() {
        let mut memo = OneWayMemo::default();
        let first = scrape(&[
            ("down", "1:10", 100),
            ("up", "1:10", 50),
            ("down", "1:11", 100),
            ("up", "1:11", 50),
            ("down", "1:12", 0),
            ("up", "1:12", 0),
            ("down", "1:13", 7),
        ]);
        assert!(memo.observe(&first).is_empty(), "nothing to compare with");
        let second = scrape(&[
            // Both ways: fine.
            ("down", "1:10", 200),
            ("up", "1:10", 60),
            // Download only: one way.
            ("down", "1:11", 180),
            ("up", "1:11", 50),
            // Idle, or a trickle: not counted.
            ("down", "1:12", 9),
            ("up", "1:12", 0),
            // On one port only: not a two-way class.
            ("down", "1:13", 900),
        ]);
        assert_eq!(
            memo.observe(&second),
            [OneWay {
                class: "1:11".parse().unwrap(),
                carried_on: "down".into(),
                packets: 80,
                silent_on: "up".into(),
            }]
        );
        assert_eq!(memo.last().len(), 1);
        // The upload side only, the next time.
        let third = scrape(&[
            ("down", "1:10", 300),
            ("up", "1:10", 70),
            ("down", "1:11", 180),
            ("up", "1:11", 90),
        ]);
        let found = memo.observe(&third);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].carried_on.as_str(), found[0].packets), ("up", 40));
    }
}
