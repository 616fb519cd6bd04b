//! `strftime_now(format)`: the current time formatted as Python's
//! `datetime.now().strftime(format)` does, for the directives chat templates
//! use (dates in system prompts). Any other directive is an error, so the
//! render falls back to jinja2 rather than print something else.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// A broken-down local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32, // 1..=12
    pub day: u32,   // 1..=31
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub weekday: u32, // 0 = Monday
    pub yday: u32,    // 1..=366
}

/// The civil time of `secs` since the epoch (already shifted to local time).
pub fn civil(secs: i64) -> Civil {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days to (y, m, d): the proleptic Gregorian algorithm of H. Hinnant.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + u32::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem / 60 % 60) as u32,
        second: (rem % 60) as u32,
        weekday: (days + 3).rem_euclid(7) as u32, // 1970-01-01 was a Thursday
        yday,
    }
}

/// Format `t` by `fmt` (Python/glibc directives), or the directive it cannot write.
pub fn strftime(t: &Civil, fmt: &str) -> Result<String, String> {
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut d = chars.next().ok_or("a format ending in '%'")?;
        let unpadded = d == '-';
        if unpadded {
            d = chars.next().ok_or("a format ending in '%-'")?;
        }
        let num = |v: u32, width: usize| if unpadded { v.to_string() } else { format!("{v:0width$}") };
        let hour12 = if t.hour % 12 == 0 { 12 } else { t.hour % 12 };
        match d {
            'Y' => out.push_str(&t.year.to_string()),
            'y' => out.push_str(&num(t.year.rem_euclid(100) as u32, 2)),
            'm' => out.push_str(&num(t.month, 2)),
            'd' => out.push_str(&num(t.day, 2)),
            'e' => out.push_str(&format!("{:>2}", t.day)),
            'H' => out.push_str(&num(t.hour, 2)),
            'I' => out.push_str(&num(hour12, 2)),
            'M' => out.push_str(&num(t.minute, 2)),
            'S' => out.push_str(&num(t.second, 2)),
            'j' => out.push_str(&num(t.yday, 3)),
            'p' => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            'B' => out.push_str(MONTHS[t.month as usize - 1]),
            'b' | 'h' => out.push_str(&MONTHS[t.month as usize - 1][..3]),
            'A' => out.push_str(DAYS[t.weekday as usize]),
            'a' => out.push_str(&DAYS[t.weekday as usize][..3]),
            'F' => out.push_str(&format!("{}-{:02}-{:02}", t.year, t.month, t.day)),
            'T' => out.push_str(&format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)),
            '%' => out.push('%'),
            other => return Err(format!("the strftime directive %{other}")),
        }
    }
    Ok(out)
}

/// Seconds since the epoch now, shifted by `utc_offset` seconds.
pub fn now_local(utc_offset: i64) -> Civil {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    civil(secs + utc_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // 2024-07-26 12:34:56 UTC, a Friday, day 208 of a leap year.
        let t = civil(1_721_997_296);
        assert_eq!((t.year, t.month, t.day, t.hour, t.minute, t.second), (2024, 7, 26, 12, 34, 56));
        assert_eq!((t.weekday, t.yday), (4, 208));
        assert_eq!(strftime(&t, "%d %b %Y").unwrap(), "26 Jul 2024");
        assert_eq!(strftime(&t, "%A, %B %-d, %Y %I:%M %p").unwrap(), "Friday, July 26, 2024 12:34 PM");
        let t = civil(0);
        assert_eq!(strftime(&t, "%Y-%m-%d %a %j").unwrap(), "1970-01-01 Thu 001");
        let t = civil(-86_400);
        assert_eq!(strftime(&t, "%F").unwrap(), "1969-12-31");
        assert!(strftime(&t, "%Z").is_err());
    }
}
