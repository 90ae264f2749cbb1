//! Timestamps for people: milliseconds since the Unix epoch (as manifests
//! and snapshot headers store them) as UTC RFC 3339 with milliseconds,
//! `2026-12-02T04:38:12.345Z`. The calendar arithmetic is Howard Hinnant's
//! `civil_from_days` (<https://howardhinnant.github.io/date_algorithms.html>).

/// `ms` milliseconds after the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_ms(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    let in_day = ms % 86_400_000;
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// The proleptic Gregorian date (year, month 1..=12, day 1..=31) of `z`
/// days after 1970-01-01 (negative: before).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    // Days since 0000-03-01: eras of 400 years (146097 days) start there,
    // each year of an era runs March to February, so a leap day is the
    // last day of its year.
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], from March
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_print_as_utc_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_796_186_292_345), "2026-12-02T04:38:12.345Z");
        assert_eq!(rfc3339_ms(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(rfc3339_ms(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
    }

    #[test]
    fn civil_from_days_agrees_with_counting_days_one_by_one() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        // Forward from 1970 past 2400 (a leap century and three that are not).
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for z in 0..=(431 * 366) {
            assert_eq!(civil_from_days(z), (y, m, d), "day {z}");
            d += 1;
            if d > len(y, m) {
                (m, d) = (m + 1, 1);
                if m > 12 {
                    (y, m) = (y + 1, 1);
                }
            }
        }
        // And back before the epoch.
        let (mut y, mut m, mut d) = (1969, 12, 31);
        for z in (-800 * 366..0).rev() {
            assert_eq!(civil_from_days(z), (y, m, d), "day {z}");
            d -= 1;
            if d == 0 {
                if m == 1 {
                    (y, m) = (y - 1, 12);
                } else {
                    m -= 1;
                }
                d = len(y, m);
            }
        }
    }

    #[test]
    fn the_largest_timestamp_prints_without_overflow() {
        let s = rfc3339_ms(u64::MAX);
        assert!(s.ends_with(".615Z"), "{s}");
    }
}
