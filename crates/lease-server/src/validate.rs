//! The OpenAPI document is the contract: before its handler runs, every request is checked
//! against the operation the served document gives for its route (the path parameters, the
//! query parameters, the JSON body), by a JSON Schema validator compiled from the document
//! itself. A constraint is declared once, on the type the document is generated from, and is
//! then both documented and enforced; a request the document allows is never refused for its
//! shape, and one it does not allow is refused `422`, naming the field, never its value.

use std::collections::HashMap;

use axum::http::Method;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::problem::Problem;

/// Where a parameter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    Path,
    Query,
}

/// One parameter of an operation, and how its text is read as the JSON its schema checks.
struct Param {
    name: String,
    location: Location,
    required: bool,
    /// The schema's type: how the parameter's text becomes a JSON value.
    kind: String,
    schema: jsonschema::Validator,
}

/// What one operation takes.
#[derive(Default)]
struct Operation {
    params: Vec<Param>,
    body: Option<jsonschema::Validator>,
    body_required: bool,
}

/// Every operation of the document, by method and path template.
#[derive(Default)]
pub(crate) struct Contract {
    operations: HashMap<(Method, String), Operation>,
}

impl std::fmt::Debug for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("operations", &self.operations.len())
            .finish()
    }
}

/// A validator for `schema`, whose `$ref`s point into the document's components.
fn compile(schema: &Value, document: &Value) -> Result<jsonschema::Validator, String> {
    let mut root = match schema {
        Value::Object(_) => schema.clone(),
        other => serde_json::json!({ "allOf": [other] }),
    };
    root["components"] = document["components"].clone();
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .map_err(|e| format!("a schema of the document does not compile: {e}"))
}

impl Contract {
    /// The contract of `document` (the served OpenAPI document, as JSON).
    ///
    /// # Errors
    /// A message when a schema of the document does not compile (a bug of the document).
    pub(crate) fn of(document: &Value) -> Result<Self, String> {
        let mut operations = HashMap::new();
        let Some(paths) = document["paths"].as_object() else {
            return Ok(Self::default());
        };
        for (path, item) in paths {
            let Some(item) = item.as_object() else {
                continue;
            };
            for (method, operation) in item {
                let Ok(method) = method.to_uppercase().parse::<Method>() else {
                    continue;
                };
                let mut compiled = Operation::default();
                for param in operation["parameters"].as_array().into_iter().flatten() {
                    let location = match param["in"].as_str() {
                        Some("path") => Location::Path,
                        Some("query") => Location::Query,
                        _ => continue,
                    };
                    compiled.params.push(Param {
                        name: param["name"].as_str().unwrap_or_default().to_owned(),
                        location,
                        required: param["required"].as_bool().unwrap_or(false),
                        kind: type_of(resolved(&param["schema"], document)),
                        schema: compile(&param["schema"], document)?,
                    });
                }
                let body = &operation["requestBody"]["content"]["application/json"]["schema"];
                if !body.is_null() {
                    compiled.body = Some(compile(body, document)?);
                }
                compiled.body_required = operation["requestBody"]["required"]
                    .as_bool()
                    .unwrap_or(false);
                operations.insert((method, path.clone()), compiled);
            }
        }
        Ok(Self { operations })
    }
}

/// The schema `schema` refers to, when it is a `$ref` into the document's components.
fn resolved<'a>(schema: &'a Value, document: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix("#")) {
        Some(pointer) => document.pointer(pointer).unwrap_or(schema),
        None => schema,
    }
}

/// The JSON type a parameter's schema names (the first that is not `null`).
fn type_of(schema: &Value) -> String {
    match &schema["type"] {
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("string")
            .to_owned(),
        _ => "string".to_owned(),
    }
}

/// A parameter's text as the JSON value its schema checks, or why it cannot be one.
fn read_param(text: &str, kind: &str) -> Result<Value, &'static str> {
    match kind {
        "integer" => text
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| text.parse::<u64>().map(Value::from))
            .map_err(|_| "a whole number"),
        "number" => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or("a finite number"),
        "boolean" => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err("true or false"),
        },
        _ => Ok(Value::String(text.to_owned())),
    }
}

/// What was wrong, said without the value: `where` names the field or parameter.
fn said(kind: &ValidationErrorKind, at: &str) -> String {
    match kind {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or("a field");
            let inside = if at.is_empty() {
                String::new()
            } else {
                format!(" in {at}")
            };
            format!("field `{name}` is required{inside}")
        }
        ValidationErrorKind::AdditionalProperties { .. } => {
            let inside = if at.is_empty() { "the body" } else { at };
            format!("{inside} has a field this endpoint does not take")
        }
        ValidationErrorKind::Type { .. } => {
            format!("{at} is not of the type the API document gives it")
        }
        ValidationErrorKind::Minimum { limit } => format!("{at} must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("{at} must be at most {limit}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("{at} must be greater than {limit}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("{at} must be less than {limit}")
        }
        ValidationErrorKind::MinLength { limit: 1 } => format!("{at} must not be empty"),
        ValidationErrorKind::MinLength { limit } => {
            format!("{at} must be at least {limit} characters long")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("{at} must be at most {limit} characters long")
        }
        ValidationErrorKind::MinItems { limit } => format!("{at} must hold at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!("{at} must hold at most {limit} items"),
        ValidationErrorKind::Pattern { .. } => {
            format!("{at} holds a character it may not hold")
        }
        ValidationErrorKind::Enum { options } => format!("{at} must be one of {options}"),
        ValidationErrorKind::Not { schema } => match schema["description"].as_str() {
            Some(rule) => format!("{at} breaks a rule: {rule}"),
            None => format!("{at} is not what this endpoint takes"),
        },
        _ => format!("{at} is not what this endpoint takes"),
    }
}

/// The name of the place an error is at: `field `limit``, `field `claim.ttl``,
/// `field `jobs[2].id``, or empty for the body itself.
fn field(pointer: &str) -> String {
    let mut name = String::new();
    for part in pointer.split('/').filter(|p| !p.is_empty()) {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            name.push_str(&format!("[{part}]"));
        } else {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(part);
        }
    }
    if name.is_empty() {
        String::new()
    } else {
        format!("field `{name}`")
    }
}

/// The error inside `error` that says most: for a value that matches none of the schemas it
/// may be (an optional field or body: `null`, or its type), the one of the schema it came
/// closest to, which is the one that found a fault deepest in it, the later schema on a tie
/// (`null` comes first). "field `until` is not of the type..." rather than "the body is not
/// what this endpoint takes".
fn telling<'a>(error: &'a jsonschema::ValidationError<'a>) -> &'a jsonschema::ValidationError<'a> {
    let context = match error.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            context
        }
        _ => return error,
    };
    let depth = |e: &jsonschema::ValidationError<'_>| e.instance_path().as_str().len();
    context
        .iter()
        .filter_map(|branch| branch.first())
        .fold(
            None,
            |best: Option<&jsonschema::ValidationError<'_>>, e| match best {
                Some(b) if depth(b) > depth(e) => Some(b),
                _ => Some(e),
            },
        )
        .map_or(error, |e| telling(e))
}

/// The first thing `validator` finds wrong with `instance`, said for `at` (a parameter's name,
/// or empty for the body, whose fields are named from the error's path).
fn check(validator: &jsonschema::Validator, instance: &Value, at: &str) -> Result<(), Problem> {
    // The common case first: a yes or no is cheaper than the errors with their paths.
    if validator.is_valid(instance) {
        return Ok(());
    }
    let Some(first) = validator.iter_errors(instance).next() else {
        return Ok(());
    };
    let error = telling(&first);
    let place = if at.is_empty() {
        field(error.instance_path().as_str())
    } else {
        at.to_owned()
    };
    let place = if place.is_empty() {
        "the body".to_owned()
    } else {
        place
    };
    Err(Problem::invalid(said(error.kind(), &place)))
}

impl Contract {
    fn operation(&self, method: &Method, path: &str) -> Option<&Operation> {
        self.operations.get(&(method.clone(), path.to_owned()))
    }

    /// Checks the path and query parameters of a request to `path` (the route's template).
    ///
    /// # Errors
    /// `422` naming the parameter and what it must be.
    pub(crate) fn check_params(
        &self,
        method: &Method,
        path: &str,
        path_params: &[(String, String)],
        query: Option<&str>,
    ) -> Result<(), Problem> {
        match self.operation(method, path) {
            Some(operation) => check_params(operation, path_params, query),
            None => Ok(()),
        }
    }

    /// Checks a request's JSON body.
    ///
    /// # Errors
    /// `422` naming the field and what it must be.
    pub(crate) fn check_body(
        &self,
        method: &Method,
        path: &str,
        body: &Value,
    ) -> Result<(), Problem> {
        match self.operation(method, path).and_then(|o| o.body.as_ref()) {
            Some(validator) => check(validator, body, ""),
            None => Ok(()),
        }
    }

    /// Whether the operation needs a body (an optional one may be sent empty).
    pub(crate) fn body_required(&self, method: &Method, path: &str) -> bool {
        self.operation(method, path)
            .is_some_and(|o| o.body_required)
    }
}

fn check_params(
    operation: &Operation,
    path_params: &[(String, String)],
    query: Option<&str>,
) -> Result<(), Problem> {
    let query: Vec<(String, String)> = query.map(url_decoded).unwrap_or_default();
    for param in &operation.params {
        let values: Vec<String> = match param.location {
            Location::Path => path_params
                .iter()
                .filter(|(name, _)| *name == param.name)
                .map(|(_, value)| value.clone())
                .collect(),
            Location::Query => query
                .iter()
                .filter(|(name, _)| *name == param.name)
                .map(|(_, value)| value.clone())
                .collect(),
        };
        let at = format!("parameter `{}`", param.name);
        match values.as_slice() {
            [] if param.required => {
                return Err(Problem::invalid(format!("{at} is required")));
            }
            [] => {}
            [value] => {
                let instance = read_param(value, &param.kind)
                    .map_err(|wanted| Problem::invalid(format!("{at} must be {wanted}")))?;
                check(&param.schema, &instance, &at)?;
            }
            _ => return Err(Problem::invalid(format!("{at} is given more than once"))),
        }
    }
    Ok(())
}

/// Whether every whole number written in `json` (outside its strings) fits 64 bits, signed or
/// not. serde_json reads a larger one as the nearest float, which could pass a bound it does
/// not meet (`-9223372036854775809` reads as `i64::MIN`); every number the document allows
/// is within 64 bits, so such a body is refused before it is read.
pub(crate) fn integers_fit(json: &[u8]) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < json.len() {
        let byte = json[i];
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
        } else if byte == b'"' {
            in_string = true;
            i += 1;
        } else if byte == b'-' || byte.is_ascii_digit() {
            let end = json[i..]
                .iter()
                .position(|b| {
                    !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
                })
                .map_or(json.len(), |n| i + n);
            let token = &json[i..end];
            let whole = !token.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
            if whole {
                let text = std::str::from_utf8(token).unwrap_or_default();
                if text.parse::<i64>().is_err() && text.parse::<u64>().is_err() {
                    return false;
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    true
}

/// Writes every whole number given with a fraction (`17.0`, which JSON Schema's `integer`
/// takes) as an integer, so that a field the document calls an integer reads as one.
pub(crate) fn whole_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let whole = n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1.9e19)
                .map(|f| format!("{f:.0}"));
            if let Some(number) = whole.and_then(|text| serde_json::from_str::<Value>(&text).ok()) {
                if number.is_i64() || number.is_u64() {
                    *value = number;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// A query string's pairs, percent-decoded (`+` as a space).
fn url_decoded(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let escaped = (byte == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match (byte, escaped) {
            (b'+', _) => out.push(b' '),
            (_, Some((high, low))) => {
                out.push(high * 16 + low);
                i += 2;
            }
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A document of one operation, as utoipa writes one: a path parameter, a query
    /// parameter, and a body with a `$ref` into the components.
    fn contract() -> Contract {
        let document = json!({
            "paths": {"/q/{queue}": {"post": {
                "parameters": [
                    {"name": "queue", "in": "path", "required": true,
                     "schema": {"$ref": "#/components/schemas/Name"}},
                    {"name": "limit", "in": "query", "required": false,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
                ],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["ttl"], "additionalProperties": false,
                    "properties": {
                        "ttl": {"type": "number", "minimum": 0.001},
                        "owner": {"$ref": "#/components/schemas/Name"},
                        "jobs": {"type": "array", "items": {"type": "object",
                            "required": ["id"], "properties": {"id": {"$ref": "#/components/schemas/Name"}}}},
                    },
                }}}},
            }}},
            "components": {"schemas": {"Name": {"type": "string", "minLength": 1, "maxLength": 4, "pattern": "^[^\\x00]*$"}}},
        });
        Contract::of(&document).unwrap()
    }

    fn body(value: Value) -> Result<(), String> {
        contract()
            .check_body(&Method::POST, "/q/{queue}", &value)
            .map_err(|p| p.detail().to_owned())
    }

    fn params(queue: &str, query: Option<&str>) -> Result<(), String> {
        contract()
            .check_params(
                &Method::POST,
                "/q/{queue}",
                &[("queue".to_owned(), queue.to_owned())],
                query,
            )
            .map_err(|p| p.detail().to_owned())
    }

    #[test]
    fn a_body_the_document_allows_passes_and_each_refusal_names_its_field_not_its_value() {
        assert_eq!(body(json!({"ttl": 1.5, "owner": "ab"})), Ok(()));
        for (sent, says) in [
            (json!({}), "field `ttl` is required"),
            (json!({"ttl": "s3cr3t"}), "field `ttl` is not of the type"),
            (json!({"ttl": 0}), "field `ttl` must be at least 0.001"),
            (
                json!({"ttl": 1, "owner": ""}),
                "field `owner` must not be empty",
            ),
            (
                json!({"ttl": 1, "owner": "s3cr3t"}),
                "field `owner` must be at most 4 characters long",
            ),
            (
                json!({"ttl": 1, "owner": "a\u{0}"}),
                "field `owner` holds a character it may not hold",
            ),
            (
                json!({"ttl": 1, "s3cr3t": 1}),
                "the body has a field this endpoint does not take",
            ),
            (
                json!({"ttl": 1, "jobs": [{"id": "a"}, {}]}),
                "field `id` is required in field `jobs[1]`",
            ),
            (json!(["s3cr3t"]), "the body is not of the type"),
        ] {
            let said = body(sent.clone()).unwrap_err();
            assert!(said.contains(says), "{sent}: {said}");
            assert!(!said.contains("s3cr3t"), "{sent}: {said}");
        }
    }

    #[test]
    fn parameters_are_read_as_their_schema_s_type_and_checked_by_name() {
        assert_eq!(params("ab", None), Ok(()));
        assert_eq!(params("ab", Some("limit=100")), Ok(()));
        for (queue, query, says) in [
            ("", None, "parameter `queue` must not be empty"),
            (
                "s3cr3t",
                None,
                "parameter `queue` must be at most 4 characters long",
            ),
            (
                "ab",
                Some("limit=0"),
                "parameter `limit` must be at least 1",
            ),
            (
                "ab",
                Some("limit=s3cr3t"),
                "parameter `limit` must be a whole number",
            ),
            (
                "ab",
                Some("limit=1&limit=2"),
                "parameter `limit` is given more than once",
            ),
        ] {
            let said = params(queue, query).unwrap_err();
            assert!(said.contains(says), "{queue} {query:?}: {said}");
            assert!(!said.contains("s3cr3t"), "{said}");
        }
    }

    #[test]
    fn a_query_is_percent_decoded_before_it_is_checked() {
        assert_eq!(
            url_decoded("a=%41%2f+b&c&d=%zz"),
            vec![
                ("a".to_owned(), "A/ b".to_owned()),
                ("c".to_owned(), String::new()),
                ("d".to_owned(), "%zz".to_owned()),
            ]
        );
        assert_eq!(params("ab", Some("limit=%31%30")), Ok(()));
    }

    #[test]
    fn whole_numbers_with_a_fraction_read_as_integers_and_others_stay() {
        let mut value =
            json!({"fence": 17.0, "ttl": 1.5, "big": 1e300, "jobs": [{"priority": -3.0}]});
        whole_numbers(&mut value);
        assert!(value["fence"].is_u64(), "{value}");
        assert!(value["jobs"][0]["priority"].is_i64(), "{value}");
        assert_eq!(value["ttl"], json!(1.5));
        assert!(value["big"].is_f64());
    }

    #[test]
    fn a_whole_number_beyond_64_bits_is_found_outside_strings_only() {
        for fits in [
            r#"{"priority": -9223372036854775808, "fence": 18446744073709551615}"#,
            r#"{"ttl": 1e400, "x": 12345678901234567890123.5}"#,
            r#"{"id": "99999999999999999999999", "e": "\"99999999999999999999999"}"#,
        ] {
            assert!(integers_fit(fits.as_bytes()), "{fits}");
        }
        for too_big in [
            r#"{"priority": -9223372036854775809}"#,
            r#"{"fence": 18446744073709551616}"#,
            r#"[1, 2, 99999999999999999999999]"#,
        ] {
            assert!(!integers_fit(too_big.as_bytes()), "{too_big}");
        }
    }

    #[test]
    fn an_operation_the_document_does_not_have_is_not_checked_here() {
        let unknown = contract().check_body(&Method::GET, "/elsewhere", &json!("anything"));
        assert!(unknown.is_ok());
        assert!(!contract().body_required(&Method::GET, "/elsewhere"));
        assert!(contract().body_required(&Method::POST, "/q/{queue}"));
    }
}
