//! Size strings as CodaLab writes them (`512m`, `4g`, `1.5t`, bare bytes).
//!
//! This follows `codalab.lib.formatting.parse_size`: a number with an optional unit `k`, `m`,
//! `g` or `t` (case-insensitive, powers of 1024), fractions allowed before a unit. Unlike
//! upstream, an empty string means 0 (bundles that did not ask for memory carry `""`).

use std::fmt;

/// A size string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size `{input}`: expected <number>[k|m|g|t], e.g. `512m` or `4g`")]
pub struct SizeError {
    /// The text that was given.
    pub input: String,
}

/// Parses a CodaLab size string into bytes.
///
/// ```
/// use codalab_wm_backend::size::parse_size;
/// assert_eq!(parse_size("4g").unwrap(), 4 * 1024 * 1024 * 1024);
/// assert_eq!(parse_size("").unwrap(), 0);
/// ```
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let error = || SizeError {
        input: input.to_owned(),
    };
    let text = input.trim();
    let Some(last) = text.chars().last() else {
        return Ok(0);
    };
    if last.is_ascii_digit() {
        return text.parse::<u64>().map_err(|_| error());
    }
    let multiplier: u64 = match last.to_ascii_lowercase() {
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        't' => 1 << 40,
        _ => return Err(error()),
    };
    let number = &text[..text.len() - 1];
    let value: f64 = number.trim().parse().map_err(|_| error())?;
    if !value.is_finite() || value < 0.0 {
        return Err(error());
    }
    let bytes = value * multiplier as f64;
    if bytes >= u64::MAX as f64 {
        return Err(error());
    }
    Ok(bytes as u64)
}

/// Bytes printed the way people read them (`2.0 GiB`), for log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanBytes(pub u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < UNITS.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.1} {}", UNITS[unit])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_like_codalab() {
        let cases: &[(&str, Option<u64>)] = &[
            ("", Some(0)),
            ("0", Some(0)),
            ("1024", Some(1024)),
            ("512m", Some(512 << 20)),
            ("512M", Some(512 << 20)),
            ("4g", Some(4 << 30)),
            ("1.5t", Some(3 << 39)),
            ("2k", Some(2048)),
            ("0.5g", Some(512 << 20)),
            (" 4g ", Some(4 << 30)),
            ("4gb", None),
            ("g", None),
            ("abc", None),
            ("-1g", None),
            ("1e400g", None),
            ("4x", None),
            ("1.5", None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_size(input).ok(), *expected, "input {input:?}");
        }
    }

    #[test]
    fn error_names_the_input() {
        let err = parse_size("lots").unwrap_err();
        assert!(err.to_string().contains("`lots`"), "{err}");
    }

    #[test]
    fn human_bytes() {
        assert_eq!(HumanBytes(512).to_string(), "512 B");
        assert_eq!(HumanBytes(2 << 30).to_string(), "2.0 GiB");
    }
}
