//! tc's ingress qdisc (`sch_ingress.c`) and IFB devices (`ifb.c`): `qdisc add dev X handle
//! ffff: ingress` gives port X a qdisc that holds filters only; a filter whose action is
//! `mirred egress redirect dev ifbN` sends what X receives through IFB port `ifbN`'s tree
//! before it goes on to its egress port. That is how sqm-scripts and wondershaper shape a
//! download on the port it arrives on.
//!
//! The ingress qdisc is kept as a [`QdiscModel`] with handle `ffff:` and no classes, so that
//! its filters go through the same `filter add|change|del` code as a tree's.

use htb_config::filter::Filter;
use htb_core::{ClassId, SchedulerConfig};
use htb_ipc::{ErrorCode, IpcError};

use super::filter_entry::FilterEntry;
use super::qdisc::QdiscModel;
use super::{Model, PlaneChange, PortModel, Step, Undo, error};

/// The ingress qdisc's handle major (`TC_H_INGRESS`'s `ffff:`).
pub const INGRESS_MAJOR: u16 = 0xffff;

/// An empty ingress qdisc.
#[must_use]
pub fn new_ingress() -> QdiscModel {
    QdiscModel::new(SchedulerConfig {
        major: INGRESS_MAJOR,
        default_minor: 0,
        ..SchedulerConfig::default()
    })
}

impl PortModel {
    /// Its ingress qdisc's filters as the data plane runs them, each with the IFB its mirred
    /// action redirects to (`None`: no ingress qdisc).
    #[must_use]
    pub fn ingress_hook(&self) -> Option<Vec<(Filter, Option<String>)>> {
        self.ingress.as_ref().map(|q| ingress_hook_of(&q.filters))
    }
}

/// Ingress filters as the data plane runs them, each with the IFB its mirred action redirects
/// to.
#[must_use]
pub fn ingress_hook_of<'a>(
    filters: impl IntoIterator<Item = &'a FilterEntry>,
) -> Vec<(Filter, Option<String>)> {
    filters
        .into_iter()
        // The data plane names ports by their plain names.
        .map(|e| (ingress_filter(e), e.redirect().map(ToString::to_string)))
        .collect()
}

/// An ingress filter as the data plane runs it (its redirect apart).
#[must_use]
pub fn ingress_filter(e: &FilterEntry) -> Filter {
    Filter {
        prio: e.prio,
        matcher: e.matcher(),
        // The flowid an ingress filter gives is shown, not used: the IFB's own filters classify
        // what it redirects.
        class: e.class.unwrap_or(ClassId::new(INGRESS_MAJOR, 0)),
        police: e.police().cloned(),
    }
}

impl Model {
    /// `qdisc add dev X handle ffff: ingress`.
    pub(super) fn ingress_add(&mut self, step: &mut Step<'_>) -> Result<(), IpcError> {
        let port = &mut self.ports[step.port];
        if port.ifb {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "{} is an IFB device: what it shapes comes from other ports' ingress; it has no ingress of its own",
                    step.name
                ),
            ));
        }
        if port.ingress.is_some() {
            return Err(error(
                ErrorCode::Exists,
                format!(
                    "Exclusivity flag on, cannot modify: {} has an ingress qdisc",
                    step.name
                ),
            ));
        }
        if port.handle_in_use(INGRESS_MAJOR) {
            return Err(error(
                ErrorCode::Exists,
                format!(
                    "handle ffff: is taken on {} (the ingress qdisc's handle)",
                    step.name
                ),
            ));
        }
        port.ingress = Some(Box::new(new_ingress()));
        step.undo.push(Undo::Ingress {
            port: step.port,
            old: None,
        });
        step.filters_changed(INGRESS_MAJOR);
        Ok(())
    }

    /// `qdisc del dev X ingress`: the qdisc and its filters go.
    pub(super) fn ingress_delete(&mut self, step: &mut Step<'_>) -> Result<(), IpcError> {
        let Some(old) = self.ports[step.port].ingress.take() else {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "Cannot find specified qdisc on specified device (no ingress qdisc on {})",
                    step.name
                ),
            ));
        };
        step.undo.push(Undo::Ingress {
            port: step.port,
            old: Some(old),
        });
        step.effect(PlaneChange::SetIngress {
            port: step.name.clone(),
            ingress: None,
        });
        Ok(())
    }

    /// Checks a filter's `mirred egress redirect dev NAME`: only on an ingress qdisc, and only
    /// to an IFB port.
    pub(super) fn check_redirect(
        &self,
        major: u16,
        redirect: Option<&str>,
    ) -> Result<(), IpcError> {
        let Some(to) = redirect else {
            return Ok(());
        };
        if major != INGRESS_MAJOR {
            return Err(error(
                ErrorCode::Invalid,
                "mirred redirect: htbd runs it in the filters of an ingress qdisc (parent ffff:), where it sends what a port receives through an IFB's tree",
            ));
        }
        match self.ports.iter().find(|p| p.name == to) {
            Some(p) if p.ifb => Ok(()),
            Some(_) => Err(error(
                ErrorCode::Invalid,
                format!(
                    "mirred egress redirect dev {to}: {to} is an interface, not an IFB; htbd redirects to IFB ports (type = \"ifb\" in the config)"
                ),
            )),
            None => Err(error(
                ErrorCode::NoDevice,
                format!(
                    "mirred egress redirect dev {to}: Cannot find device \"{to}\" (declare it in htbd's config: [[interface]] name = \"{to}\" type = \"ifb\")"
                ),
            )),
        }
    }
}
