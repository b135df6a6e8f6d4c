//! The input of `enqueue-many`: one job id per line, or one JSON object per line (a job as
//! `POST /v1/queues/{queue}/jobs/batch` takes one). Every line
//! is checked before anything is stored; an error names the line and what is wrong with it.

use lease_domain::{EnqueueSpec, JobId};

use crate::args::RequestError;

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

/// One JSON line: an object with `id` and any other field of a job as the network service's
/// batch enqueue takes one (`lease_server::batch_job_fields`), checked by the domain's one
/// enqueue check over `defaults`.
fn json_line(line: &str, defaults: &EnqueueSpec) -> Result<(JobId, EnqueueSpec), String> {
    lease_server::batch_job_fields(line)?
        .check(defaults)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_domain::{Payload, QueueName, Timestamp};

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
                "line 1: unknown field `colour`",
                "",
            ),
            ("{\"queue\": \"q\"}", true, "line 1: missing field `id`", ""),
            (
                "{\"id\": 7}",
                true,
                "line 1: id: invalid type: integer `7`, expected a string",
                "",
            ),
            (
                "{\"id\": \"a\", \"priority\": 1.5}",
                true,
                "line 1: priority: invalid type: floating point `1.5`, expected i64",
                "",
            ),
            (
                "{\"id\": \"a\", \"max_attempts\": -1}",
                true,
                "line 1: max_attempts: invalid value: integer `-1`, expected u32",
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
