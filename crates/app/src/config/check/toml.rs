//! TOML items as JSON (for the structs' own `Deserialize`) and offsets as lines.

use serde_json::Value;
use toml_edit::{Item, TableLike};

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// A TOML item as JSON, for the structs' own `Deserialize`.
pub fn to_json(item: &Item) -> Value {
    match item {
        Item::None => Value::Null,
        Item::Value(value) => value_json(value),
        Item::Table(table) => table_json(table),
        Item::ArrayOfTables(array) => Value::Array(array.iter().map(|t| table_json(t)).collect()),
    }
}

fn table_json(table: &dyn TableLike) -> Value {
    Value::Object(
        table
            .iter()
            .map(|(k, item)| (k.to_owned(), to_json(item)))
            .collect(),
    )
}

fn value_json(value: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), value_json(v)))
                .collect(),
        ),
    }
}
