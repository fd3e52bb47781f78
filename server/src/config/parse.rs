//! Ollama's value grammar for environment variables: quote/space trimming, Go's `ParseBool`
//! with Ollama's "anything else non-empty is true" rule, Go's `time.ParseDuration`, and the
//! duration-or-seconds rule of `OLLAMA_KEEP_ALIVE` / `OLLAMA_LOAD_TIMEOUT`, and the three-way
//! switches (`OLLAMA_FLASH_ATTENTION`, `OLLAMA_GO_TEMPLATE`, `OLLAMA_KV_CACHE_TYPE`). Pure functions, so the
//! rules are table-tested here and reused by the API layer (`keep_alive` in requests).

use std::sync::Mutex;
use std::time::Duration;

use crate::prompt::prefer::GoTemplate;
pub use crate::scheduler::KeepAlive;
use runner_protocol::{FlashAttention, KvCacheType};

/// Values of Ollama's variables that did not parse and fell back to their default, as Ollama's
/// `envconfig` does ("invalid environment variable, using default"): a service file carried
/// over from Ollama with `OLLAMA_KEEP_ALIVE=1d` must still start. `herd serve` logs them once
/// logging is up ([`take_fallbacks`]).
static FALLBACKS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn fallback<T: std::fmt::Debug>(raw: &str, default: T) -> T {
    let line = format!("invalid value {:?}, using default {default:?}", clean(raw));
    if let Ok(mut f) = FALLBACKS.lock() {
        f.push(line);
    }
    default
}

/// The fallbacks recorded while parsing the configuration (see [`FALLBACKS`]), once.
pub fn take_fallbacks() -> Vec<String> {
    FALLBACKS
        .lock()
        .map(|mut f| std::mem::take(&mut *f))
        .unwrap_or_default()
}

/// Ollama's `envconfig.Var`: trim spaces, then quotes (both kinds), as one cut.
pub fn clean(raw: &str) -> &str {
    raw.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// Go's `strconv.ParseBool`: exactly these spellings, nothing else.
pub fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Ollama's `BoolWithDefault`: empty → `default`; a Go bool → its value; any other non-empty
/// value → `true` (so `OLLAMA_NOPRUNE=yes` disables pruning, as it does in Ollama).
pub fn ollama_bool(raw: &str, default: bool) -> bool {
    match clean(raw) {
        "" => default,
        s => go_parse_bool(s).unwrap_or(true),
    }
}

/// Go's `time.ParseDuration`, in signed nanoseconds. Accepts `[-+]?([0-9]*(\.[0-9]*)?unit)+`
/// with units `ns us µs μs ms s m h`, and the bare `0`. Errors carry Go's wording.
pub fn go_parse_duration(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {orig:?}");
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    // Accumulate in u128 so overflow is detected exactly against Go's 1<<63 bound.
    let limit: u128 = 1 << 63;
    let mut total: u128 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &s[..int_len];
        s = &s[int_len..];
        let mut frac_part = "";
        if s.starts_with('.') {
            s = &s[1..];
            let frac_len = s.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &s[..frac_len];
            s = &s[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = s
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {orig:?}"));
        }
        let unit_name = &s[..unit_len];
        s = &s[unit_len..];
        let unit: u128 = match unit_name {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {unit_name:?} in duration {orig:?}"
                ))
            }
        };
        let mut v: u128 = 0;
        for b in int_part.bytes() {
            v = v * 10 + u128::from(b - b'0');
            if v > limit {
                return Err(invalid());
            }
        }
        v *= unit;
        if v > limit {
            return Err(invalid());
        }
        // Fraction: digits beyond nanosecond precision cannot change the result, so 30 are plenty.
        let mut frac: u128 = 0;
        let mut scale: u128 = 1;
        for b in frac_part.bytes().take(30) {
            frac = frac * 10 + u128::from(b - b'0');
            scale *= 10;
        }
        v += frac * unit / scale;
        total += v;
        if total > limit {
            return Err(invalid());
        }
    }
    if neg {
        Ok((total as i128).wrapping_neg() as i64)
    } else if total > (limit - 1) {
        Err(invalid())
    } else {
        Ok(total as i64)
    }
}

/// Signed nanoseconds as a keep-alive: negative means forever.
pub fn keep_alive_from_nanos(ns: i64) -> KeepAlive {
    if ns < 0 {
        KeepAlive::Forever
    } else {
        KeepAlive::For(Duration::from_nanos(ns as u64))
    }
}

/// For the startup log: `forever` or the duration.
pub fn keep_alive_display(k: &KeepAlive) -> String {
    match k {
        KeepAlive::Forever => "forever".to_owned(),
        KeepAlive::For(d) => format!("{d:?}"),
    }
}

/// The env-var duration rule shared by `OLLAMA_KEEP_ALIVE` and `OLLAMA_LOAD_TIMEOUT`: a Go
/// duration, else an integer number of seconds; `None` when it is neither.
pub fn env_duration_nanos(raw: &str) -> Option<i64> {
    let s = clean(raw);
    if let Ok(ns) = go_parse_duration(s) {
        return Some(ns);
    }
    s.parse::<i64>()
        .ok()
        .map(|secs| secs.saturating_mul(1_000_000_000))
}

/// Parse a go-style bool, for clap.
pub fn clap_bool(raw: &str) -> Result<bool, String> {
    Ok(ollama_bool(raw, false))
}

/// Parse an unsigned count with an empty value meaning `D` (Ollama's `Uint`), for clap; a
/// malformed value is `D` too, recorded as a [`fallback`].
pub fn clap_uint<const D: u32>(raw: &str) -> Result<u32, String> {
    Ok(match clean(raw) {
        "" => D,
        s => s.parse::<u32>().unwrap_or_else(|_| fallback(raw, D)),
    })
}

/// A byte count: digits with an optional decimal (`K`, `M`, `G`, `T`, optional `B`) or binary
/// (`KiB` … `TiB`) suffix, case-insensitive.
pub fn clap_byte_size(raw: &str) -> Result<u64, String> {
    let s = clean(raw).to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(format!("invalid size {raw:?}")),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid size {raw:?}"))
}

/// `OLLAMA_KEEP_ALIVE`: Go duration or integer seconds, negative = forever; anything else is
/// the default 5m, recorded as a [`fallback`].
pub fn clap_keep_alive(raw: &str) -> Result<KeepAlive, String> {
    let default = KeepAlive::For(Duration::from_secs(300));
    if clean(raw).is_empty() {
        return Ok(default);
    }
    Ok(env_duration_nanos(raw)
        .map(keep_alive_from_nanos)
        .unwrap_or_else(|| fallback(raw, default)))
}

/// How long a model load may stall; `None` = no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadTimeout(pub Option<Duration>);

impl LoadTimeout {
    /// For the effective-config log: the duration, or `none`.
    pub fn shown(&self) -> String {
        self.0
            .map_or_else(|| "none".to_string(), |d| format!("{d:?}"))
    }
}

/// `OLLAMA_LOAD_TIMEOUT`: Go duration or integer seconds; zero or negative = no limit.
pub fn clap_load_timeout(raw: &str) -> Result<LoadTimeout, String> {
    let default = LoadTimeout(Some(Duration::from_secs(300)));
    if clean(raw).is_empty() {
        return Ok(default);
    }
    Ok(clap_deadline(raw).unwrap_or_else(|_| fallback(raw, default)))
}

/// herd's own deadlines (`HERD_PROGRESS_TIMEOUT`, `HERD_HEALTH_*`): the same Go duration or
/// integer seconds; zero or negative = off.
pub fn clap_deadline(raw: &str) -> Result<LoadTimeout, String> {
    let ns = env_duration_nanos(raw).ok_or_else(|| {
        format!(
            "{:?} is neither a duration (5m, 1h30m) nor seconds",
            clean(raw)
        )
    })?;
    Ok(LoadTimeout(
        (ns > 0).then(|| Duration::from_nanos(ns as u64)),
    ))
}

pub fn clap_flash_attention(raw: &str) -> Result<FlashAttention, String> {
    Ok(match clean(raw) {
        "" | "auto" => FlashAttention::Auto,
        s if ollama_bool(s, false) => FlashAttention::On,
        _ => FlashAttention::Off,
    })
}

/// Ollama's `GoTemplate`: empty = unset; a Go bool as spelled; any other non-empty text is
/// true (`BoolWithDefault`). Any set value turns the preference check off (`goTemplateEnvSet`).
pub fn clap_go_template(raw: &str) -> Result<GoTemplate, String> {
    Ok(match clean(raw) {
        "" => GoTemplate::Auto,
        s if ollama_bool(s, true) => GoTemplate::On,
        _ => GoTemplate::Off,
    })
}

pub fn clap_kv_cache_type(raw: &str) -> Result<KvCacheType, String> {
    KvCacheType::parse(clean(raw))
        .ok_or_else(|| format!("{:?}: expected f16, q8_0 or q4_0", clean(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_attention_and_kv() {
        assert_eq!(clap_flash_attention(""), Ok(FlashAttention::Auto));
        assert_eq!(clap_flash_attention("1"), Ok(FlashAttention::On));
        assert_eq!(clap_flash_attention("yes"), Ok(FlashAttention::On));
        assert_eq!(clap_flash_attention("false"), Ok(FlashAttention::Off));
        assert_eq!(clap_kv_cache_type("Q8_0"), Ok(KvCacheType::Q8_0));
        assert_eq!(clap_kv_cache_type(""), Ok(KvCacheType::F16));
        assert!(clap_kv_cache_type("q3").is_err());
    }

    #[test]
    fn go_template_reads_as_ollama_does() {
        let cases = [
            ("", GoTemplate::Auto),
            ("  ", GoTemplate::Auto),
            ("''", GoTemplate::Auto),
            ("1", GoTemplate::On),
            ("\"True\"", GoTemplate::On),
            // Not a Go bool: Ollama's BoolWithDefault reads any other text as true.
            ("yes", GoTemplate::On),
            ("0", GoTemplate::Off),
            (" false ", GoTemplate::Off),
            ("F", GoTemplate::Off),
        ];
        for (raw, want) in cases {
            assert_eq!(clap_go_template(raw), Ok(want), "{raw:?}");
        }
    }

    #[test]
    fn byte_sizes() {
        let table = [
            ("0", Some(0)),
            ("1024", Some(1024)),
            ("10M", Some(10_000_000)),
            ("10mb", Some(10_000_000)),
            ("512GiB", Some(512 << 30)),
            (" \"2TiB\" ", Some(2 << 40)),
            ("1.5G", None),
            ("-1", None),
            ("lots", None),
            ("99999999999TiB", None),
        ];
        for (raw, want) in table {
            assert_eq!(clap_byte_size(raw).ok(), want, "{raw:?}");
        }
    }

    #[test]
    fn bools_follow_ollama() {
        let cases = [
            ("", false, false),
            ("", true, true),
            ("1", false, true),
            ("true", false, true),
            ("True", false, true),
            ("T", false, true),
            ("0", true, false),
            ("false", true, false),
            ("F", true, false),
            ("  \"false\" ", true, false),
            ("'0'", true, false),
            // Not a Go bool, but non-empty: true (Ollama's BoolWithDefault).
            ("yes", false, true),
            ("no", false, true),
            ("off", false, true),
            ("2", false, true),
            // Only quotes/spaces: empty after cleaning, so the default.
            ("  ''  ", true, true),
            ("\"\"", false, false),
        ];
        for (raw, default, want) in cases {
            assert_eq!(ollama_bool(raw, default), want, "{raw:?} default {default}");
        }
    }

    #[test]
    fn go_durations() {
        const S: i64 = 1_000_000_000;
        let ok = [
            ("0", 0),
            ("5m", 300 * S),
            ("1h30m", 5400 * S),
            ("1.5h", 5400 * S),
            ("-1s", -S),
            ("+2s", 2 * S),
            ("300ms", 300_000_000),
            ("1us", 1_000),
            ("1µs", 1_000),
            ("1μs", 1_000),
            ("7ns", 7),
            (".5s", S / 2),
            ("1.s", S),
            ("2562047h47m16.854775807s", i64::MAX),
            ("-2562047h47m16.854775808s", i64::MIN),
        ];
        for (s, want) in ok {
            assert_eq!(go_parse_duration(s), Ok(want), "{s}");
        }
        for bad in [
            "",
            "300",
            "-1",
            "5",
            ".",
            "s",
            "5x",
            "1h 2m",
            "--1s",
            "-",
            "2562047h47m16.854775808s",
        ] {
            assert!(go_parse_duration(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn env_durations_accept_seconds() {
        const S: i64 = 1_000_000_000;
        assert_eq!(env_duration_nanos("300"), Some(300 * S));
        assert_eq!(env_duration_nanos("-1"), Some(-S));
        assert_eq!(env_duration_nanos(" '10m' "), Some(600 * S));
        assert_eq!(env_duration_nanos("soon"), None);
        assert_eq!(clap_keep_alive("-1"), Ok(KeepAlive::Forever));
        assert_eq!(clap_keep_alive("0"), Ok(KeepAlive::For(Duration::ZERO)));
        assert_eq!(
            clap_keep_alive(""),
            Ok(KeepAlive::For(Duration::from_secs(300)))
        );
        // Invalid values fall back to the default, as Ollama's envconfig does.
        let five = KeepAlive::For(Duration::from_secs(300));
        for bad in ["soon", "1d", "???", "1w"] {
            assert_eq!(clap_keep_alive(bad), Ok(five), "{bad}");
            assert_eq!(
                clap_load_timeout(bad),
                Ok(LoadTimeout(Some(Duration::from_secs(300)))),
                "{bad}"
            );
        }
        assert!(take_fallbacks()
            .iter()
            .any(|l| l == "invalid value \"1d\", using default For(300s)"));
        assert_eq!(clap_load_timeout("0"), Ok(LoadTimeout(None)));
        assert_eq!(
            clap_deadline("250ms"),
            Ok(LoadTimeout(Some(Duration::from_millis(250))))
        );
        assert_eq!(clap_deadline("0"), Ok(LoadTimeout(None)));
        assert!(clap_deadline("").is_err());
        assert_eq!(clap_load_timeout("-5m"), Ok(LoadTimeout(None)));
        assert_eq!(
            clap_load_timeout("90"),
            Ok(LoadTimeout(Some(Duration::from_secs(90))))
        );
    }

    #[test]
    fn uints() {
        assert_eq!(clap_uint::<512>(""), Ok(512));
        assert_eq!(clap_uint::<512>(" \"4\" "), Ok(4));
        assert_eq!(clap_uint::<1>("0"), Ok(0));
        for bad in ["-1", "four", "0x10", "0o10", "4k"] {
            assert_eq!(clap_uint::<1>(bad), Ok(1), "{bad}");
        }
    }
}
