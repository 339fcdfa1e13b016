#!/usr/bin/env python3
"""Strict validation of Prometheus Operator objects (monitoring.coreos.com/v1: PodMonitor,
ServiceMonitor, PrometheusRule) read as YAML documents on stdin.

The schemas are the Prometheus Operator's CRDs (v0.80.1) as the PyPI package
`cloudcoil-models-prometheus-operator` 0.80.1.0 carries them (pydantic models generated from the
CRDs' openAPIV3Schema). Validation is strict the way `kubectl apply --validate=strict` is: an
unknown field anywhere is an error (every object schema with `properties` gets
`additionalProperties: false`), as are wrong types and missing required fields.
Objects of other API groups are skipped (kubernetes-validate checks those).

Exit status 0 when every object validates; 1 with one line per error, naming the object and
the path of the offending field; 2 when no monitoring object was read at all.
"""
import sys

import jsonschema
import yaml
from cloudcoil.models.prometheus_operator import v1

KINDS = {"PodMonitor": v1.PodMonitor, "ServiceMonitor": v1.ServiceMonitor,
         "PrometheusRule": v1.PrometheusRule}


def strict(schema):
    """Forbids unknown fields in every object schema that lists its properties."""
    if isinstance(schema, dict):
        if "properties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def deepest(error):
    """The error that names the field: inside `anyOf` (an optional field is `T or null`), the
    one that reached deepest into the object."""
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return error


def main():
    validators = {kind: jsonschema.Draft202012Validator(strict(model.model_json_schema(by_alias=True)))
                  for kind, model in KINDS.items()}
    checked, errors = 0, []
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc or not str(doc.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
            continue
        kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
        if doc["apiVersion"] != "monitoring.coreos.com/v1" or kind not in validators:
            errors.append(f"{kind} {name}: {doc['apiVersion']} {kind} is not one this validator knows")
            continue
        checked += 1
        for error in map(deepest, validators[kind].iter_errors(doc)):
            path = ".".join(str(p) for p in error.absolute_path) or "(object)"
            errors.append(f"{kind} {name}: {path}: {error.message[:200]}")
    for line in errors:
        print(line)
    if errors:
        return 1
    if checked == 0:
        print("no monitoring.coreos.com object on stdin")
        return 2
    print(f"{checked} monitoring.coreos.com object(s) valid (Prometheus Operator v0.80.1 CRDs, strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
