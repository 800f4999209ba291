//! htbd's config file and saved state (`state.toml`), and what a parsed one is turned into.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = htbd::DaemonConfig::parse(text) {
        // A valid config is also exported as tc commands and built into a model.
        let _ = htbd::tc_export::commands(&config);
        let _ = htbd::startup::config_hash(&config);
    }
    if let Ok(trees) = htbd::parse_state(text) {
        let _ = htbd::model::Model::from_trees(trees, &|_| 4);
    }
});
