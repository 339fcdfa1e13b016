//! Google's discovery document of the Compute Engine API (`discovery/compute.v1.json`,
//! vendored from `google-api-python-client`: see `discovery/README.md`) as a request checker:
//! which method a request is (HTTP method and path template), its parameters (required,
//! declared, enums, patterns, types) and its body (the method's request schema: no unknown
//! field, JSON types and enums as declared, the fields the schema annotates as required for
//! the method). A rejection names the parameter or the field, as the service's 400 does.

use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The vendored discovery document.
pub const COMPUTE_V1: &str = include_str!("../discovery/compute.v1.json");

/// The path prefix of every method (`servicePath`).
pub const SERVICE_PATH: &str = "/compute/v1/";

/// One method of the document.
#[derive(Debug)]
pub struct Method {
    /// Its id, `compute.instances.insert`.
    pub id: String,
    /// `GET`, `POST`, `DELETE` …
    pub http_method: String,
    /// Its path template below the service path, `projects/{project}/zones/{zone}/instances`.
    pub path: String,
    parameters: Map<String, Value>,
    request: Option<String>,
}

/// The document, parsed once.
#[derive(Debug)]
pub struct Discovery {
    doc: Value,
    methods: Vec<Method>,
}

/// A request the document does not allow: the HTTP status and the message naming why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 400 (bad parameter or body) or 404 (no such method).
    pub status: u16,
    /// What is wrong, naming the parameter or field.
    pub message: String,
}

fn bad(message: String) -> Rejection {
    Rejection {
        status: 400,
        message,
    }
}

impl Discovery {
    /// The Compute Engine v1 document.
    pub fn compute() -> &'static Discovery {
        static DOC: OnceLock<Discovery> = OnceLock::new();
        DOC.get_or_init(|| Discovery::parse(COMPUTE_V1).expect("the vendored document parses"))
    }

    /// A document from its JSON text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        let doc: Value = serde_json::from_str(text)?;
        let mut methods = Vec::new();
        collect_methods(&doc["resources"], &mut methods);
        Ok(Self { doc, methods })
    }

    /// The document's `revision`.
    pub fn revision(&self) -> &str {
        self.doc["revision"].as_str().unwrap_or("")
    }

    /// The method with `id`.
    pub fn method(&self, id: &str) -> Option<&Method> {
        self.methods.iter().find(|m| m.id == id)
    }

    /// The method `http_method path` calls, with its path parameters (checked).
    pub fn route(
        &self,
        http_method: &str,
        path: &str,
    ) -> Result<(&Method, BTreeMap<String, String>), Rejection> {
        let not_found = || Rejection {
            status: 404,
            message: format!("no method of compute v1 is `{http_method} {path}`"),
        };
        let rest = path.strip_prefix(SERVICE_PATH).ok_or_else(not_found)?;
        let segments: Vec<&str> = rest.split('/').collect();
        let (method, params) = self
            .methods
            .iter()
            .filter(|m| m.http_method == http_method)
            .find_map(|m| match_template(&m.path, &segments).map(|p| (m, p)))
            .ok_or_else(not_found)?;
        for (name, value) in &params {
            self.check_parameter(method, name, value)?;
        }
        Ok((method, params))
    }

    /// Checks the query parameters of a call of `method`: each declared (by the method or the
    /// document), of its type and enum; every required one present (path or query).
    pub fn check_query(
        &self,
        method: &Method,
        path_params: &BTreeMap<String, String>,
        query: &[(String, String)],
    ) -> Result<(), Rejection> {
        for (name, value) in query {
            if path_params.contains_key(name) {
                return Err(bad(format!("parameter `{name}` is a path parameter")));
            }
            self.check_parameter(method, name, value)?;
        }
        for (name, spec) in &method.parameters {
            let required = spec["required"].as_bool().unwrap_or(false);
            let given = path_params.contains_key(name) || query.iter().any(|(n, _)| n == name);
            if required && !given {
                return Err(bad(format!("required parameter `{name}` is missing")));
            }
        }
        Ok(())
    }

    fn check_parameter(&self, method: &Method, name: &str, value: &str) -> Result<(), Rejection> {
        let spec = method
            .parameters
            .get(name)
            .or_else(|| self.doc["parameters"].get(name))
            .ok_or_else(|| {
                bad(format!(
                    "unknown parameter `{name}` for method {}",
                    method.id
                ))
            })?;
        check_scalar(spec, &Value::String(value.to_owned()), name, true).map_err(bad)
    }

    /// Checks the body of a call of `method` against its request schema.
    pub fn check_body(&self, method: &Method, body: Option<&Value>) -> Result<(), Rejection> {
        match (&method.request, body) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(bad(format!("method {} takes no body", method.id))),
            (Some(schema), None) => Err(bad(format!("method {} needs a {schema} body", method.id))),
            (Some(schema), Some(body)) => self
                .check_schema(schema, body, Some(&method.id))
                .map_err(bad),
        }
    }

    /// Checks `value` against schema `name` (a response in the fake's own tests, or a request
    /// body with the fields required for `method_id`).
    pub fn check_schema(
        &self,
        name: &str,
        value: &Value,
        method_id: Option<&str>,
    ) -> Result<(), String> {
        let schema = self.schema(name)?;
        self.check_value(schema, value, "", method_id)
    }

    fn schema(&self, name: &str) -> Result<&Value, String> {
        self.doc["schemas"]
            .get(name)
            .ok_or_else(|| format!("the document has no schema `{name}`"))
    }

    fn check_value(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        method_id: Option<&str>,
    ) -> Result<(), String> {
        if let Some(reference) = schema["$ref"].as_str() {
            return self.check_value(self.schema(reference)?, value, at, method_id);
        }
        match schema["type"].as_str() {
            Some("object") => self.check_object(schema, value, at, method_id),
            Some("array") => {
                let items = value
                    .as_array()
                    .ok_or_else(|| format!("field `{at}`: expected an array, got {value}"))?;
                for (i, item) in items.iter().enumerate() {
                    self.check_value(&schema["items"], item, &format!("{at}[{i}]"), method_id)?;
                }
                Ok(())
            }
            _ => check_scalar(schema, value, at, false),
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        method_id: Option<&str>,
    ) -> Result<(), String> {
        let object = value
            .as_object()
            .ok_or_else(|| format!("field `{at}`: expected an object, got {value}"))?;
        let field = |name: &str| {
            if at.is_empty() {
                name.to_owned()
            } else {
                format!("{at}.{name}")
            }
        };
        let properties = schema["properties"].as_object();
        for (name, item) in object {
            let spec = match (
                properties.and_then(|p| p.get(name)),
                schema.get("additionalProperties"),
            ) {
                (Some(spec), _) => spec,
                (None, Some(additional)) => additional,
                (None, None) => {
                    return Err(format!(
                        "Invalid JSON payload received. Unknown name \"{name}\" at `{}`: Cannot find field.",
                        if at.is_empty() { "(body)" } else { at }
                    ));
                }
            };
            self.check_value(spec, item, &field(name), method_id)?;
        }
        if let (Some(properties), Some(method_id)) = (properties, method_id) {
            for (name, spec) in properties {
                let required = spec["annotations"]["required"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|m| m == method_id));
                if required && !object.contains_key(name) {
                    return Err(format!(
                        "field `{}` is required by {method_id}",
                        field(name)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A string, integer, number or boolean (`from_text`: a parameter, always text in the URL).
fn check_scalar(spec: &Value, value: &Value, at: &str, from_text: bool) -> Result<(), String> {
    let kind = spec["type"].as_str().unwrap_or("any");
    let format = spec["format"].as_str().unwrap_or("");
    let wrong = || format!("field `{at}`: expected {kind} {format}, got {value}");
    let text = value.as_str();
    match (kind, format) {
        ("string", "int64" | "uint64") => {
            let digits = text
                .map(str::to_owned)
                .or_else(|| value.as_i64().map(|n| n.to_string()));
            let ok = digits.is_some_and(|d| {
                d.trim_start_matches('-')
                    .chars()
                    .all(|c| c.is_ascii_digit())
                    && !d.is_empty()
            });
            ok.then_some(()).ok_or_else(wrong)?;
        }
        ("string", _) => {
            let text = text.ok_or_else(wrong)?;
            check_enum(spec, text, at)?;
            check_pattern(spec, text, at)?;
        }
        ("integer", _) => {
            let ok = if from_text {
                text.is_some_and(|t| t.parse::<i64>().is_ok())
            } else {
                value.is_i64() || value.is_u64()
            };
            ok.then_some(()).ok_or_else(wrong)?;
        }
        ("number", _) => {
            let ok = if from_text {
                text.is_some_and(|t| t.parse::<f64>().is_ok())
            } else {
                value.is_number()
            };
            ok.then_some(()).ok_or_else(wrong)?;
        }
        ("boolean", _) => {
            let ok = if from_text {
                matches!(text, Some("true" | "false"))
            } else {
                value.is_boolean()
            };
            ok.then_some(()).ok_or_else(wrong)?;
        }
        _ => {}
    }
    Ok(())
}

fn check_enum(spec: &Value, text: &str, at: &str) -> Result<(), String> {
    match spec["enum"].as_array() {
        Some(values) if !values.iter().any(|v| v == text) => Err(format!(
            "field `{at}`: invalid value `{text}`, expected one of {}",
            values
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

fn check_pattern(spec: &Value, text: &str, at: &str) -> Result<(), String> {
    let Some(pattern) = spec["pattern"].as_str() else {
        return Ok(());
    };
    // The document writes RE2 patterns; the few it uses are also valid `regex` patterns.
    let Ok(regex) = Regex::new(&format!("^(?:{pattern})$")) else {
        return Ok(());
    };
    if regex.is_match(text) {
        Ok(())
    } else {
        Err(format!(
            "field `{at}`: `{text}` does not match the pattern `{pattern}`"
        ))
    }
}

fn collect_methods(resources: &Value, out: &mut Vec<Method>) {
    let Some(resources) = resources.as_object() else {
        return;
    };
    for resource in resources.values() {
        if let Some(methods) = resource["methods"].as_object() {
            for method in methods.values() {
                out.push(Method {
                    id: method["id"].as_str().unwrap_or("").to_owned(),
                    http_method: method["httpMethod"].as_str().unwrap_or("").to_owned(),
                    path: method["path"].as_str().unwrap_or("").to_owned(),
                    parameters: method["parameters"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    request: method["request"]["$ref"].as_str().map(str::to_owned),
                });
            }
        }
        collect_methods(&resource["resources"], out);
    }
}

/// The path parameters when `segments` (percent-decoded by the caller or not) match
/// `template` segment for segment.
fn match_template(template: &str, segments: &[&str]) -> Option<BTreeMap<String, String>> {
    let parts: Vec<&str> = template.split('/').collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut params = BTreeMap::new();
    for (part, segment) in parts.iter().zip(segments) {
        match (part.find('{'), part.find('}')) {
            (Some(open), Some(close)) => {
                let (prefix, suffix) = (&part[..open], &part[close + 1..]);
                let value = segment.strip_prefix(prefix)?.strip_suffix(suffix)?;
                if value.is_empty() {
                    return None;
                }
                let name = part[open + 1..close].trim_start_matches('+');
                params.insert(name.to_owned(), percent_decode(value));
            }
            _ if part == segment => {}
            _ => return None,
        }
    }
    Some(params)
}

/// `%XX` decoded (path parameters).
pub fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
