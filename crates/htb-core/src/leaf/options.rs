//! What each leaf kind's options are called and what their values are: the names and value
//! kinds of each spec's fields (its serde form), listed next to the spec they describe, so that
//! a reader of text (the config file) takes every kind's options from here instead of keeping a
//! list of its own.

/// What an option's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionValue {
    /// A count: packets, flows, buckets, seconds (`u32`).
    Count,
    /// A count of packets that limits the queue (`limit` of `pfifo`, `sfq`, `fq_codel`).
    Packets,
    /// Bytes (`u32`), written as tc's sizes (`"30k"`) or a bare number of bytes.
    Size,
    /// A [`Duration`](crate::Duration), written as tc's times (`"5ms"`) or bare µs.
    Time,
    /// A [`Rate`](crate::Rate), written as tc's rates (`"20mbit"`) or bare bit/s.
    Rate,
    /// On or off.
    Flag,
    /// One of the kind's keywords (`"diffserv4"`).
    Keyword,
    /// A signed number within `min..=max` (tc's range).
    Int {
        /// Smallest accepted.
        min: i32,
        /// Largest accepted.
        max: i32,
    },
}

/// One option of a leaf kind: its name (tc's keyword, the spec's field) and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafOption {
    /// The field's name, as the spec's serde form and the config file write it.
    pub name: &'static str,
    /// What its value is.
    pub value: OptionValue,
}

impl LeafOption {
    /// An option named `name` of value `value`.
    #[must_use]
    pub const fn new(name: &'static str, value: OptionValue) -> Self {
        Self { name, value }
    }
}
