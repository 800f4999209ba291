//! `flows [ dev DEV ] [ class CLASSID ] [ top N ]` (htbd's, not tc's: the kernel keeps no
//! flows): which of the flow records htbd keeps to list. Its grammar; htb-cli asks htbd and
//! prints the answer.

use htb_ipc::FlowsQuery;

use crate::args::{Args, Result, class_id, illegal, interface, usage};

/// The usage line.
pub(crate) const FLOWS_USAGE: &str =
    "Usage: htb-cli flows [ dev DEV ] [ class CLASSID ] [ top N ]   (N: 20 by default)";

/// Flows listed without `top`.
const DEFAULT_TOP: u32 = 20;

/// Parses `flows`' words (`--class X` and `--top N` are taken too).
///
/// # Errors
/// tc-style usage errors.
pub(crate) fn parse(words: &[String]) -> Result<FlowsQuery> {
    let mut ask = FlowsQuery {
        dev: None,
        class: None,
        top: DEFAULT_TOP,
    };
    let mut a = Args::new(words);
    while let Some(w) = a.next() {
        match w.trim_start_matches("--") {
            "dev" => ask.dev = Some(interface(a.value()?)?),
            "class" | "classid" => ask.class = Some(class_id(a.value()?, "class")?),
            "top" => {
                ask.top = a
                    .value()?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .map_or_else(|| illegal("top"), Ok)?;
            }
            other => return usage(format!("What is \"{other}\"? {FLOWS_USAGE}")),
        }
    }
    Ok(ask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split_words as words;
    use htb_core::ClassId;

    #[test]
    fn flows_takes_a_dev_a_class_and_a_top_in_either_spelling() {
        let q = parse(&words("dev r2 class 1:10 top 5")).unwrap();
        assert_eq!(
            q,
            FlowsQuery {
                dev: Some("r2".parse().unwrap()),
                class: Some(ClassId::new(1, 0x10)),
                top: 5
            }
        );
        assert_eq!(parse(&words("--class 1:a --top 3")).unwrap().top, 3);
        assert_eq!(parse(&words("")).unwrap().top, DEFAULT_TOP);
        for (bad, says) in [
            ("top 0", "Illegal \"top\""),
            ("top x", "Illegal \"top\""),
            ("class 1:zz", "class"),
            ("colour red", "What is \"colour\""),
            ("dev", ""),
        ] {
            let e = parse(&words(bad)).unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
