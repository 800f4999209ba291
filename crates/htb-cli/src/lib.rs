//! `htb-cli`: tc's grammar for a running htbd ([`tc`], over the control socket: [`client`]),
//! the deterministic HTB simulator (`htb-cli sim`), and chart output shared with the
//! benchmarks and the lab demo.

pub mod client;
pub mod plot;
pub mod sim;
pub mod tc;
