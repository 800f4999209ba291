//! `rate N%`'s one question to the world outside the grammar: a link's speed
//! (`get_percent_rate` reads `/sys/class/net/DEV/speed`), asked of the caller.

/// A link's speed by interface name, for `rate N%` (tc reads `/sys/class/net/DEV/speed`);
/// `None`: not known, and a percentage is refused saying so.
pub type LinkSpeed<'a> = &'a dyn Fn(&str) -> Option<htb_core::Rate>;

/// No link speed is known (a percentage rate is refused): what the plain parsers use.
#[must_use]
pub fn no_link_speed(_dev: &str) -> Option<htb_core::Rate> {
    None
}
