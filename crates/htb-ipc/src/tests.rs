//! The wire as the daemon and older clients write it: fields refused, forms kept.

use super::*;

fn dev(name: &str) -> InterfaceName {
    name.parse().unwrap()
}

/// A field the daemon does not know is an error, not silently ignored: at the top, in a
/// command, in a filter's match and in a leaf's options.
#[test]
fn unknown_fields_are_refused() {
    let ok = r#"{"version":1,"request":{"type":"apply","commands":[
        {"op":"class_delete","dev":"r2","id":"1:10"},
        {"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}]}}"#;
    assert!(serde_json::from_str::<Request>(ok).is_ok());
    for bad in [
        r#"{"version":1,"request":{"type":"ping"},"extra":1}"#,
        r#"{"version":1,"request":{"type":"ping","extra":1}}"#,
        r#"{"version":1,"request":{"type":"apply","commands":[{"op":"class_delete","dev":"r2","id":"1:10","rate":1}]}}"#,
        r#"{"version":1,"request":{"type":"apply","commands":[{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturbb":10}}]}}"#,
        r#"{"version":1,"request":{"type":"show","object":"class","stat":true}}"#,
    ] {
        let e = serde_json::from_str::<Request>(bad).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{bad}: {e}");
    }
}

/// A batch's commands read without serde's buffering (`tagged`) come out as the derived
/// reader reads them, whatever the order of the keys, and are refused where it refuses.
#[test]
fn batches_read_fast_as_the_derived_reader_reads_them() {
    let commands = [
        r#"{"op":"class_add","dev":"r2","id":"1:20","parent":"1:1","rate":10000000,"ceil":100000000}"#,
        r#"{"op":"class_change","dev":"r2","id":":20","rate":5000000,"linklayer":"adsl"}"#,
        r#"{"op":"class_replace","dev":"r2","id":"1:20","parent":"root","rate":1}"#,
        r#"{"op":"class_delete","dev":"r2","id":"1:20"}"#,
        r#"{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":1,"kind":"u32","handle":"800::801","matcher":{"dst":"10.0.0.1"},"class":"1:20"}"#,
        r#"{"op":"filter_change","dev":"r2","protocol":"ip","prio":3,"kind":"flower","handle":"3","matcher":{},"class":"1:20"}"#,
        r#"{"op":"filter_replace","dev":"r2","protocol":"all","prio":5,"kind":"u32","handle":"2:","matcher":{},"hashing":{"divisor":256}}"#,
        r#"{"op":"filter_delete","dev":"r2","prio":1,"handle":"800::801"}"#,
        r#"{"op":"filter_delete","dev":"r2"}"#,
        r#"{"op":"qdisc_add","dev":"r2","handle":"1:","default_minor":32}"#,
        r#"{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}"#,
        r#"{"dev":"r2","op":"class_delete","id":"1:20"}"#,
        r#"{"dev":"r2","op":"qdisc_delete"}"#,
        r#"{"op":"class_split","dev":"r2","id":"1:10","choice":"split"}"#,
    ];
    let commands_len = commands.len();
    let list = format!("[{}]", commands.join(","));
    let derived: Vec<Command> = serde_json::from_str(&list).unwrap();
    for kind in ["apply", "stage"] {
        let request = format!(r#"{{"version":1,"request":{{"type":"{kind}","commands":{list}}}}}"#);
        let fast: Request = serde_json::from_str(&request).unwrap();
        let (RequestBody::Apply { commands } | RequestBody::Stage { commands }) = fast.request
        else {
            panic!("{kind}: {:?}", fast.request)
        };
        assert_eq!(commands, derived, "{kind}");
    }
    // The type after the commands, and the other requests: the derived reader.
    let late: Request = serde_json::from_str(&format!(
        r#"{{"version":1,"request":{{"commands":{list},"type":"apply"}}}}"#
    ))
    .unwrap();
    assert!(
        matches!(late.request, RequestBody::Apply { commands } if commands.len() == commands_len)
    );
    let ping: Request = serde_json::from_str(r#"{"version":1,"request":{"type":"ping"}}"#).unwrap();
    assert_eq!(ping.request, RequestBody::Ping {});
    // Refused as the derived reader refuses.
    for bad in [
        r#"{"type":"stage","commands":[],"extra":1}"#,
        r#"{"type":"stage"}"#,
        r#"{"type":"apply","commands":[],"commands":[]}"#,
        r#"{"type":"apply","commands":[{"op":"class_delete","dev":"r2","id":"1:20","rate":1}]}"#,
        r#"{"type":"apply","commands":[{"op":"filter_add","dev":"r2","protocol":"ip","kind":"u32","matcher":{},"flowid":"1:1"}]}"#,
        r#"{"type":"apply","commands":[{"op":"class_remove","dev":"r2","id":"1:20"}]}"#,
        r#"{"type":"apply","commands":[{"op":"class_add","dev":"r2","id":"1:x","rate":1}]}"#,
        r#"{"type":"apply","commands":[{"dev":"r2","id":"1:20"}]}"#,
    ] {
        let text = format!(r#"{{"version":1,"request":{bad}}}"#);
        assert!(serde_json::from_str::<Request>(&text).is_err(), "{bad}");
    }
}

/// Answers read without buffering (`tagged`) come out as they were written, and as the
/// derived reader reads them.
#[test]
fn answers_read_fast_as_written() {
    let class = r#"{"dev":"r2","id":"1:20","parent":"1:1","level":0,"leaf":true,"prio":0,"quantum":1500,"rate":1000000,"ceil":2000000,"burst":1600,"cburst":1600,"buffer_ns":1,"cbuffer_ns":1,"overhead":0,"mpu":0,"linklayer":"ethernet","stats":{"bytes":3000,"packets":2,"drops":1,"overlimits":4,"requeues":0,"backlog_bytes":1500,"backlog_packets":1,"lended":5,"borrowed":6,"giants":0,"tokens":-7,"ctokens":8}}"#;
    let texts = [
        format!(
            r#"{{"version":1,"result":{{"Ok":{{"type":"shown","classes":[{class},{class}],"next":40000}}}}}}"#
        ),
        r#"{"version":1,"result":{"Ok":{"type":"applied","results":[{},{"dropped_packets":3},{}]}}}"#.to_owned(),
        r#"{"version":1,"result":{"Ok":{"type":"pong","daemon":"0.1.0","pid":7}}}"#.to_owned(),
        r#"{"version":1,"result":{"Ok":{"type":"staged","commands":12}}}"#.to_owned(),
        r#"{"version":1,"result":{"Err":{"code":"invalid","message":"no","command":3}}}"#
            .to_owned(),
    ];
    for text in &texts {
        let response: Response =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let again = serde_json::to_string(&response).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&again).unwrap(), response);
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let derived: Result<ReplyBody, IpcError> =
            serde_json::from_value(value["result"].clone()).unwrap();
        assert_eq!(response.result, derived, "{text}");
    }
    let Ok(ReplyBody::Shown(shown)) = serde_json::from_str::<Response>(&texts[0]).unwrap().result
    else {
        panic!("not shown")
    };
    assert_eq!((shown.classes.len(), shown.next), (2, Some(40000)));
    assert_eq!(shown.classes[1].stats.unwrap().borrowed, 6);
    // The type last, an unknown answer field, and a malformed result.
    let late: Response = serde_json::from_str(
        r#"{"version":1,"result":{"Ok":{"results":[{}],"type":"applied","later":1}}}"#,
    )
    .unwrap();
    assert_eq!(
        late.result,
        Ok(ReplyBody::Applied {
            results: vec![CommandResult::default()]
        })
    );
    for bad in [
        r#"{"version":1,"result":{"Maybe":{}}}"#,
        r#"{"version":1,"result":{"Ok":{"type":"applied"}}}"#,
        r#"{"version":1,"result":{"Ok":{"type":"shown","classes":[{"dev":"r2"}]}}}"#,
    ] {
        assert!(serde_json::from_str::<Response>(bad).is_err(), "{bad}");
    }
}

/// The counters are the core's block, inline: a reply reads and writes as before it was
/// shared (every field at the top of `stats`).
#[test]
fn counter_blocks_keep_their_json() {
    let text = r#"{"bytes":3000,"packets":2,"drops":1,"overlimits":4,"requeues":0,"backlog_bytes":1500,"backlog_packets":1,"lended":5,"borrowed":6,"giants":0,"tokens":-7,"ctokens":8}"#;
    let class: ClassStats = serde_json::from_str(text).unwrap();
    assert_eq!(
        (
            class.queue.bytes,
            class.queue.backlog_packets,
            class.borrowed,
            class.tokens
        ),
        (3000, 1, 6, -7)
    );
    assert_eq!(serde_json::to_string(&class).unwrap(), text);
    let leaf = r#"{"bytes":3000,"packets":2,"drops":1,"overlimits":0,"requeues":0,"backlog_bytes":1500,"backlog_packets":1}"#;
    let stats: LeafQdiscStats = serde_json::from_str(leaf).unwrap();
    assert_eq!((stats.queue.drops, stats.fq_codel), (1, None));
    assert_eq!(serde_json::to_string(&stats).unwrap(), leaf);
    let qdisc: QueueStats = serde_json::from_str(leaf).unwrap();
    assert_eq!(qdisc, stats.queue);
}

#[test]
fn class_ids_are_typed_and_read_as_older_versions_wrote_them() {
    // Journal lines as htbd 0.1 wrote them, when ids were strings: they still load, into
    // typed ids.
    let old = [
        r#"{"op":"class_add","dev":"r2","id":"1:20","parent":"1:1","rate":10000000,"ceil":100000000}"#,
        r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"1:","rate":100000000}"#,
        r#"{"op":"class_delete","dev":"r2","id":"1:20"}"#,
        r#"{"op":"class_change","dev":"r2","id":":20","rate":5000000}"#,
    ];
    let commands: Vec<Command> = old
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    let Command::ClassAdd(c) = &commands[0] else {
        panic!("{commands:?}")
    };
    assert_eq!(
        (c.id, c.parent),
        (ClassId::new(1, 0x20), Some(ClassId::new(1, 1)))
    );
    assert!(matches!(&commands[1], Command::ClassAdd(c) if c.parent == Some(ClassId::new(1, 0))));
    assert!(
        matches!(&commands[2], Command::ClassDelete(ClassDelete { id, .. }) if *id == ClassId::new(1, 0x20))
    );
    assert!(matches!(&commands[3], Command::ClassChange(c) if c.id == ClassId::new(0, 0x20)));
    // Written back as they were (`:20` as `0:20`, which reads back the same).
    for (line, command) in old.iter().zip(&commands) {
        let again = serde_json::to_string(command).unwrap();
        assert_eq!(again, line.replace("\":20\"", "\"0:20\""));
        assert_eq!(serde_json::from_str::<Command>(&again).unwrap(), *command);
    }
    // A link layer as text; `adsl` is `atm`, as tc reads it.
    for (text, want) in [
        ("ethernet", LinkLayer::Ethernet),
        ("atm", LinkLayer::Atm),
        ("adsl", LinkLayer::Atm),
    ] {
        let line =
            format!(r#"{{"op":"class_add","dev":"r2","id":"1:20","rate":1,"linklayer":"{text}"}}"#);
        let c: Command = serde_json::from_str(&line).unwrap();
        assert!(
            matches!(c, Command::ClassAdd(c) if c.linklayer == Some(want)),
            "{line}"
        );
    }
    // Filters: a flowid as text, and a hash table without one.
    let with: Command = serde_json::from_str(
        r#"{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":1,"kind":"u32","matcher":{"dport":[5201,5201]},"class":"1:20"}"#,
    )
    .unwrap();
    assert!(matches!(&with, Command::FilterAdd(f) if f.class == Some(ClassId::new(1, 0x20))));
    let without: Command = serde_json::from_str(
        r#"{"op":"filter_add","dev":"r2","protocol":"all","prio":5,"kind":"u32","handle":"2:","matcher":{},"hashing":{"divisor":256}}"#,
    )
    .unwrap();
    assert!(matches!(&without, Command::FilterAdd(f) if f.class.is_none()));
    assert!(!serde_json::to_string(&without).unwrap().contains("class"));
    // Handles as the operator wrote them: u32's parts, flower's number, a filter del's
    // with no kind; each one word, written back in the form every grammar reads.
    for (line, word) in [
        (
            r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","handle":"800::801","matcher":{}}"#,
            0x8000_0801,
        ),
        (
            r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":2,"kind":"flower","handle":"3","matcher":{},"class":"1:20"}"#,
            3,
        ),
        (
            r#"{"op":"filter_delete","dev":"r2","prio":1,"handle":"800::801"}"#,
            0x8000_0801,
        ),
    ] {
        let c: Command = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let handle = match &c {
            Command::FilterAdd(f) => f.handle,
            Command::FilterDelete(FilterDelete { handle, .. }) => *handle,
            _ => None,
        };
        assert_eq!(handle, Some(FilterHandle(word)), "{line}");
        let again = serde_json::to_string(&c).unwrap();
        assert!(
            again.contains(&format!("\"handle\":\"{word:#x}\"")),
            "{again}"
        );
        assert_eq!(serde_json::from_str::<Command>(&again).unwrap(), c);
    }
    // Prefixes as the operator wrote them (the CLI forwarded its text): a bare address is a
    // host; written back with its length. A malformed one is refused when read.
    let old: Command = serde_json::from_str(
        r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","matcher":{"dst":"10.0.0.9","src":"192.168.0.0/16"},"class":"1:20"}"#,
    )
    .unwrap();
    let Command::FilterAdd(f) = &old else {
        panic!("{old:?}")
    };
    assert_eq!(
        (
            f.matcher.dst.map(|p| p.prefix_len()),
            f.matcher.src.map(|p| p.prefix_len())
        ),
        (Some(32), Some(16))
    );
    assert!(
        serde_json::to_string(&old)
            .unwrap()
            .contains(r#""dst":"10.0.0.9/32""#)
    );
    assert!(
        serde_json::from_str::<Match>(r#"{"dst":"10.0.0.300/32"}"#)
            .unwrap_err()
            .to_string()
            .contains("10.0.0.300")
    );
    // A show's class and parent as text: `root`, a class, a qdisc.
    let show: Request = serde_json::from_str(
        r#"{"version":1,"request":{"type":"show","object":"class","class":"1:20","parent":"root"}}"#,
    )
    .unwrap();
    assert!(matches!(
        show.request,
        RequestBody::Show(Show { class: Some(c), parent: Some(Parent::Root), .. })
            if c == ClassId::new(1, 0x20)
    ));
    let show: Show = serde_json::from_str(r#"{"object":"filter","parent":"1:"}"#).unwrap();
    assert_eq!(show.parent, Some(Parent::Id(ClassId::new(1, 0))));
    assert_eq!(
        serde_json::to_string(&show).unwrap(),
        r#"{"object":"filter","parent":"1:","stats":false,"invisible":false}"#
    );
    // A parent written as "root" is the root; a malformed id is refused when read.
    let root: Command = serde_json::from_str(
        r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"root","rate":1}"#,
    )
    .unwrap();
    assert!(matches!(root, Command::ClassAdd(c) if c.parent.is_none()));
    for bad in [
        r#"{"op":"class_delete","dev":"r2","id":"1:x"}"#,
        r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"up","rate":1}"#,
    ] {
        assert!(serde_json::from_str::<Command>(bad).is_err(), "{bad}");
    }
}

/// A `filter add` as htb-cli 0.1 sent it, every match field given: it reads, says the
/// same in words, and is written back byte for byte (older clients keep working).
#[test]
fn todays_filter_add_request_reads_and_writes_back_the_same() {
    let text = r#"{"version":1,"request":{"type":"apply","commands":[{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":5,"kind":"u32","handle":"0x80000801","matcher":{"src":"10.1.0.0/16","dst":"192.168.2.0/24","proto":17,"sport":[4096,8191],"dport":[53,53],"dscp":10,"vlan":7,"raw":[{"at":0,"mask":251658240,"value":83886080},{"at":12,"nexthdr":true,"mask":65280,"value":4608}]},"class":"1:30"},{"op":"class_add","dev":"r2","id":"1:30","parent":"1:1","rate":2000000,"ceil":40000000}]}}"#;
    let request: Request = serde_json::from_str(text).unwrap();
    let RequestBody::Apply { commands } = &request.request else {
        panic!("{request:?}")
    };
    let [Command::FilterAdd(f), Command::ClassAdd(c)] = commands.as_slice() else {
        panic!("{commands:?}")
    };
    assert_eq!(
        (commands[0].dev().as_str(), commands[1].dev().as_str()),
        ("r2", "r2")
    );
    assert_eq!(
        f.matcher.words().to_string(),
        "src 10.1.0.0/16 dst 192.168.2.0/24 proto 17 sport 4096-8191 dport 53 dscp 10 vlan 7 2 u32 keys"
    );
    assert_eq!(f.class, Some(ClassId::new(1, 0x30)));
    assert_eq!(serde_json::to_string(&c.rate).unwrap(), "2000000");
    assert_eq!(serde_json::to_string(&request).unwrap(), text);
}

/// A match field the classifier cannot hold is refused as the request is read, the
/// message naming the field and why (htbd answers it as a bad request, never applies it).
#[test]
fn a_bad_match_in_a_request_is_refused_naming_the_field() {
    let request = |matcher: &str| {
        format!(
            r#"{{"version":1,"request":{{"type":"apply","commands":[{{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","matcher":{matcher},"class":"1:10"}}]}}}}"#
        )
    };
    assert!(serde_json::from_str::<Request>(&request(r#"{"dscp":63,"vlan":4094}"#)).is_ok());
    for (matcher, says) in [
        (r#"{"dscp":64}"#, "dscp 64: must be 0 to 63"),
        (r#"{"vlan":4095}"#, "vlan 4095: must be 0 to 4094"),
        (r#"{"dport":[443,80]}"#, "dport 443-80: an empty port range"),
    ] {
        let e = serde_json::from_str::<Request>(&request(matcher))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{matcher}: {e}");
    }
}

/// An interface name the kernel would refuse (`dev_valid_name()`) is refused as the
/// request is read, in any field that names one, the message naming the rule; today's
/// names read as the plain strings they are.
#[test]
fn a_bad_interface_name_in_a_request_is_refused_as_it_is_read() {
    let apply = |command: &str| {
        format!(r#"{{"version":1,"request":{{"type":"apply","commands":[{command}]}}}}"#)
    };
    let redirect = |to: &str| {
        apply(&format!(
            r#"{{"op":"filter_add","dev":"r2","parent":"ffff:","protocol":"all","prio":10,"kind":"u32","matcher":{{}},"redirect":"{to}"}}"#
        ))
    };
    for good in [
        apply(r#"{"op":"qdisc_delete","dev":"bond0.100"}"#),
        apply(r#"{"op":"ingress_add","dev":"enp3s0f1"}"#),
        redirect("ifb4eth0"),
    ] {
        assert!(serde_json::from_str::<Request>(&good).is_ok(), "{good}");
    }
    for (text, says) in [
        (
            apply(r#"{"op":"qdisc_delete","dev":"x/y"}"#),
            r#""x/y" is not a valid interface name: it may not hold '/'"#,
        ),
        (
            apply(r#"{"op":"class_delete","dev":"eth0:1","id":"1:10"}"#),
            r#""eth0:1" is not a valid interface name: it may not hold ':'"#,
        ),
        (
            apply(r#"{"op":"ingress_add","dev":""}"#),
            "an interface name may not be empty",
        ),
        (
            redirect("ifb-sixteen-byte"),
            r#""ifb-sixteen-byte" is not a valid interface name: 16 bytes, at most 15"#,
        ),
        (
            r#"{"version":1,"request":{"type":"show","object":"class","dev":".."}}"#.into(),
            r#"".." is not a valid interface name"#,
        ),
    ] {
        let e = serde_json::from_str::<Request>(&text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
}

/// A show without a page reads as before (the whole list); one with a page round-trips,
/// and a reply says where the next page starts only when one follows.
#[test]
fn pages_are_optional_on_both_sides() {
    let old = r#"{"version":1,"request":{"type":"show","object":"class","dev":"r2","stats":true}}"#;
    let Ok(Request {
        request: RequestBody::Show(show),
        ..
    }) = serde_json::from_str::<Request>(old)
    else {
        panic!("an unpaged show parses");
    };
    assert_eq!(show.page, None);
    let paged = Show {
        page: Some(Page {
            from: 40_000,
            limit: 20_000,
        }),
        ..show
    };
    let text = serde_json::to_string(&paged).unwrap();
    assert!(
        text.contains(r#""page":{"from":40000,"limit":20000}"#),
        "{text}"
    );
    assert_eq!(serde_json::from_str::<Show>(&text).unwrap(), paged);
    let last = serde_json::to_string(&Shown::default()).unwrap();
    assert!(!last.contains("next"), "{last}");
    let more = Shown {
        next: Some(60_000),
        ..Shown::default()
    };
    let text = serde_json::to_string(&more).unwrap();
    assert_eq!(
        serde_json::from_str::<Shown>(&text).unwrap().next,
        Some(60_000)
    );
}

#[test]
fn frames_round_trip_and_errors_are_data() {
    let request = Request::new(RequestBody::Apply {
        commands: vec![
            Command::ClassChange(Box::new(ClassSpec {
                parent: Some(ClassId::new(1, 1)),
                ceil: Some(Rate::from_mbit(100)),
                ..ClassSpec::new(dev("r2"), ClassId::new(1, 0x10), Rate::from_mbit(20))
            })),
            Command::FilterDelete(FilterDelete {
                dev: dev("r2"),
                parent: None,
                prio: Some(1),
                handle: None,
            }),
        ],
    });
    let mut wire = Vec::new();
    write_frame(&mut wire, &request).unwrap();
    assert_eq!(
        body_len(wire[..4].try_into().unwrap()).unwrap(),
        wire.len() - 4
    );
    let back: Request = read_frame(&mut wire.as_slice()).unwrap();
    assert_eq!(back, request);

    let response = Response::new(Err(IpcError {
        code: ErrorCode::NotFound,
        message: "class 1:99 does not exist".into(),
        command: Some(1),
    }));
    let json = serde_json::to_string(&response).unwrap();
    assert!(json.contains(r#""code":"not_found""#), "{json}");
    let back: Response = serde_json::from_str(&json).unwrap();
    assert_eq!(back, response);
    // A code this client does not know is still an error.
    let newer = json.replace("not_found", "quota_exceeded");
    let back: Response = serde_json::from_str(&newer).unwrap();
    assert_eq!(back.result.unwrap_err().code, ErrorCode::Unknown);
}

#[test]
fn leaf_qdisc_commands_are_typed_on_the_wire() {
    let spec = LeafSpec::FqCodel(htb_core::FqCodelSpec {
        target: Some(htb_core::Duration::from_millis(10)),
        ecn: Some(false),
        ..htb_core::FqCodelSpec::default()
    });
    let command = Command::LeafAdd(Box::new(LeafQdiscSpec {
        dev: dev("r2"),
        parent: Some(ClassId::new(1, 0x10)),
        handle: Some(ClassId::new(0x10, 0)),
        leaf: spec,
        stab: None,
    }));
    let json = serde_json::to_string(&command).unwrap();
    assert_eq!(
        json,
        r#"{"op":"leaf_add","dev":"r2","parent":"1:10","handle":"10:","leaf":{"kind":"fq_codel","limit":null,"flows":null,"target":10000000,"interval":null,"quantum":null,"ecn":false,"ce_threshold":null,"memory_limit":null,"drop_batch":null}}"#
    );
    assert_eq!(serde_json::from_str::<Command>(&json).unwrap(), command);
    // A size table travels as tc's options, the link layer by its name.
    let stab = Command::QdiscAdd(Box::new(QdiscSpec {
        stab: Some(SizeSpec {
            overhead: 34,
            link_layer: Some(LinkLayer::Ethernet),
            ..SizeSpec::default()
        }),
        ..QdiscSpec::new(dev("r2"))
    }));
    let stab_json = serde_json::to_string(&stab).unwrap();
    assert!(
        stab_json
            .contains(r#""stab":{"overhead":34,"mpu":0,"mtu":0,"tsize":0,"linklayer":"ethernet"}"#),
        "{stab_json}"
    );
    assert_eq!(serde_json::from_str::<Command>(&stab_json).unwrap(), stab);
    // Ids are checked where they are read.
    let bad = json.replace("\"1:10\"", "\"1:xyz\"");
    let e = serde_json::from_str::<Command>(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1:xyz"), "{e}");
    let short =
        r#"{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}"#;
    let Command::LeafAdd(l) = serde_json::from_str::<Command>(short).unwrap() else {
        panic!()
    };
    assert_eq!(
        l.leaf,
        LeafSpec::Sfq(htb_core::SfqSpec {
            perturb: Some(10),
            ..htb_core::SfqSpec::default()
        })
    );
}

#[test]
fn oversized_and_truncated_frames_are_refused() {
    let mut huge = (MAX_MESSAGE_BYTES + 1).to_be_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(matches!(
        read_frame::<Request>(&mut huge.as_slice()),
        Err(FrameError::TooLarge(n)) if n == MAX_MESSAGE_BYTES + 1
    ));
    assert!(matches!(
        read_frame::<Request>(&mut [].as_slice()),
        Err(FrameError::Closed)
    ));
    let mut short = 10u32.to_be_bytes().to_vec();
    short.extend_from_slice(b"{\"ver");
    assert!(matches!(
        read_frame::<Request>(&mut short.as_slice()),
        Err(FrameError::Io(_))
    ));
    let mut garbage = 5u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(b"hello");
    assert!(matches!(
        read_frame::<Request>(&mut garbage.as_slice()),
        Err(FrameError::Json(_))
    ));
}

/// The operator's split choice is a typed value on the wire: `"split"`, `"owned"` or none;
/// anything else is refused as it is read.
#[test]
fn a_split_choice_is_typed_on_the_wire() {
    let read = |choice: &str| {
        serde_json::from_str::<Command>(&format!(
            r#"{{"op":"class_split","dev":"r2","id":"1:10"{choice}}}"#
        ))
    };
    for (given, want) in [
        (r#","choice":"split""#, Some(SplitChoice::Split)),
        (r#","choice":"owned""#, Some(SplitChoice::Owned)),
        ("", None),
    ] {
        let command = read(given).unwrap();
        assert_eq!(
            command,
            Command::ClassSplit(SplitSpec {
                dev: dev("r2"),
                id: ClassId::new(1, 0x10),
                choice: want,
            })
        );
        let written = serde_json::to_string(&command).unwrap();
        assert_eq!(serde_json::from_str::<Command>(&written).unwrap(), command);
    }
    for bad in [
        r#","choice":"yes""#,
        r#","choice":true"#,
        r#","split":"split""#,
    ] {
        assert!(read(bad).is_err(), "{bad}");
    }
}

/// A batch holds millions of commands: each is the size of the largest variant, so the large
/// specs are boxed (the journal's and the wire's JSON are the same: `Box<T>` reads and writes
/// as `T`, which the round trips above check).
#[test]
fn a_command_is_small() {
    assert!(size_of::<Command>() <= 64, "{}", size_of::<Command>());
    assert!(size_of::<ClassSpec>() > 64 && size_of::<FilterSpec>() > 64);
    println!("Command: {} bytes", size_of::<Command>());
}

/// A label is written from its fields (no copy) as `ClassLabel` writes itself, and the frame's
/// body is the message's JSON after its length.
#[test]
fn a_label_command_is_written_as_its_label_writes_itself() {
    let label: ClassLabel = serde_json::from_value(serde_json::json!({
        "name": "Ann \"A\" O'Neil",
        "circuit": "17",
        "devices": [{ "id": "d1", "mac": "00:1a:2b:3c:4d:5e", "addresses": ["10.0.3.7/32"] }],
    }))
    .unwrap();
    let spec = LabelSpec {
        dev: dev("r2"),
        id: ClassId::new(1, 0x10),
        label: Some(label.clone()),
    };
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(json["label"], serde_json::to_value(&label).unwrap());
    assert_eq!(
        serde_json::from_value::<LabelSpec>(json).unwrap(),
        spec,
        "read back"
    );
    let none = LabelSpec {
        label: None,
        ..spec
    };
    assert_eq!(
        serde_json::to_string(&none).unwrap(),
        r#"{"dev":"r2","id":"1:10"}"#
    );
    let request = Request::new(RequestBody::Apply {
        commands: vec![Command::ClassLabel(Box::new(none))],
    });
    let frame = encode(&request).unwrap();
    assert_eq!(frame[4..], serde_json::to_vec(&request).unwrap());
    assert_eq!(
        body_len(frame[..4].try_into().unwrap()).unwrap(),
        frame.len() - 4
    );
}
