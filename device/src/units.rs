//! Sizes and times written the way fio writes them. Every command and every
//! job-file key goes through these two parsers, so `4k` means the same
//! thing everywhere.
//!
//! Sizes: a number with an optional suffix `k`, `m`, `g`, `t` or `p`, which
//! may be followed by `i`, `b` or `ib`, in any case; every suffix is a power
//! of 1024 (fio's default `kb_base=1024`). A bare `b` means bytes.
//!
//! Times: a number of seconds, or a number with `us`, `ms`, `s`, `m`
//! (minutes), `h` or `d`; `usec` and `msec` are accepted as fio accepts them.
//!
//! Two deliberate differences from fio, both toward refusing rather than
//! guessing: fio reads `1.5k` as 1 byte (it stops at the `.`) and, in its
//! compatibility mode, `1KiB` as 1000 bytes; here `1.5k` is 1536 bytes and
//! `1KiB` is 1024. A value that is not a whole number of bytes (or of
//! nanoseconds) is an error, never rounded.

use std::fmt;
use std::time::Duration;

/// Why a size or time did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnitError {
    /// Not a number with a known suffix.
    Malformed {
        /// `"size"` or `"time"`.
        kind: &'static str,
        /// The text as given.
        input: String,
    },
    /// A fraction of a byte or of a nanosecond.
    Fraction {
        /// `"size"` or `"time"`.
        kind: &'static str,
        /// The text as given.
        input: String,
    },
    /// Larger than 2^64 bytes or nanoseconds.
    Overflow {
        /// `"size"` or `"time"`.
        kind: &'static str,
        /// The text as given.
        input: String,
    },
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::Malformed { kind: "size", .. } => write!(
                f,
                "not a size: use a number with an optional k, m, g, t or p suffix \
                 (powers of 1024; e.g. 4k, 1.5g, 2MiB)"
            ),
            UnitError::Malformed { .. } => write!(
                f,
                "not a time: use seconds, or a number with us, ms, s, m, h or d \
                 (e.g. 500ms, 2m)"
            ),
            UnitError::Fraction { kind: "size", .. } => write!(f, "not a whole number of bytes"),
            UnitError::Fraction { .. } => write!(f, "not a whole number of nanoseconds"),
            UnitError::Overflow { kind, .. } => write!(f, "too large for a {kind}"),
        }
    }
}

impl UnitError {
    /// The text that did not parse.
    pub fn input(&self) -> &str {
        match self {
            UnitError::Malformed { input, .. }
            | UnitError::Fraction { input, .. }
            | UnitError::Overflow { input, .. } => input,
        }
    }
}

/// A number split into its integer digits, fraction digits and suffix.
struct Number<'a> {
    int: &'a str,
    frac: &'a str,
    suffix: String,
}

/// Splits `s` into digits, an optional `.digits`, and a lower-case suffix.
fn split(s: &str) -> Option<Number<'_>> {
    let t = s.trim();
    let int_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (int, rest) = t.split_at(int_end);
    let (frac, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            r.split_at(end)
        }
        None => ("", rest),
    };
    if int.is_empty() {
        return None;
    }
    Some(Number {
        int,
        frac,
        suffix: rest.trim().to_ascii_lowercase(),
    })
}

/// `int.frac * mult`, exactly, or `None` if it has a fractional part.
/// `Err` on overflow of `u64`.
fn scale(n: &Number<'_>, mult: u128) -> Result<Option<u64>, ()> {
    // 38 digits fit u128; a longer integer part is out of range anyway, and
    // fraction digits beyond 18 cannot matter for multipliers below 2^60
    // unless they are non-zero, which is then a fraction of the unit.
    if n.int.len() > 20 {
        return Err(());
    }
    let int: u128 = n.int.parse().map_err(|_| ())?;
    let frac_digits = n.frac.trim_end_matches('0');
    if frac_digits.len() > 18 {
        return Ok(None);
    }
    let frac: u128 = if frac_digits.is_empty() {
        0
    } else {
        frac_digits.parse().map_err(|_| ())?
    };
    let den = 10u128.pow(frac_digits.len() as u32);
    let frac_scaled = frac * mult;
    if frac_scaled % den != 0 {
        return Ok(None);
    }
    let total = int
        .checked_mul(mult)
        .and_then(|v| v.checked_add(frac_scaled / den))
        .ok_or(())?;
    u64::try_from(total).map(Some).map_err(|_| ())
}

/// Parses a size in bytes: `512`, `4k`, `64M`, `1.5g`, `2MiB`, `1tb`.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let malformed = || UnitError::Malformed {
        kind: "size",
        input: s.to_string(),
    };
    let n = split(s).ok_or_else(malformed)?;
    let shift = match n.suffix.as_str() {
        "" | "b" => 0,
        other => {
            let mut chars = other.chars();
            let power = match chars.next() {
                Some('k') => 1,
                Some('m') => 2,
                Some('g') => 3,
                Some('t') => 4,
                Some('p') => 5,
                _ => return Err(malformed()),
            };
            if !matches!(chars.as_str(), "" | "i" | "b" | "ib") {
                return Err(malformed());
            }
            10 * power
        }
    };
    match scale(&n, 1u128 << shift) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(UnitError::Fraction {
            kind: "size",
            input: s.to_string(),
        }),
        Err(()) => Err(UnitError::Overflow {
            kind: "size",
            input: s.to_string(),
        }),
    }
}

/// Parses a time: seconds by default, or with a unit (`250ms`, `2m`).
pub fn parse_time(s: &str) -> Result<Duration, UnitError> {
    let malformed = || UnitError::Malformed {
        kind: "time",
        input: s.to_string(),
    };
    let n = split(s).ok_or_else(malformed)?;
    const SEC: u128 = 1_000_000_000;
    let nanos_per = match n.suffix.as_str() {
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "" | "s" => SEC,
        "m" => 60 * SEC,
        "h" => 3_600 * SEC,
        "d" => 86_400 * SEC,
        _ => return Err(malformed()),
    };
    match scale(&n, nanos_per) {
        Ok(Some(ns)) => Ok(Duration::from_nanos(ns)),
        Ok(None) => Err(UnitError::Fraction {
            kind: "time",
            input: s.to_string(),
        }),
        Err(()) => Err(UnitError::Overflow {
            kind: "time",
            input: s.to_string(),
        }),
    }
}

/// A byte count for people: exact below 1 KiB, else one decimal in the
/// largest unit that is at least 1 (`1.5 GiB`).
pub fn show_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut unit = 0;
    let mut scaled = b as f64 / 1024.0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    if scaled.fract() == 0.0 {
        format!("{scaled:.0} {}", UNITS[unit])
    } else {
        format!("{scaled:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_fio_suffixes_in_any_case() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512b"), Ok(512));
        for (s, v) in [
            ("4k", 4u64 << 10),
            ("4K", 4 << 10),
            ("4ki", 4 << 10),
            ("4kb", 4 << 10),
            ("4KiB", 4 << 10),
            ("64M", 64 << 20),
            ("1GiB", 1 << 30),
            ("1gb", 1 << 30),
            ("2t", 2 << 40),
            ("1P", 1 << 50),
            ("1.5k", 1536),
            ("0.5m", 512 << 10),
            (" 8k ", 8 << 10),
            ("8 k", 8 << 10),
        ] {
            assert_eq!(parse_size(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_not_rounded() {
        for s in [
            "", "x", "k", "4x", "4kk", "4kib2", "-1", "1.", ".5k", "1e3", "4 kx",
        ] {
            assert!(
                matches!(parse_size(s), Err(UnitError::Malformed { .. })),
                "{s}"
            );
        }
        assert!(matches!(
            parse_size("1.3k"),
            Err(UnitError::Fraction { .. })
        ));
        assert!(matches!(parse_size("0.5"), Err(UnitError::Fraction { .. })));
        assert!(matches!(
            parse_size("16385p"),
            Err(UnitError::Overflow { .. })
        ));
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(UnitError::Overflow { .. })
        ));
        assert_eq!(parse_size("16383p"), Ok(16383 << 50));
    }

    #[test]
    fn times_default_to_seconds_and_take_fio_units() {
        let ms = Duration::from_millis;
        assert_eq!(parse_time("2"), Ok(ms(2000)));
        assert_eq!(parse_time("0.2"), Ok(ms(200)));
        assert_eq!(parse_time("2s"), Ok(ms(2000)));
        assert_eq!(parse_time("250ms"), Ok(ms(250)));
        assert_eq!(parse_time("250MSEC"), Ok(ms(250)));
        assert_eq!(parse_time("1500us"), Ok(ms(1) + Duration::from_micros(500)));
        assert_eq!(parse_time("2m"), Ok(ms(120_000)));
        assert_eq!(parse_time("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_time("1d"), Ok(ms(86_400_000)));
        for s in ["", "s", "2y", "2 mins", "-1"] {
            assert!(
                matches!(parse_time(s), Err(UnitError::Malformed { .. })),
                "{s}"
            );
        }
        assert!(matches!(
            parse_time("0.0000000001"),
            Err(UnitError::Fraction { .. })
        ));
    }

    #[test]
    fn bytes_show_in_the_largest_unit() {
        assert_eq!(show_bytes(3), "3 B");
        assert_eq!(show_bytes(4096), "4 KiB");
        assert_eq!(show_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(show_bytes(100 << 40), "100 TiB");
    }
}
