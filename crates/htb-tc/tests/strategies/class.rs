//! Class commands: htb classes, their deletion, their labels.

use super::*;

fn class_spec() -> BoxedStrategy<ClassSpec> {
    (
        (
            dev(),
            class_id(),
            proptest::option::of(class_id()),
            rate(),
            proptest::option::of(rate()),
            proptest::option::of(0u64..=u64::from(u32::MAX)),
            proptest::option::of(0u64..=u64::from(u32::MAX)),
        ),
        (
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(link_layer()),
        ),
    )
        .prop_map(
            |(
                (dev, id, parent, rate, ceil, burst, cburst),
                (prio, quantum, mtu, overhead, mpu, linklayer),
            )| ClassSpec {
                dev,
                id,
                parent,
                rate,
                ceil,
                burst,
                cburst,
                prio,
                quantum,
                mtu,
                overhead,
                mpu,
                linklayer,
            },
        )
        .boxed()
}

fn text() -> BoxedStrategy<LabelText> {
    // Texts with either kind of quote (not both: a tc line cannot carry that).
    prop_oneof![
        "[A-Za-z0-9 .-]{1,12}",
        "[A-Za-z' ]{1,8}",
        "[A-Za-z\" ]{1,8}"
    ]
    .prop_filter_map("a label text", |s| s.parse().ok())
    .boxed()
}

fn label() -> BoxedStrategy<Option<ClassLabel>> {
    let device = (
        text(),
        proptest::option::of(text()),
        proptest::option::of(any::<[u8; 6]>()),
        proptest::collection::vec(prop_oneof![prefix(false), prefix(true)], 0..3),
    )
        .prop_map(|(id, name, mac, addresses)| Device {
            id,
            name,
            mac: mac.map(|m| {
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
                    .parse::<MacAddr>()
                    .expect("six bytes are a MAC")
            }),
            addresses,
        });
    (
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::collection::vec(device, 0..3),
    )
        .prop_map(|(name, circuit, comment, devices)| {
            ClassLabel::new(LabelFields {
                name,
                circuit,
                comment,
                devices,
            })
            .ok()
        })
        .boxed()
}

pub(super) fn class_command() -> BoxedStrategy<Command> {
    prop_oneof![
        class_spec().prop_map(|s| Command::ClassAdd(Box::new(s))),
        class_spec().prop_map(|s| Command::ClassChange(Box::new(s))),
        class_spec().prop_map(|s| Command::ClassReplace(Box::new(s))),
        (dev(), class_id()).prop_map(|(dev, id)| Command::ClassDelete(ClassDelete { dev, id })),
        (dev(), class_id(), label()).prop_map(|(dev, id, label)| Command::ClassLabel(Box::new(
            LabelSpec { dev, id, label }
        ))),
    ]
    .boxed()
}
