//! `class label dev D classid C [name N] [circuit ID] [comment T] [device ID [name N] [mac M]
//! [address A]…]…` (htbd's, not tc's): who a class shapes. With nothing after the class, the
//! label goes. Each text is checked as it is read (`htb_ipc::LabelText`), so a bad one is a
//! usage error here, not a refusal from htbd.

use htb_ipc::{ClassLabel, Command, Device, LabelFields, LabelSpec, LabelText, MacAddr};

use crate::action::Action;
use crate::args::{Args, Result, class_id, interface, usage};
use crate::words::{self, Words, WriteError};

/// `htb-cli class label help`.
pub(super) const USAGE: &str = "\
Usage: htb-cli class label dev STRING classid CLASSID [ name TEXT ] [ circuit TEXT ]
       [ comment TEXT ] [ device TEXT [ name TEXT ] [ mac MAC ] [ address PREFIX ]... ]...
 name     who the class shapes (a subscriber, \"uplink\")
 circuit  the subscriber's circuit id (LibreQoS's Circuit ID)
 device   a device of the circuit; its name, MAC and addresses follow it
Nothing after the class takes its label away. Quote texts with spaces (\"Ann O'Neil\").";

fn text(value: &str, what: &str) -> Result<LabelText> {
    value
        .parse()
        .or_else(|e| usage(format!("Illegal \"{what}\": {e}")))
}

/// Parses the words after `class label`.
pub(super) fn parse(words: &[String]) -> Result<Action> {
    let mut a = Args::new(words);
    let (mut dev, mut id) = (None, None);
    let mut fields = LabelFields::default();
    while let Some(w) = a.next() {
        // A device's own words follow it; `name` after a device is the device's.
        let device = fields.devices.last_mut();
        match (w, device) {
            ("dev", _) => dev = Some(interface(a.value()?)?),
            ("classid", _) => id = Some(class_id(a.value()?, "classid")?),
            ("name", Some(d)) => d.name = Some(text(a.value()?, "name")?),
            ("name", None) => fields.name = Some(text(a.value()?, "name")?),
            ("circuit", _) => fields.circuit = Some(text(a.value()?, "circuit")?),
            ("comment", _) => fields.comment = Some(text(a.value()?, "comment")?),
            ("device", _) => fields.devices.push(Device {
                id: text(a.value()?, "device")?,
                name: None,
                mac: None,
                addresses: Vec::new(),
            }),
            ("mac", Some(d)) => {
                let v = a.value()?;
                d.mac = Some(
                    v.parse::<MacAddr>()
                        .or_else(|e| usage(format!("Illegal \"mac\": {e}")))?,
                );
            }
            ("address", Some(d)) => {
                let v = a.value()?;
                d.addresses.push(
                    v.parse()
                        .or_else(|e| usage(format!("Illegal \"address\" {v:?}: {e}")))?,
                );
            }
            ("mac" | "address", None) => {
                return usage(format!("\"{w}\" belongs to a device: device ID {w} …"));
            }
            ("help", _) => return Ok(Action::Help(USAGE)),
            (other, _) => {
                return usage(format!(
                    "What is \"{other}\"? Try \"htb-cli class label help\"."
                ));
            }
        }
    }
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    let Some(id) = id else {
        return usage("Must specify classid (classid MAJ:MIN).");
    };
    let label = if fields == LabelFields::default() {
        None
    } else {
        Some(ClassLabel::new(fields).or_else(|e| usage(e.to_string()))?)
    };
    Ok(Action::Change(Command::ClassLabel(Box::new(LabelSpec {
        dev,
        id,
        label,
    }))))
}

/// `label dev D classid C …`'s words (after `class`): the label's own words, as the one
/// writer of them ([`ClassLabel::words`]) quotes them.
pub(crate) fn write(l: &LabelSpec, w: &mut Words) -> words::Result<()> {
    w.word("label");
    w.dev(&l.dev)?;
    w.pair("classid", l.id);
    if let Some(label) = &l.label {
        let words = label.words().ok_or_else(|| {
            WriteError::Unquotable(format!("a text of the label of class {}", l.id))
        })?;
        w.words(&words);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_command, split_line};

    fn label(line: &str) -> Result<LabelSpec> {
        match parse_command(&split_line(line))? {
            Action::Change(Command::ClassLabel(l)) => Ok(*l),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_a_circuit_and_prints_it_back() {
        let line = "class label dev eth0 classid 1:10 name \"Ann O'Neil\" circuit C-17 \
                    device D-1 name 'the \"big\" router' mac 00:1A:2b:3c:4d:5e \
                    address 10.0.3.7 address 2001:db8::/64 device D-2";
        let l = label(line).unwrap();
        assert_eq!(
            (l.dev.as_str(), l.id.to_string().as_str()),
            ("eth0", "1:10")
        );
        let label = l.label.unwrap();
        let f = label.fields();
        assert_eq!(f.name.as_ref().unwrap().as_str(), "Ann O'Neil");
        assert_eq!(f.devices.len(), 2);
        assert_eq!(
            f.devices[0].name.as_ref().unwrap().as_str(),
            "the \"big\" router"
        );
        // Its words read back to the same label.
        let again = label_words(&label);
        assert_eq!(again, label);
    }

    fn label_words(l: &ClassLabel) -> ClassLabel {
        let line = format!("class label dev eth0 classid 1:10 {}", l.words().unwrap());
        label(&line).unwrap().label.unwrap()
    }

    #[test]
    fn nothing_after_the_class_takes_the_label_away() {
        assert_eq!(
            label("class label dev eth0 classid 1:10").unwrap().label,
            None
        );
    }

    #[test]
    fn bad_words_are_usage_errors() {
        for (line, says) in [
            (
                "class label dev eth0 classid 1:10 mac 00:11:22:33:44:55",
                "belongs to a device",
            ),
            (
                "class label dev eth0 classid 1:10 device a mac 00:11",
                "Illegal \"mac\"",
            ),
            (
                "class label dev eth0 classid 1:10 device a address 10.0.0.300",
                "Illegal \"address\"",
            ),
            ("class label dev eth0 classid 1:10 name", "not complete"),
            (
                "class label dev eth0 classid 1:10 colour red",
                "What is \"colour\"",
            ),
            ("class label classid 1:10 name x", "Must specify device"),
            ("class label dev eth0 name x", "Must specify classid"),
        ] {
            let e = label(line).unwrap_err();
            assert!(e.0.contains(says), "{line}: {e}");
        }
        let long = format!("class label dev e classid 1:1 name {}", "x".repeat(300));
        assert!(label(&long).unwrap_err().0.contains("too long"));
    }
}
