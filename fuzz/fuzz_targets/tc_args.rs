//! `htb-cli` argument vectors: NUL-separated words through tc's grammar.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args: Vec<String> = text.split('\0').map(str::to_owned).collect();
    let _ = htb_cli::tc::parse::parse_command_line(&args);
    let _ = htb_cli::tc::parse::parse_command(&args);
});
