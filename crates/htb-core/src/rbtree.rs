//! Intrusive red-black trees whose nodes live in arenas and link by `u32` index.
//!
//! This plays the role of `<linux/rbtree.h>` in `sch_htb.c`: a class sits in up to nine trees
//! at once (its level's wait queue and, per priority, a row or its parent's feed), and the
//! links live in the class's arena slots, so inserting or erasing never allocates. Indices
//! instead of pointers keep the crate free of `unsafe`: a node is a [`Links`] record in some
//! pool, and a [`NodePool`] tells the tree where a node's links and key are.
//!
//! As in the kernel, equal keys go to the right of existing ones (FIFO among ties, like
//! `htb_add_to_wait_tree`), an erased node is marked unlinked (`RB_CLEAR_NODE`), and erasing an
//! unlinked node is refused rather than corrupting the tree (`htb_safe_rb_erase`).

use core::fmt::Debug;

/// Index of a node in its pool.
pub(crate) type NodeId = u32;
/// "No node": the null child/parent link.
pub(crate) const NIL: NodeId = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Color {
    Red = 0,
    Black = 1,
    /// Not in any tree (`RB_EMPTY_NODE`).
    Unlinked = 2,
}

/// Which child of a node: the kernel writes each balancing case twice, once per side
/// (`__rb_insert`, `____rb_erase_color`); here each case is written once over a side and its
/// mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Left = 0,
    Right = 1,
}

impl Side {
    fn mirror(self) -> Self {
        match self {
            Self::Left => Self::Right,
            Self::Right => Self::Left,
        }
    }
}

/// A node's links. Lives inside the owner's slot of some arena. The color rides in the parent
/// word's top two bits, so the record is three words: a wait-queue node (links and a 64-bit
/// time) is 20 bytes, not 24, on every class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Links {
    /// The parent's index in the low 30 bits ([`PARENT_BITS`] set: none), the [`Color`] in the
    /// top two.
    parent_color: u32,
    /// Left and right child, indexed by [`Side`].
    children: [NodeId; 2],
}

/// The parent index's bits in [`Links::parent_color`]: all of them set is [`NIL`].
const PARENT_BITS: u32 = (1 << 30) - 1;

/// Every node of a pool must have an index below this ([`Links`] keeps 30 bits of it).
pub(crate) const MAX_NODES: u32 = PARENT_BITS;

impl Links {
    pub(crate) const UNLINKED: Self = Self::new(NIL, Color::Unlinked);

    const fn new(parent: NodeId, color: Color) -> Self {
        Self {
            parent_color: (parent & PARENT_BITS) | ((color as u32) << 30),
            children: [NIL, NIL],
        }
    }

    pub(crate) fn is_linked(&self) -> bool {
        self.color() != Color::Unlinked
    }

    #[inline]
    fn parent(&self) -> NodeId {
        match self.parent_color & PARENT_BITS {
            PARENT_BITS => NIL,
            parent => parent,
        }
    }

    #[inline]
    fn set_parent(&mut self, parent: NodeId) {
        debug_assert!(
            parent == NIL || parent < MAX_NODES,
            "node {parent} past MAX_NODES"
        );
        self.parent_color = (self.parent_color & !PARENT_BITS) | (parent & PARENT_BITS);
    }

    #[inline]
    fn color(&self) -> Color {
        match self.parent_color >> 30 {
            0 => Color::Red,
            1 => Color::Black,
            _ => Color::Unlinked,
        }
    }

    #[inline]
    fn set_color(&mut self, color: Color) {
        self.parent_color = (self.parent_color & PARENT_BITS) | ((color as u32) << 30);
    }

    fn child(&self, side: Side) -> NodeId {
        self.children[side as usize]
    }

    fn left(&self) -> NodeId {
        self.child(Side::Left)
    }

    fn right(&self) -> NodeId {
        self.child(Side::Right)
    }

    /// The side of this node that `child` hangs on (right when it is not its left child).
    fn side_of(&self, child: NodeId) -> Side {
        if self.left() == child {
            Side::Left
        } else {
            Side::Right
        }
    }
}

/// Where a tree finds its nodes' links and keys.
pub(crate) trait NodePool {
    type Key: Ord + Copy + Debug;
    fn links(&self, node: NodeId) -> &Links;
    fn links_mut(&mut self, node: NodeId) -> &mut Links;
    fn key(&self, node: NodeId) -> Self::Key;
    /// Links and key in one access (one bounds check on the walk down the tree).
    fn node(&self, node: NodeId) -> (&Links, Self::Key) {
        (self.links(node), self.key(node))
    }
}

/// Why [`RbTree::check`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TreeFault {
    RedRoot,
    RootHasParent,
    RedRedEdge(NodeId),
    BlackHeight(NodeId),
    Order(NodeId),
    ParentLink(NodeId),
    UnlinkedInTree(NodeId),
    StaleFirst,
    StaleLast,
    Cycle,
}

/// The root of one tree plus its cached first and last nodes. The kernel recomputes
/// `rb_first`; caching it makes the next-event lookup and a DRR rewind O(1). Caching the last
/// node makes the common insert O(1) amortized: wait-queue keys are times, nearly always the
/// latest, and rows and feeds refill in round-robin (= key) order, so most inserts append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RbTree {
    root: NodeId,
    first: NodeId,
    last: NodeId,
}

impl Default for RbTree {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl RbTree {
    pub(crate) const EMPTY: Self = Self {
        root: NIL,
        first: NIL,
        last: NIL,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.root == NIL
    }

    /// The node with the smallest key (first among equals), or [`NIL`].
    pub(crate) fn first(&self) -> NodeId {
        self.first
    }

    /// The largest node, or [`NIL`].
    #[inline]
    pub(crate) fn last(&self) -> NodeId {
        self.last
    }

    /// Links `node` in key order; equal keys go after existing ones. Returns `false` (and
    /// changes nothing) if `node` is already linked somewhere.
    pub(crate) fn insert<P: NodePool + ?Sized>(&mut self, pool: &mut P, node: NodeId) -> bool {
        if self.root == NIL {
            // Into an empty tree, the common case of a row or feed with one active class:
            // one look-up of the node (a pool's look-up is not free).
            let links = pool.links_mut(node);
            if links.is_linked() {
                debug_assert!(false, "rbtree: inserting linked node {node}");
                return false;
            }
            *links = Links::new(NIL, Color::Black);
            (self.root, self.first, self.last) = (node, node, node);
            return true;
        }
        if pool.links(node).is_linked() {
            debug_assert!(false, "rbtree: inserting linked node {node}");
            return false;
        }
        let key = pool.key(node);
        let (parent, go_left, leftmost, rightmost) = if self.root == NIL {
            (NIL, false, true, true)
        } else if key >= pool.key(self.last) {
            // Append after the last node (equal keys go after existing ones).
            (self.last, false, false, true)
        } else if key < pool.key(self.first) {
            (self.first, true, true, false)
        } else {
            let mut parent = NIL;
            let mut cur = self.root;
            let mut go_left = false;
            while cur != NIL {
                parent = cur;
                let (links, k) = pool.node(cur);
                go_left = key < k;
                cur = links.child(if go_left { Side::Left } else { Side::Right });
            }
            (parent, go_left, false, false)
        };
        *pool.links_mut(node) = Links::new(parent, Color::Red);
        if parent == NIL {
            self.root = node;
        } else {
            let side = if go_left { Side::Left } else { Side::Right };
            Self::set_child(pool, parent, side, node);
        }
        if leftmost {
            self.first = node;
        }
        if rightmost {
            self.last = node;
        }
        self.insert_fixup(pool, node);
        true
    }

    /// Unlinks `node` and marks it unlinked. Returns `false` if it was not linked (the
    /// `htb_safe_rb_erase` case: a bug elsewhere, not worth corrupting the tree for).
    pub(crate) fn erase<P: NodePool + ?Sized>(&mut self, pool: &mut P, node: NodeId) -> bool {
        if self.root == node && self.first == node && self.last == node {
            // The only node: one look-up of it.
            let links = pool.links_mut(node);
            if !links.is_linked() {
                debug_assert!(false, "rbtree: erasing unlinked node {node}");
                return false;
            }
            *links = Links::UNLINKED;
            (self.root, self.first, self.last) = (NIL, NIL, NIL);
            return true;
        }
        if !pool.links(node).is_linked() {
            debug_assert!(false, "rbtree: erasing unlinked node {node}");
            return false;
        }
        if self.first == node {
            self.first = Self::next(pool, node);
        }
        if self.last == node {
            self.last = Self::prev(pool, node);
        }
        let z = *pool.links(node);
        let mut removed_color = z.color();
        let x;
        let x_parent;
        if z.left() == NIL || z.right() == NIL {
            // At most one child: it takes the node's place.
            x = if z.left() == NIL { z.right() } else { z.left() };
            x_parent = z.parent();
            self.transplant(pool, node, x);
        } else {
            let y = Self::extreme(pool, z.right(), Side::Left);
            removed_color = pool.links(y).color();
            x = pool.links(y).right();
            if pool.links(y).parent() == node {
                x_parent = y;
            } else {
                x_parent = pool.links(y).parent();
                self.transplant(pool, y, x);
                Self::set_child(pool, y, Side::Right, z.right());
            }
            self.transplant(pool, node, y);
            Self::set_child(pool, y, Side::Left, z.left());
            pool.links_mut(y).set_color(z.color());
        }
        if removed_color == Color::Black {
            self.erase_fixup(pool, x, x_parent);
        }
        *pool.links_mut(node) = Links::UNLINKED;
        true
    }

    /// In-order successor of `node`, or [`NIL`] (`rb_next`).
    pub(crate) fn next<P: NodePool + ?Sized>(pool: &P, node: NodeId) -> NodeId {
        Self::step(pool, node, Side::Right)
    }

    /// In-order predecessor of `node`, or [`NIL`] (`rb_prev`).
    pub(crate) fn prev<P: NodePool + ?Sized>(pool: &P, node: NodeId) -> NodeId {
        Self::step(pool, node, Side::Left)
    }

    /// The in-order neighbour of `node` towards `side`: the nearest node of its subtree on
    /// that side, else the first ancestor it is not on that side of.
    fn step<P: NodePool + ?Sized>(pool: &P, node: NodeId, side: Side) -> NodeId {
        let links = pool.links(node);
        if links.child(side) != NIL {
            return Self::extreme(pool, links.child(side), side.mirror());
        }
        let mut child = node;
        let mut parent = links.parent();
        while parent != NIL && pool.links(parent).child(side) == child {
            child = parent;
            parent = pool.links(parent).parent();
        }
        parent
    }

    /// The first node whose key is `>= key`, or [`NIL`] (`htb_id_find_next_upper`).
    pub(crate) fn find_next_upper<P: NodePool + ?Sized>(&self, pool: &P, key: P::Key) -> NodeId {
        let mut best = NIL;
        let mut node = self.root;
        while node != NIL {
            let (links, k) = pool.node(node);
            if key > k {
                node = links.right();
            } else if key < k {
                best = node;
                node = links.left();
            } else {
                return node;
            }
        }
        best
    }

    /// Calls `f` on every node in key order.
    pub(crate) fn for_each<P: NodePool + ?Sized>(&self, pool: &P, mut f: impl FnMut(NodeId)) {
        let mut node = self.first;
        while node != NIL {
            f(node);
            node = Self::next(pool, node);
        }
    }

    /// Verifies every red-black and ordering invariant and the cached first node; returns the
    /// number of nodes.
    pub(crate) fn check<P: NodePool + ?Sized>(&self, pool: &P) -> Result<usize, TreeFault> {
        if self.root == NIL {
            return if self.first == NIL {
                Ok(0)
            } else {
                Err(TreeFault::StaleFirst)
            };
        }
        let root = pool.links(self.root);
        if root.parent() != NIL {
            return Err(TreeFault::RootHasParent);
        }
        if root.color() == Color::Red {
            return Err(TreeFault::RedRoot);
        }
        let mut count = 0usize;
        Self::check_subtree(pool, self.root, None, None, &mut count, 0)?;
        if self.first != Self::extreme(pool, self.root, Side::Left) {
            return Err(TreeFault::StaleFirst);
        }
        if self.last != Self::extreme(pool, self.root, Side::Right) {
            return Err(TreeFault::StaleLast);
        }
        Ok(count)
    }

    /// Returns the black height of the subtree at `node`.
    fn check_subtree<P: NodePool + ?Sized>(
        pool: &P,
        node: NodeId,
        lower: Option<P::Key>,
        upper: Option<P::Key>,
        count: &mut usize,
        depth: u32,
    ) -> Result<u32, TreeFault> {
        if node == NIL {
            return Ok(1);
        }
        // A valid tree of 2^32 nodes is at most 64 deep; deeper means a cycle.
        if depth > 64 {
            return Err(TreeFault::Cycle);
        }
        *count += 1;
        let links = *pool.links(node);
        if links.color() == Color::Unlinked {
            return Err(TreeFault::UnlinkedInTree(node));
        }
        let key = pool.key(node);
        if lower.is_some_and(|l| key < l) || upper.is_some_and(|u| key > u) {
            return Err(TreeFault::Order(node));
        }
        for child in links.children {
            if child != NIL {
                if pool.links(child).parent() != node {
                    return Err(TreeFault::ParentLink(child));
                }
                if links.color() == Color::Red && pool.links(child).color() == Color::Red {
                    return Err(TreeFault::RedRedEdge(child));
                }
            }
        }
        let left = Self::check_subtree(pool, links.left(), lower, Some(key), count, depth + 1)?;
        let right = Self::check_subtree(pool, links.right(), Some(key), upper, count, depth + 1)?;
        if left != right {
            return Err(TreeFault::BlackHeight(node));
        }
        Ok(left + u32::from(links.color() == Color::Black))
    }

    /// The last node of the subtree at `node` going towards `side` (the minimum for left).
    fn extreme<P: NodePool + ?Sized>(pool: &P, mut node: NodeId, side: Side) -> NodeId {
        while pool.links(node).child(side) != NIL {
            node = pool.links(node).child(side);
        }
        node
    }

    fn color<P: NodePool + ?Sized>(pool: &P, node: NodeId) -> Color {
        if node == NIL {
            Color::Black
        } else {
            pool.links(node).color()
        }
    }

    fn set_color<P: NodePool + ?Sized>(pool: &mut P, node: NodeId, color: Color) {
        if node != NIL {
            pool.links_mut(node).set_color(color);
        }
    }

    /// Hangs `child` (possibly [`NIL`]) on `side` of `node` and points it back at `node`.
    fn set_child<P: NodePool + ?Sized>(pool: &mut P, node: NodeId, side: Side, child: NodeId) {
        pool.links_mut(node).children[side as usize] = child;
        if child != NIL {
            pool.links_mut(child).set_parent(node);
        }
    }

    /// Replaces the subtree at `old` by the one at `new` in `old`'s parent.
    fn transplant<P: NodePool + ?Sized>(&mut self, pool: &mut P, old: NodeId, new: NodeId) {
        let parent = pool.links(old).parent();
        if parent == NIL {
            self.root = new;
            if new != NIL {
                pool.links_mut(new).set_parent(NIL);
            }
        } else {
            let side = pool.links(parent).side_of(old);
            Self::set_child(pool, parent, side, new);
        }
    }

    /// Rotates `x` down towards `side`: its child on the other side takes its place
    /// (`side == Left` is the textbook left rotation).
    fn rotate<P: NodePool + ?Sized>(&mut self, pool: &mut P, x: NodeId, side: Side) {
        let up = side.mirror();
        let y = pool.links(x).child(up);
        let inner = pool.links(y).child(side);
        Self::set_child(pool, x, up, inner);
        self.transplant(pool, x, y);
        Self::set_child(pool, y, side, x);
    }

    fn insert_fixup<P: NodePool + ?Sized>(&mut self, pool: &mut P, mut z: NodeId) {
        loop {
            let parent = pool.links(z).parent();
            if parent == NIL || pool.links(parent).color() != Color::Red {
                break;
            }
            // A red parent is never the root, so the grandparent exists. `side` is the
            // parent's side of the grandparent; every case below mirrors for the other side.
            let grand = pool.links(parent).parent();
            let side = pool.links(grand).side_of(parent);
            let uncle = pool.links(grand).child(side.mirror());
            if Self::color(pool, uncle) == Color::Red {
                Self::set_color(pool, parent, Color::Black);
                Self::set_color(pool, uncle, Color::Black);
                Self::set_color(pool, grand, Color::Red);
                z = grand;
            } else {
                let mut parent = parent;
                if pool.links(parent).child(side.mirror()) == z {
                    z = parent;
                    self.rotate(pool, z, side);
                    parent = pool.links(z).parent();
                }
                Self::set_color(pool, parent, Color::Black);
                Self::set_color(pool, grand, Color::Red);
                self.rotate(pool, grand, side.mirror());
            }
        }
        let root = self.root;
        Self::set_color(pool, root, Color::Black);
    }

    /// Restores the invariants after a black node was removed above `x` (possibly [`NIL`]),
    /// whose parent is `parent`.
    fn erase_fixup<P: NodePool + ?Sized>(
        &mut self,
        pool: &mut P,
        mut x: NodeId,
        mut parent: NodeId,
    ) {
        while x != self.root && Self::color(pool, x) == Color::Black {
            // `side` is x's side of its parent, `far` its sibling's; each case mirrors.
            let side = pool.links(parent).side_of(x);
            let far = side.mirror();
            let mut w = pool.links(parent).child(far);
            if Self::color(pool, w) == Color::Red {
                Self::set_color(pool, w, Color::Black);
                Self::set_color(pool, parent, Color::Red);
                self.rotate(pool, parent, side);
                w = pool.links(parent).child(far);
            }
            let (near_nephew, far_nephew) = (pool.links(w).child(side), pool.links(w).child(far));
            if Self::color(pool, near_nephew) == Color::Black
                && Self::color(pool, far_nephew) == Color::Black
            {
                Self::set_color(pool, w, Color::Red);
                x = parent;
                parent = pool.links(x).parent();
            } else {
                if Self::color(pool, far_nephew) == Color::Black {
                    Self::set_color(pool, near_nephew, Color::Black);
                    Self::set_color(pool, w, Color::Red);
                    self.rotate(pool, w, far);
                    w = pool.links(parent).child(far);
                }
                let parent_color = pool.links(parent).color();
                Self::set_color(pool, w, parent_color);
                Self::set_color(pool, parent, Color::Black);
                let far_nephew = pool.links(w).child(far);
                Self::set_color(pool, far_nephew, Color::Black);
                self.rotate(pool, parent, side);
                x = self.root;
                break;
            }
        }
        Self::set_color(pool, x, Color::Black);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use proptest::prelude::*;

    use super::*;

    /// A pool of (links, key, insertion sequence) for tests.
    struct TestPool {
        nodes: Vec<(Links, u32)>,
    }

    impl NodePool for TestPool {
        type Key = u32;
        fn links(&self, node: NodeId) -> &Links {
            &self.nodes[node as usize].0
        }
        fn links_mut(&mut self, node: NodeId) -> &mut Links {
            &mut self.nodes[node as usize].0
        }
        fn key(&self, node: NodeId) -> u32 {
            self.nodes[node as usize].1
        }
    }

    fn pool(keys: &[u32]) -> TestPool {
        TestPool {
            nodes: keys.iter().map(|&k| (Links::UNLINKED, k)).collect(),
        }
    }

    fn in_order(tree: &RbTree, pool: &TestPool) -> Vec<NodeId> {
        let mut out = Vec::new();
        tree.for_each(pool, |n| out.push(n));
        out
    }

    #[test]
    fn equal_keys_are_fifo() {
        let mut p = pool(&[5, 5, 3, 5, 7]);
        let mut t = RbTree::EMPTY;
        for n in 0..5 {
            assert!(t.insert(&mut p, n));
        }
        assert_eq!(in_order(&t, &p), [2, 0, 1, 3, 4]);
        assert_eq!(t.first(), 2);
        assert_eq!(t.check(&p), Ok(5));
    }

    #[test]
    fn double_insert_and_erase_are_refused() {
        let mut p = pool(&[1, 2]);
        let mut t = RbTree::EMPTY;
        assert!(t.insert(&mut p, 0));
        // Release builds refuse silently; debug builds also assert, so only check release.
        if !cfg!(debug_assertions) {
            assert!(!t.insert(&mut p, 0));
            assert!(!t.erase(&mut p, 1));
        }
        assert!(t.erase(&mut p, 0));
        assert!(t.is_empty());
        assert_eq!(t.first(), NIL);
    }

    #[test]
    fn appends_prepends_and_middle_inserts_keep_order() {
        let keys: Vec<u32> = (0..100)
            .map(|i| if i % 3 == 0 { 1000 + i } else { 1000 - i })
            .collect();
        let mut p = pool(&keys);
        let mut t = RbTree::EMPTY;
        for n in 0..100 {
            assert!(t.insert(&mut p, n));
            t.check(&p).unwrap();
        }
        let order = in_order(&t, &p);
        assert!(
            order
                .windows(2)
                .all(|w| keys[w[0] as usize] <= keys[w[1] as usize])
        );
        assert_eq!(RbTree::prev(&p, order[50]), order[49]);
        assert_eq!(RbTree::prev(&p, order[0]), NIL);
        for &n in order.iter().rev().take(60) {
            assert!(t.erase(&mut p, n));
            t.check(&p).unwrap();
        }
    }

    #[test]
    fn find_next_upper_finds_ceiling() {
        let mut p = pool(&[10, 20, 30]);
        let mut t = RbTree::EMPTY;
        for n in 0..3 {
            t.insert(&mut p, n);
        }
        assert_eq!(t.find_next_upper(&p, 5), 0);
        assert_eq!(t.find_next_upper(&p, 20), 1);
        assert_eq!(t.find_next_upper(&p, 21), 2);
        assert_eq!(t.find_next_upper(&p, 31), NIL);
    }

    proptest! {
        /// Random inserts and erases agree with a sorted reference after every operation.
        #[test]
        fn matches_reference_model(ops in prop::collection::vec((any::<bool>(), 0u32..64), 1..400)) {
            let keys: Vec<u32> = (0..64).map(|i| (i * 37) % 23).collect();
            let mut p = pool(&keys);
            let mut t = RbTree::EMPTY;
            // Reference: (key, insertion sequence, node) sorted.
            let mut model: Vec<(u32, usize, NodeId)> = Vec::new();
            for (seq, (insert, node)) in ops.into_iter().enumerate() {
                let linked = p.links(node).is_linked();
                if insert && !linked {
                    prop_assert!(t.insert(&mut p, node));
                    model.push((keys[node as usize], seq, node));
                    model.sort_unstable();
                } else if !insert && linked {
                    prop_assert!(t.erase(&mut p, node));
                    model.retain(|&(_, _, n)| n != node);
                }
                prop_assert_eq!(t.check(&p), Ok(model.len()));
                let expected: Vec<NodeId> = model.iter().map(|&(_, _, n)| n).collect();
                prop_assert_eq!(in_order(&t, &p), expected);
            }
        }
    }
}
