//! `htb-cli`: tc's grammar for a running htbd ([`tc`], over the control socket: [`client`]),
//! LibreQoS's subscriber list imported as one batch ([`import`]), the deterministic HTB
//! simulator (`htb-cli sim`), the
//! supervisor between htbd's `/health` and routing daemons ([`health_watch`]), and chart output shared with the
//! benchmarks and the lab demo.

pub mod client;
pub mod health_watch;
pub mod import;
pub mod plot;
pub mod sim;
pub mod tc;
