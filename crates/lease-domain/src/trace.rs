//! The W3C trace context a job carries from its enqueue to its attempts
//! (<https://www.w3.org/TR/trace-context/>): checked once at the boundary, kept as sent.

use crate::InputError;

/// The longest `tracestate` kept (the specification's bound for one header).
pub const TRACESTATE_MAX: usize = 512;

/// A checked `traceparent`, with its `tracestate` if one came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

fn refused<T>(what: impl Into<String>) -> Result<T, InputError> {
    Err(InputError::TraceContext(what.into()))
}

/// Whether `text` is `len` lowercase hex digits.
fn lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl TraceContext {
    /// `traceparent` (`VERSION-TRACEID-PARENTID-FLAGS`, lowercase hex: version 00 is exactly
    /// that; a later version may add fields after a `-`) and `tracestate` (at most
    /// [`TRACESTATE_MAX`] bytes of printable ASCII), checked.
    ///
    /// # Errors
    /// [`InputError::TraceContext`] naming the header and what is wrong with it.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, InputError> {
        let fields: Vec<&str> = traceparent.splitn(5, '-').collect();
        let [version, trace_id, parent_id, flags, rest @ ..] = fields.as_slice() else {
            return refused(
                "traceparent must be VERSION-TRACEID-PARENTID-FLAGS (00-32 hex-16 hex-2 hex)",
            );
        };
        if !lower_hex(version, 2) || *version == "ff" {
            return refused(format!(
                "traceparent's version must be 2 lowercase hex digits other than ff, got {version:?}"
            ));
        }
        if *version == "00" && !rest.is_empty() {
            return refused("traceparent of version 00 has exactly four fields");
        }
        if !lower_hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
            return refused("traceparent's trace id must be 32 lowercase hex digits, not all zero");
        }
        if !lower_hex(parent_id, 16) || parent_id.bytes().all(|b| b == b'0') {
            return refused(
                "traceparent's parent id must be 16 lowercase hex digits, not all zero",
            );
        }
        if !lower_hex(flags, 2) {
            return refused("traceparent's flags must be 2 lowercase hex digits");
        }
        let tracestate = match tracestate.map(str::trim).filter(|t| !t.is_empty()) {
            Some(state) if state.len() > TRACESTATE_MAX => {
                return refused(format!(
                    "tracestate is {} bytes, over the limit of {TRACESTATE_MAX}",
                    state.len()
                ));
            }
            Some(state) if !state.bytes().all(|b| (0x20..0x7f).contains(&b)) => {
                return refused("tracestate must be printable ASCII");
            }
            state => state.map(str::to_owned),
        };
        Ok(Self {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The `traceparent` as sent.
    #[must_use]
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate`, if any.
    #[must_use]
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace's id (32 hex digits).
    #[must_use]
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or_default()
    }

    /// The enqueuing span's id (16 hex digits): the parent of the first attempt's span.
    #[must_use]
    pub fn parent_id(&self) -> &str {
        self.traceparent.get(36..52).unwrap_or_default()
    }

    /// Whether the enqueuing side sampled the trace (flag bit 0).
    #[must_use]
    pub fn sampled(&self) -> bool {
        self.traceparent
            .get(53..55)
            .and_then(|f| u8::from_str_radix(f, 16).ok())
            .is_some_and(|f| f & 1 == 1)
    }
}

/// How a span joins a trace that began elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// It continues the trace: a child of the span that began it (a job's first attempt, a
    /// request's span under its caller's `traceparent`).
    Child,
    /// It starts a trace of its own, linked to that span (a retry; a claim, which serves jobs
    /// of many traces).
    Link,
}

impl Join {
    /// How attempt `attempt` of a job joins the trace it was enqueued in: the first (or a claim
    /// by id, attempt 0) continues it; a retry starts a trace of its own linked to it, as awa
    /// does.
    #[must_use]
    pub fn attempt(attempt: u32) -> Self {
        if attempt <= 1 {
            Self::Child
        } else {
            Self::Link
        }
    }
}
