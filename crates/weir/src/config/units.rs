//! Human units in config values: durations (`250ms`, `10s`, `5m`, `1h`, or a bare number of
//! seconds) and sizes (`512`, `32k`, `1m`, `2g`, binary multiples). Both deserialize from a YAML
//! number or string.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration from the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dur(pub Duration);

/// A byte size from the config.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

fn split_unit(s: &str) -> (&str, &str) {
    let i = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    (&s[..i], s[i..].trim())
}

impl std::str::FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Dur, String> {
        let (num, unit) = split_unit(s.trim());
        let n: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?} (use e.g. 500ms, 10s, 5m)"))?;
        let secs = match unit {
            "ms" => n / 1000.0,
            "" | "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            "d" => n * 86_400.0,
            _ => return Err(format!("invalid duration unit in {s:?} (ms, s, m, h or d)")),
        };
        // `from_secs_f64` panics on overflow, NaN and negatives: `99999999999999999999d` aborted
        // `weir check` with no key named. Refuse them as config errors instead.
        if secs.is_sign_negative() {
            return Err(format!("duration {s:?} must not be negative"));
        }
        Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| *d <= MAX_DURATION)
            .map(Dur)
            .ok_or_else(|| format!("duration {s:?} is out of range (at most 100 years)"))
    }
}

/// The longest duration the config accepts: far beyond any sensible timeout, and far below what
/// would overflow an `Instant` when added to now.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        let (num, unit) = split_unit(s.trim());
        let n: u64 = num
            .parse()
            .map_err(|_| format!("invalid size {s:?} (use e.g. 512, 32k, 1m)"))?;
        let mult: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            _ => return Err(format!("invalid size unit in {s:?} (k, m or g)")),
        };
        n.checked_mul(mult)
            .map(Size)
            .ok_or_else(|| format!("size {s:?} is too large"))
    }
}

struct UnitVisitor<T>(std::marker::PhantomData<T>);

impl<T: std::str::FromStr<Err = String>> Visitor<'_> for UnitVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number or a string with a unit")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::custom("must not be negative"));
        }
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(
            "250ms".parse::<Dur>().unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!("10".parse::<Dur>().unwrap().0, Duration::from_secs(10));
        assert_eq!("2m".parse::<Dur>().unwrap().0, Duration::from_secs(120));
        assert_eq!("1d".parse::<Dur>().unwrap().0, Duration::from_secs(86_400));
        assert!("10 parsecs".parse::<Dur>().is_err());
        for bad in [
            "99999999999999999999d",
            "1e300s",
            "nan",
            "inf",
            "-1s",
            "-0.5",
        ] {
            let e = bad.parse::<Dur>().unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!("99999999999999999999k".parse::<Size>().is_err());
        assert!("18446744073709551615g".parse::<Size>().is_err());
        assert_eq!("32k".parse::<Size>().unwrap().0, 32768);
        assert_eq!("1m".parse::<Size>().unwrap().0, 1 << 20);
        assert!("-1".parse::<Size>().is_err());
        assert!("1q".parse::<Size>().is_err());
    }
}
