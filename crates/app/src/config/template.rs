//! `config init`: a commented TOML template with every option, its default and its help,
//! required values set to [`PLACEHOLDER`], all generated from [`super::schema`].

use super::schema::{self, PLACEHOLDER, Program};
use codalab_wm_core::describe::{BackendKind, Placement, TableSchema};
use serde_json::Value;
use std::fmt::Write;

/// A TOML value for a JSON default (`None` for an unset option).
pub fn toml_value(value: &Value) -> Option<String> {
    let rendered = match value {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => toml_edit::Value::from(s.as_str()).to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().filter_map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(_) => return None,
    };
    Some(rendered.trim().to_owned())
}

/// Writes one option: its help as a comment, then `key = default`, the placeholder of a
/// required key, or (unset by default) a commented-out example.
fn option(
    out: &mut String,
    table: &TableSchema,
    key: &str,
    required: Option<&str>,
    kind: Option<&dyn BackendKind>,
) {
    let doc = table.docs.get(key).map(String::as_str).unwrap_or_default();
    let default = table.defaults.get(key).and_then(toml_value);
    // A set default is printed as the value; an unset one keeps the help's explanation.
    let doc = match &default {
        Some(_) => doc.split(" [default:").next().unwrap_or_default().trim(),
        None => doc,
    };
    match (required, default) {
        (Some(placeholder), _) => {
            let _ = writeln!(out, "# {doc} (required)\n{key} = {placeholder}");
        }
        (None, Some(value)) => {
            let _ = writeln!(out, "# {doc}\n{key} = {value}");
        }
        (None, None) => {
            let example = schema::example(table.name, key, kind).unwrap_or("\"\"");
            let unset = if doc.contains("[default:") {
                ""
            } else {
                " (unset by default)"
            };
            let _ = writeln!(out, "# {doc}{unset}\n# {key} = {example}");
        }
    }
}

/// Writes the options of `table` (of backend `kind`, if any), skipping `skip`; `set`
/// overrides values (already TOML).
fn options(
    out: &mut String,
    table: &TableSchema,
    kind: Option<&dyn BackendKind>,
    skip: &[&str],
    set: &[(&str, &str)],
) {
    let required = kind.map_or(&[][..], |k| k.required());
    let nested: Vec<&str> = kind.map_or_else(Vec::new, |k| {
        k.subtables().iter().map(|(n, _)| *n).collect()
    });
    for key in schema::options(table, &nested).filter(|k| !skip.contains(k)) {
        if let Some((_, value)) = set.iter().find(|(k, _)| *k == key) {
            let doc = table.docs.get(key).map(String::as_str).unwrap_or_default();
            let doc = doc.split(" [default:").next().unwrap_or_default().trim();
            let _ = writeln!(out, "# {doc}\n{key} = {value}");
            continue;
        }
        let placeholder = required.iter().find(|(k, _)| *k == key).map(|(_, p)| *p);
        option(out, table, key, placeholder, kind);
    }
}

fn header(out: &mut String, backend: &dyn BackendKind, pools: bool) {
    let flags = if pools { " --pools" } else { "" };
    let _ = writeln!(
        out,
        "# cl-worker-manager configuration, written by `cl-worker-manager config init --backend {}{flags}`.\n\
         # Every option is listed with its default. Settings are layered: built-in defaults, then this\n\
         # file (--config FILE), then CODALAB_WM_* environment variables, then command-line flags.\n\
         #\n\
         # 1. Replace every {PLACEHOLDER}:  grep -n {PLACEHOLDER} FILE\n\
         # 2. Check the file (contacts nothing):      cl-worker-manager config check FILE\n\
         # 3. Run:                                    cl-worker-manager --config FILE\n\
         # 4. After editing limits, shapes or rates:  kill -HUP <manager pid>  (applied at the next tick)\n",
        backend.name()
    );
}

/// The whole template for `backend`, single-backend or (`pools`) with a two-pool example.
pub fn render(backend: &dyn BackendKind, pools: bool, program: &Program) -> String {
    let mut out = String::new();
    header(&mut out, backend, pools);
    let top = schema::top(program);
    let _ = writeln!(out, "# ---- global settings ----\n");
    if pools {
        let _ = writeln!(
            out,
            "# With [[pools]], leave `backend` unset: each pool names its own backend.\n\
             # min_workers, max_workers, launch_mode and max_launches_per_tick below apply to the\n\
             # single-backend mode only; pools have their own.\n"
        );
        options(&mut out, &top, None, &[], &[]);
    } else {
        let name = format!("\"{}\"", backend.name());
        options(&mut out, &top, None, &[], &[("backend", &name)]);
    }
    let _ = writeln!(
        out,
        "\n# ---- the cl-worker settings (--worker-* flags) ----\n[worker]"
    );
    let skip: &[&str] = if pools {
        &["tag", "tag_exclusive"]
    } else {
        &[]
    };
    options(&mut out, &schema::worker(program), None, skip, &[]);
    if pools {
        pools_example(&mut out, backend);
    } else {
        let _ = writeln!(
            out,
            "\n# ---- the {} backend ----\n[{}]",
            backend.name(),
            backend.table()
        );
        options(&mut out, &backend.schema(), Some(backend), &[], &[]);
        extra_tables(&mut out, backend, backend.table());
    }
    notify_example(&mut out);
    out
}

/// A commented-out `[[notify]]` entry (see [`codalab_wm_core::notify`]).
fn notify_example(out: &mut String) {
    let codes = codalab_wm_core::events::EventKind::CODES.join(", ");
    let digest = codalab_wm_core::notify::DIGEST_SECONDS;
    let _ = writeln!(
        out,
        "\n# ---- webhooks: events POSTed as JSON, in order, retried; never blocking the loop ----\n\
         # Event codes: {codes}.\n\
         # [[notify]]\n\
         # The URL to POST to; it may hold a token: a secret, never logged or shown\n\
         # url = \"https://hooks.slack.com/services/T000/B000/XXXX\"\n\
         # The events to send [default: every event]\n\
         # events = [\"launch_failed\", \"pool_backing_off\", \"budget_reached\", \"server_unreachable\"]\n\
         # slack ({{\"text\": …}}) or raw (the event as /status shows it)\n\
         # format = \"slack\"\n\
         # Events of one kind and pool within this many seconds are one message (count, first,\n\
         # last); a warning after a quiet spell goes out at once. 0: every event at once\n\
         # digest_seconds = {digest}"
    );
}

/// Sub-tables a backend may have (Azure's Entra ID app), commented out.
fn extra_tables(out: &mut String, backend: &dyn BackendKind, prefix: &str) {
    let schema = backend.schema();
    for (name, fields) in backend.subtables() {
        let doc = schema.docs.get(name).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "\n# {doc}; give it instead of account_key (unset by default):\n# [{prefix}.{name}]"
        );
        for field in fields {
            let _ = writeln!(out, "# {field} = \"\"");
        }
    }
}

fn pools_example(out: &mut String, backend: &dyn BackendKind) {
    let pools = schema::pools();
    let (table, schema) = (backend.table(), backend.schema());
    let name = format!("\"{}\"", backend.name());
    let _ = writeln!(
        out,
        "\n# ---- pools: one manager, several worker shapes; each bundle goes to the cheapest pool it fits ----\n\
         [[pools]]"
    );
    options(
        out,
        &pools,
        None,
        &[],
        &[("name", "\"cpu\""), ("backend", &name)],
    );
    let _ = writeln!(
        out,
        "\n# The pool's backend settings: every [{table}] key is accepted here.\n[pools.{table}]"
    );
    // What each pool gets of its own when these are unset (here: pool `cpu`).
    let own = backend.placement_defaults(Placement {
        pool: Some("cpu"),
        password_file: None,
    });
    for (key, value) in &own {
        let doc = schema.docs.get(key).cloned().unwrap_or_default();
        let doc = doc.split(" [default:").next().unwrap_or_default().trim();
        let value = toml_value(value).unwrap_or_default();
        let _ = writeln!(
            out,
            "# {doc} [default: one per pool, so that pools never share jobs]\n# {key} = {value}"
        );
    }
    let per_pool: Vec<&str> = own.keys().map(String::as_str).collect();
    options(out, &schema, Some(backend), &per_pool, &[("gpus", "0")]);
    extra_tables(out, backend, &format!("pools.{table}"));
    let _ = writeln!(
        out,
        "\n# A second pool: GPU workers, preferred only for bundles that need them.\n\
         [[pools]]\nname = \"gpu\"\nbackend = {name}\nmax = 4\ncost = 10\n\
         launch_mode = \"target\"\nmax_launches_per_tick = 2\n\
         pending_timeout = 900\n\n[pools.{table}]"
    );
    let gpu = backend.gpu_pool();
    for (key, placeholder) in backend.required() {
        if !gpu.iter().any(|(k, _)| k == key) {
            let _ = writeln!(out, "{key} = {placeholder}");
        }
    }
    let _ = writeln!(out, "gpus = 1");
    for (key, value) in gpu {
        let _ = writeln!(out, "{key} = {value}");
    }
}
