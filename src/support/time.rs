//! The time formats of verdict's answers: RFC 3339 in UTC, with microseconds
//! for decisions, reviews and the webhook, and with milliseconds for batch
//! jobs. One place, so that no path can panic on a time outside years
//! 1..=9999 (`OffsetDateTime::from` would). Audit records keep their own
//! fixed-width form (`audit::record`), which their hashes cover.

use std::time::SystemTime;

use time::macros::format_description;
use time::OffsetDateTime;

/// RFC 3339 UTC, e.g. `2026-11-22T21:30:00.123456Z`; `None` outside years
/// 1..=9999.
pub fn try_rfc3339(t: SystemTime) -> Option<String> {
    let nanos = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).ok()?,
        Err(before) => -i128::try_from(before.duration().as_nanos()).ok()?,
    };
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()?
        .format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// [`try_rfc3339`], or the whole seconds since the Unix epoch as text for a
/// time it cannot write (never a time verdict stamps itself).
pub fn rfc3339(t: SystemTime) -> String {
    try_rfc3339(t).unwrap_or_else(|| {
        let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => i128::from(d.as_secs()),
            Err(before) => -i128::from(before.duration().as_secs()),
        };
        secs.to_string()
    })
}

/// `2026-11-22T21:26:13.123Z` for `ms` milliseconds since the Unix epoch
/// (the epoch itself for one out of range).
pub fn rfc3339_millis(ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn microseconds_in_utc_and_no_panic_out_of_range() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_123_456);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40.123456Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(try_rfc3339(far), None);
        assert_eq!(rfc3339(far), "400000000000");
    }

    #[test]
    fn milliseconds_for_jobs() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_795_000_000_123),
            "2026-11-18T11:06:40.123Z"
        );
    }
}
