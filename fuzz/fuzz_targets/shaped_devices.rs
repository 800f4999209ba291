//! `htb-cli import FILE.csv`: LibreQoS's ShapedDevices.csv read, grouped into circuits and
//! turned into a batch (a sync over an empty tree: everything added). Whatever the file holds, a
//! file that is accepted must give a batch that prints as tc's lines htb-cli's own parser reads
//! back as the same commands (free text — names, ids with line breaks — stays in comments).
#![no_main]

use std::collections::BTreeMap;

use htb_cli::import::circuits::{Placement, group};
use htb_cli::import::shaped_devices::read;
use htb_cli::import::sync::batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(devices) = read(text) else {
        return;
    };
    let Ok(circuits) = group(devices) else {
        return;
    };
    let placement = Placement {
        download_dev: Some("lan0".parse().unwrap()),
        upload_dev: Some("wan0".parse().unwrap()),
        parent: "1:1".parse().unwrap(),
        nodes: BTreeMap::new(),
        prio: 10,
    };
    let Ok(b) = batch(&circuits, None, &placement, &BTreeMap::new(), 0x100) else {
        return;
    };
    let mut printed = Vec::new();
    if let Err(e) = b.print(&mut printed) {
        panic!("the batch does not print: {e}");
    }
    let text = String::from_utf8(printed).unwrap();
    let read = match htb_cli::tc::parse::parse_batch(&text) {
        Ok(read) => read,
        Err((line, e)) => panic!("printed line {line} does not parse: {e}\n{text}"),
    };
    // What is sent is what the printed batch says.
    let read: Vec<_> = read
        .into_iter()
        .filter_map(|(_, a)| match a {
            htb_cli::tc::parse::Action::Change(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(read, b.commands, "{text}");
});
