//! htbd's reader of a request's body (`htb_ipc::read_incoming`): never a panic, the same
//! verdict as the typed read, and a batch's kept text reads back as its commands (the journal
//! writes that text as it is).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let typed = serde_json::from_slice::<htb_ipc::Request>(data);
    let incoming = htb_ipc::read_incoming(data.to_vec());
    assert_eq!(typed.is_ok(), incoming.is_ok());
    let Ok(incoming) = incoming else { return };
    let Some(raw) = incoming.raw else { return };
    assert!(!raw.items().contains(&b'\n'));
    let mut list = b"[".to_vec();
    list.extend_from_slice(raw.items());
    list.push(b']');
    let mut d = serde_json::Deserializer::from_slice(&list);
    let back = htb_ipc::deserialize_commands(&mut d).expect("the kept text reads back");
    match incoming.request.request {
        htb_ipc::RequestBody::Stage { commands } | htb_ipc::RequestBody::Apply { commands } => {
            assert_eq!(back, commands);
        }
        _ => panic!("text kept for a request that is not a batch"),
    }
});
