//! docs/api.md holds what the API does. Every example in it (a `curl`
//! command, `# HTTP <status>`, and the response it shows) is sent to a real
//! server started with the policy the doc shows, and the actual response
//! must have the documented shape: the same HTTP status, every documented
//! key present with the same JSON type (recursively; for an array, its
//! first element), no undocumented key in an object that does not say
//! `"…": "…"`, and the same value for the keys in [`STABLE`]. Every
//! `request_hash` must be the SHA-256 of the body's RFC 8785 canonical form,
//! and what the doc's Python snippet prints for the body. The decision table
//! must list the rows of the engine's table in its order
//! (`DecisionReason::TABLE_ORDER`); every
//! decision reason, claim status, claim reason and error code in the code
//! must have its row in the doc's tables (and no row may name one the code
//! does not have), and the claim reasons marked as contradictions must be
//! those of `Reason::is_contradiction`.
//!
//! Example markers: `<!-- example: NAME [wait] [same-job] -->` before the
//! command and response blocks (`wait`: poll until the documented
//! `status`; `same-job`: the `job_id` of the submit before it).
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use http::Method;
use serde_json::Value;
use support::{TestServer, APP_KEY, VERIFY_ONLY_KEY};
use verdict::engine::decide::DecisionReason;
use verdict::engine::{ClaimStatus, Reason};
use verdict::http::error::ApiError;

/// Keys whose documented value must equal the actual one wherever they
/// appear: the decision, its reasons, statuses and error codes. Everything
/// else (ids, times, latency, hashes, coverage) is checked for shape only.
const STABLE: &[&str] = &[
    "decision",
    "reason",
    "reasons",
    "verdict",
    "status",
    "code",
    "message",
    "enforced",
    "would_decide",
    "claim_id",
    "field",
    "requested",
    "floor",
    "effect",
    "param",
    "unbound_params",
    "decision_mode",
    "require_claims",
    "items_total",
    "claims_total",
    "claims_supported",
    "sources_total",
];

/// The key of a documented object that stands for keys left out.
const MORE: &str = "…";

/// The address every example is written against.
const DOC_BASE: &str = "http://127.0.0.1:8181";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn doc() -> String {
    read("docs/api.md")
}

/// A fenced code block: its info string, its text and the line it opens on.
struct Block {
    lang: String,
    text: String,
    line: usize,
}

/// The fenced blocks that follow each `<!-- KIND: ARGS -->` marker, up to
/// `count` of them, with the marker's arguments.
fn marked(doc: &str, kind: &str, count: usize) -> Vec<(Vec<String>, usize, Vec<Block>)> {
    let lines: Vec<&str> = doc.lines().collect();
    let prefix = format!("<!-- {kind}:");
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix(&prefix) else {
            continue;
        };
        let args: Vec<String> = rest
            .trim_end_matches("-->")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut blocks = Vec::new();
        let mut i = n + 1;
        while blocks.len() < count && i < lines.len() {
            if lines[i].trim().starts_with("<!-- ") {
                break;
            }
            if let Some(lang) = lines[i].trim_start().strip_prefix("```") {
                let open = i;
                let mut text = String::new();
                i += 1;
                while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                    text.push_str(lines[i]);
                    text.push('\n');
                    i += 1;
                }
                blocks.push(Block {
                    lang: lang.trim().to_string(),
                    text,
                    line: open + 1,
                });
            }
            i += 1;
        }
        assert_eq!(
            blocks.len(),
            count,
            "docs/api.md:{}: {kind} marker needs {count} fenced blocks after it",
            n + 1
        );
        out.push((args, n + 1, blocks));
    }
    out
}

/// Splits a shell command into words: `'…'` is literal, `"…"` and bare
/// words expand `$NAME` from `vars`, a backslash before a newline joins
/// lines, and `#` at the start of a word comments out the rest of the line.
fn shell_words(s: &str, vars: &HashMap<&str, String>) -> Vec<String> {
    let expand = |name: &str| -> String {
        vars.get(name)
            .cloned()
            .unwrap_or_else(|| panic!("docs/api.md uses ${name}, which the test does not know"))
    };
    let chars: Vec<char> = s.chars().collect();
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut i = 0;
    let var_at = |i: usize| -> (String, usize) {
        let mut j = i + 1;
        while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        (chars[i + 1..j].iter().collect(), j)
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            c if c.is_whitespace() => {
                if let Some(w) = cur.take() {
                    words.push(w);
                }
                i += 1;
            }
            '#' if cur.is_none() => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' => {
                let end = (i + 1..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .expect("a closing single quote");
                cur.get_or_insert_with(String::new)
                    .extend(&chars[i + 1..end]);
                i = end + 1;
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        w.push(chars[i + 1]);
                        i += 2;
                    } else if chars[i] == '$' {
                        let (name, next) = var_at(i);
                        w.push_str(&expand(&name));
                        i = next;
                    } else {
                        w.push(chars[i]);
                        i += 1;
                    }
                }
                assert!(i < chars.len(), "a closing double quote");
                i += 1;
            }
            '$' => {
                let (name, next) = var_at(i);
                cur.get_or_insert_with(String::new).push_str(&expand(&name));
                i = next;
            }
            c => {
                cur.get_or_insert_with(String::new).push(c);
                i += 1;
            }
        }
    }
    if let Some(w) = cur {
        words.push(w);
    }
    words
}

/// One documented request and the response the doc shows for it.
struct Example {
    name: String,
    flags: Vec<String>,
    /// `docs/api.md:N`, for messages.
    at: String,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    status: u16,
    response: Value,
}

impl Example {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// Reads a `curl` command as curl would send it: the subset the doc uses
/// (`-s`, `-X`, `-H`, `-d`, one URL).
fn parse_curl(
    sh: &Block,
    vars: &HashMap<&str, String>,
) -> (Method, String, Vec<(String, String)>, Option<String>) {
    let words = shell_words(&sh.text, vars);
    assert_eq!(
        words.first().map(String::as_str),
        Some("curl"),
        "docs/api.md:{}: one curl command per example",
        sh.line
    );
    let (mut method, mut url, mut headers, mut body) = (None, None, Vec::new(), None);
    let mut it = words.into_iter().skip(1);
    while let Some(w) = it.next() {
        match w.as_str() {
            "-s" | "-sS" | "--silent" | "--show-error" => {}
            "-X" | "--request" => method = it.next(),
            "-H" | "--header" => {
                let h = it.next().expect("a header after -H");
                let (k, v) = h.split_once(':').expect("a header is name: value");
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
            "-d" | "--data" | "--data-raw" => {
                assert!(
                    body.is_none(),
                    "docs/api.md:{}: one -d per command",
                    sh.line
                );
                body = it.next();
            }
            u if u.starts_with("http://") => {
                assert!(
                    url.is_none(),
                    "docs/api.md:{}: one URL per command",
                    sh.line
                );
                url = Some(u.to_string());
            }
            other => panic!(
                "docs/api.md:{}: the test does not read the curl argument {other:?}",
                sh.line
            ),
        }
    }
    let url = url.expect("a URL");
    let path = url
        .strip_prefix(DOC_BASE)
        .unwrap_or_else(|| panic!("docs/api.md:{}: examples call {DOC_BASE}", sh.line))
        .to_string();
    // curl's defaults: -d makes a POST with a form content type.
    let method = method.unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.into());
    if body.is_some() && !headers.iter().any(|(k, _)| k == "content-type") {
        headers.push((
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        ));
    }
    (
        Method::from_bytes(method.as_bytes()).expect("a method"),
        path,
        headers,
        body,
    )
}

/// `# HTTP 200` in the command block: the documented status.
fn documented_status(sh: &Block) -> u16 {
    sh.text
        .lines()
        .find_map(|l| l.trim().strip_prefix("# HTTP "))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "docs/api.md:{}: an example states its status as `# HTTP <code>`",
                sh.line
            )
        })
}

fn vars() -> HashMap<&'static str, String> {
    HashMap::from([
        ("VERDICT_KEY", APP_KEY.to_string()),
        ("VERIFY_KEY", VERIFY_ONLY_KEY.to_string()),
        ("JOB_ID", String::new()),
    ])
}

/// Every example, in document order. `$JOB_ID` is left as a placeholder
/// and filled in from the job the doc submitted before it.
fn examples(doc: &str) -> Vec<Example> {
    let mut v = vars();
    v.insert("JOB_ID", "{JOB_ID}".into());
    marked(doc, "example", 2)
        .into_iter()
        .map(|(args, line, blocks)| {
            let (sh, json) = (&blocks[0], &blocks[1]);
            let at = format!("docs/api.md:{line}");
            assert_eq!(sh.lang, "sh", "{at}: the command block is ```sh");
            assert_eq!(json.lang, "json", "{at}: the response block is ```json");
            let (method, path, headers, body) = parse_curl(sh, &v);
            let response: Value = serde_json::from_str(&json.text).unwrap_or_else(|e| {
                panic!("docs/api.md:{}: the response is not JSON: {e}", json.line)
            });
            let mut args = args.into_iter();
            Example {
                name: args
                    .next()
                    .unwrap_or_else(|| panic!("{at}: an example needs a name")),
                flags: args.collect(),
                status: documented_status(sh),
                at,
                method,
                path,
                headers,
                body,
                response,
            }
        })
        .collect()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Compares a documented value with the actual one: see the module doc.
/// A documented object lists every key of the actual one unless it holds
/// the key [`MORE`]; a documented `request_hash` shown in full is exact.
fn check_shape(doc: &Value, actual: &Value, path: &str, errors: &mut Vec<String>) {
    if type_name(doc) != type_name(actual) {
        errors.push(format!(
            "{path}: documented as {}, is {}: {actual}",
            type_name(doc),
            type_name(actual)
        ));
        return;
    }
    match (doc, actual) {
        (Value::Object(d), Value::Object(a)) => {
            for (k, dv) in d.iter().filter(|(k, _)| k.as_str() != MORE) {
                let p = format!("{path}.{k}");
                let exact = STABLE.contains(&k.as_str())
                    || (k == "request_hash" && dv.as_str().is_some_and(|h| !h.ends_with('…')));
                match a.get(k) {
                    None => errors.push(format!("{p}: documented, but not in the response")),
                    Some(av) if exact && dv != av => {
                        errors.push(format!("{p}: documented as {dv}, is {av}"))
                    }
                    Some(av) => check_shape(dv, av, &p, errors),
                }
            }
            if !d.contains_key(MORE) {
                for k in a.keys().filter(|k| !d.contains_key(*k)) {
                    errors.push(format!(
                        "{path}.{k}: in the response, but not documented (nor \"{MORE}\")"
                    ));
                }
            }
        }
        (Value::Array(d), Value::Array(a)) => {
            if let Some(first) = d.first() {
                match a.first() {
                    Some(af) => check_shape(first, af, &format!("{path}[0]"), errors),
                    None => errors.push(format!("{path}: documented with items, is empty")),
                }
            }
        }
        _ => {}
    }
}

/// Runs the doc's Python snippet on each body, as `python3 snippet.py <
/// body.json` would, in one python3 process; `None` when python3 cannot
/// run here.
fn python_hashes(snippet: &str, bodies: &[String]) -> Option<Vec<String>> {
    use std::io::Write;
    const DRIVER: &str = "import contextlib, io, json, sys\n\
        snippet = sys.argv[1]\n\
        for body in json.load(sys.stdin):\n\
        \x20   sys.stdin = io.StringIO(body)\n\
        \x20   out = io.StringIO()\n\
        \x20   with contextlib.redirect_stdout(out):\n\
        \x20       exec(snippet, {\"__name__\": \"__main__\"})\n\
        \x20   print(out.getvalue().strip())\n";
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(snippet)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let input = serde_json::to_vec(bodies).expect("bodies as JSON");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write the bodies");
    let out = child.wait_with_output().expect("python3 runs");
    assert!(
        out.status.success(),
        "the doc's Python snippet failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), bodies.len(), "one hash per body: {lines:?}");
    Some(lines)
}

/// The policy file the doc shows, which the examples rely on.
fn policies(doc: &str) -> Vec<(String, String)> {
    marked(doc, "policy", 1)
        .into_iter()
        .map(|(args, line, blocks)| {
            let name = args
                .first()
                .cloned()
                .unwrap_or_else(|| panic!("docs/api.md:{line}: a policy marker names its file"));
            assert_eq!(blocks[0].lang, "toml", "docs/api.md:{line}");
            (name, blocks[0].text.clone())
        })
        .collect()
}

#[tokio::test]
async fn every_example_answers_with_the_documented_shape() {
    let doc = doc();
    let files = policies(&doc);
    assert!(
        !files.is_empty(),
        "docs/api.md shows the policy its examples use"
    );
    let s = TestServer::start_with(|c| {
        for (name, text) in &files {
            std::fs::write(c.policies_dir.join(name), text).unwrap();
        }
    })
    .await;
    let snippet = marked(&doc, "snippet", 1)
        .into_iter()
        .find(|(args, _, _)| args.first().map(String::as_str) == Some("request-hash"))
        .map(|(_, _, b)| b.into_iter().next().expect("a block").text)
        .expect("docs/api.md has the request-hash snippet");
    let examples = examples(&doc);
    assert!(examples.len() >= 20, "only {} examples", examples.len());
    let mut names = BTreeSet::new();
    let mut job_id = String::new();
    let mut failures = Vec::new();
    // (where, body, the server's request_hash), for the Python snippet.
    let mut hashed: Vec<(String, String, String)> = Vec::new();
    for ex in &examples {
        assert!(
            names.insert(ex.name.clone()),
            "{}: duplicate example name",
            ex.at
        );
        let path = ex.path.replace("{JOB_ID}", &job_id);
        let headers: Vec<(&str, &str)> = ex
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body = ex.body.clone().unwrap_or_default();
        // A job is polled until it shows the documented status.
        let send = || s.send(ex.method.clone(), &path, &headers, body.clone());
        let r = if ex.has("wait") {
            let what = format!("{} ({}) to reach its documented status", ex.at, ex.name);
            support::eventually(&what, Duration::from_secs(30), || async {
                let r = send().await;
                let done = serde_json::from_slice::<Value>(&r.body)
                    .is_ok_and(|v| v["status"] == ex.response["status"]);
                if done {
                    Ok(r)
                } else {
                    Err(r.text())
                }
            })
            .await
        } else {
            send().await
        };
        let mut errors = Vec::new();
        if r.status != ex.status {
            errors.push(format!("status: documented {}, is {}", ex.status, r.status));
        }
        let actual: Value = match serde_json::from_slice(&r.body) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!(
                    "{} ({}): not JSON ({e}): {}",
                    ex.at,
                    ex.name,
                    r.text()
                ));
                continue;
            }
        };
        check_shape(&ex.response, &actual, "$", &mut errors);
        // The request id: the caller's when it sent a sane one, in the
        // header and in the body.
        let rid = r.header("x-request-id").map(str::to_string);
        if rid.is_none() {
            errors.push("no X-Request-ID header".into());
        }
        let body_rid = actual
            .get("request_id")
            .or_else(|| actual.get("error").and_then(|e| e.get("request_id")));
        if let Some(b) = body_rid {
            if b.as_str() != rid.as_deref() {
                errors.push(format!("request_id {b} is not the header's {rid:?}"));
            }
        }
        if let Some((_, sent)) = ex.headers.iter().find(|(k, _)| k == "x-request-id") {
            if rid.as_deref() != Some(sent.as_str()) {
                errors.push(format!("X-Request-ID {sent:?} came back as {rid:?}"));
            }
        }
        // request_hash: RFC 8785, and the doc's snippet agrees.
        if let Some(h) = actual.get("request_hash").and_then(Value::as_str) {
            let sent: Value = serde_json::from_str(&body).expect("a JSON body");
            let want = verdict::http::canonical_hash(&sent).expect("canonical");
            if h != want {
                errors.push(format!("request_hash {h} is not {want}"));
            }
            hashed.push((ex.at.clone(), body.clone(), h.to_string()));
        }
        if let Some(id) = actual.get("job_id").and_then(Value::as_str) {
            if ex.has("same-job") && id != job_id {
                errors.push(format!("job_id {id} is not the first submit's {job_id}"));
            }
            job_id = id.to_string();
        }
        if !errors.is_empty() {
            failures.push(format!(
                "{} ({}): {} {path}\n    {}\n    actual: {}",
                ex.at,
                ex.name,
                ex.method,
                errors.join("\n    "),
                serde_json::to_string_pretty(&actual).unwrap()
            ));
        }
    }
    let bodies: Vec<String> = hashed.iter().map(|(_, b, _)| b.clone()).collect();
    match python_hashes(&snippet, &bodies) {
        Some(py) => {
            for ((at, _, server), py) in hashed.iter().zip(py) {
                if &py != server {
                    failures.push(format!(
                        "{at}: the doc's Python snippet says {py}, the server {server}"
                    ));
                }
            }
        }
        None => eprintln!("python3 is not available: the doc's snippet was not run"),
    }
    assert!(
        failures.is_empty(),
        "docs/api.md does not match the API:\n{}",
        failures.join("\n\n")
    );
    s.shutdown().await;
}

/// The examples cover what the doc promises to show.
#[test]
fn the_examples_cover_the_api() {
    let doc = doc();
    let examples = examples(&doc);
    let shown = |pred: &dyn Fn(&Example) -> bool| examples.iter().any(pred);
    let decision = |ex: &Example, d: &str, r: &str| {
        ex.path == "/v2/authorize" && ex.response["decision"] == d && ex.response["reason"] == r
    };
    let body = |ex: &Example| -> Value {
        ex.body
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null)
    };
    assert!(shown(
        &|e| e.path == "/v2/verify" && e.response["verdict"] == "supported"
    ));
    assert!(shown(&|e| e.path == "/v2/verify"
        && e.response["checks"][0]["conflicts"][0]["claim"]["text"]
            .is_string()));
    assert!(shown(&|e| e.path == "/v2/authorize"
        && e.response["decision"].is_string()
        && e.response.get(MORE).is_none()));
    assert!(shown(&|e| decision(e, "allow", "coverage_sufficient")));
    assert!(shown(&|e| decision(e, "deny", "missing_citations")));
    assert!(shown(&|e| decision(e, "deny", "unsupported_claims")));
    assert!(shown(&|e| decision(e, "needs_review", "review_required")));
    assert!(shown(&|e| decision(e, "deny", "unknown_action")));
    assert!(shown(
        &|e| e.response["enforced"] == false && e.response["would_decide"].is_string()
    ));
    assert!(shown(
        &|e| body(e)["answer"].is_string() || body(e)["answer"].is_object()
    ));
    assert!(shown(&|e| e.response["requirements"]["floors_applied"][0]
        ["field"]
        .is_string()));
    assert!(shown(&|e| e.path == "/v1/verify-claims-batch"
        && e.headers.iter().any(|(k, _)| k == "idempotency-key")
        && e.status == 202));
    assert!(shown(&|e| e.has("same-job") && e.status == 200));
    assert!(shown(
        &|e| e.path.starts_with("/v2/jobs/") && e.response["results"][0].is_object()
    ));
    assert!(shown(&|e| e
        .headers
        .iter()
        .any(|(k, _)| k == "x-request-id")));
    for status in [400, 401, 403, 409, 415, 422] {
        assert!(
            shown(&|e| e.status == status && e.response["error"]["code"].is_string()),
            "{status}"
        );
    }
}

/// Breaking the doc breaks the test: a renamed field, a wrong decision, a
/// wrong type, a missing array item, an undocumented field are each
/// reported.
#[test]
fn the_shape_check_catches_drift() {
    use serde_json::json;
    let actual = json!({"decision": "deny", "metrics": {"latency_ms": 0.5},
        "checks": [{"claim_id": "c1", "coverage": 0.2}],
        "request_hash": "sha256:00ff"});
    let check = |doc: Value| {
        let mut e = Vec::new();
        check_shape(&doc, &actual, "$", &mut e);
        e
    };
    let ok = json!({"decision": "deny", "metrics": {"latency_ms": 9.9},
        "checks": [{"claim_id": "c1", "coverage": 0.9}], "request_hash": "sha256:00…"});
    assert_eq!(check(ok), Vec::<String>::new());
    assert!(check(json!({"decision": "deny", "…": "…"})).is_empty());
    for bad in [
        json!({"decision": "allow", "…": "…"}),
        json!({"metrics": {"latency": 0.5}, "…": "…"}),
        json!({"metrics": {"latency_ms": "0.5"}, "…": "…"}),
        json!({"checks": [{"claim_id": "c2", "…": "…"}], "…": "…"}),
        json!({"checks": [{"claim_id": "c1"}], "…": "…"}),
        json!({"request_hash": "sha256:00fe", "…": "…"}),
        json!({"decision": "deny"}),
    ] {
        assert!(!check(bad.clone()).is_empty(), "{bad}");
    }
    let mut e = Vec::new();
    check_shape(&json!({"a": [1]}), &json!({"a": []}), "$", &mut e);
    assert!(!e.is_empty());
}

/// The values of the first flow-style `enum: [...]` after the line `marker`
/// in docs/openapi.yaml.
fn openapi_enum(marker: &str) -> BTreeSet<String> {
    let text = read("docs/openapi.yaml");
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("docs/openapi.yaml: no {marker:?}"));
    let rest = &text[at..];
    let from = rest.find("enum: [").expect("an enum after the marker") + "enum: [".len();
    let to = from + rest[from..].find(']').expect("the enum's end");
    rest[from..to]
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The first cells (in backticks) of the table after `<!-- table: NAME -->`.
fn table_keys(doc: &str, name: &str) -> Vec<String> {
    table_rows(doc, name)
        .into_iter()
        .map(|cells| {
            let first = cells.first().cloned().unwrap_or_default();
            first.trim().trim_matches('`').to_string()
        })
        .collect()
}

/// The body rows of the table after `<!-- table: NAME -->`, as cells.
fn table_rows(doc: &str, name: &str) -> Vec<Vec<String>> {
    let marker = format!("<!-- table: {name} -->");
    let at = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/api.md has no {marker}"));
    doc[at + marker.len()..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its separator
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn assert_same(what: &str, code: BTreeSet<String>, doc: BTreeSet<String>) {
    let undocumented: Vec<_> = code.difference(&doc).collect();
    let unknown: Vec<_> = doc.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/api.md is out of date on {what}:\n  in the code, not in the doc: {undocumented:?}\n  in the doc, not in the code: {unknown:?}"
    );
}

fn decision_reasons() -> BTreeSet<String> {
    DecisionReason::ALL
        .iter()
        .map(|r| r.as_str().to_string())
        .collect()
}

#[test]
fn every_reason_and_error_code_has_its_row() {
    let doc = doc();
    let reasons = decision_reasons();
    assert!(reasons.contains("coverage_sufficient") && reasons.len() >= 10);
    assert_same(
        "decision reasons",
        reasons,
        table_keys(&doc, "decision-reasons").into_iter().collect(),
    );
    let claim_reasons: BTreeSet<String> =
        Reason::ALL.iter().map(|r| r.as_str().to_string()).collect();
    assert!(claim_reasons.contains("amount_mismatch"));
    assert_same(
        "claim reasons",
        claim_reasons,
        table_keys(&doc, "claim-reasons").into_iter().collect(),
    );
    let statuses: BTreeSet<String> = ClaimStatus::ALL
        .iter()
        .map(|s| s.as_str().to_string())
        .collect();
    assert_same(
        "claim statuses",
        statuses,
        table_keys(&doc, "claim-statuses").into_iter().collect(),
    );
    let codes: BTreeSet<String> = ApiError::CODES.iter().map(|c| c.to_string()).collect();
    assert!(codes.contains("invalid_request"));
    assert_same(
        "error codes",
        codes.clone(),
        table_keys(&doc, "error-codes").into_iter().collect(),
    );
    assert_eq!(
        openapi_enum("    Error:"),
        codes,
        "docs/openapi.yaml's error codes are not the server's"
    );
}

/// The claim reasons the doc marks as contradictions are the ones
/// `Reason::is_contradiction` names.
#[test]
fn the_contradiction_column_follows_the_engine() {
    let code: BTreeSet<String> = Reason::ALL
        .iter()
        .filter(|r| r.is_contradiction())
        .map(|r| r.as_str().to_string())
        .collect();
    assert!(code.contains("amount_mismatch") && !code.contains("low_coverage"));
    let doc: BTreeSet<String> = table_rows(&doc(), "claim-reasons")
        .into_iter()
        .filter(|cells| cells.get(1).map(String::as_str) == Some("yes"))
        .map(|cells| cells[0].trim_matches('`').to_string())
        .collect();
    assert_same("contradictions", code, doc);
}

fn dedup_runs(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v {
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

/// The decision table in the doc has the rows of the engine's table, in
/// order: the reasons of its rows, read in order (consecutive repeats
/// merged), are `DecisionReason::TABLE_ORDER` (which the engine's own tests
/// check against the table).
#[test]
fn the_decision_table_follows_decide() {
    let code: Vec<String> = DecisionReason::TABLE_ORDER
        .iter()
        .map(|r| r.as_str().to_string())
        .collect();
    let doc = doc();
    let rows = table_rows(&doc, "decision-table");
    let documented: Vec<String> = rows
        .iter()
        .flat_map(|cells| {
            let last = cells.last().cloned().unwrap_or_default();
            last.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        dedup_runs(documented),
        code,
        "docs/api.md's decision table (reason column, in order) is not decide()'s"
    );
}
