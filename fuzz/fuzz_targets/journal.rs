//! The journal loader (`journal.jsonl`), and replaying what it accepts onto a model.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seq, bytes)) = data.split_first() else {
        return;
    };
    if let Ok(journal) = htbd::persist::parse_journal(bytes, u64::from(seq % 4)) {
        let mut model = htbd::model::Model::default();
        for (_, batch) in &journal.batches {
            let _ = model.apply(batch);
        }
    }
});
