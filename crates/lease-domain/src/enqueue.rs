//! One job to enqueue as a caller gives it, and the one check that makes it an
//! [`EnqueueSpec`]: the network service's bodies, the CLI's flags and JSON lines and the Python
//! package's arguments each fill an [`EnqueueFields`] in their own form and call
//! [`EnqueueFields::check`], so each field is read, defaulted and refused in one place (a new
//! field is added here, then once at each language's boundary).

use crate::{
    EnqueueSpec, GroupKey, InputError, JobId, OnParentFailure, Payload, QueueName, Timestamp,
    TraceContext, Ttl,
};

/// One job as a caller names it: each field as given, `None` where it says nothing (the
/// defaults then say). Times and durations are seconds; the payload is its bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnqueueFields {
    /// The job's id.
    pub id: String,
    /// Its queue.
    pub queue: Option<String>,
    /// Higher is claimed first.
    pub priority: Option<i64>,
    /// Not claimable before this time.
    pub run_at: Option<f64>,
    /// How many leases claims may hand out.
    pub max_attempts: Option<u32>,
    /// The payload's bytes.
    pub payload: Option<Vec<u8>>,
    /// When it was enqueued (taken only from a caller whose clock is trusted: the caller
    /// leaves it out otherwise).
    pub enqueued_at: Option<f64>,
    /// How long one attempt may run.
    pub timeout: Option<f64>,
    /// `finished`: a finished job of this id runs again.
    pub replace: Option<String>,
    /// The job's group in its queue.
    pub group: Option<String>,
    /// Debounce, in seconds.
    pub debounce: Option<f64>,
    /// The jobs it runs after.
    pub after: Option<Vec<String>>,
    /// `cancel` or `run`: what it does when a parent fails.
    pub on_parent_failure: Option<String>,
    /// The W3C `traceparent` of the span that enqueues it.
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (ignored without one).
    pub tracestate: Option<String>,
}

/// A field of an [`EnqueueFields`] that cannot be stored: which, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {error}")]
pub struct FieldRefused {
    /// The field, as callers name it (`id`, `run_at`, `after`, ...).
    pub field: &'static str,
    /// What is wrong with its value.
    pub error: InputError,
}

/// `value` checked by `check`, or `field` refused with its error.
fn checked<T, U>(
    field: &'static str,
    value: Option<T>,
    check: impl FnOnce(T) -> Result<U, InputError>,
) -> Result<Option<U>, FieldRefused> {
    value
        .map(check)
        .transpose()
        .map_err(|error| FieldRefused { field, error })
}

impl EnqueueFields {
    /// The job's id and spec: each field checked into the domain's type, and `defaults`
    /// wherever the caller said nothing (the queue a path or a flag names, the enqueue's time
    /// by the clock, the trace context of a request's headers).
    ///
    /// # Errors
    /// The first field that cannot be stored, with why.
    pub fn check(mut self, defaults: &EnqueueSpec) -> Result<(JobId, EnqueueSpec), FieldRefused> {
        let id = JobId::new(std::mem::take(&mut self.id))
            .map_err(|error| FieldRefused { field: "id", error })?;
        Ok((id, self.spec(defaults)?))
    }

    /// The spec alone, its `id` not read: for a caller that names its jobs apart from their
    /// fields (the CLI's flags, which hold for every id it reads).
    ///
    /// # Errors
    /// The first field that cannot be stored, with why.
    pub fn spec(self, defaults: &EnqueueSpec) -> Result<EnqueueSpec, FieldRefused> {
        let time = |field, value: Option<f64>| checked(field, value, Timestamp::new);
        let ttl = |field, value: Option<f64>| checked(field, value, Ttl::new);
        let replace = checked("replace", self.replace, |r| {
            if r == "finished" {
                Ok(true)
            } else {
                Err(InputError::InvalidSetting(format!(
                    "{r:?} is not one; the one value is \"finished\""
                )))
            }
        })?;
        let after = checked("after", self.after, |ids| {
            ids.into_iter().map(JobId::new).collect::<Result<_, _>>()
        })?;
        let on_parent_failure = checked("on_parent_failure", self.on_parent_failure, |p| {
            OnParentFailure::parse(&p).map_err(InputError::from)
        })?;
        let tracestate = self.tracestate;
        let trace = checked("traceparent", self.traceparent, |parent| {
            TraceContext::new(&parent, tracestate.as_deref())
        })?;
        Ok(EnqueueSpec {
            queue: checked("queue", self.queue, QueueName::new)?
                .unwrap_or_else(|| defaults.queue.clone()),
            priority: self.priority.unwrap_or(defaults.priority),
            run_at: time("run_at", self.run_at)?.or(defaults.run_at),
            max_attempts: self.max_attempts.or(defaults.max_attempts),
            payload: checked("payload", self.payload, |bytes| {
                Payload::new(bytes, Payload::DEFAULT_LIMIT)
            })?
            .or_else(|| defaults.payload.clone()),
            enqueued_at: time("enqueued_at", self.enqueued_at)?.or(defaults.enqueued_at),
            timeout: ttl("timeout", self.timeout)?.or(defaults.timeout),
            replace_finished: replace.unwrap_or(defaults.replace_finished),
            group: checked("group", self.group, GroupKey::new)?.or_else(|| defaults.group.clone()),
            debounce: ttl("debounce", self.debounce)?.or(defaults.debounce),
            after: after.unwrap_or_else(|| defaults.after.clone()),
            on_parent_failure: on_parent_failure.unwrap_or(defaults.on_parent_failure),
            trace: trace.or_else(|| defaults.trace.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> EnqueueSpec {
        EnqueueSpec {
            queue: QueueName::new("mail").unwrap(),
            priority: 2,
            max_attempts: Some(3),
            ..EnqueueSpec::default()
        }
    }

    #[test]
    fn a_field_left_out_takes_the_default_and_a_field_given_overrides_it() {
        let (id, spec) = EnqueueFields {
            id: "a".into(),
            priority: Some(-1),
            run_at: Some(5.5),
            payload: Some(b"hi".to_vec()),
            after: Some(vec!["p".into()]),
            on_parent_failure: Some("run".into()),
            replace: Some("finished".into()),
            ..EnqueueFields::default()
        }
        .check(&defaults())
        .unwrap();
        assert_eq!(id.as_str(), "a");
        assert_eq!(
            (spec.queue.as_str(), spec.priority, spec.max_attempts),
            ("mail", -1, Some(3))
        );
        assert_eq!(spec.run_at, Some(Timestamp::new(5.5).unwrap()));
        assert_eq!(
            spec.payload.as_ref().map(Payload::as_bytes),
            Some(&b"hi"[..])
        );
        assert_eq!(spec.after, [JobId::new("p").unwrap()]);
        assert_eq!(spec.on_parent_failure, OnParentFailure::Run);
        assert!(spec.replace_finished);
        let (_, plain) = EnqueueFields {
            id: "b".into(),
            ..EnqueueFields::default()
        }
        .check(&defaults())
        .unwrap();
        assert_eq!(plain, defaults());
    }

    #[test]
    fn each_bad_field_is_refused_by_its_name() {
        let refused = |fields: EnqueueFields| fields.check(&defaults()).unwrap_err().field;
        let base = || EnqueueFields {
            id: "a".into(),
            ..EnqueueFields::default()
        };
        assert_eq!(
            refused(EnqueueFields {
                id: String::new(),
                ..base()
            }),
            "id"
        );
        assert_eq!(
            refused(EnqueueFields {
                queue: Some(String::new()),
                ..base()
            }),
            "queue"
        );
        assert_eq!(
            refused(EnqueueFields {
                run_at: Some(f64::NAN),
                ..base()
            }),
            "run_at"
        );
        assert_eq!(
            refused(EnqueueFields {
                timeout: Some(-1.0),
                ..base()
            }),
            "timeout"
        );
        assert_eq!(
            refused(EnqueueFields {
                debounce: Some(0.0),
                ..base()
            }),
            "debounce"
        );
        assert_eq!(
            refused(EnqueueFields {
                group: Some(String::new()),
                ..base()
            }),
            "group"
        );
        assert_eq!(
            refused(EnqueueFields {
                replace: Some("all".into()),
                ..base()
            }),
            "replace"
        );
        assert_eq!(
            refused(EnqueueFields {
                after: Some(vec![String::new()]),
                ..base()
            }),
            "after"
        );
        assert_eq!(
            refused(EnqueueFields {
                on_parent_failure: Some("skip".into()),
                ..base()
            }),
            "on_parent_failure"
        );
        assert_eq!(
            refused(EnqueueFields {
                traceparent: Some("00-x".into()),
                ..base()
            }),
            "traceparent"
        );
        assert_eq!(
            refused(EnqueueFields {
                payload: Some(vec![0; Payload::DEFAULT_LIMIT + 1]),
                ..base()
            }),
            "payload"
        );
    }
}
