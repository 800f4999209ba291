//! `[qdisc]` and `[[class]]`: sections, and the validated tree they describe.

use std::collections::HashMap;

use htb_core::{
    ClassId, ClassSpec, Instant, LengthAdjust, Scheduler, SchedulerConfig, SizeSpec, SizeTable,
    Warning,
};
use serde::Deserialize;

use crate::error::{ConfigError, Located};
use crate::leaf::{LeafDef, LeafSection};
use crate::values::{ClassIdValue, HexMinor, LinkLayerValue, RateValue, SizeValue, TimeValue};
use htb_core::{ClassDef, TreeSpec};

/// `[qdisc]`: tc's `qdisc add ... handle 1: htb default 20 r2q 10 direct_qlen 1000`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdiscSection {
    /// The qdisc handle, `"1:"` (default: the major of the class ids).
    pub handle: Option<Located<ClassIdValue>>,
    /// Hex minor of the default class for unclassified traffic (tc `default`).
    pub default: Option<HexMinor>,
    /// Rate-to-quantum divisor (tc `r2q`, default 10).
    pub r2q: Option<u32>,
    /// Direct queue limit in packets (tc `direct_qlen`, default 1000).
    pub direct_qlen: Option<u32>,
    /// Default burst as time at the class's rate (default `"1ms"`; see the README).
    pub burst_time: Option<TimeValue>,
    /// The size table (tc `stab`): `{ overhead = 34, linklayer = "ethernet" }`, with `mpu`,
    /// `mtu` and `tsize` as tc takes them.
    #[serde(default)]
    pub stab: Option<Located<SizeSpec>>,
    /// The queue discipline of every leaf class that has none of its own (default
    /// `fq_codel`; the kernel's default would be `pfifo`).
    #[serde(default)]
    pub leaf: Option<Located<LeafSection>>,
}

/// A `stab = { … }` table checked as tc and the kernel check it, the error pointing at it.
///
/// # Errors
/// A table tc or the kernel refuses.
pub fn size_table(text: &str, stab: &Located<SizeSpec>) -> Result<SizeTable, ConfigError> {
    stab.get_ref()
        .table()
        .map_err(|e| ConfigError::spanned(text, &stab.span(), e.to_string()))
}

/// `[[class]]`: tc's `class add ... classid 1:20 htb rate R [ceil R] ...`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSection {
    /// The class id, `"1:20"`.
    pub id: Located<ClassIdValue>,
    /// The parent class; omitted (or the qdisc handle `"1:"`) for a root class.
    #[serde(default)]
    pub parent: Option<Located<ClassIdValue>>,
    /// Guaranteed rate (required).
    pub rate: Option<RateValue>,
    /// Ceiling (default: rate).
    #[serde(default)]
    pub ceil: Option<RateValue>,
    /// Burst at rate (default: 1 ms of rate + mtu).
    #[serde(default)]
    pub burst: Option<SizeValue>,
    /// Burst at ceil.
    #[serde(default)]
    pub cburst: Option<SizeValue>,
    /// Priority 0 (highest) to 7.
    #[serde(default)]
    pub prio: Option<u32>,
    /// DRR quantum in bytes (default rate / r2q, clamped to 1000..200000).
    #[serde(default)]
    pub quantum: Option<SizeValue>,
    /// MTU for default bursts (default 1600).
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Bytes added to each packet's length (tc `overhead`).
    #[serde(default)]
    pub overhead: Option<u16>,
    /// Minimum packet unit (tc `mpu`).
    #[serde(default)]
    pub mpu: Option<u16>,
    /// `ethernet` or `atm`.
    #[serde(default)]
    pub linklayer: Option<LinkLayerValue>,
    /// Packet limit of the class's leaf (the qdisc's default kind): shorthand for
    /// `leaf = { kind = KIND, limit = N }`.
    #[serde(default)]
    pub limit: Option<Located<u32>>,
    /// The class's leaf queue discipline (default: `[qdisc] leaf`).
    #[serde(default)]
    pub leaf: Option<Located<LeafSection>>,
    /// Who it shapes: `label = { name = "Ann", circuit = "17", devices = [{ id = "a", mac =
    /// "…", addresses = ["10.0.3.7"] }] }` (not tc's; the console and `class show -d` show it).
    #[serde(default)]
    pub label: Option<crate::ClassLabel>,
    /// htbd with several workers: the subtree this class tops served by every worker at once
    /// (`true`) or by one (`false`), whatever `[daemon] split_above` says (not tc's; see
    /// [`split_choices`](crate::split_choices)). The simulator runs one scheduler and ignores it.
    #[serde(default)]
    pub split: Option<Located<bool>>,
}

impl ClassSection {
    /// The class parameters, defaults left unresolved. `None` when `rate` is missing.
    #[must_use]
    pub fn spec(&self) -> Option<ClassSpec> {
        let rate = self.rate?.0;
        Some(ClassSpec {
            rate,
            ceil: self.ceil.map(|c| c.0),
            burst: self.burst.map(|b| b.0),
            cburst: self.cburst.map(|b| b.0),
            prio: self.prio.unwrap_or(0),
            quantum: self.quantum.map(|q| u32::try_from(q.0).unwrap_or(u32::MAX)),
            mtu: self.mtu,
            adjust: LengthAdjust {
                overhead: self.overhead.unwrap_or(0),
                mpu: self.mpu.unwrap_or(0),
                link_layer: self.linklayer.map(|l| l.0).unwrap_or_default(),
            },
        })
    }
}

/// Validates `[qdisc]` and `[[class]]` sections parsed from `text` into a tree: ids, parents,
/// cycles, depth, and every class's parameters (by building the tree once).
///
/// # Errors
/// The first problem, located in `text`.
pub fn tree_from_sections(
    text: &str,
    qdisc: Option<&QdiscSection>,
    classes: &[Located<ClassSection>],
) -> Result<TreeSpec, ConfigError> {
    let default = QdiscSection::default();
    let qdisc = qdisc.unwrap_or(&default);
    let major = match &qdisc.handle {
        Some(handle) => {
            let id = handle.get_ref().0;
            if !id.is_qdisc() {
                return Err(ConfigError::spanned(
                    text,
                    &handle.span(),
                    format!("handle {id} must end in ':'"),
                ));
            }
            id.major()
        }
        None => classes
            .first()
            .map_or(1, |c| c.get_ref().id.get_ref().0.major()),
    };
    let mut config = SchedulerConfig {
        major,
        ..SchedulerConfig::default()
    };
    if let Some(default) = qdisc.default {
        config.default_minor = default.0;
    }
    if let Some(r2q) = qdisc.r2q {
        config.r2q = r2q;
    }
    if let Some(qlen) = qdisc.direct_qlen {
        config.direct_qlen = qlen;
    }
    if let Some(burst_time) = qdisc.burst_time {
        config.default_burst_time = burst_time.0;
    }
    if let Some(stab) = &qdisc.stab {
        config.stab = Some(size_table(text, stab)?);
    }
    if let Some(leaf) = &qdisc.leaf {
        let def = leaf.get_ref().0;
        if def.handle.is_some() {
            let msg = "the default leaf has no handle: give handles to classes' own leaves";
            return Err(ConfigError::spanned(text, &leaf.span(), msg));
        }
        config.default_leaf = def.config;
    }

    // Index classes, refusing duplicates and foreign majors.
    let mut index: HashMap<ClassId, usize> = HashMap::new();
    for (i, section) in classes.iter().enumerate() {
        let located = &section.get_ref().id;
        let id = located.get_ref().0;
        if id.major() != major {
            let msg = format!("class {id} does not belong to qdisc {major:x}:");
            return Err(ConfigError::spanned(text, &located.span(), msg));
        }
        if id.is_qdisc() {
            let msg = format!("{id} is the qdisc handle; classes need a minor, like {major:x}:1");
            return Err(ConfigError::spanned(text, &located.span(), msg));
        }
        if index.insert(id, i).is_some() {
            return Err(ConfigError::spanned(
                text,
                &located.span(),
                format!("class {id} is defined twice"),
            ));
        }
    }

    // Parents first: a depth-first order that also finds unknown parents and cycles.
    let parent_of = |section: &ClassSection| -> Result<Option<ClassId>, ConfigError> {
        let Some(parent) = &section.parent else {
            return Ok(None);
        };
        let pid = parent.get_ref().0;
        if pid.major() == major && pid.is_qdisc() {
            return Ok(None);
        }
        if !index.contains_key(&pid) {
            let msg = format!("parent {pid} is not a class defined here");
            return Err(ConfigError::spanned(text, &parent.span(), msg));
        }
        Ok(Some(pid))
    };
    let mut order = Vec::with_capacity(classes.len());
    let mut state = vec![0u8; classes.len()]; // 0 new, 1 on the path, 2 done
    for start in 0..classes.len() {
        let mut path = vec![start];
        while let Some(&i) = path.last() {
            if state[i] == 2 {
                path.pop();
                continue;
            }
            state[i] = 1;
            match parent_of(classes[i].get_ref())? {
                Some(pid) if state[index[&pid]] == 1 => {
                    let located = classes[i]
                        .get_ref()
                        .parent
                        .as_ref()
                        .map(Located::span)
                        .unwrap_or_default();
                    let msg = format!("parent {pid} makes a cycle");
                    return Err(ConfigError::spanned(text, &located, msg));
                }
                Some(pid) if state[index[&pid]] == 0 => path.push(index[&pid]),
                _ => {
                    state[i] = 2;
                    order.push(i);
                    path.pop();
                }
            }
        }
    }

    let mut defs = Vec::with_capacity(classes.len());
    for &i in &order {
        let section = classes[i].get_ref();
        let id = section.id.get_ref().0;
        let Some(spec) = section.spec() else {
            let msg = format!("class {id} needs a rate, e.g. rate = \"10mbit\"");
            return Err(ConfigError::spanned(text, &section.id.span(), msg));
        };
        let leaf = class_leaf(text, section, &config)?;
        defs.push((
            ClassDef {
                id,
                parent: parent_of(section)?,
                spec,
                leaf,
            },
            i,
        ));
    }
    // Only leaves take a leaf discipline.
    for (def, i) in &defs {
        if def.leaf.is_some() && defs.iter().any(|(d, _)| d.parent == Some(def.id)) {
            let section = classes[*i].get_ref();
            let span = section
                .leaf
                .as_ref()
                .map(Located::span)
                .or_else(|| section.limit.as_ref().map(Located::span))
                .unwrap_or_default();
            let msg = format!(
                "class {} has children: only a leaf class takes a leaf qdisc",
                def.id
            );
            return Err(ConfigError::spanned(text, &span, msg));
        }
    }

    // Build once: the scheduler checks depth and parameters exactly as it will at run time.
    let mut scratch: Scheduler<u32> = Scheduler::new(config);
    let mut warnings = Vec::new();
    for (def, i) in &defs {
        match scratch.add_class(Instant::ZERO, def.id, def.parent, &def.spec) {
            Ok(change) => warnings.extend(change.warnings.iter().map(Warning::to_string)),
            Err(e) => {
                return Err(ConfigError::spanned(
                    text,
                    &classes[*i].span(),
                    e.to_string(),
                ));
            }
        }
    }
    Ok(TreeSpec {
        config,
        classes: defs.into_iter().map(|(d, _)| d).collect(),
        warnings,
    })
}

/// A class's own leaf: `leaf = …`, or `limit = N` on the qdisc's default kind.
fn class_leaf(
    text: &str,
    section: &ClassSection,
    config: &SchedulerConfig,
) -> Result<Option<LeafDef>, ConfigError> {
    match (&section.leaf, &section.limit) {
        (Some(_), Some(limit)) => Err(ConfigError::spanned(
            text,
            &limit.span(),
            "give the limit inside leaf = { … } (limit alone is the default leaf's)",
        )),
        (Some(leaf), None) => Ok(Some(leaf.get_ref().0)),
        (None, Some(limit)) => {
            let kind = config.default_leaf.kind();
            let Some(spec) = crate::leaf::with_packet_limit(&config.default_leaf, *limit.get_ref())
            else {
                let option = kind.byte_limit().unwrap_or("limit");
                return Err(ConfigError::spanned(
                    text,
                    &limit.span(),
                    format!(
                        "limit is in packets, and the default leaf {kind} limits bytes: \
                         write leaf = {{ kind = \"{kind}\", {option} = BYTES }}"
                    ),
                ));
            };
            spec.resolve()
                .map(|config| {
                    Some(LeafDef {
                        handle: None,
                        config,
                    })
                })
                .map_err(|e| ConfigError::spanned(text, &limit.span(), e.to_string()))
        }
        (None, None) => Ok(None),
    }
}

/// A config file of only `[qdisc]` and `[[class]]` sections, for the tests of what is built
/// from them (this module's and `split.rs`'s).
#[cfg(test)]
#[derive(Deserialize)]
pub(crate) struct TestDoc {
    pub(crate) qdisc: Option<QdiscSection>,
    #[serde(default)]
    pub(crate) class: Vec<Located<ClassSection>>,
}

#[cfg(test)]
impl TestDoc {
    /// Reads `text` and builds its tree, as the daemon's config reader does.
    pub(crate) fn tree(text: &str) -> Result<(Self, TreeSpec), ConfigError> {
        let doc: Self = crate::from_toml(text)?;
        let tree = tree_from_sections(text, doc.qdisc.as_ref(), &doc.class)?;
        Ok((doc, tree))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> Result<TreeSpec, ConfigError> {
        TestDoc::tree(text).map(|(_, tree)| tree)
    }

    #[test]
    fn orders_parents_first_and_reads_qdisc() {
        let text = r#"
[qdisc]
default = "20"
r2q = 5

[[class]]
id = "1:20"
parent = "1:1"
rate = "10mbit"
ceil = "100mbit"
prio = 1

[[class]]
id = "1:1"
parent = "1:"
rate = "100mbit"
"#;
        let t = tree(text).unwrap();
        assert_eq!(t.config.default_minor, 0x20);
        assert_eq!(t.config.r2q, 5);
        assert_eq!(
            t.classes
                .iter()
                .map(|c| c.id.to_string())
                .collect::<Vec<_>>(),
            ["1:1", "1:20"]
        );
        assert_eq!(t.classes[1].parent, Some(ClassId::new(1, 1)));
        assert_eq!(t.classes[1].spec.prio, 1);
        assert_eq!(t.classes[0].parent, None, "parent = \"1:\" is the qdisc");
        let htb: Scheduler<u32> = t.build(Instant::ZERO).unwrap();
        assert_eq!(htb.class_count(), 2);
        assert!(!t.warnings.is_empty(), "100mbit/5 is a big quantum");
    }

    fn err(text: &str) -> String {
        tree(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_line_column_and_key() {
        assert_eq!(
            err("[[class]]\nid = \"1:1\"\nrate = \"10mbitx\"\n"),
            "line 3, column 8: class[0].rate: invalid rate \"10mbitx\": unknown unit (e.g. \"100mbit\", \"1.5gbit\", \"800kbit\")"
        );
        assert_eq!(
            err(
                "[[class]]\nid = \"1:1\"\nrate = \"1mbit\"\n[[class]]\nid = \"1:2\"\nparent = \"1:9\"\nrate = \"1mbit\"\n"
            ),
            "line 6, column 10: class[1].parent: parent 1:9 is not a class defined here"
        );
        assert!(
            err("[[class]]\nid = \"1:1\"\nratee = \"1\"\n")
                .starts_with("line 3, column 1: class[0].ratee: unknown field `ratee`")
        );
        assert!(err("[[class]]\nid = \"1:1\"\n").contains("class 1:1 needs a rate"));
        assert!(
            err("[[class]]\nid = \"1:1\"\nrate = 1\n[[class]]\nid = \"1:1\"\nrate = 1\n")
                .contains("defined twice")
        );
        assert!(
            err("[[class]]\nid = \"2:1\"\nrate = 1\n[[class]]\nid = \"1:2\"\nrate = 1\n")
                .contains("does not belong")
        );
        assert!(
            err("[[class]]\nid = \"1:1\"\nparent = \"1:2\"\nrate = 1\n[[class]]\nid = \"1:2\"\nparent = \"1:1\"\nrate = 1\n")
                .contains("cycle")
        );
        assert!(
            err("[[class]]\nid = \"1:1\"\nrate = \"0bit\"\n").contains("rate must be above zero")
        );
        assert!(err("[qdisc]\ndefault = 20\n").contains("hex digits"));
    }

    #[test]
    fn too_deep_trees_are_refused_with_location() {
        let mut text = String::new();
        for i in 1..=9 {
            text += &format!("[[class]]\nid = \"1:{i}\"\nrate = \"1mbit\"\n");
            if i > 1 {
                text += &format!("parent = \"1:{}\"\n", i - 1);
            }
        }
        let e = tree(&text).unwrap_err();
        assert!(e.message.contains("deeper than 8 levels"), "{e}");
        assert_eq!(e.key.as_deref(), Some("class[8]"));
    }

    #[test]
    fn leaves_per_class_and_by_default() {
        use htb_core::{FqCodelConfig, LeafConfig, SfqConfig};
        let t = tree(
            "[qdisc]\nleaf = \"sfq\"\n[[class]]\nid = \"1:1\"\nrate = \"10mbit\"\n\
             [[class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"1mbit\"\n\
             leaf = { kind = \"fq_codel\", handle = \"10:\", ecn = false }\n\
             [[class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"1mbit\"\nlimit = 50\n\
             [[class]]\nid = \"1:30\"\nparent = \"1:1\"\nrate = \"1mbit\"\n",
        )
        .unwrap();
        assert_eq!(t.config.default_leaf, LeafConfig::Sfq(SfqConfig::default()));
        let leaf = |id: u32| t.classes.iter().find(|c| c.id.minor() == id).unwrap().leaf;
        let ten = leaf(0x10).unwrap();
        assert_eq!(ten.handle, Some(0x10));
        assert_eq!(
            ten.config,
            LeafConfig::FqCodel(FqCodelConfig {
                ecn: false,
                ..FqCodelConfig::default()
            })
        );
        let LeafConfig::Sfq(twenty) = leaf(0x20).unwrap().config else {
            panic!("limit = N is a limit on the default kind")
        };
        assert_eq!((twenty.limit, twenty.flows), (50, 50));
        assert_eq!(leaf(0x30), None, "the default leaf");
        let htb: Scheduler<u32> = t.build(Instant::ZERO).unwrap();
        let info = |id: u32| htb.class_info(ClassId::new(1, id)).unwrap().leaf;
        assert_eq!(info(0x10), Some(ten.config));
        assert_eq!(info(0x30), Some(t.config.default_leaf));
        assert_eq!(info(1), None, "inner classes hold no leaf");
    }

    #[test]
    fn bad_leaves_are_located() {
        assert!(
            err("[[class]]\nid = \"1:1\"\nrate = 1\nlimit = 5\nleaf = \"pfifo\"\n")
                .starts_with("line 4, column 9: class[0].limit: give the limit inside leaf")
        );
        let e = err(
            "[[class]]\nid = \"1:1\"\nrate = 1\nleaf = \"sfq\"\n[[class]]\nid = \"1:2\"\nparent = \"1:1\"\nrate = 1\n",
        );
        assert!(e.contains("class 1:1 has children"), "{e}");
        assert!(
            err("[qdisc]\nleaf = { kind = \"pfifo\", handle = \"5:\" }\n").contains("no handle")
        );
        assert!(
            err("[qdisc]\nleaf = \"bfifo\"\n[[class]]\nid = \"1:1\"\nrate = 1\nlimit = 5\n")
                .contains("bfifo limits bytes")
        );
        let e =
            err("[[class]]\nid = \"1:1\"\nrate = 1\nleaf = { kind = \"fq_codel\", flows = 0 }\n");
        assert!(
            e.starts_with("line 4, column 8: class[0].leaf: fq_codel: flows 0"),
            "{e}"
        );
    }
}
