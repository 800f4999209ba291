//! Reading the messages that carry many items without serde's buffering: a batch's commands,
//! a page of `show`, a batch's results.
//!
//! `RequestBody`, `Command` and `ReplyBody` are internally tagged (`"type"`, `"op"`). serde's
//! derived reader for such an enum cannot know the variant before it has read the tag, so it
//! first copies the whole object into a buffer of its own (`Content`) and reads the variant
//! from that. For a `stage` or `apply` request it does that twice: the whole list, then each
//! command. With a million subscribers that copy was the largest cost of an import in htbd
//! (more than the model's own work), and in htb-cli of reading the running state.
//!
//! Every writer of this crate puts the tag first (serde writes it first). When it comes first,
//! the readers here read it, then the rest of the object straight into the variant's own
//! struct, with that struct's checks (`deny_unknown_fields` among them). Any other order, and
//! every other variant, goes through the derived reader, so what is accepted and what is
//! refused does not change.

use std::fmt;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::{
    ClassDelete, ClassSpec, Command, CommandResult, FilterDelete, FilterSpec, IpcError, LabelSpec,
    ReplyBody, RequestBody, Shown,
};

/// `Request.request`.
pub(crate) fn request_body<'de, D: Deserializer<'de>>(d: D) -> Result<RequestBody, D::Error> {
    d.deserialize_map(BodyVisitor)
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = RequestBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request object with its \"type\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestBody, A::Error> {
        let kind = match leading_tag(&mut map, "type")? {
            Ok(kind) => kind,
            Err(body) => return Ok(body),
        };
        if kind != "apply" && kind != "stage" {
            return derived_variant(map, "type", kind);
        }
        let mut commands = None;
        while let Some(field) = map.next_key::<String>()? {
            if field != "commands" {
                return Err(de::Error::unknown_field(&field, &["commands"]));
            }
            if commands.is_some() {
                return Err(de::Error::duplicate_field("commands"));
            }
            commands = Some(map.next_value_seed(Commands)?);
        }
        let commands = commands.ok_or_else(|| de::Error::missing_field("commands"))?;
        Ok(if kind == "apply" {
            RequestBody::Apply { commands }
        } else {
            RequestBody::Stage { commands }
        })
    }
}

/// A list of commands (a request's, a journal line's), each read as `tagged` says: for
/// `#[serde(deserialize_with = "htb_ipc::deserialize_commands")]`.
///
/// # Errors
/// As the derived reader of `Vec<Command>`.
pub fn deserialize_commands<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Command>, D::Error> {
    Commands.deserialize(d)
}

/// A list of commands, each read by [`CommandSeed`].
struct Commands;

impl<'de> DeserializeSeed<'de> for Commands {
    type Value = Vec<Command>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Command>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Commands {
    type Value = Vec<Command>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of commands")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Command>, A::Error> {
        let mut commands = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(command) = seq.next_element_seed(CommandSeed)? {
            commands.push(command);
        }
        Ok(commands)
    }
}

/// One command: the variants a large batch is made of read directly, the others derived.
struct CommandSeed;

impl<'de> DeserializeSeed<'de> for CommandSeed {
    type Value = Command;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Command, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for CommandSeed {
    type Value = Command;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a command object with its \"op\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Command, A::Error> {
        let op = match leading_tag(&mut map, "op")? {
            Ok(op) => op,
            Err(command) => return Ok(command),
        };
        // The rest of the object, read straight into the variant's struct.
        let read: fn(MapAccessDeserializer<A>) -> Result<Command, A::Error> = match op.as_str() {
            "class_add" => |f| Box::<ClassSpec>::deserialize(f).map(Command::ClassAdd),
            "class_change" => |f| Box::<ClassSpec>::deserialize(f).map(Command::ClassChange),
            "class_replace" => |f| Box::<ClassSpec>::deserialize(f).map(Command::ClassReplace),
            "class_delete" => |f| ClassDelete::deserialize(f).map(Command::ClassDelete),
            "filter_add" => |f| Box::<FilterSpec>::deserialize(f).map(Command::FilterAdd),
            "filter_change" => |f| Box::<FilterSpec>::deserialize(f).map(Command::FilterChange),
            "filter_replace" => |f| Box::<FilterSpec>::deserialize(f).map(Command::FilterReplace),
            "filter_delete" => |f| FilterDelete::deserialize(f).map(Command::FilterDelete),
            "class_label" => |f| Box::<LabelSpec>::deserialize(f).map(Command::ClassLabel),
            _ => return derived_variant(map, "op", op),
        };
        read(MapAccessDeserializer::new(map))
    }
}

/// `Response.result`: serde's `{"Ok": …}` or `{"Err": …}`, the answer read by [`ReplySeed`].
pub(crate) fn reply_result<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Result<ReplyBody, IpcError>, D::Error> {
    d.deserialize_map(ResultVisitor)
}

struct ResultVisitor;

impl<'de> Visitor<'de> for ResultVisitor {
    type Value = Result<ReplyBody, IpcError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{\"Ok\": an answer} or {\"Err\": an error}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const VARIANTS: &[&str] = &["Ok", "Err"];
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        let result = match key.as_str() {
            "Ok" => Ok(map.next_value_seed(ReplySeed)?),
            "Err" => Err(map.next_value::<IpcError>()?),
            other => return Err(de::Error::unknown_variant(other, VARIANTS)),
        };
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(2, &self));
        }
        Ok(result)
    }
}

/// An answer: `shown` and `applied` read directly, the others derived.
struct ReplySeed;

impl<'de> DeserializeSeed<'de> for ReplySeed {
    type Value = ReplyBody;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ReplyBody, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReplySeed {
    type Value = ReplyBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an answer object with its \"type\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReplyBody, A::Error> {
        let kind = match leading_tag(&mut map, "type")? {
            Ok(kind) => kind,
            Err(reply) => return Ok(reply),
        };
        match kind.as_str() {
            "shown" => Ok(ReplyBody::Shown(Shown::deserialize(
                MapAccessDeserializer::new(map),
            )?)),
            "applied" => {
                // As the derived reader: unknown fields are passed over (answers may grow).
                let mut results = None;
                while let Some(field) = map.next_key::<String>()? {
                    if field == "results" {
                        if results.is_some() {
                            return Err(de::Error::duplicate_field("results"));
                        }
                        results = Some(map.next_value::<Vec<CommandResult>>()?);
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                let results = results.ok_or_else(|| de::Error::missing_field("results"))?;
                Ok(ReplyBody::Applied { results })
            }
            _ => derived_variant(map, "type", kind),
        }
    }
}

/// Reads an object's first entry. When its key is `tag`, gives back the tag's value (the
/// variant), the rest of the object still in `map`; otherwise the whole object read by `T`'s
/// derived reader, which finds the tag wherever it is.
fn leading_tag<'de, A: MapAccess<'de>, T: de::DeserializeOwned>(
    map: &mut A,
    tag: &str,
) -> Result<Result<String, T>, A::Error> {
    let Some(key) = map.next_key::<String>()? else {
        return derived(Map::new()).map(Err);
    };
    if key != tag {
        let first = map.next_value::<Value>()?;
        return derived(rest(map, key, first)?).map(Err);
    }
    map.next_value::<String>().map(Ok)
}

/// The object whose first entry was `tag: variant`, the rest still in `map`, read by `T`'s
/// derived reader (a variant that is not read directly).
fn derived_variant<'de, A: MapAccess<'de>, T: de::DeserializeOwned>(
    map: A,
    tag: &str,
    variant: String,
) -> Result<T, A::Error> {
    derived(rest(map, tag.to_owned(), Value::String(variant))?)
}

/// The object whose first entry was `key: first`, the rest still in `map`.
fn rest<'de, A: MapAccess<'de>>(
    mut map: A,
    key: String,
    first: Value,
) -> Result<Map<String, Value>, A::Error> {
    let mut object = Map::new();
    object.insert(key, first);
    while let Some(key) = map.next_key::<String>()? {
        let value = map.next_value::<Value>()?;
        if object.insert(key.clone(), value).is_some() {
            return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
        }
    }
    Ok(object)
}

/// `object` read by the derived reader of `T`.
fn derived<T: de::DeserializeOwned, E: de::Error>(object: Map<String, Value>) -> Result<T, E> {
    T::deserialize(Value::Object(object)).map_err(E::custom)
}
