//! LibreQoS's `network.json`: the hierarchy of nodes (sites, access points) above the
//! circuits, each with its download and upload limits. A node becomes one HTB class per tree:
//! `ceil` its `downloadBandwidthMbps` (or upload), `rate` its `…Min` when given, else the same;
//! both capped by its parent's, as LibreQoS's `inheritBandwidthMaxes` caps them. Keys htbd has
//! no use for (`type`, `id`, coordinates …) are ignored, as LibreQoS ignores what it does not
//! read.

use serde_json::{Map, Value};

use super::shaped_devices::mbps_to_bits;

/// Why the file was refused: where in the hierarchy, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", if path.is_empty() { "top level".to_owned() } else { path.join(" → ") })]
pub struct NetworkError {
    /// The node names from the top to where the problem is.
    pub path: Vec<String>,
    /// What was wrong.
    pub message: String,
}

/// One node of the hierarchy, its limits in bit/s already capped by its parent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name (the `Parent Node` circuits name).
    pub name: String,
    /// Download `rate` and `ceil`.
    pub download: (u64, u64),
    /// Upload `rate` and `ceil`.
    pub upload: (u64, u64),
    /// Its children, in file order.
    pub children: Vec<Self>,
}

impl Node {
    /// This node and every node below it, parents first, each with its parent's name.
    pub fn walk<'a>(&'a self, parent: Option<&'a str>, out: &mut Vec<(&'a Self, Option<&'a str>)>) {
        out.push((self, parent));
        for child in &self.children {
            child.walk(Some(&self.name), out);
        }
    }
}

/// Every node of `nodes`, parents first, with its parent's name (`None`: a top-level node).
#[must_use]
pub fn flatten(nodes: &[Node]) -> Vec<(&Node, Option<&str>)> {
    let mut out = Vec::new();
    for n in nodes {
        n.walk(None, &mut out);
    }
    out
}

/// Reads `network.json`'s text.
///
/// # Errors
/// Not JSON, not an object of nodes, a limit that is not Mbps, or a node name given twice.
pub fn read(text: &str) -> Result<Vec<Node>, NetworkError> {
    let value: Value = serde_json::from_str(text).map_err(|e| NetworkError {
        path: Vec::new(),
        message: format!("not JSON: {e}"),
    })?;
    let Value::Object(top) = value else {
        return Err(NetworkError {
            path: Vec::new(),
            message: "expected an object of nodes, {\"Site_1\": {…}, …}".into(),
        });
    };
    let nodes = children(&top, &mut Vec::new(), None)?;
    let mut seen = std::collections::BTreeSet::new();
    for (node, _) in flatten(&nodes) {
        if !seen.insert(node.name.as_str()) {
            return Err(NetworkError {
                path: vec![node.name.clone()],
                message: "the node name is used twice (circuits name their node by it)".into(),
            });
        }
    }
    Ok(nodes)
}

/// The limits `(rate, ceil)` of a parent, capping its children's.
type Caps = ((u64, u64), (u64, u64));

fn children(
    object: &Map<String, Value>,
    path: &mut Vec<String>,
    caps: Option<Caps>,
) -> Result<Vec<Node>, NetworkError> {
    let mut out = Vec::with_capacity(object.len());
    for (name, value) in object {
        path.push(name.clone());
        let err = |path: &[String], message: String| NetworkError {
            path: path.to_vec(),
            message,
        };
        let Value::Object(fields) = value else {
            return Err(err(path, "a node is an object of its limits".into()));
        };
        let limit = |key: &str, required: bool| -> Result<Option<u64>, NetworkError> {
            match fields.get(key) {
                None if required => Err(err(path, format!("{key} is missing"))),
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => mbps_to_bits(&n.to_string())
                    .map(Some)
                    .map_err(|why| err(path, format!("{key} {n}: {why}"))),
                // Some integrations write numbers as strings.
                Some(Value::String(s)) => mbps_to_bits(s.trim())
                    .map(Some)
                    .map_err(|why| err(path, format!("{key} {s:?}: {why}"))),
                Some(other) => Err(err(path, format!("{key} {other}: expected Mbps"))),
            }
        };
        let capped = |max: u64, min: Option<u64>, cap: Option<(u64, u64)>| {
            let (cap_rate, cap_ceil) = cap.unwrap_or((u64::MAX, u64::MAX));
            let ceil = max.min(cap_ceil);
            (min.unwrap_or(max).min(ceil).min(cap_rate), ceil)
        };
        let download = capped(
            limit("downloadBandwidthMbps", true)?.unwrap_or(0),
            limit("downloadBandwidthMbpsMin", false)?,
            caps.map(|c| c.0),
        );
        let upload = capped(
            limit("uploadBandwidthMbps", true)?.unwrap_or(0),
            limit("uploadBandwidthMbpsMin", false)?,
            caps.map(|c| c.1),
        );
        let kids = match fields.get("children") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(c)) => children(c, path, Some((download, upload)))?,
            Some(_) => return Err(err(path, "children is an object of nodes".into())),
        };
        out.push(Node {
            name: name.clone(),
            download,
            upload,
            children: kids,
        });
        path.pop();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libreqos_example_reads_with_limits_capped_by_parents() {
        let text = r#"{
            "Site_1": {"downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 1000, "type": "site",
                "children": {
                    "AP_A": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500, "type": "ap"},
                    "Site_3": {"downloadBandwidthMbps": 2000, "uploadBandwidthMbps": 500,
                        "downloadBandwidthMbpsMin": 100.5, "type": "site",
                        "children": {"AP_9": {"downloadBandwidthMbps": "120", "uploadBandwidthMbps": 120}}}
                }},
            "Site_2": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500, "latitude": 1.5}
        }"#;
        let nodes = read(text).unwrap();
        let all: Vec<(&str, Option<&str>, (u64, u64))> = flatten(&nodes)
            .into_iter()
            .map(|(n, p)| (n.name.as_str(), p, n.download))
            .collect();
        assert_eq!(
            all,
            [
                ("Site_1", None, (1_000_000_000, 1_000_000_000)),
                ("AP_A", Some("Site_1"), (500_000_000, 500_000_000)),
                // Ceil capped by Site_1's; the given min stays below it.
                ("Site_3", Some("Site_1"), (100_500_000, 1_000_000_000)),
                // Rate capped by Site_3's rate, ceil by its ceil.
                ("AP_9", Some("Site_3"), (100_500_000, 120_000_000)),
                ("Site_2", None, (500_000_000, 500_000_000)),
            ]
        );
    }

    #[test]
    fn bad_files_name_the_node_and_the_key() {
        for (text, why) in [
            ("[1, 2]", "top level: expected an object of nodes"),
            ("{\"A\": 1}", "A: a node is an object"),
            (
                "{\"A\": {\"uploadBandwidthMbps\": 1}}",
                "A: downloadBandwidthMbps is missing",
            ),
            (
                r#"{"A": {"downloadBandwidthMbps": 1, "uploadBandwidthMbps": 1, "children": {"B": {"downloadBandwidthMbps": -3, "uploadBandwidthMbps": 1}}}}"#,
                "A → B: downloadBandwidthMbps -3",
            ),
            (
                r#"{"A": {"downloadBandwidthMbps": 1, "uploadBandwidthMbps": 1, "children": {"A": {"downloadBandwidthMbps": 1, "uploadBandwidthMbps": 1}}}}"#,
                "A: the node name is used twice",
            ),
            ("{", "not JSON"),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
