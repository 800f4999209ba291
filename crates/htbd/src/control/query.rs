//! The console's reads ([`crate::web`]): status, shows, a class's leaf qdisc and the sampler's
//! counters of the classes its charts track. Served by the control task like a client's
//! `show`, but not counted as control-socket requests.

use htb_core::ClassId;
use htb_ipc::{ClassStats, InterfaceName, IpcError, LeafQdiscInfo, Show, Shown, Status};
use tokio::sync::oneshot;

use super::Control;
use super::show::{class_stats, leaf_qdisc_stats};

/// A tracked class: its port and id.
pub type ClassKey = (InterfaceName, ClassId);

/// A read, with where its answer goes.
#[derive(Debug)]
pub enum Query {
    /// `htb-cli status`.
    Status(oneshot::Sender<Result<Status, IpcError>>),
    /// `htb-cli … show`.
    Show(Show, oneshot::Sender<Result<Shown, IpcError>>),
    /// A class's leaf qdisc with its statistics (`None`: an inner class).
    Leaf(
        ClassKey,
        oneshot::Sender<Result<Option<LeafQdiscInfo>, IpcError>>,
    ),
    /// `htb-cli explain`.
    Explain(
        htb_ipc::Explain,
        oneshot::Sender<Result<htb_ipc::Explanation, IpcError>>,
    ),
    /// The labelled classes whose label mentions a text (lower case), at most `limit`: port,
    /// class and the label's title.
    Labels {
        /// What to look for.
        text: String,
        /// How many to return at most.
        limit: usize,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Vec<(ClassKey, String)>, IpcError>>,
    },
    /// `htb-cli flows`.
    Flows(
        htb_ipc::FlowsQuery,
        oneshot::Sender<Result<htb_ipc::FlowList, IpcError>>,
    ),
    /// The counters of classes, in order (`None`: no such class any more).
    Sample(
        Vec<ClassKey>,
        oneshot::Sender<Result<Vec<Option<ClassStats>>, IpcError>>,
    ),
}

impl Control {
    pub(super) async fn query(&self, query: Query) {
        // The asker may have gone (a closed browser tab); nothing is lost then.
        match query {
            Query::Status(reply) => {
                // The console's sampler asks every second: it gets the generation as last
                // hashed (none since a change), never a hash of the whole state.
                let generation = self.hashed_generation();
                let status = self.on_engine(|engine| engine.stats()).await.map(|stats| {
                    let mut status = crate::status::status(&stats, &self.model.ports);
                    status.flows = self.flow_status(status.flows.take());
                    status.generation = generation;
                    status
                });
                let _ = reply.send(status);
            }
            Query::Show(show, reply) => {
                let _ = reply.send(self.show(&show).await);
            }
            Query::Leaf(class, reply) => {
                let _ = reply.send(self.leaf(&class).await);
            }
            Query::Explain(ask, reply) => {
                let _ = reply.send(self.explain(&ask).await);
            }
            Query::Flows(ask, reply) => {
                let _ = reply.send(self.flows(&ask).await);
            }
            Query::Sample(classes, reply) => {
                let _ = reply.send(self.sample(&classes).await);
            }
            Query::Labels { text, limit, reply } => {
                let _ = reply.send(Ok(self.labels(&text, limit)));
            }
        }
    }

    /// The classes whose labels mention `text`, in port and class order.
    fn labels(&self, text: &str, limit: usize) -> Vec<(ClassKey, String)> {
        let mut found = Vec::new();
        for port in &self.model.ports {
            for (_, qdisc) in port.trees() {
                let hits = qdisc.classes.labels().filter(|(_, l)| l.mentions(text));
                for (id, label) in hits.take(limit - found.len()) {
                    found.push(((port.name.clone(), id), label.title().to_owned()));
                }
                if found.len() == limit {
                    return found;
                }
            }
        }
        found
    }

    async fn leaf(&self, (dev, id): &ClassKey) -> Result<Option<LeafQdiscInfo>, IpcError> {
        let port = &self.model.ports[self.model.port_index(dev)?];
        let Some(qdisc) = port.tree(id.major()) else {
            return Ok(None);
        };
        let Some(config) = qdisc.class_info(*id).and_then(|c| c.leaf) else {
            return Ok(None);
        };
        let handle = qdisc.leaf_handle(*id);
        let snapshot = self.snapshot(dev, &[*id]).await?;
        let stats = leaf_qdisc_stats(
            snapshot.classes.first().copied().flatten(),
            snapshot.leaves.first().cloned().flatten(),
            0,
        );
        Ok(Some(LeafQdiscInfo {
            dev: dev.clone(),
            handle,
            parent: Some(*id),
            config,
            stab: None,
            stats: Some(stats),
        }))
    }

    /// One copy per port of its tracked classes' counters.
    async fn sample(&self, classes: &[ClassKey]) -> Result<Vec<Option<ClassStats>>, IpcError> {
        let mut out = vec![None; classes.len()];
        for port in &self.model.ports {
            let (positions, ids): (Vec<usize>, Vec<ClassId>) = classes
                .iter()
                .enumerate()
                .filter(|(_, (dev, id))| {
                    *dev == port.name
                        && port
                            .tree(id.major())
                            .is_some_and(|q| q.class_info(*id).is_some())
                })
                .map(|(i, (_, id))| (i, *id))
                .unzip();
            if ids.is_empty() {
                continue;
            }
            let snapshot = self.snapshot(&port.name, &ids).await?;
            for (k, &i) in positions.iter().enumerate() {
                out[i] = class_stats(&snapshot, k);
            }
        }
        Ok(out)
    }
}
