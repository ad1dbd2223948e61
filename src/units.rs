//! Sizes in bytes and durations: parsing what people and other programs write, formatting
//! what sweepd shows. One module, because the same letters mean different things in different
//! places, and each place's convention has a name here:
//!
//! - **config sizes** ([`parse_config_size`]): what `supervisor.toml` takes. `KiB`/`K` are 1024,
//!   `KB` is 1000, as the SI and IEC prefixes say, and the unit is required.
//! - **allocator messages** ([`parse_allocator_size`]): what PyTorch, JAX/XLA and cudaMallocAsync
//!   print in an out-of-memory error. They print `GB` and mean GiB, so there every unit is
//!   binary; reading their text as config sizes would be 7% off per GiB.
//! - **for people** ([`format_size`]): config messages ("1.5 GiB", trailing zeros dropped);
//!   [`format_allocator_size`] quotes an allocator's figures as it writes them ("7.45 GiB");
//!   [`format_gib`] is the capacity model's fixed "6.0 GiB"; [`whole_mib`] the MiB columns of
//!   `sweepd gpus`, [`format_mib`] the same with its unit ("512 MiB"). No other module formats
//!   a size.
//! - **stored** ([`to_mib`], [`from_mib`]): a trial's peak memory as the `sweepd:peak_memory_mib`
//!   attribute, a whole number of MiB.
//! - **durations**: humantime's syntax both ways ("90s", "1h 30m", "1year"); [`parse_duration`]
//!   adds the message config shows, [`format_duration`] is humantime's; [`format_elapsed`] is
//!   `status`'s compact "3m12s".

use std::time::Duration;

pub use humantime::format_duration;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

// ---------------------------------------------------------------------------------------------
// Config sizes.

/// Units a size may be written in, lower-cased, with their multipliers.
const SIZE_UNITS: [(&str, u64); 13] = [
    ("b", 1),
    ("kib", KIB),
    ("mib", MIB),
    ("gib", GIB),
    ("tib", TIB),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("k", KIB),
    ("m", MIB),
    ("g", GIB),
    ("t", TIB),
];
const SIZE_UNIT_NAMES: &str = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G, T";

/// A size as `supervisor.toml` takes it, such as `"1.5GiB"`, `"512 MiB"` or `"2GB"`, in bytes: a non-negative decimal
/// number (fractions allowed), optional spaces, then a unit: B, KiB, MiB, GiB, TiB (powers of
/// 1024), KB, MB, GB, TB (powers of 1000), or K, M, G, T (= KiB, MiB, GiB, TiB), in any case. The
/// unit is required, so that "6" is not silently six bytes. Fractional bytes round to nearest.
pub fn parse_config_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("size {s:?} must not be negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!(
            "invalid size {s:?}: write a number and a unit, e.g. \"6GiB\" or \"1.5 GB\""
        ));
    }
    if unit.is_empty() {
        return Err(format!(
            "size {s:?} has no unit; write e.g. \"{number}B\" or \"{number}GiB\" \
             (units: {SIZE_UNIT_NAMES})"
        ));
    }
    let lower = unit.to_ascii_lowercase();
    let Some(&(_, mult)) = SIZE_UNITS.iter().find(|(u, _)| *u == lower) else {
        return Err(format!(
            "unknown unit {unit:?} in size {s:?}; expected one of {SIZE_UNIT_NAMES}"
        ));
    };
    let too_large = || format!("size {s:?} is too large");
    // Exact decimal arithmetic, so that "1.1GB" is 1_100_000_000 bytes, not a float's guess.
    // Digits past the 18th of the fraction are far below a byte even in TiB.
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let frac = &frac[..frac.len().min(18)];
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().expect("digits")
    };
    let scale = 10u128.pow(frac.len() as u32);
    let mult = u128::from(mult);
    let bytes = int
        .checked_mul(mult)
        .and_then(|b| b.checked_add((frac_value * mult + scale / 2) / scale))
        .ok_or_else(too_large)?;
    u64::try_from(bytes).map_err(|_| too_large())
}

/// Bytes for people, as config messages show them: the largest binary unit that fits, at most
/// two decimals, trailing zeros dropped: "800 B", "512 MiB", "1.5 GiB".
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("B", 1),
        ("KiB", KIB),
        ("MiB", MIB),
        ("GiB", GIB),
        ("TiB", TIB),
    ];
    let mut i = UNITS.iter().rposition(|&(_, m)| bytes >= m).unwrap_or(0);
    loop {
        let (name, m) = UNITS[i];
        let m = u128::from(m);
        let hundredths = (u128::from(bytes) * 100 + m / 2) / m;
        // 1023.999 KiB rounds to 1024.00 KiB: say 1 MiB instead.
        if hundredths >= 1024 * 100 && i + 1 < UNITS.len() {
            i += 1;
            continue;
        }
        let (whole, frac) = (hundredths / 100, hundredths % 100);
        return match frac {
            0 => format!("{whole} {name}"),
            f if f % 10 == 0 => format!("{whole}.{} {name}", f / 10),
            f => format!("{whole}.{f:02} {name}"),
        };
    }
}

// ---------------------------------------------------------------------------------------------
// Allocator messages.

/// The size an allocator message writes at the start of `s` (after blanks): "7.45 GiB",
/// "17179869184 bytes", "1.00GiB". `None` if `s` does not start with one.
pub fn parse_allocator_size(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let num = s[..end].trim_end_matches('.');
    if num.is_empty() || !num.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let rest = s[end..].trim_start();
    let unit: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let mult = allocator_unit(&unit)?;
    let bytes = (value * mult as f64).round();
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return None;
    }
    Some(bytes as u64)
}

/// What one unit of an allocator message is in bytes: B/bytes, KiB, MiB, GiB, TiB, and KB, MB,
/// GB, TB read as binary too. Trailing punctuation (`GiB;`, `MiB)`) is ignored.
pub fn allocator_unit(unit: &str) -> Option<u64> {
    let unit = unit.trim_end_matches(['.', ',', ';', ')']);
    Some(match unit {
        "B" | "bytes" | "byte" => 1,
        "KiB" | "KB" | "kB" => KIB,
        "MiB" | "MB" => MIB,
        "GiB" | "GB" => GIB,
        "TiB" | "TB" => TIB,
        _ => return None,
    })
}

/// Bytes as PyTorch writes them, for reasons that quote an OOM: the largest binary unit that
/// keeps the number at least 1, always two decimals ("7.45 GiB"), "N bytes" below 1 KiB.
pub fn format_allocator_size(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

// ---------------------------------------------------------------------------------------------
// Fixed units.

/// Bytes as GiB with one decimal ("6.0 GiB"), the unit every capacity message uses.
pub fn format_gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB as f64)
}

/// Whole MiB, rounded down: the MiB columns of `sweepd gpus` and the sizes in worker log lines.
pub fn whole_mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// Whole MiB with the unit ("512 MiB", rounded down): a worker's memory in its recycling
/// reasons, a trial's expected peak in `sweepd gpus`.
pub fn format_mib(bytes: u64) -> String {
    format!("{} MiB", whole_mib(bytes))
}

/// Bytes as the nearest whole number of MiB, as the `sweepd:peak_memory_mib` attribute stores
/// them (a JSON number, for Optuna's tools and SQL).
pub fn to_mib(bytes: u64) -> f64 {
    (bytes as f64 / MIB as f64).round()
}

/// The bytes a stored MiB figure ([`to_mib`]) stands for: a negative or NaN one is 0, one too
/// large for a `u64` is `u64::MAX`.
pub fn from_mib(mib: f64) -> u64 {
    (mib * MIB as f64) as u64
}

// ---------------------------------------------------------------------------------------------
// Durations.

/// A duration in humantime's syntax (`"90s"`, `"2h"`, `"1h 30m"`, `"1day"`), or a message that
/// says what to write instead. Zero and upper bounds are the caller's to check.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| {
        format!("invalid duration {s:?}: {e} (write e.g. \"90s\", \"2h\", \"1h 30m\")")
    })
}

/// A span of time run or waited, compact and to the second, as `status` shows it: `45s`,
/// `3m12s`, `2h05m` (seconds left out past an hour), `3d04h` (minutes left out past a day).
pub fn format_elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    // Every unit: binary, decimal, and the short forms that mean binary.
    #[case::gib("1GiB", 1_073_741_824)]
    #[case::gib_fraction_with_space("1.5 GiB", 1_610_612_736)]
    #[case::mib("512MiB", 536_870_912)]
    #[case::gb_is_decimal("2GB", 2_000_000_000)]
    #[case::bytes("800B", 800)]
    #[case::kib_with_space("4 KiB", 4096)]
    #[case::kb_is_decimal("1KB", 1000)]
    #[case::tb_is_decimal("3 TB", 3_000_000_000_000)]
    #[case::tib("1TiB", 1 << 40)]
    #[case::m_is_mib("2M", 2 << 20)]
    #[case::k_is_kib("1k", 1024)]
    #[case::t_is_tib("1T", 1 << 40)]
    // Any case, blanks around, fractions.
    #[case::lower_case("1gib", 1 << 30)]
    #[case::upper_case("1GIB", 1 << 30)]
    #[case::lower_case_decimal("2gb", 2_000_000_000)]
    #[case::blanks_around("  6 g  ", 6 << 30)]
    #[case::exact_not_via_f64("1.1GB", 1_100_000_000)]
    #[case::leading_point(".5KiB", 512)]
    #[case::rounds_to_nearest_byte("0.3KiB", 307)]
    #[case::zero("0B", 0)]
    #[case::largest_tib_that_fits("16777215TiB", 16_777_215 << 40)]
    fn config_size_is_read(#[case] text: &str, #[case] bytes: u64) {
        assert_eq!(parse_config_size(text), Ok(bytes), "{text:?}");
    }

    #[rstest]
    #[case::unknown_unit_listing_the_units("1 GiX", &["unknown unit \"GiX\"", "KiB"])]
    #[case::negative("-1GiB", &["negative"])]
    #[case::no_unit("1024", &["no unit"])]
    #[case::past_u64("16777216TiB", &["too large"])]
    #[case::past_u128("99999999999999999999999999999999999999999B", &[])]
    #[case::empty("", &[])]
    #[case::unit_only("GiB", &[])]
    #[case::two_points("1.2.3MB", &[])]
    #[case::point_only(".", &[])]
    #[case::exponent("1e9B", &[])]
    #[case::plus_sign("+1B", &[])]
    #[case::words("one GiB", &[])]
    fn config_size_is_refused(#[case] text: &str, #[case] says: &[&str]) {
        let e = parse_config_size(text).unwrap_err();
        for s in says {
            assert!(e.contains(s), "{text:?} should say {s:?}: {e}");
        }
    }

    #[rstest]
    #[case::zero(0, "0 B")]
    #[case::bytes(800, "800 B")]
    #[case::below_a_kib(1023, "1023 B")]
    #[case::one_kib(1024, "1 KiB")]
    #[case::whole_mib(512 << 20, "512 MiB")]
    #[case::one_decimal(1_610_612_736, "1.5 GiB")]
    #[case::two_decimals((1 << 30) + (1 << 30) / 4, "1.25 GiB")]
    #[case::decimal_gb(2_000_000_000, "1.86 GiB")]
    #[case::rounds_up_into_the_next_unit((1 << 20) - 1, "1 MiB")]
    #[case::tib(3 << 40, "3 TiB")]
    #[case::largest(u64::MAX, "16777216 TiB")]
    fn format_size_picks_the_largest_binary_unit(#[case] bytes: u64, #[case] shown: &str) {
        assert_eq!(format_size(bytes), shown);
    }

    #[rstest]
    #[case::pytorch("7.45 GiB", 7_999_376_589)]
    #[case::gb_is_binary("2GB", 2 << 30)]
    #[case::mb_is_binary("20 MB", 20 << 20)]
    #[case::small_kb_is_binary("512 kB", 512 << 10)]
    #[case::jax_bytes("17179869184 bytes", 17_179_869_184)]
    #[case::xla_one_token("1.00GiB", 1 << 30)]
    #[case::blanks_before("  33.56 MiB is free", 35_190_211)]
    #[case::punctuation_after("15.78 GiB;", 16_943_645_983)]
    #[case::closing_parenthesis("14.45 GiB)", 15_515_569_357)]
    #[case::zero("0B", 0)]
    fn allocator_size_is_read(#[case] text: &str, #[case] bytes: u64) {
        assert_eq!(parse_allocator_size(text), Some(bytes), "{text:?}");
    }

    #[rstest]
    #[case::empty("")]
    #[case::unit_only("GiB")]
    #[case::not_at_the_start("of 2 GiB")]
    #[case::negative("-1 GiB")]
    #[case::unknown_unit("3 parsecs")]
    #[case::no_unit("42")]
    #[case::point_first(".5 GiB")]
    fn allocator_size_is_not_read(#[case] text: &str) {
        assert_eq!(parse_allocator_size(text), None, "{text:?}");
    }

    #[test]
    fn gb_means_gib_in_allocator_messages_and_a_billion_in_the_config() {
        assert_eq!(parse_allocator_size("2 GB"), Some(2 << 30));
        assert_eq!(parse_config_size("2 GB"), Ok(2_000_000_000));
        assert_eq!(parse_config_size("2 GiB"), Ok(2 << 30));
    }

    #[rstest]
    #[case::bytes(800, "800 bytes")]
    #[case::below_a_kib(1023, "1023 bytes")]
    #[case::one_kib(1024, "1.00 KiB")]
    #[case::mib(35_190_211, "33.56 MiB")]
    #[case::gib(2 << 30, "2.00 GiB")]
    #[case::tib_is_the_largest(5000 << 40, "5000.00 TiB")]
    fn allocator_size_is_written_as_pytorch_writes_it(#[case] bytes: u64, #[case] shown: &str) {
        assert_eq!(format_allocator_size(bytes), shown);
    }

    #[rstest]
    #[case::zero(0, "0.0 GiB")]
    #[case::whole(6 << 30, "6.0 GiB")]
    #[case::one_decimal(1_610_612_736, "1.5 GiB")]
    #[case::small(512 << 20, "0.5 GiB")]
    fn format_gib_has_one_decimal(#[case] bytes: u64, #[case] shown: &str) {
        assert_eq!(format_gib(bytes), shown);
    }

    #[rstest]
    #[case::below_one((1 << 20) - 1, 0)]
    #[case::exact(512 << 20, 512)]
    #[case::rounds_down((3 << 20) - 1, 2)]
    fn whole_mib_rounds_down(#[case] bytes: u64, #[case] mib: u64) {
        assert_eq!(whole_mib(bytes), mib);
    }

    #[rstest]
    #[case::below_one((1 << 20) - 1, "0 MiB")]
    #[case::exact(512 << 20, "512 MiB")]
    #[case::rounds_down((3 << 20) - 1, "2 MiB")]
    #[case::past_a_gib(1100 << 20, "1100 MiB")]
    fn format_mib_writes_whole_mib_with_the_unit(#[case] bytes: u64, #[case] shown: &str) {
        assert_eq!(format_mib(bytes), shown);
    }

    #[rstest]
    #[case::exact(512 << 20, 512.0)]
    #[case::rounds_to_nearest((1 << 20) + (1 << 19), 2.0)]
    #[case::below_half((1 << 19) - 1, 0.0)]
    fn stored_mib_is_the_nearest_whole_mib(#[case] bytes: u64, #[case] mib: f64) {
        assert_eq!(to_mib(bytes), mib);
    }

    #[rstest]
    #[case::whole(512.0, 512 << 20)]
    #[case::fraction(0.5, 1 << 19)]
    #[case::negative(-1.0, 0)]
    #[case::nan(f64::NAN, 0)]
    #[case::too_large(f64::INFINITY, u64::MAX)]
    fn stored_mib_back_to_bytes(#[case] mib: f64, #[case] bytes: u64) {
        assert_eq!(from_mib(mib), bytes);
    }

    #[rstest]
    #[case::seconds("90s", 90)]
    #[case::two_units("1h 30m", 5400)]
    #[case::words("2 hours", 7200)]
    #[case::a_day("1day", 86_400)]
    #[case::humantimes_year("1y", 31_557_600)]
    fn duration_is_read(#[case] text: &str, #[case] secs: u64) {
        assert_eq!(parse_duration(text), Ok(Duration::from_secs(secs)));
    }

    #[rstest]
    #[case::word("soon")]
    #[case::unknown_unit("1 fortnight")]
    #[case::bare_number("60")]
    fn duration_is_refused_saying_what_to_write(#[case] text: &str) {
        let e = parse_duration(text).unwrap_err();
        assert!(
            e.starts_with(&format!("invalid duration {text:?}: ")),
            "{e}"
        );
        assert!(
            e.ends_with("(write e.g. \"90s\", \"2h\", \"1h 30m\")"),
            "{e}"
        );
    }

    #[rstest]
    #[case::seconds(45, "45s")]
    #[case::zero(0, "0s")]
    #[case::minutes(192, "3m12s")]
    #[case::a_minute_exactly(60, "1m00s")]
    #[case::hours_drop_seconds(7_505, "2h05m")]
    #[case::days_drop_minutes(273_600, "3d04h")]
    fn elapsed_is_compact(#[case] secs: u64, #[case] shown: &str) {
        assert_eq!(format_elapsed(Duration::from_secs(secs)), shown);
    }

    #[test]
    fn format_duration_is_humantimes() {
        assert_eq!(
            format_duration(Duration::from_secs(31_557_600)).to_string(),
            "1year"
        );
        assert_eq!(
            format_duration(Duration::from_millis(50)).to_string(),
            "50ms"
        );
    }
}
