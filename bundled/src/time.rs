//! `time_now`, `time_after`, `time_before`: the query's `trigger_time`
//! (never the wall clock), compared with a timestamp given as unix
//! milliseconds or as an RFC 3339 date-time.
//!
//! An RFC 3339 string is checked against the RFC's grammar before it is
//! converted (`jiff` alone is more lenient: it takes offsets up to ±25:59,
//! offsets with seconds, and other ISO 8601 forms): `YYYY-MM-DDTHH:MM:SS`,
//! an optional fraction, then `Z` or `±HH:MM` with the hour at most 23 and
//! the minute at most 59, as Decision Gate's `time` built-in (the `time`
//! crate's RFC 3339 parser) requires. `T` and `Z` may be lower case, and
//! the date and time may be separated by a space (RFC 3339 §5.6, note). The
//! input is at most a few dozen bytes by the time it reaches the converter;
//! nothing here allocates in proportion to it beyond the error message.

use evidence_wire::evidence::{EvidenceError, TriggerTime};
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
                "params.timestamp {:?} is not an RFC 3339 date-time: {why}; write e.g. \"2024-01-01T00:00:00Z\" or \"2024-01-01T09:30:00+05:30\"",
                excerpt(text)
            ),
        )
    };
    check_rfc3339_syntax(text).map_err(refuse)?;
    let timestamp: jiff::Timestamp = text.parse().map_err(|error: jiff::Error| {
        let detail = error.to_string();
        refuse(&detail)
    })?;
    Ok(timestamp.as_millisecond())
}

/// At most 64 characters of `text`, for an error message.
fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(64).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// RFC 3339 §5.6 `date-time`: `full-date "T" full-time`, where
/// `full-time = partial-time time-offset` and
/// `time-offset = "Z" / ("+" / "-") time-hour ":" time-minute`.
/// Field ranges that depend on the calendar (day of month, leap seconds)
/// are left to the converter; the offset's ranges are checked here.
fn check_rfc3339_syntax(text: &str) -> Result<(), &'static str> {
    let bytes = text.as_bytes();
    let digits = |range: core::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_digit))
    };
    let at = |index: usize, expected: &[u8]| bytes.get(index).is_some_and(|b| expected.contains(b));
    if !(digits(0..4) && at(4, b"-") && digits(5..7) && at(7, b"-") && digits(8..10)) {
        return Err("the date must be YYYY-MM-DD");
    }
    if !at(10, b"Tt ") {
        return Err("the date and the time must be separated by `T` (or a space)");
    }
    if !(digits(11..13) && at(13, b":") && digits(14..16) && at(16, b":") && digits(17..19)) {
        return Err("the time must be HH:MM:SS");
    }
    let mut index = 19;
    if at(index, b".") {
        let start = index + 1;
        index = start;
        while bytes.get(index).is_some_and(u8::is_ascii_digit) {
            index += 1;
        }
        if index == start {
            return Err("a `.` must be followed by the digits of the fraction");
        }
    }
    match bytes.get(index..) {
        Some(b"Z" | b"z") => Ok(()),
        Some([b'+' | b'-', h1, h2, b':', m1, m2]) => {
            let number = |high: &u8, low: &u8| {
                (high.is_ascii_digit() && low.is_ascii_digit())
                    .then(|| (high - b'0') * 10 + (low - b'0'))
            };
            match (number(h1, h2), number(m1, m2)) {
                (Some(hour), Some(minute)) if hour <= 23 && minute <= 59 => Ok(()),
                (Some(_), Some(_)) => Err("the offset must lie within -23:59..=+23:59"),
                _ => Err("the offset must be Z or ±HH:MM"),
            }
        }
        _ => Err("the offset must be Z or ±HH:MM"),
    }
}

#[cfg(test)]
mod tests {
    use super::check_rfc3339_syntax;

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
}
