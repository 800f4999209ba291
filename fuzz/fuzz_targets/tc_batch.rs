//! `htb-cli -b FILE`: a batch file, line by line through tc's grammar.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = htb_cli::tc::parse::parse_batch(text);
    }
});
