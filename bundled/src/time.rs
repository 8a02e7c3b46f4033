//! `time_now`, `time_after`, `time_before`: the query's `trigger_time`
//! (never the wall clock), compared with a timestamp given as unix
//! milliseconds or as an RFC 3339 date-time.
//!
//! An RFC 3339 string is read by the RFC's grammar (§5.6 `date-time`), as
//! Decision Gate's `time` built-in (the `time` crate's RFC 3339 parser)
//! reads it: `YYYY-MM-DDTHH:MM:SS`, an optional fraction of any length,
//! then `Z` or `±HH:MM` with the hour at most 23 and the minute at most 59
//! (`jiff`'s own parser is more lenient: offsets up to ±25:59, offsets
//! with seconds, other ISO 8601 forms; its timestamps also end a day
//! before year 9999 does, so it is used here for the calendar only).
//! `T` and `Z` may be lower case, and the date and time may be separated
//! by a space (the note under the ABNF; the `time` crate takes any one
//! byte there, this provider only `T`, `t` and a space).
//!
//! - Range: the instants RFC 3339 can write in UTC,
//!   `0000-01-01T00:00:00Z..=9999-12-31T23:59:59.999999999Z`; a date-time
//!   whose offset moves it outside (`9999-12-31T23:59:59-00:01`) is
//!   refused with both ends named (Decision Gate's `time` takes those too,
//!   as instants of year -1 or 10000).
//! - Fractions: any number of digits, truncated to milliseconds toward
//!   the past, also before 1970: never rounded up past a boundary
//!   (Decision Gate divides nanoseconds toward zero, so before 1970 a
//!   fraction finer than a millisecond reads 1 ms later there).
//! - Leap seconds: `:60` is the last second of a month in UTC
//!   (`23:59:60Z` on the month's last day, or that instant at another
//!   offset) and reads as the last millisecond before the next minute,
//!   `23:59:59.999Z`, whatever its fraction (Decision Gate's `time` reads
//!   it as `23:59:59.999999999Z`); anywhere else it is refused.
//!
//! Nothing here allocates in proportion to the input beyond the error
//! message (the input is bounded by the frame limits before it arrives).

use evidence_wire::evidence::{EvidenceError, TriggerTime};
use evidence_wire::text::truncate_chars;
use evidence_wire_provider::{CheckContext, CheckError, NoParams};

use crate::checks::Timestamp;

/// `time_now`: the trigger time as an integer (unix milliseconds, or the
/// logical tick).
pub(crate) fn time_now(_: NoParams, context: &CheckContext) -> Result<i64, CheckError> {
    Ok(match context.context().trigger_time {
        TriggerTime::UnixMillis(millis) => millis,
        TriggerTime::Logical(tick) => tick,
    })
}

/// `time_after` (`after == true`: trigger time > timestamp) and
/// `time_before` (trigger time < timestamp).
pub(crate) fn compare_time(
    context: &CheckContext,
    timestamp: Timestamp,
    after: bool,
) -> Result<bool, CheckError> {
    let threshold = match timestamp {
        Timestamp::UnixMillis(millis) => millis,
        Timestamp::Text(text) => rfc3339_millis(&text)?,
    };
    let now = match context.context().trigger_time {
        TriggerTime::UnixMillis(millis) => millis,
        TriggerTime::Logical(_) => {
            return Err(CheckError::new(
                "unsupported_trigger_time",
                "time comparisons need a unix_millis trigger_time, not a logical one",
            ));
        }
    };
    Ok(if after {
        now > threshold
    } else {
        now < threshold
    })
}

/// An RFC 3339 date-time as unix milliseconds, or `invalid_params` naming
/// what is wrong.
fn rfc3339_millis(text: &str) -> Result<i64, EvidenceError> {
    let refuse = |why: &str| {
        EvidenceError::new(
            "invalid_params",
            format!(
                "params.timestamp {:?} {why}; write e.g. \"2024-01-01T00:00:00Z\" or \"2024-01-01T09:30:00+05:30\"",
                truncate_chars(text, 64)
            ),
        )
    };
    let fields = parse_rfc3339(text)
        .map_err(|why| refuse(&format!("is not an RFC 3339 date-time: {why}")))?;
    fields.unix_millis().map_err(|refusal| match refusal {
        Refusal::Invalid(why) => refuse(&format!("is not an RFC 3339 date-time: {why}")),
        Refusal::OutOfRange(side) => refuse(&format!(
            "is outside {FIRST}..={LAST}, the instants RFC 3339 can write in UTC: with its offset it is {side} them"
        )),
    })
}

/// Why fields that fit the grammar name no instant.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// A field out of its range, or a leap second where there is none.
    Invalid(String),
    /// An instant before [`FIRST`] (`"before"`) or after [`LAST`] (`"after"`).
    OutOfRange(&'static str),
}

/// The first instant RFC 3339 can write in UTC, `0000-01-01T00:00:00Z`.
const FIRST: &str = "0000-01-01T00:00:00Z";

/// The last instant RFC 3339 can write in UTC.
const LAST: &str = "9999-12-31T23:59:59.999999999Z";

/// [`FIRST`] in seconds since 1970.
const FIRST_SECONDS: i64 = -62_167_219_200;

/// [`LAST`]'s whole seconds since 1970.
const LAST_SECONDS: i64 = 253_402_300_799;

/// 1970-01-01T00:00:00, the origin of unix time.
const UNIX_EPOCH: jiff::civil::DateTime = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// The fields of an RFC 3339 date-time as written (digits checked, ranges
/// not yet).
#[derive(Debug, PartialEq, Eq)]
struct Rfc3339<'a> {
    year: i16,
    month: i8,
    day: i8,
    hour: i8,
    minute: i8,
    second: i8,
    /// The digits after the `.` (empty without one).
    fraction: &'a [u8],
    /// The offset east of UTC, in minutes (`Z`, `+00:00` and `-00:00` are 0).
    offset_minutes: i16,
}

impl Rfc3339<'_> {
    /// The instant in unix milliseconds, or why there is none: a field
    /// out of its range (a day the month does not have, hour 24, …), a
    /// leap second that is not the last second of a month in UTC, an
    /// instant outside [`FIRST`]..=[`LAST`].
    fn unix_millis(&self) -> Result<i64, Refusal> {
        let leap = self.second == 60;
        if self.second > 60 {
            return Err(Refusal::Invalid(
                "the second must be 00..=59 (60 for a leap second)".to_owned(),
            ));
        }
        let second = if leap { 59 } else { self.second };
        let local = jiff::civil::DateTime::new(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            second,
            0,
        )
        .map_err(|error| Refusal::Invalid(format!("{error}")))?;
        let local_seconds = local.duration_since(UNIX_EPOCH).as_secs();
        // Local dates are within 0000..=9999 and offsets within a day: no
        // overflow here or below.
        let seconds = local_seconds - i64::from(self.offset_minutes) * 60;
        if seconds < FIRST_SECONDS {
            return Err(Refusal::OutOfRange("before"));
        }
        if seconds > LAST_SECONDS {
            return Err(Refusal::OutOfRange("after"));
        }
        if leap {
            // The UTC date-time: within 0000..=9999, as checked above.
            let utc = UNIX_EPOCH
                .checked_add(jiff::SignedDuration::from_secs(seconds))
                .map_err(|error| Refusal::Invalid(format!("{error}")))?;
            if !(utc.hour() == 23 && utc.minute() == 59 && utc.day() == utc.days_in_month()) {
                return Err(Refusal::Invalid(
                    "a leap second (:60) can only be the last second of a month in UTC (23:59:60Z on its last day)".to_owned(),
                ));
            }
        }
        // Whole seconds since 1970 (negative before), then the fraction's
        // milliseconds added: truncation toward the past.
        let millis = if leap {
            999
        } else {
            self.fraction
                .iter()
                .chain(b"000")
                .take(3)
                .fold(0, |millis, digit| {
                    millis * 10 + i64::from(digit.saturating_sub(b'0'))
                })
        };
        // At most ±2.6e14: far from overflowing.
        Ok(seconds * 1000 + millis)
    }
}

/// RFC 3339 §5.6 `date-time`: `full-date "T" full-time`, where
/// `full-time = partial-time time-offset`,
/// `partial-time = time-hour ":" time-minute ":" time-second [time-secfrac]`,
/// `time-secfrac = "." 1*DIGIT` and
/// `time-offset = "Z" / ("+" / "-") time-hour ":" time-minute`; `T`, `Z`
/// in either case, a space for `T` (§5.6, note). The offset's ranges are
/// checked here, the calendar's and the clock's by
/// [`Rfc3339::unix_millis`].
fn parse_rfc3339(text: &str) -> Result<Rfc3339<'_>, &'static str> {
    let bytes = text.as_bytes();
    // The value of the ASCII digits at `range`, if they all are.
    let number = |range: core::ops::Range<usize>| {
        let digits = bytes.get(range)?;
        digits.iter().all(u8::is_ascii_digit).then(|| {
            digits
                .iter()
                .fold(0i16, |n, digit| n * 10 + i16::from(digit - b'0'))
        })
    };
    // Two digits (at most 99) as an `i8`.
    let two = |start: usize| number(start..start + 2).and_then(|n| i8::try_from(n).ok());
    let at = |index: usize, expected: &[u8]| bytes.get(index).is_some_and(|b| expected.contains(b));
    let date = (|| {
        let year = number(0..4)?;
        (at(4, b"-") && at(7, b"-")).then_some(())?;
        Some((year, two(5)?, two(8)?))
    })();
    let Some((year, month, day)) = date else {
        return Err("the date must be YYYY-MM-DD");
    };
    if !at(10, b"Tt ") {
        return Err("the date and the time must be separated by `T` (or a space)");
    }
    let time = (|| {
        (at(13, b":") && at(16, b":")).then_some(())?;
        Some((two(11)?, two(14)?, two(17)?))
    })();
    let Some((hour, minute, second)) = time else {
        return Err("the time must be HH:MM:SS");
    };
    let mut index = 19;
    let mut fraction: &[u8] = &[];
    if at(index, b".") {
        let start = index + 1;
        index = start;
        while bytes.get(index).is_some_and(u8::is_ascii_digit) {
            index += 1;
        }
        fraction = bytes.get(start..index).unwrap_or_default();
        if fraction.is_empty() {
            return Err("a `.` must be followed by the digits of the fraction");
        }
    }
    let offset_minutes = match bytes.get(index..) {
        Some(b"Z" | b"z") => 0,
        Some([sign @ (b'+' | b'-'), _, _, b':', _, _]) => match (two(index + 1), two(index + 4)) {
            (Some(hours), Some(minutes)) if hours <= 23 && minutes <= 59 => {
                let minutes = i16::from(hours) * 60 + i16::from(minutes);
                if *sign == b'-' { -minutes } else { minutes }
            }
            (Some(_), Some(_)) => return Err("the offset must lie within -23:59..=+23:59"),
            _ => return Err("the offset must be Z or ±HH:MM"),
        },
        _ => return Err("the offset must be Z or ±HH:MM"),
    };
    Ok(Rfc3339 {
        year,
        month,
        day,
        hour,
        minute,
        second,
        fraction,
        offset_minutes,
    })
}

#[cfg(test)]
mod tests {
    use super::{FIRST_SECONDS, LAST_SECONDS, Rfc3339, UNIX_EPOCH, parse_rfc3339, rfc3339_millis};

    fn check_rfc3339_syntax(text: &str) -> Result<(), &'static str> {
        parse_rfc3339(text).map(|_| ())
    }

    #[test]
    fn rfc3339_grammar_table() {
        for accepted in [
            "2024-01-01T00:00:00Z",
            "2024-01-01t00:00:00z",
            "2024-01-01T00:00:00.5Z",
            "2024-01-01T00:00:00.123456789+05:30",
            "2024-01-01T00:00:00+23:59",
            "2024-01-01T00:00:00-23:59",
            "2024-01-01T00:00:00-00:00",
            "2024-01-01 00:00:00Z",
        ] {
            assert_eq!(check_rfc3339_syntax(accepted), Ok(()), "{accepted}");
        }
        for refused in [
            "2024-01-01T00:00:00+25:00",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00-24:00",
            "2024-01-01T00:00:00+23:60",
            "2024-01-01T00:00:00+0530",
            "2024-01-01T00:00:00+05:30:00",
            "2024-01-01T00:00:00",
            "2024-01-01_00:00:00Z",
            "2024-01-01T00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-1-01T00:00:00Z",
            "",
            "2024-01-01T00:00:00Z ",
            "２024-01-01T00:00:00Z",
        ] {
            assert!(check_rfc3339_syntax(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_range_is_what_rfc3339_can_write_in_utc() {
        let seconds = |year, month, day, hour, minute, second| {
            jiff::civil::DateTime::constant(year, month, day, hour, minute, second, 0)
                .duration_since(UNIX_EPOCH)
                .as_secs()
        };
        assert_eq!(seconds(0, 1, 1, 0, 0, 0), FIRST_SECONDS);
        assert_eq!(seconds(9999, 12, 31, 23, 59, 59), LAST_SECONDS);
        assert_eq!(
            rfc3339_millis("0000-01-01T00:00:00Z"),
            Ok(FIRST_SECONDS * 1000)
        );
        assert_eq!(
            rfc3339_millis("9999-12-31T23:59:59.999999999Z"),
            Ok(LAST_SECONDS * 1000 + 999)
        );
    }

    #[test]
    fn fields_are_read_as_written() {
        assert_eq!(
            parse_rfc3339("2024-02-29t23:59:60.0123456789-05:30"),
            Ok(Rfc3339 {
                year: 2024,
                month: 2,
                day: 29,
                hour: 23,
                minute: 59,
                second: 60,
                fraction: b"0123456789",
                offset_minutes: -330,
            })
        );
        assert_eq!(
            parse_rfc3339("0000-01-01 00:00:00+23:59").map(|fields| fields.offset_minutes),
            Ok(1439)
        );
    }

    #[test]
    fn refusals_say_why() {
        for (text, why) in [
            ("2023-02-29T00:00:00Z", "day"),
            ("2024-01-01T24:00:00Z", "hour"),
            (
                "2024-01-01T00:00:61Z",
                "the second must be 00..=59 (60 for a leap second)",
            ),
            (
                "9999-12-31T23:59:59-00:01",
                "is outside 0000-01-01T00:00:00Z..=9999-12-31T23:59:59.999999999Z, the instants RFC 3339 can write in UTC: with its offset it is after them",
            ),
            (
                "0000-01-01T00:00:00+00:01",
                "with its offset it is before them",
            ),
            (
                "2024-01-31T12:59:60Z",
                "a leap second (:60) can only be the last second of a month",
            ),
        ] {
            let error = rfc3339_millis(text).expect_err(text);
            assert_eq!(error.code, "invalid_params");
            assert!(error.message.contains(why), "{text}: {}", error.message);
        }
    }
}
