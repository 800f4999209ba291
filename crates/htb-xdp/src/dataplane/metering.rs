//! Flow metering on the data plane ([`crate::flow_table`]): each frame a worker classifies is
//! counted in its flow's record, with the round trips and retransmissions the round-trip
//! tracker finds and the drops its class's leaf makes; after each pass the records that ended
//! go to the export ring, which htbd's exporter empties off the data-plane threads. A full
//! ring loses the record (counted), never stalls the worker.

use std::sync::mpsc::{SyncSender, TrySendError};

use htb_core::{ClassId, Instant};

use super::{Dataplane, Port, Slot};
use crate::flow_table::{FlowKey, FlowRecord, FlowTable};
use crate::parse::Parsed;
use crate::rings::Rings;
use crate::rtt::Observed;

/// Places flushed at a time when the data plane stops.
const FLUSH_RANGE: usize = 4096;

/// A worker's flow table and its end of the export ring.
#[derive(Debug)]
pub(crate) struct Metering {
    pub(crate) table: FlowTable,
    sink: SyncSender<FlowRecord>,
}

impl Metering {
    /// Counts frame `f` in its flow's record, with what the round-trip tracker made of it.
    pub(super) fn meter(&mut self, f: &Metered<'_>, rtt: Option<Observed>, now: Instant) {
        let m = self;
        if !m.table.sample() {
            return;
        }
        let Some(key) = key_of(f) else {
            return;
        };
        let tcp_flags = match (key.proto, f.parsed.l4) {
            (6, Some(l4)) if !f.parsed.fragment => f.bytes.get(l4 + 13).copied().unwrap_or(0),
            _ => 0,
        };
        let now = now.as_nanos();
        if let Some(seen) = rtt {
            // A round trip belongs to the direction whose segment carried the timestamp.
            if let Some((_, ns)) = seen.sample {
                m.table.note_rtt(f.reverse_hash, &reversed(&key), ns);
            }
            if seen.retransmit {
                m.table.note_retransmit(f.hash, &key);
            }
        }
        // IP bytes, from the (innermost) IP header on, as IPFIX's octetDeltaCount counts.
        let len = f
            .parsed
            .l3
            .and_then(|l3| u32::try_from(l3).ok())
            .map_or(f.len, |l3| f.len.saturating_sub(l3));
        m.table.observe(f.hash, &key, f.class, len, tcp_flags, now);
    }
}

/// A frame as the meter reads it.
pub(super) struct Metered<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) parsed: &'a Parsed,
    pub(super) ingress: usize,
    pub(super) egress: usize,
    pub(super) hash: u32,
    /// The reverse direction's flow hash (computed only when the frame gave a round trip).
    pub(super) reverse_hash: u32,
    pub(super) class: Option<ClassId>,
    /// Its length on the wire (L2).
    pub(super) len: u32,
}

/// The class a frame went to on `port`: its filter's, or its tree's default.
pub(super) fn class_of(port: &Port, classified: Option<usize>, slot: Slot) -> Option<ClassId> {
    match classified {
        Some(i) => port.classifier.class(i),
        // Several workers resolve the default class from the fleet's view (`Port::
        // unclassified_slot`): the slot names it.
        None => match slot.target {
            htb_core::Target::Class(class) => Some(class),
            _ => slot
                .tree
                .and_then(|t| port.trees.get(t))
                .and_then(|t| t.htb.default_class()),
        },
    }
}

/// The flow of a frame: `None` for one that is not IP.
fn key_of(f: &Metered<'_>) -> Option<FlowKey> {
    let info = &f.parsed.info;
    Some(FlowKey {
        src: info.src?,
        dst: info.dst?,
        proto: info.proto.unwrap_or(0),
        sport: info.sport.unwrap_or(0),
        dport: info.dport.unwrap_or(0),
        vlan: info.vlan,
        ingress: u16::try_from(f.ingress).ok()?,
        egress: u16::try_from(f.egress).ok()?,
    })
}

/// The reverse direction of `key`: the flow whose segments this one's echo.
fn reversed(key: &FlowKey) -> FlowKey {
    FlowKey {
        src: key.dst,
        dst: key.src,
        sport: key.dport,
        dport: key.sport,
        ingress: key.egress,
        egress: key.ingress,
        ..*key
    }
}

impl<R: Rings> Dataplane<R> {
    /// Meters the flows this worker classifies into `table`, handing ended records to `sink`.
    pub(crate) fn set_metering(&mut self, table: FlowTable, sink: SyncSender<FlowRecord>) {
        self.metering = Some(Metering { table, sink });
    }

    /// The flow table, when flows are metered.
    pub(crate) fn flow_table(&self) -> Option<&FlowTable> {
        self.metering.as_ref().map(|m| &m.table)
    }

    /// A frame of flow hash `hash` dropped by a leaf or a full queue.
    pub(super) fn meter_drop(&mut self, hash: u32) {
        if let Some(m) = self.metering.as_mut() {
            m.table.note_drop(hash);
        }
    }

    /// Sweeps this pass's share of the table for timeouts and hands the ended records to the
    /// export ring.
    pub(super) fn export_flows(&mut self, now: Instant) {
        let Some(m) = self.metering.as_mut() else {
            return;
        };
        let Metering { table, sink } = m;
        table.sweep(now.as_nanos());
        let mut lost = 0;
        for record in table.take_outbox() {
            match sink.try_send(record) {
                Ok(()) => {}
                // A full ring, or no exporter: the record is lost, counted.
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => lost += 1,
            }
        }
        table.lost_to_export(lost);
    }

    /// Hands every record over (the data plane stops): a range of the table at a time, each
    /// waiting for room on the export ring, which the exporter still empties (and which
    /// answers at once once it is gone), so that a stop loses none to a full ring.
    pub(crate) fn flush_flows(&mut self, now: Instant) {
        self.export_flows(now);
        let Some(Metering { table, sink }) = self.metering.as_mut() else {
            return;
        };
        let mut lost = 0;
        for start in (0..table.places()).step_by(FLUSH_RANGE) {
            table.flush_range(start..start + FLUSH_RANGE);
            for record in table.take_outbox() {
                if sink.send(record).is_err() {
                    lost += 1;
                }
            }
        }
        table.lost_to_export(lost);
    }
}
