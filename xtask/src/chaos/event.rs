//! One line of the manager's JSON log (`--log-format json`, flattened events), read without a
//! JSON library: the top-level string, number and literal members; nested values are skipped.

use std::collections::BTreeMap;
use std::fmt;

/// A log event: its top-level scalar members, or the raw line when it is not JSON (a panic).
#[derive(Debug, Clone, Default)]
pub struct Event {
    fields: BTreeMap<String, String>,
    raw: String,
}

impl Event {
    /// Parses one line.
    pub fn parse(line: &str) -> Self {
        Self {
            fields: members(line).unwrap_or_default(),
            raw: line.to_owned(),
        }
    }

    /// A member as text (strings unescaped, numbers as written).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// A numeric member.
    pub fn number(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    /// The `message` member.
    pub fn message(&self) -> &str {
        self.get("message").unwrap_or("")
    }

    /// Whether the line is not a JSON object (e.g. a panic message).
    pub fn is_raw(&self) -> bool {
        self.fields.is_empty()
    }

    /// The line as logged.
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

fn members(line: &str) -> Option<BTreeMap<String, String>> {
    let mut chars = line.trim().chars().peekable();
    if chars.next()? != '{' {
        return None;
    }
    let mut fields = BTreeMap::new();
    loop {
        skip_space(&mut chars);
        match chars.next()? {
            '}' => return Some(fields),
            ',' => continue,
            '"' => {}
            _ => return None,
        }
        let key = string(&mut chars)?;
        skip_space(&mut chars);
        if chars.next()? != ':' {
            return None;
        }
        skip_space(&mut chars);
        match *chars.peek()? {
            '"' => {
                chars.next();
                fields.insert(key, string(&mut chars)?);
            }
            '{' | '[' => skip_nested(&mut chars)?,
            _ => {
                let mut value = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '}' || c.is_whitespace() {
                        break;
                    }
                    value.push(c);
                    chars.next();
                }
                fields.insert(key, value);
            }
        }
    }
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn skip_space(chars: &mut Chars) {
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
}

/// The rest of a string whose opening quote was read.
fn string(chars: &mut Chars) -> Option<String> {
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?).unwrap_or('?'));
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
}

fn skip_nested(chars: &mut Chars) -> Option<()> {
    let mut depth = 0usize;
    loop {
        match chars.next()? {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            '"' => {
                string(chars)?;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_members_and_skips_nested_ones() {
        let event = Event::parse(
            r#"{"timestamp":"t","level":"WARN","error":"a \"b\"\n","retry_in_seconds":4,"span":{"x":"}"},"spans":[{"a":1}],"message":"tick skipped"}"#,
        );
        assert_eq!(event.message(), "tick skipped");
        assert_eq!(event.get("error"), Some("a \"b\"\n"));
        assert_eq!(event.number("retry_in_seconds"), Some(4));
        assert_eq!(event.get("span"), None);
        assert!(Event::parse("thread 'main' panicked at x").is_raw());
    }
}
