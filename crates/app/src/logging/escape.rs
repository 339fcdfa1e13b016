//! Text logs escape control characters: a log line holds text the CodaLab server chose (error
//! bodies, bundle fields, user names), and a raw carriage return, newline or terminal escape
//! in it could forge log lines or drive the terminal of whoever reads the log. (The JSON
//! format escapes them already.)

use std::io::{self, Write};

/// Writes each formatted event with its control characters escaped as `\u{..}`, except the
/// final newline, tabs, and, when `ansi` is on, the SGR colour sequences the formatter itself
/// emits (`ESC [ digits ; … m`: colours only, which cannot move the cursor or erase).
#[derive(Debug)]
pub struct Escaping<W> {
    inner: W,
    ansi: bool,
}

impl<W: Write> Escaping<W> {
    /// Escaping what is written to `inner`; `ansi`: the formatter emits colour codes.
    pub fn new(inner: W, ansi: bool) -> Self {
        Self { inner, ansi }
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // The formatter hands over one whole event per `write_all`; escape it in one pass.
        let out = escape(&String::from_utf8_lossy(buf), self.ansi);
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `text` with its control characters escaped as `\u{..}`, except tabs, a final newline and,
/// with `ansi`, SGR colour sequences.
pub fn escape(text: &str, ansi: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let last = chars.peek().is_none();
        let sgr = if c == '\u{1b}' && ansi {
            sgr_length(&text[at..])
        } else {
            0
        };
        if !c.is_control() || c == '\t' || (c == '\n' && last) {
            out.push(c);
        } else if sgr > 0 {
            out.push_str(&text[at..at + sgr]);
            for _ in 1..sgr {
                chars.next();
            }
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out
}

/// A multi-line message (an error's chain, a config file's problems one a line) for the
/// terminal: each line [`escape`]d, and every later line indented, so that none passes for a
/// line of its own (`INFO …`) though the text may quote a server.
pub fn escape_lines(text: &str) -> String {
    let lines = text.lines().enumerate().map(|(i, line)| {
        let line = escape(line, false);
        match i == 0 || line.starts_with(' ') {
            true => line,
            false => format!("  {line}"),
        }
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// The length of the SGR sequence `ESC [ [0-9;]* m` at the start of `text`, 0 if none.
fn sgr_length(text: &str) -> usize {
    let bytes = text.as_bytes();
    if bytes.len() < 3 || bytes[0] != 0x1b || bytes[1] != b'[' {
        return 0;
    }
    let params = bytes[2..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';')
        .count();
    match bytes.get(2 + params) {
        Some(b'm') => 3 + params,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str, ansi: bool) -> String {
        let mut writer = Escaping::new(Vec::new(), ansi);
        writer.write_all(text.as_bytes()).unwrap();
        String::from_utf8(writer.inner).unwrap()
    }

    #[test]
    fn control_characters_are_escaped_except_the_final_newline() {
        assert_eq!(
            escaped("WARN x: boom\r\nINFO forged\u{1b}[2J\u{7}\n", false),
            "WARN x: boom\\u{d}\\u{a}INFO forged\\u{1b}[2J\\u{7}\n"
        );
        assert_eq!(escaped("a\tb\n", false), "a\tb\n");
        assert_eq!(escaped("\u{9b}31m\n", false), "\\u{9b}31m\n");
    }

    #[test]
    fn lines_stay_lines_and_none_passes_for_a_line_of_its_own() {
        assert_eq!(
            escape_lines("bad file:\n  wm.toml:1: x\nINFO forged\u{1b}[2J"),
            "bad file:\n  wm.toml:1: x\n  INFO forged\\u{1b}[2J"
        );
    }

    #[test]
    fn colour_sequences_stay_when_ansi_is_on_and_nothing_else_does() {
        assert_eq!(
            escaped(
                "\u{1b}[2m2026\u{1b}[0m \u{1b}[33mWARN\u{1b}[0m \u{1b}[2J\n",
                true
            ),
            "\u{1b}[2m2026\u{1b}[0m \u{1b}[33mWARN\u{1b}[0m \\u{1b}[2J\n"
        );
        assert_eq!(escaped("\u{1b}[31m\n", false), "\\u{1b}[31m\n");
    }
}
