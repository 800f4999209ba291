//! `Scheduler::check`: walks every structure and verifies the invariants the algorithm relies
//! on. Tests and fuzzers call it after each operation; it is O(classes × log classes).

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::Scheduler;
use super::arena::{NO_CLASS, NO_INNER};
use crate::Packet;
use crate::rbtree::NIL;
use crate::spec::MAX_DEPTH;
use crate::stats::Mode;

/// A violated scheduler invariant (a bug in this crate), described for a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError(pub String);

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scheduler invariant violated: {}", self.0)
    }
}

impl core::error::Error for CheckError {}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(CheckError(format!($($fmt)+)));
        }
    };
}

/// Where a prio node is expected to be linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Row { level: usize, prio: usize },
    Feed { inner: u32, prio: usize },
}

impl<P: Packet> Scheduler<P> {
    /// Verifies every internal invariant: red-black properties and orderings of all trees,
    /// levels and child counts, that exactly the non-green classes wait in the event queues,
    /// that active classes sit in exactly the rows and feeds their modes call for, DRR
    /// pointers, row masks, and the queue totals.
    ///
    /// # Errors
    /// A [`CheckError`] describing the first violation found.
    pub fn check(&self) -> Result<(), CheckError> {
        let nodes = &self.prio_nodes.nodes;
        let waits = &self.wait_nodes;
        let mut homes = vec![None::<Home>; nodes.len()];
        let mut waiting = 0usize;

        for (level, lvl) in self.levels.iter().enumerate() {
            let count = lvl
                .wait
                .check(waits)
                .map_err(|e| CheckError(format!("wait queue {level}: {e:?}")))?;
            waiting += count;
            let mut wait_err = None;
            lvl.wait.for_each(waits, |cl| {
                let c = &self.classes[cl as usize];
                if !c.live() || c.level as usize != level || c.mode == Mode::CanSend {
                    wait_err = Some(format!(
                        "class {} (level {}, {:?}) in wait queue {level}",
                        c.id(),
                        c.level,
                        c.mode
                    ));
                }
            });
            if let Some(e) = wait_err {
                return Err(CheckError(e));
            }
            for (prio, row) in lvl.rows.iter().enumerate() {
                row.tree
                    .check(nodes)
                    .map_err(|e| CheckError(format!("row {level}/{prio}: {e:?}")))?;
                ensure!(
                    (lvl.row_mask >> prio & 1 == 1) != row.tree.is_empty(),
                    "row_mask of level {level} disagrees with row {prio}"
                );
                self.check_row(row, Home::Row { level, prio }, &mut homes)?;
            }
        }

        // Inner state belongs to exactly one live inner class.
        let mut inner_owner = vec![NO_CLASS; self.inner.len()];
        for (slot, c) in self.classes.iter().enumerate() {
            if c.live() && self.cold[slot].inner != NO_INNER {
                let owner = &mut inner_owner[self.cold[slot].inner as usize];
                ensure!(
                    *owner == NO_CLASS,
                    "inner state {} shared by two classes",
                    self.cold[slot].inner
                );
                *owner = slot as u32;
            }
        }
        for &free in &self.free_inner {
            ensure!(
                inner_owner[free as usize] == NO_CLASS,
                "inner state {free} is free and in use"
            );
        }

        // Record every feed's members first: membership is checked per class below.
        for (slot, c) in self.classes.iter().enumerate() {
            if !c.live() || self.cold[slot].inner == NO_INNER {
                continue;
            }
            for (prio, feed) in self.inner[self.cold[slot].inner as usize]
                .feeds
                .iter()
                .enumerate()
            {
                feed.tree
                    .check(nodes)
                    .map_err(|e| CheckError(format!("feed {}/{prio}: {e:?}", c.id())))?;
                self.check_row(
                    feed,
                    Home::Feed {
                        inner: self.cold[slot].inner,
                        prio,
                    },
                    &mut homes,
                )?;
                let mut stranger = None;
                feed.tree.for_each(nodes, |node| {
                    let owner = nodes[node as usize].owner;
                    if self.classes[owner as usize].parent != slot as u32 {
                        stranger = Some(self.classes[owner as usize].id());
                    }
                });
                if let Some(id) = stranger {
                    return Err(CheckError(format!(
                        "{id} in a feed of {}, not its parent",
                        c.id()
                    )));
                }
            }
        }

        let mut qlen = 0u64;
        let mut backlog = 0u64;
        let mut flow_records = 0usize;
        let mut live = 0usize;
        let mut non_green = 0usize;
        for (slot, c) in self.classes.iter().enumerate() {
            let queue = &self.classes[slot].queue;
            if !c.live() {
                ensure!(
                    !waits[slot].links.is_linked(),
                    "dead slot {slot} in a wait queue"
                );
                continue;
            }
            live += 1;
            ensure!(
                self.ids.get(c.id().minor()) == Some(slot as u32),
                "id map misses class {}",
                c.id()
            );
            ensure!(
                c.id().major() == self.config.major,
                "class {} has a foreign major",
                c.id()
            );
            qlen += u64::from(queue.len());
            backlog += queue.backlog();
            match queue.check(&self.store) {
                Ok(records) => flow_records += records,
                Err(e) => return Err(CheckError(format!("class {}: {e}", c.id()))),
            }
            ensure!(
                c.level == 0 || queue.is_empty(),
                "inner class {} holds packets in its leaf slot",
                c.id()
            );
            if c.mode != Mode::CanSend {
                non_green += 1;
            }
            ensure!(
                waits[slot].links.is_linked() == (c.mode != Mode::CanSend),
                "class {} is {:?} but {} the wait queue",
                c.id(),
                c.mode,
                if waits[slot].links.is_linked() {
                    "in"
                } else {
                    "not in"
                }
            );

            // Tree shape and levels.
            let children_counted = self.cold[slot].children;
            let expected_level = if children_counted == 0 {
                0
            } else if c.parent == NO_CLASS {
                MAX_DEPTH as u8 - 1
            } else {
                self.classes[c.parent as usize].level.wrapping_sub(1)
            };
            ensure!(
                c.level == expected_level,
                "class {} at level {} expected {expected_level}",
                c.id(),
                c.level
            );
            ensure!(
                (c.level == 0) == (self.cold[slot].inner == NO_INNER),
                "class {} inner state vs level",
                c.id()
            );
            if c.parent != NO_CLASS {
                let p = &self.classes[c.parent as usize];
                ensure!(
                    p.live() && self.cold[c.parent as usize].children > 0,
                    "class {} has a dead or childless parent",
                    c.id()
                );
            }
            let children = self
                .classes
                .iter()
                .filter(|k| k.live() && k.parent == slot as u32)
                .count();
            ensure!(
                children == children_counted as usize,
                "class {} counts {} children, has {children}",
                c.id(),
                children_counted
            );

            // Buckets.
            ensure!(
                c.ctokens <= c.cbuffer,
                "class {} ctokens above cbuffer",
                c.id()
            );
            ensure!(
                c.tokens > -super::algo::MBUFFER - 1,
                "class {} tokens below the floor",
                c.id()
            );

            // Activity and tree membership.
            if c.level == 0 {
                let throttled = self.throttled.iter().any(|&(_, t)| t as usize == slot);
                ensure!(
                    (c.activity != 0 && !queue.is_empty())
                        || (c.activity == 0 && (queue.is_empty() || throttled)),
                    "leaf {} activity {:#x} with {} packets queued (throttled: {throttled})",
                    c.id(),
                    c.activity,
                    queue.len()
                );
                ensure!(
                    c.activity == 0 || c.activity == 1 << c.prio,
                    "leaf {} active at a foreign prio",
                    c.id()
                );
            } else {
                ensure!(queue.is_empty(), "inner class {} holds packets", c.id());
                for (prio, feed) in self.inner[self.cold[slot].inner as usize]
                    .feeds
                    .iter()
                    .enumerate()
                {
                    ensure!(
                        (c.activity >> prio & 1 == 1) != feed.tree.is_empty(),
                        "inner {} activity {:#x} disagrees with feed {prio}",
                        c.id(),
                        c.activity
                    );
                }
            }
            for prio in 0..MAX_DEPTH {
                let active = c.activity >> prio & 1 == 1;
                let node = self.prio_node(slot as u32, prio as u8);
                let expected = match (active, c.mode) {
                    (true, Mode::CanSend) => Some(Home::Row {
                        level: c.level as usize,
                        prio,
                    }),
                    (true, Mode::MayBorrow) if c.parent != NO_CLASS => Some(Home::Feed {
                        inner: self.cold[c.parent as usize].inner,
                        prio,
                    }),
                    _ => None,
                };
                if c.level == 0 && !active {
                    continue; // a leaf's single node serves only its active prio
                }
                ensure!(
                    homes[node as usize] == expected,
                    "class {} prio {prio} ({:?}, active {active}) is in {:?}, expected {:?}",
                    c.id(),
                    c.mode,
                    homes[node as usize],
                    expected
                );
            }
        }
        ensure!(
            live == self.ids.len(),
            "{live} live classes but {} ids",
            self.ids.len()
        );
        ensure!(
            waiting == non_green,
            "{waiting} classes wait, {non_green} are not green"
        );
        ensure!(
            qlen == self.qlen,
            "leaf queues hold {qlen} packets, counter says {}",
            self.qlen
        );
        ensure!(
            backlog == self.backlog,
            "leaf queues hold {backlog} bytes, counter says {}",
            self.backlog
        );
        ensure!(
            flow_records == self.store.flows_in_use(),
            "leaves hold {flow_records} flow records, the tables have {} in use (leaked)",
            self.store.flows_in_use()
        );
        let pooled = self.store.packets.in_use() as u64;
        ensure!(
            pooled == self.qlen,
            "the packet pool holds {pooled} packets, the leaves {} (leaked)",
            self.qlen
        );
        Ok(())
    }

    /// Records where each node of `row` lives, and checks owners and the DRR pointer.
    fn check_row(
        &self,
        row: &super::arena::Row,
        home: Home,
        homes: &mut [Option<Home>],
    ) -> Result<(), CheckError> {
        let nodes = &self.prio_nodes.nodes;
        let mut result = Ok(());
        row.tree.for_each(nodes, |node| {
            if homes[node as usize].is_some() && result.is_ok() {
                result = Err(CheckError(format!("node {node} linked in two trees")));
            }
            homes[node as usize] = Some(home);
            let owner = nodes[node as usize].owner;
            if (owner == NO_CLASS || !self.classes[owner as usize].live()) && result.is_ok() {
                result = Err(CheckError(format!(
                    "node {node} in {home:?} has no live owner"
                )));
            }
        });
        result?;
        if row.ptr != NIL {
            ensure!(
                nodes[row.ptr as usize].links.is_linked(),
                "DRR pointer of {home:?} at an unlinked node"
            );
            let key = nodes[row.ptr as usize].key;
            ensure!(
                row.tree.find_next_upper(nodes, key) == row.ptr,
                "DRR pointer of {home:?} outside its tree"
            );
        }
        Ok(())
    }
}

impl<P: Packet> Scheduler<P> {
    /// A human-readable dump of every class, row and feed, for debugging failed checks.
    #[doc(hidden)]
    #[must_use]
    pub fn dump(&self) -> String {
        use core::fmt::Write;
        let nodes = &self.prio_nodes.nodes;
        let mut out = String::new();
        let members = |row: &super::arena::Row| {
            let mut v = Vec::new();
            row.tree.for_each(nodes, |n| {
                v.push(self.classes[nodes[n as usize].owner as usize].id());
            });
            let ptr =
                (row.ptr != NIL).then(|| self.classes[nodes[row.ptr as usize].owner as usize].id());
            format!("{v:?} ptr {ptr:?} last {:#x}", row.last_ptr_id)
        };
        for (slot, c) in self.classes.iter().enumerate().filter(|(_, c)| c.live()) {
            let _ = writeln!(
                out,
                "class {} slot {slot} parent {} level {} {:?} act {:#x} prio {} inner {} node {} q {} tokens {} ctokens {} t_c {}",
                c.id(),
                c.parent as i64,
                c.level,
                c.mode,
                c.activity,
                c.prio,
                self.cold[slot].inner as i64,
                c.prio_node,
                self.classes[slot].queue.len(),
                c.tokens,
                c.ctokens,
                c.t_c
            );
            if self.cold[slot].inner != NO_INNER {
                for (prio, feed) in self.inner[self.cold[slot].inner as usize]
                    .feeds
                    .iter()
                    .enumerate()
                {
                    if !feed.tree.is_empty() || feed.ptr != NIL || feed.last_ptr_id != 0 {
                        let _ = writeln!(out, "  feed {prio}: {}", members(feed));
                    }
                }
            }
        }
        for (level, lvl) in self.levels.iter().enumerate() {
            for (prio, row) in lvl.rows.iter().enumerate() {
                if !row.tree.is_empty() || row.ptr != NIL {
                    let _ = writeln!(out, "row {level}/{prio}: {}", members(row));
                }
            }
            let mut waiting = Vec::new();
            lvl.wait.for_each(&self.wait_nodes, |n| {
                waiting.push((
                    self.classes[n as usize].id(),
                    self.wait_nodes[n as usize].key,
                ));
            });
            if !waiting.is_empty() {
                let _ = writeln!(out, "wait {level}: {waiting:?}");
            }
        }
        out
    }
}
