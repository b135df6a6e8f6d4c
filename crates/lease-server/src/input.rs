//! Reading a request: its JSON body checked field by field against what the endpoint takes
//! (so an error names the field and never repeats a value), and checked values turned into
//! the domain's types with the same care.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use lease_domain::InputError;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::problem::Problem;

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Any JSON number.
    Number,
    /// A whole number from 0 up to the bound.
    Unsigned(u64),
    /// A whole number that fits an `i64`.
    Integer,
    /// A string.
    Text,
    /// An array.
    Array,
    /// An object.
    Object,
    /// `true` or `false`.
    Bool,
}

/// One field an endpoint takes.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Whether it must be present (and not null).
    pub required: bool,
}

/// A required field.
#[must_use]
pub const fn required(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

/// An optional field (absent or null).
#[must_use]
pub const fn optional(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

fn fits(value: &Value, kind: Kind) -> bool {
    match kind {
        Kind::Number => value.is_number(),
        Kind::Unsigned(max) => value.as_u64().is_some_and(|n| n <= max),
        Kind::Integer => value.as_i64().is_some(),
        Kind::Text => value.is_string(),
        Kind::Array => value.is_array(),
        Kind::Object => value.is_object(),
        Kind::Bool => value.is_boolean(),
    }
}

fn wanted(kind: Kind) -> String {
    match kind {
        Kind::Number => "a number".to_owned(),
        Kind::Unsigned(max) => format!("a whole number from 0 to {max}"),
        Kind::Integer => "a whole number that fits 64 bits".to_owned(),
        Kind::Text => "a string".to_owned(),
        Kind::Array => "an array".to_owned(),
        Kind::Object => "an object".to_owned(),
        Kind::Bool => "true or false".to_owned(),
    }
}

/// Checks a JSON value against the fields an endpoint takes.
///
/// # Errors
/// `422` naming the first field that is missing, of the wrong type or unknown (an unknown
/// field is not named: its name came from the request; the fields taken are listed instead).
pub fn check_fields(value: &Value, fields: &[Field]) -> Result<(), Problem> {
    let Some(object) = value.as_object() else {
        return Err(Problem::invalid("the body must be a JSON object"));
    };
    if let Some(_unknown) = object
        .keys()
        .find(|k| !fields.iter().any(|f| f.name == k.as_str()))
    {
        let taken: Vec<&str> = fields.iter().map(|f| f.name).collect();
        return Err(Problem::invalid(format!(
            "the body has a field this endpoint does not take (it takes: {})",
            taken.join(", ")
        )));
    }
    for field in fields {
        match object.get(field.name) {
            None | Some(Value::Null) if field.required => {
                return Err(Problem::invalid(format!(
                    "field `{}` is required",
                    field.name
                )));
            }
            None | Some(Value::Null) => {}
            Some(value) if !fits(value, field.kind) => {
                return Err(Problem::invalid(format!(
                    "field `{}` must be {}",
                    field.name,
                    wanted(field.kind)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Reads a JSON body: `415` unless it is `application/json`, `413` over the body limit, `400`
/// unless it is JSON, `422` unless its fields are those of `fields`; with `empty_is_object`,
/// an empty body (with any or no content type) reads as `{}`.
///
/// # Errors
/// The [`Problem`] that says which.
pub fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    fields: &[Field],
    empty_is_object: bool,
) -> Result<T, Problem> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "the body is over the size limit",
            )
        } else {
            Problem::malformed("the body could not be read")
        }
    })?;
    let value = if body.is_empty() && empty_is_object {
        Value::Object(serde_json::Map::new())
    } else {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be sent as Content-Type: application/json",
            ));
        }
        serde_json::from_slice(&body).map_err(|e| {
            Problem::malformed(format!(
                "the body is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?
    };
    check_fields(&value, fields)?;
    serde_json::from_value(value)
        .map_err(|_| Problem::invalid("a field of the body has a value out of range"))
}

/// The problem with a name, text or number a caller gave, naming the field but not the value.
#[must_use]
pub fn bad_value(field: &str, err: &InputError) -> Problem {
    let what = match err {
        InputError::EmptyJobId | InputError::EmptyOwner | InputError::EmptyQueue => {
            "must not be empty".to_owned()
        }
        InputError::NulInText { .. } => "must not contain a NUL character".to_owned(),
        InputError::NameTooLong { .. } => format!(
            "is over the limit of {} bytes",
            lease_domain::MAX_NAME_BYTES
        ),
        InputError::PayloadTooLarge { limit, .. } => {
            format!("is over the limit of {limit} bytes")
        }
        InputError::NonPositiveTtl(_) | InputError::TtlBelowResolution { .. } => {
            "must be greater than 0 (and large enough to move the time on)".to_owned()
        }
        InputError::UntilOverflow { .. } => "is too large".to_owned(),
        InputError::FenceOutOfRange(_) => {
            format!("must be at most {}", lease_domain::Fence::MAX.get())
        }
        _ => "has a value out of range".to_owned(),
    };
    Problem::invalid(format!("field `{field}` {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: [Field; 3] = [
        required("ttl", Kind::Number),
        optional("limit", Kind::Unsigned(100)),
        optional("owner", Kind::Text),
    ];

    fn detail(problem: Problem) -> (u16, String) {
        let response = axum::response::IntoResponse::into_response(problem);
        (response.status().as_u16(), format!("{response:?}"))
    }

    #[test]
    fn each_field_is_checked_by_name_and_no_value_is_repeated() {
        assert!(check_fields(&serde_json::json!({"ttl": 1.5, "limit": null}), &FIELDS).is_ok());
        for (body, says) in [
            (serde_json::json!({}), "field `ttl` is required"),
            (
                serde_json::json!({"ttl": "s3cr3t"}),
                "field `ttl` must be a number",
            ),
            (
                serde_json::json!({"ttl": 1, "limit": 101}),
                "field `limit` must be a whole number from 0 to 100",
            ),
            (
                serde_json::json!({"ttl": 1, "limit": -1}),
                "field `limit` must be a whole number",
            ),
            (
                serde_json::json!({"ttl": 1, "s3cr3t": 1}),
                "does not take (it takes: ttl, limit, owner)",
            ),
            (serde_json::json!(["s3cr3t"]), "must be a JSON object"),
        ] {
            let problem = check_fields(&body, &FIELDS).unwrap_err();
            assert_eq!(problem.status(), StatusCode::UNPROCESSABLE_ENTITY);
            let (_, shown) = detail(problem.clone());
            assert!(
                problem_detail(&problem).contains(says),
                "{body}: {}",
                problem_detail(&problem)
            );
            assert!(!shown.contains("s3cr3t"));
        }
    }

    fn problem_detail(problem: &Problem) -> String {
        format!("{problem:?}")
    }

    #[test]
    fn a_body_is_json_of_the_right_type_and_size_or_refused_with_its_own_status() {
        let json = {
            let mut h = HeaderMap::new();
            h.insert(
                header::CONTENT_TYPE,
                "application/json; charset=utf-8".parse().unwrap(),
            );
            h
        };
        let read = |headers: &HeaderMap, body: &'static str, empty: bool| {
            json_body::<Value>(
                headers,
                Ok(Bytes::from_static(body.as_bytes())),
                &FIELDS,
                empty,
            )
            .map_err(|p| p.status().as_u16())
        };
        assert!(read(&json, r#"{"ttl": 3}"#, false).is_ok());
        assert_eq!(read(&HeaderMap::new(), r#"{"ttl": 3}"#, false), Err(415));
        assert_eq!(read(&json, r#"{"ttl": "#, false), Err(400));
        assert_eq!(read(&json, "", false), Err(400));
        assert_eq!(
            read(&HeaderMap::new(), "", true),
            Err(422),
            "{{}} lacks ttl"
        );
    }
}
