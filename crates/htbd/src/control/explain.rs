//! `htb-cli explain ADDR`: packets to and from an address, classified on each port by the data
//! plane's own classifier ([`htb_xdp::explain`], in a job between two packet batches: a few
//! µs), with the class's path to the root from the model.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_core::ClassId;
use htb_ipc::{
    Direction, ErrorCode, Explain, Explanation, InterfaceName, IpcError, Outcome, PortExplanation,
};
use htb_xdp::explain::{Classified, Probe};

use super::Control;
use crate::model::on_wire;

/// UDP: what a probe is without `proto`.
const UDP: u8 = 17;

impl Control {
    pub(super) async fn explain(&self, ask: &Explain) -> Result<Explanation, IpcError> {
        let peer = ask.peer.unwrap_or(match ask.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        });
        let (addr_port, peer_port) = (ask.addr_port.unwrap_or(0), ask.peer_port.unwrap_or(0));
        let proto = ask.proto.unwrap_or(UDP);
        let to = Probe {
            src: peer,
            dst: ask.addr,
            proto,
            sport: peer_port,
            dport: addr_port,
        };
        let from = Probe {
            src: ask.addr,
            dst: peer,
            proto,
            sport: addr_port,
            dport: peer_port,
        };
        let frames = [
            (Direction::ToAddr, to.frame()),
            (Direction::FromAddr, from.frame()),
        ]
        .map(|(d, f)| f.map(|f| (d, f)));
        let frames: Vec<(Direction, Vec<u8>)> = frames
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| IpcError::new(ErrorCode::Invalid, e.to_string()))?;
        let ports: Vec<InterfaceName> = match &ask.dev {
            Some(dev) => vec![self.model.ports[self.model.port_index(dev)?].name.clone()],
            None => self.model.ports.iter().map(|p| p.name.clone()).collect(),
        };
        let asked = ports.clone();
        let classified = self
            .on_engine(move |engine| {
                asked
                    .iter()
                    .flat_map(|dev| {
                        frames
                            .iter()
                            .map(|(direction, frame)| {
                                let classified = engine.explain(dev, frame);
                                let class = match &classified {
                                    Some(
                                        Classified::Filter { class, .. }
                                        | Classified::Default(class),
                                    ) => Some(*class),
                                    _ => None,
                                };
                                let queue = class.and_then(|c| engine.leaf_queue(dev, c, frame));
                                (dev.clone(), *direction, classified, queue)
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            })
            .await?;
        let mut explanation = Explanation::default();
        for (dev, direction, classified, leaf_queue) in classified {
            let Some(classified) = classified else {
                continue;
            };
            let outcome = match classified {
                Classified::Filter {
                    prio,
                    matcher,
                    class,
                    policed,
                    ..
                } => Outcome::Filter {
                    prio,
                    matcher: on_wire(&matcher),
                    class,
                    policed,
                },
                Classified::Default(class) => Outcome::Default { class },
                Classified::Direct => Outcome::Direct,
                Classified::MqDefault(classes) => Outcome::MqDefault { classes },
                Classified::Unshaped => Outcome::Unshaped,
            };
            let path = match &outcome {
                Outcome::Filter { class, .. } | Outcome::Default { class } => {
                    self.path(&dev, *class)
                }
                _ => Vec::new(),
            };
            explanation.ports.push(PortExplanation {
                dev,
                direction,
                outcome,
                path,
                leaf_queue,
            });
        }
        Ok(explanation)
    }

    /// `class` and its ancestors up to its root class, as the model has them.
    fn path(&self, dev: &str, class: ClassId) -> Vec<ClassId> {
        let Some(port) = self.model.ports.iter().find(|p| p.name == dev) else {
            return Vec::new();
        };
        let Some(tree) = port.tree(class.major()) else {
            return vec![class];
        };
        let mut path = vec![class];
        let mut at = class;
        while let Some(parent) = tree.class_info(at).and_then(|c| c.parent) {
            // A tree is at most 8 levels deep; a cycle would be a bug, not a reason to hang.
            if path.len() > 16 {
                break;
            }
            path.push(parent);
            at = parent;
        }
        path
    }
}
