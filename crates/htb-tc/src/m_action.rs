//! A filter's `action …` (iproute2 `tc/m_action.c`'s `parse_action`): hands each to its own
//! module, as tc does.

use crate::args::{Args, Result};
use crate::words::{self, Words};
use crate::{m_gact, m_mirred, m_police};

/// One `action …` of a filter: `police …` (`m_police.c`), `mirred egress redirect dev IFB`
/// (`m_mirred.c`), or gact's `ok`/`pass`.
///
/// # Errors
/// What those modules refuse.
pub(super) fn action(
    a: &mut Args<'_>,
    police: &mut Option<Box<htb_ipc::PoliceConfig>>,
    redirect: &mut Option<htb_ipc::InterfaceName>,
) -> Result<()> {
    match a.peek() {
        Some("police") => {
            a.value()?;
            *police = Some(Box::new(m_police::options(a)?));
        }
        Some("mirred") => {
            a.value()?;
            *redirect = Some(m_mirred::options(a)?);
        }
        _ => m_gact::action(a)?,
    }
    Ok(())
}

/// A filter's actions as `action …` words: its policer, then its redirect.
///
/// # Errors
/// A redirect's device name no tc line can carry.
pub(crate) fn write(
    police: Option<&htb_ipc::PoliceConfig>,
    redirect: Option<&str>,
    w: &mut Words,
) -> words::Result<()> {
    if let Some(p) = police {
        w.word("action");
        w.word("police");
        m_police::write(p, w);
    }
    if let Some(dev) = redirect {
        w.word("action");
        w.word("mirred");
        m_mirred::write(dev, w)?;
    }
    Ok(())
}
