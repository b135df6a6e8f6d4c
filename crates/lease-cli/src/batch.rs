//! The input of `enqueue-many`: one job id per line, or one JSON object per line. Every line
//! is checked before anything is stored; an error names the line and what is wrong with it.

use lease_domain::{EnqueueSpec, JobId, Payload, QueueName, Timestamp, Ttl};
use serde_json::Value;

use crate::args::RequestError;

/// The fields a JSON line may have.
const FIELDS: [&str; 12] = EnqueueSpec::FIELDS;

/// The jobs `input` lists, each with `defaults` where its line says nothing. Empty lines are
/// skipped; a line's final carriage return (a file written on Windows) is not part of it.
///
/// # Errors
/// [`RequestError::Read`] naming the line (counted from 1) and the problem: input that is not
/// UTF-8, a bad id, or, for JSON lines, text that is not an object, an unknown field, a field
/// of the wrong type or a value out of range.
pub(crate) fn parse(
    input: &[u8],
    defaults: &EnqueueSpec,
    json_lines: bool,
) -> Result<Vec<(JobId, EnqueueSpec)>, RequestError> {
    let text = std::str::from_utf8(input).map_err(|e| {
        let line = input[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        RequestError::Read(format!("standard input, line {line}: not UTF-8 text"))
    })?;
    let mut jobs = Vec::new();
    for (n, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let at = |problem: String| {
            RequestError::Read(format!("standard input, line {}: {problem}", n + 1))
        };
        let job = if json_lines {
            json_line(line, defaults).map_err(at)?
        } else {
            let id = JobId::new(line).map_err(|e| at(e.to_string()))?;
            (id, defaults.clone())
        };
        jobs.push(job);
    }
    Ok(jobs)
}

/// One JSON line: an object with `id` and any of the other [`FIELDS`].
fn json_line(line: &str, defaults: &EnqueueSpec) -> Result<(JobId, EnqueueSpec), String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("not a JSON object ({e})"))?;
    let Value::Object(fields) = value else {
        return Err("not a JSON object".to_owned());
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field {unknown:?} (the fields are {})",
            FIELDS.join(", ")
        ));
    }
    let text = |name: &str| match fields.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{name} must be a string, not {other}")),
    };
    let id = text("id")?.ok_or("the field id is missing")?;
    let id = JobId::new(id).map_err(|e| e.to_string())?;
    let mut spec = defaults.clone();
    if let Some(queue) = text("queue")? {
        spec.queue = QueueName::new(queue).map_err(|e| e.to_string())?;
    }
    if let Some(value) = fields.get("priority") {
        spec.priority = value.as_i64().ok_or_else(|| {
            format!("priority must be a whole number that fits 64 bits, not {value}")
        })?;
    }
    if let Some(value) = fields.get("run_at") {
        let seconds = value
            .as_f64()
            .ok_or_else(|| format!("run_at must be a number of seconds, not {value}"))?;
        spec.run_at = Some(Timestamp::new(seconds).map_err(|e| format!("run_at: {e}"))?);
    }
    if let Some(value) = fields.get("max_attempts") {
        let n = value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "max_attempts must be a whole number from 0 to {}, not {value}",
                    u32::MAX
                )
            })?;
        spec.max_attempts = Some(n);
    }
    if let Some(value) = fields.get("timeout") {
        let seconds = value
            .as_f64()
            .ok_or_else(|| format!("timeout must be a number of seconds, not {value}"))?;
        spec.timeout = Some(Ttl::new(seconds).map_err(|e| format!("timeout: {e}"))?);
    }
    if let Some(value) = fields.get("debounce") {
        let seconds = value
            .as_f64()
            .ok_or_else(|| format!("debounce must be a number of seconds, not {value}"))?;
        spec.debounce = Some(Ttl::new(seconds).map_err(|e| format!("debounce: {e}"))?);
    }
    if let Some(group) = text("group")? {
        spec.group = Some(lease_domain::GroupKey::new(group).map_err(|e| format!("group: {e}"))?);
    }
    if let Some(value) = fields.get("after") {
        let parents = value
            .as_array()
            .ok_or_else(|| format!("after must be a list of job ids, not {value}"))?;
        spec.after = parents
            .iter()
            .map(|p| match p {
                Value::String(id) => JobId::new(id.clone()).map_err(|e| format!("after: {e}")),
                other => Err(format!(
                    "after must be a list of job ids, not one of {other}"
                )),
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(policy) = text("on_parent_failure")? {
        spec.on_parent_failure = lease_domain::OnParentFailure::parse(&policy)
            .map_err(|e| format!("on_parent_failure: {e}"))?;
    }
    match text("replace")?.as_deref() {
        None => {}
        Some("finished") => spec.replace_finished = true,
        Some(other) => {
            return Err(format!(
                "replace is {other:?}; the one value is \"finished\""
            ));
        }
    }
    if let Some(payload) = text("payload")? {
        spec.payload = Some(
            Payload::new(payload.into_bytes(), Payload::DEFAULT_LIMIT)
                .map_err(|e| e.to_string())?,
        );
    }
    Ok((id, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> EnqueueSpec {
        EnqueueSpec {
            queue: QueueName::new("mail").unwrap(),
            priority: 2,
            ..EnqueueSpec::default()
        }
    }

    fn error(input: &str, json: bool) -> String {
        parse(input.as_bytes(), &defaults(), json)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn id_lines_take_the_flags_skip_empty_lines_and_drop_a_final_carriage_return() {
        let jobs = parse(b"a\n\nb\r\n c\n", &defaults(), false).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", " c"]);
        assert!(jobs.iter().all(|(_, spec)| *spec == defaults()));
    }

    #[test]
    fn json_lines_override_the_flags_field_by_field() {
        let input = "{\"id\": \"a\"}\n{\"id\": \"b\", \"queue\": \"sms\", \"priority\": -1, \
                     \"run_at\": 5.5, \"max_attempts\": 1, \"payload\": \"hi\"}\n";
        let jobs = parse(input.as_bytes(), &defaults(), true).unwrap();
        assert_eq!(jobs[0].1, defaults());
        let b = &jobs[1].1;
        assert_eq!(
            (b.queue.as_str(), b.priority, b.run_at, b.max_attempts),
            ("sms", -1, Some(Timestamp::new(5.5).unwrap()), Some(1))
        );
        assert_eq!(b.payload.as_ref().map(Payload::as_bytes), Some(&b"hi"[..]));
    }

    #[test]
    fn each_bad_line_is_named_with_what_is_wrong() {
        let cases = [
            (
                "{\"id\": \"a\"}\n[1]\n",
                true,
                "line 2: not a JSON object",
                "",
            ),
            (
                "{\"id\": \"a\", \"colour\": 1}",
                true,
                "line 1: unknown field \"colour\"",
                "",
            ),
            (
                "{\"queue\": \"q\"}",
                true,
                "line 1: the field id is missing",
                "",
            ),
            (
                "{\"id\": 7}",
                true,
                "line 1: id must be a string, not 7",
                "",
            ),
            (
                "{\"id\": \"a\", \"priority\": 1.5}",
                true,
                "priority must be a whole number",
                "",
            ),
            (
                "{\"id\": \"a\", \"max_attempts\": -1}",
                true,
                "max_attempts must be a whole number",
                "",
            ),
            (
                "{\"id\": \"a\", \"queue\": \"\"}",
                true,
                "line 1: ",
                "queue",
            ),
            ("{\"id\": \"a\"", true, "line 1: not a JSON object", ""),
        ];
        for (input, json, expected, also) in cases {
            let message = error(input, json);
            assert!(
                message.contains(expected) && message.contains(also),
                "{input}: {message}"
            );
        }
        let long = "x".repeat(lease_domain::MAX_NAME_BYTES + 1);
        assert!(error(&format!("ok\n{long}\n"), false).contains("line 2"));
        let not_utf8 = parse(b"a\nb\xff\n", &defaults(), false)
            .unwrap_err()
            .to_string();
        assert!(not_utf8.contains("line 2: not UTF-8"), "{not_utf8}");
    }
}
