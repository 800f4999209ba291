//! A filter's `action` (iproute2 `tc/m_gact.c`, the generic action): htbd's filters classify,
//! and a classifying filter's verdict is gact's `ok` (`TC_ACT_OK`: the packet goes to the class
//! the filter names), so `action ok`, `action pass` and `action gact ok` say what the filter
//! does anyway; the verdicts that would change a packet's fate are refused, naming them.

use crate::args::{Args, Result, usage};

/// Reads an action after `action`: `[gact] ok|pass`.
///
/// # Errors
/// Any other action or verdict.
pub(super) fn action(a: &mut Args<'_>) -> Result<()> {
    let mut word = a.value()?;
    if word == "gact" {
        word = a.value()?;
    }
    match word {
        "ok" | "pass" => Ok(()),
        "drop" | "shot" | "reclassify" | "continue" | "pipe" | "trap" | "goto" | "jump" => {
            usage(format!(
                "action {word} is not supported: htbd's filters only classify (action ok and \
                 pass, which classifying does, are accepted)"
            ))
        }
        other => usage(format!(
            "action \"{other}\" is not supported: htbd knows gact's ok and pass"
        )),
    }
}
