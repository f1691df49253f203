//! The E2B wire protocol, as Lizard speaks it so that E2B's published SDKs (`e2b`,
//! `@e2b/code-interpreter`, `e2b-code-interpreter`) work against `lizard serve` unmodified.
//!
//! Three surfaces, one module each:
//! - [`ci`]: the code interpreter (E2B's in-sandbox port 49999): `/execute` NDJSON lines, contexts.
//!   Its output lines are a serialization of [`crate::ExecutionEvent`] ([`ci::lines`]), never a
//!   second event type.
//! - [`envd`]: the sandbox daemon (E2B's port 49983): Connect-protocol JSON messages of the
//!   `process.Process` and `filesystem.Filesystem` services, the Connect envelope framing, and the
//!   `/files` answers.
//! - [`api`]: the control plane (`api.e2b.dev`): sandbox create/connect/info/list bodies and the
//!   error body.
//!
//! Like the rest of the crate this is types and pure functions: no I/O, no HTTP framework. Field
//! names follow what the SDKs send and parse (see `docs/E2B.md` for the mapping onto Lizard).

pub mod api;
pub mod ci;
pub mod envd;
pub mod templates;

/// The E2B port of the code interpreter inside a sandbox (header `E2b-Sandbox-Port`).
pub const CODE_INTERPRETER_PORT: u16 = 49999;
/// The E2B port of envd (processes, filesystem, `/files`).
pub const ENVD_PORT: u16 = 49983;
/// The sandbox id the SDKs use in debug mode (`E2B_DEBUG=true`).
pub const DEBUG_SANDBOX_ID: &str = "debug_sandbox_id";
/// The envd version Lizard reports: the SDKs gate features on it — octet-stream uploads (0.5.7),
/// file metadata as `user.e2b.*` xattrs (0.6.2), entries in watch events (0.6.3) and
/// `allowNetworkMounts` (0.6.4), the newest gate of E2B's SDKs (JavaScript `e2b` 2.51, Python
/// `e2b` 2.63). Lizard's envd has them all (`lizard-agent`'s `e2b::envd`).
pub const ENVD_VERSION: &str = "0.6.4";

/// Milliseconds since the Unix epoch as RFC 3339 UTC with microseconds
/// (`2025-01-01T12:00:00.123000Z`), the form E2B's timestamps take.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}000Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (H. Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339_ms(1_735_732_800_123), "2025-01-01T12:00:00.123000Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999000Z");
    }
}
