//! Volume device names: a mirror or a stripe of other devices, named in
//! one string wherever a device is named.
//!
//! ```text
//! DEVICE := LEAF | mirror:(LEG,LEG[,LEG...]) | stripe:[CHUNK:](LEG,LEG[,LEG...])
//! LEG    := LEAF, with `\` before any `,` `(` `)` or `\` it contains
//! CHUNK  := a size, a multiple of 4 KiB (64k when left out)
//! ```
//!
//! A leaf is any single device (`emu`, `ram`, `file:PATH`, `vfio:ADDR`,
//! and whatever device forms come later): the legs are split at the
//! commas that are outside parentheses and not escaped, so a leg's own
//! syntax never matters. `mirror:(file:/a,file:/b)`,
//! `stripe:128k:(emu,emu,emu)`, `mirror:(file:/data/x\,y,vfio:0000:01:00.0)`.
//! A leaf given alone (not as a leg) is taken as it is, with no escapes.

use std::fmt;

use crate::units::parse_size;

/// Chunk size of a stripe that names none.
pub const DEFAULT_CHUNK: u64 = 64 << 10;

/// A parsed device name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A single device, by its own name.
    Leaf(String),
    /// RAID-1 over the legs.
    Mirror(Vec<Spec>),
    /// RAID-0 over the legs in chunks of `chunk` bytes.
    Stripe {
        /// Bytes per chunk.
        chunk: u64,
        /// The legs, in layout order.
        legs: Vec<Spec>,
    },
}

/// True if `s` names a volume (and should be parsed with [`parse`]).
pub fn is_volume(s: &str) -> bool {
    s.starts_with("mirror:") || s.starts_with("stripe:")
}

/// Parses a device name.
pub fn parse(s: &str) -> Result<Spec, String> {
    if let Some(rest) = s.strip_prefix("mirror:") {
        let legs = legs(rest).map_err(|e| format!("{s}: {e}"))?;
        if legs.len() < 2 {
            return Err(format!("{s}: a mirror needs at least two legs"));
        }
        return Ok(Spec::Mirror(legs));
    }
    if let Some(rest) = s.strip_prefix("stripe:") {
        let (chunk, rest) = match rest.split_once(':') {
            Some((c, legs)) if !rest.starts_with('(') => {
                let chunk = parse_size(c).map_err(|e| format!("{s}: chunk size: {e}"))?;
                (chunk, legs)
            }
            _ => (DEFAULT_CHUNK, rest),
        };
        if chunk == 0 || chunk % 4096 != 0 {
            return Err(format!("{s}: the chunk size must be a multiple of 4k"));
        }
        let legs = legs(rest).map_err(|e| format!("{s}: {e}"))?;
        if legs.is_empty() {
            return Err(format!("{s}: a stripe needs legs"));
        }
        return Ok(Spec::Stripe { chunk, legs });
    }
    if s.is_empty() {
        return Err("an empty device name".to_string());
    }
    Ok(Spec::Leaf(s.to_string()))
}

/// Splits `(LEG,LEG,...)` into legs.
fn legs(s: &str) -> Result<Vec<Spec>, String> {
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or("expected the legs in parentheses: (LEG,LEG,...)")?;
    let mut legs = Vec::new();
    let mut raw = String::new();
    let (mut depth, mut escaped) = (0u32, false);
    for c in inner.chars() {
        if escaped {
            raw.push('\\');
            raw.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '(' => {
                depth += 1;
                raw.push(c);
            }
            ')' => {
                depth = depth.checked_sub(1).ok_or("a `)` with no `(`")?;
                raw.push(c);
            }
            ',' if depth == 0 => legs.push(leg(&std::mem::take(&mut raw))?),
            _ => raw.push(c),
        }
    }
    if escaped {
        return Err("a `\\` at the end of a leg".to_string());
    }
    if depth != 0 {
        return Err("a `(` with no `)`".to_string());
    }
    legs.push(leg(&raw)?);
    Ok(legs)
}

/// One leg: a volume, or a leaf with its escapes undone.
fn leg(raw: &str) -> Result<Spec, String> {
    if raw.is_empty() {
        return Err("an empty leg".to_string());
    }
    if is_volume(raw) {
        return parse(raw);
    }
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            _ => out.push(c),
        }
    }
    Ok(Spec::Leaf(out))
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if matches!(c, ',' | '(' | ')' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn write_legs(f: &mut fmt::Formatter<'_>, legs: &[Spec]) -> fmt::Result {
    write!(f, "(")?;
    for (i, l) in legs.iter().enumerate() {
        if i > 0 {
            write!(f, ",")?;
        }
        match l {
            Spec::Leaf(s) => write!(f, "{}", escape(s))?,
            volume => write!(f, "{volume}")?,
        }
    }
    write!(f, ")")
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Leaf(s) => write!(f, "{s}"),
            Spec::Mirror(legs) => {
                write!(f, "mirror:")?;
                write_legs(f, legs)
            }
            Spec::Stripe { chunk, legs } => {
                write!(f, "stripe:{}k:", chunk >> 10)?;
                write_legs(f, legs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(s: &str) -> Spec {
        Spec::Leaf(s.to_string())
    }

    #[test]
    fn volumes_parse_with_any_leaf_as_a_leg() {
        assert_eq!(
            parse("mirror:(file:/a,file:/b)"),
            Ok(Spec::Mirror(vec![leaf("file:/a"), leaf("file:/b")]))
        );
        assert_eq!(
            parse("stripe:128k:(emu,ram,vfio:0000:01:00.0)"),
            Ok(Spec::Stripe {
                chunk: 128 << 10,
                legs: vec![leaf("emu"), leaf("ram"), leaf("vfio:0000:01:00.0")]
            })
        );
        assert_eq!(
            parse("stripe:(emu,emu)"),
            Ok(Spec::Stripe {
                chunk: DEFAULT_CHUNK,
                legs: vec![leaf("emu"), leaf("emu")]
            })
        );
        // Another engineer's device forms, with their colons, slashes,
        // brackets and query strings, are legs as they are.
        let tcp = "nvme-tcp://[::1]:4420/nqn.2014-08.org.nvmexpress:uuid:1?hdgst=1&ddgst=1";
        assert_eq!(
            parse(&format!("mirror:({tcp},file:/x)")),
            Ok(Spec::Mirror(vec![leaf(tcp), leaf("file:/x")]))
        );
        // A leaf alone is verbatim.
        assert_eq!(parse("file:/odd,(name)"), Ok(leaf("file:/odd,(name)")));
    }

    #[test]
    fn escapes_carry_commas_parentheses_and_backslashes_in_a_leg() {
        let s = r"mirror:(file:/d/a\,b,file:/d/\(c\)\\)";
        let spec = parse(s).unwrap();
        assert_eq!(
            spec,
            Spec::Mirror(vec![leaf("file:/d/a,b"), leaf(r"file:/d/(c)\")])
        );
        assert_eq!(spec.to_string(), s, "display gives the name back");
        assert_eq!(parse(&spec.to_string()), Ok(spec));
    }

    #[test]
    fn malformed_names_say_what_is_wrong() {
        let err = |s: &str| parse(s).unwrap_err();
        assert!(err("mirror:(file:/a)").contains("at least two legs"));
        assert!(err("mirror:file:/a,file:/b").contains("parentheses"));
        assert!(err("mirror:(file:/a,,file:/b)").contains("empty leg"));
        assert!(err("mirror:(file:/a,file:/b").contains("parentheses"));
        assert!(err("stripe:6k:(emu,emu)").contains("multiple of 4k"));
        assert!(err("stripe:lots:(emu,emu)").contains("chunk size"));
        assert!(err(r"mirror:(file:/a,file:/b\)").contains("at the end of a leg"));
        assert!(
            err("mirror:(file:/a),(b)").contains("`)`"),
            "{}",
            err("mirror:(file:/a),(b)")
        );
        assert!(err("").contains("empty"));
        // Nested volumes parse (they are refused when opened).
        assert!(parse("mirror:(stripe:(emu,emu),stripe:(emu,emu))").is_ok());
    }
}
