#!/usr/bin/env node
// Writes the copy of the Batch spec that Prism serves: the vendored spec plus schema-level
// `example` values, and nothing else. Without them Prism's static placeholders ("string")
// for `format: duration` fail its own response validation (HTTP 500 on listing tasks), and
// task counts come out as int32 minimums. Examples do not change request validation.
//
// usage: node make-mock-spec.js <BatchService.json> <BatchService.mock.json>
"use strict";
const fs = require("fs");

const [source, target] = process.argv.slice(2);
if (!source || !target) {
  console.error("usage: make-mock-spec.js <spec.json> <mock-spec.json>");
  process.exit(2);
}
const spec = JSON.parse(fs.readFileSync(source, "utf8"));

let durations = 0;
const stack = [spec];
while (stack.length > 0) {
  const node = stack.pop();
  if (Array.isArray(node)) {
    stack.push(...node);
  } else if (node !== null && typeof node === "object") {
    if (node.type === "string" && node.format === "duration" && !("example" in node)) {
      node.example = "PT1H";
      durations += 1;
    }
    stack.push(...Object.values(node));
  }
}
const counts = { active: 1, running: 2, completed: 3, succeeded: 2, failed: 1 };
for (const name of ["TaskCounts", "TaskSlotCounts"]) {
  spec.definitions[name].example = counts;
}
fs.writeFileSync(target, JSON.stringify(spec, null, 2));
console.log(`wrote ${target} (${durations} duration examples)`);
