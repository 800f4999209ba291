//! `htb-cli`: the deterministic HTB simulator (`htb-cli sim`), and chart output shared with the
//! benchmarks and the lab demo.

pub mod plot;
pub mod sim;
