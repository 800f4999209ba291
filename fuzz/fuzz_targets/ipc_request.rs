//! The control socket's input: a frame (length header + JSON body) decoded as a request.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The framed path htb-cli uses, and the daemon's header check then body parse.
    let _ = htb_ipc::read_frame::<htb_ipc::Request>(&mut &data[..]);
    if let Some(header) = data.get(..4) {
        let header: [u8; 4] = header.try_into().unwrap();
        if htb_ipc::body_len(header).is_ok() {
            let _ = serde_json::from_slice::<htb_ipc::Request>(&data[4..]);
        }
    }
    let _ = serde_json::from_slice::<htb_ipc::Response>(data);
});
