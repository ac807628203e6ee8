//! Workers as Kubernetes pods (DESIGN.md §14, docs/SCALING.md "Kubernetes"), through the real
//! binaries: the real `pegasusd` with a `kind: kubernetes` launcher talks to a mock Kubernetes
//! API server that this test runs in-process on 127.0.0.1 over plain HTTP (pegasusd finds it
//! through the kubeconfig in `KUBECONFIG`, with a bearer token, as kubectl would).
//!
//! The mock answers what pegasusd uses (create, get, list by label, watch one pod, delete with
//! preconditions) in the API server's own shapes: objects as k8s-openapi writes them, a
//! resourceVersion per change, `Status` bodies for 401/404/405/409/422, watches as
//! newline-delimited `WatchEvent`s kept open until `timeoutSeconds`. It records every request.
//! Beside it runs a fake kubelet on this machine (the "node"): for each created pod it starts
//! the real `project-worker` with exactly the pod's environment (and what a container runtime
//! adds, `PATH` and `HOME`; nothing else of this test's environment) and the pod's args, the
//! image's `project-worker` being this build's binary; it reports the pod Running, then
//! Succeeded or Failed with the container's exit (`terminated`, exit code, reason) as a real
//! kubelet does, SIGTERMs the process on DELETE (SIGKILL after the grace period) and removes
//! the pod once its process is gone. The node sees the claim `pegasus-home` at the home's
//! `projects/` (as kind's bind mount in docs/SCALING.md does), so the pod's mounts stand at
//! the paths pegasusd gave; the kubelet refuses a pod whose mounts would not. It cannot make
//! the pod's private `emptyDir` home (no mount namespace): the worker sees the real home.
//! Secrets too (create, get, list by label, delete): a pod's `secret` volume is resolved when
//! its container starts (a missing Secret keeps it waiting, as on a real node), its items
//! written (decoded, with their mode) to a folder of the node's own for that pod; having no
//! mount namespace, the kubelet points the container at that folder by rewriting the env
//! values that name a path under the volume's mountPath.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use axum::{
    body::Body,
    extract::{Request, State},
    http::header,
    response::Response,
    Router,
};
use common::*;
use pegasus_fakellm::FakeLlm;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NS: &str = "pegasus";
const CLAIM: &str = "pegasus-home";
const IMAGE: &str = "registry.example/pegasus-worker:0.1";
const TOKEN: &str = "mock-token-for-pegasusd";
const PODS: &str = "/api/v1/namespaces/pegasus/pods";
const SECRETS: &str = "/api/v1/namespaces/pegasus/secrets";
const WORKER: &str = env!("CARGO_BIN_EXE_project-worker");

// ---------------------------------------------------------------------------------------------
// The mock API server and its kubelet.

/// A request as the mock API server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    /// The query, decoded, in order.
    query: Vec<(String, String)>,
    body: Value,
    authorization: Option<String>,
}

impl Seen {
    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `DELETE .../pods/NAME` with the uid precondition `uid`.
    fn deletes(&self, uid: &str) -> bool {
        self.method == "DELETE" && self.body["preconditions"]["uid"] == uid
    }
}

/// One watch event, as every watch of a matching pod from an older version sees it.
struct Event {
    rv: u64,
    namespace: String,
    kind: &'static str,
    object: Value,
}

struct PodRec {
    object: Value,
    /// The container's process while it runs.
    pid: Option<u32>,
}

#[derive(Default)]
struct Api {
    pods: BTreeMap<(String, String), PodRec>,
    /// Secrets by (namespace, name).
    secrets: BTreeMap<(String, String), Value>,
    /// The cluster's resourceVersion: one counter for every change.
    rv: u64,
    events: Vec<Event>,
    requests: Vec<Seen>,
    /// Where the node sees each claim's volume: (namespace, claim) -> host folder.
    claims: BTreeMap<(String, String), PathBuf>,
    /// Worker processes running now, and the most ever at once, per project annotation.
    running: BTreeMap<String, usize>,
    most_at_once: BTreeMap<String, usize>,
    /// Whether the node has the worker image (else it would pull it from a registry it cannot
    /// reach).
    images_on_node: bool,
    /// What the kubelet refused to run: a pod pegasusd should never make.
    problems: Vec<String>,
}

struct Shared {
    api: Mutex<Api>,
    /// The number of events so far: open watches wait for it to change.
    changed: tokio::sync::watch::Sender<usize>,
    /// Where the kubelet writes each container's output (`kubectl logs`).
    logs: PathBuf,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Api> {
        self.api.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `object` (a pod) under a new resourceVersion and tells the watches.
    fn record(
        &self,
        api: &mut Api,
        kind: &'static str,
        namespace: &str,
        mut object: Value,
    ) -> Value {
        api.rv += 1;
        object["metadata"]["resourceVersion"] = json!(api.rv.to_string());
        api.events.push(Event {
            rv: api.rv,
            namespace: namespace.to_string(),
            kind,
            object: object.clone(),
        });
        self.changed.send_replace(api.events.len());
        object
    }

    /// Changes the pod `namespace/name` of `uid` with `f` (a MODIFIED event); `None` when that
    /// pod is gone.
    fn modify(
        &self,
        api: &mut Api,
        namespace: &str,
        name: &str,
        uid: &str,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let key = (namespace.to_string(), name.to_string());
        let rec = api
            .pods
            .get(&key)
            .filter(|r| r.object["metadata"]["uid"] == uid)?;
        let mut object = rec.object.clone();
        f(&mut object);
        let object = self.record(api, "MODIFIED", namespace, object);
        api.pods.get_mut(&key)?.object = object.clone();
        Some(object)
    }

    /// Removes the pod (the kubelet's final delete once its containers are gone): DELETED.
    fn remove(&self, api: &mut Api, namespace: &str, name: &str) {
        if let Some(rec) = api.pods.remove(&(namespace.to_string(), name.to_string())) {
            self.record(api, "DELETED", namespace, rec.object);
        }
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn new_uid() -> String {
    let h = random_hex(16);
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn urldecode(q: &str) -> String {
    let b = q.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(c) => out.push(c),
                    Err(_) => out.extend_from_slice(&b[i..i + 3]),
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// A `Status` as the API server sends with an error.
fn status(code: u16, reason: &str, message: String, name: Option<&str>) -> Response {
    let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    if let Some(name) = name {
        s["details"] = json!({"name": name, "kind": "pods"});
    }
    json_response(code, &s)
}

fn not_found(name: &str) -> Response {
    status(
        404,
        "NotFound",
        format!("pods \"{name}\" not found"),
        Some(name),
    )
}

/// `k=v`, `k==v`, `k!=v`, `k` and `!k`, comma-separated (what label selectors pegasus may send).
fn labels_match(selector: &str, object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()] != v.trim()
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()] == v.trim()
            } else if let Some(k) = term.strip_prefix('!') {
                labels[k].is_null()
            } else {
                !labels[term].is_null()
            }
        })
}

/// A field selector the API server supports for pods that pegasus may send; `Err` for others.
fn fields_match(selector: &str, object: &Value) -> Result<bool, String> {
    let mut all = true;
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        if term.contains("!=") {
            return Err(format!(
                "the mock does not do `!=` in field selectors: {term}"
            ));
        }
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| format!("invalid selector: '{term}'"))?;
        let field = match k {
            "metadata.name" => &object["metadata"]["name"],
            "metadata.namespace" => &object["metadata"]["namespace"],
            "status.phase" => &object["status"]["phase"],
            _ => return Err(format!("field label not supported: {k}")),
        };
        all &= field == v;
    }
    Ok(all)
}

/// What the server stores of a created pod: its defaults filled in, as the real one does.
fn defaulted(mut pod: Value, namespace: &str, uid: &str) -> Value {
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    let meta = &mut pod["metadata"];
    meta["namespace"] = json!(namespace);
    meta["uid"] = json!(uid);
    meta["creationTimestamp"] = json!(now());
    let spec = &mut pod["spec"];
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("terminationGracePeriodSeconds", json!(30)),
        ("enableServiceLinks", json!(true)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
        ("priority", json!(0)),
    ] {
        if spec[k].is_null() {
            spec[k] = v;
        }
    }
    let mut guaranteed = true;
    if let Some(containers) = spec["containers"].as_array_mut() {
        for c in containers {
            for (k, v) in [
                ("terminationMessagePath", json!("/dev/termination-log")),
                ("terminationMessagePolicy", json!("File")),
                ("imagePullPolicy", json!("IfNotPresent")),
            ] {
                if c[k].is_null() {
                    c[k] = v;
                }
            }
            let r = &c["resources"];
            guaranteed &= !r["limits"]["cpu"].is_null()
                && !r["limits"]["memory"].is_null()
                && r["limits"] == r["requests"];
        }
    }
    pod["status"] = json!({"phase": "Pending",
        "qosClass": if guaranteed { "Guaranteed" } else { "Burstable" }});
    pod
}

/// What the API server's validation refuses (the part of it a pegasus pod could trip).
fn invalid(pod: &Value) -> Option<String> {
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return Some("spec.containers: Required value".into());
    };
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    if !matches!(
        spec["restartPolicy"].as_str(),
        None | Some("Always" | "OnFailure" | "Never")
    ) {
        return Some(format!(
            "spec.restartPolicy: Unsupported value: {}",
            spec["restartPolicy"]
        ));
    }
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].name: Required value"));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].image: Required value"));
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or("");
            if !volumes.contains(&name) {
                return Some(format!(
                    "spec.containers[{i}].volumeMounts[{j}].name: Not found: \"{name}\""
                ));
            }
        }
        for (j, e) in c["env"].as_array().into_iter().flatten().enumerate() {
            if e["name"].as_str().is_none_or(str::is_empty) {
                return Some(format!(
                    "spec.containers[{i}].env[{j}].name: Required value"
                ));
            }
        }
    }
    for (k, v) in pod["metadata"]["labels"].as_object().into_iter().flatten() {
        let v = v.as_str().unwrap_or("");
        let ok = v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && (v.is_empty()
                || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && v.ends_with(|c: char| c.is_ascii_alphanumeric())));
        if !ok {
            return Some(format!(
                "metadata.labels: Invalid value: \"{v}\" (label {k})"
            ));
        }
    }
    None
}

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return status(
                    400,
                    "BadRequest",
                    format!("the request body is not JSON: {e}"),
                    None,
                )
            }
        }
    };
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (urldecode(k), urldecode(v))
            })
            .collect(),
        body,
        authorization: parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    s.lock().requests.push(seen.clone());
    if seen.authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
        return status(401, "Unauthorized", "Unauthorized".into(), None);
    }
    let segments: Vec<&str> = seen.path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", "namespaces", ns, "pods"] => match seen.method.as_str() {
            "GET" if seen.param("watch").is_some_and(|w| w == "true" || w == "1") => {
                watch(s.clone(), ns, &seen)
            }
            "GET" => list(&s, ns, &seen),
            "POST" => create(&s, ns, seen.body.clone()),
            _ => method_not_allowed(),
        },
        ["api", "v1", "namespaces", ns, "secrets"] => match seen.method.as_str() {
            "GET" => list_secrets(&s, ns, &seen),
            "POST" => create_secret(&s, ns, seen.body.clone()),
            _ => method_not_allowed(),
        },
        ["api", "v1", "namespaces", ns, "secrets", name] => match seen.method.as_str() {
            "GET" => match s.lock().secrets.get(&(ns.to_string(), name.to_string())) {
                Some(secret) => json_response(200, secret),
                None => secret_not_found(name),
            },
            "DELETE" => match s.lock().secrets.remove(&(ns.to_string(), name.to_string())) {
                Some(_) => json_response(
                    200,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                        "details": {"name": name, "kind": "secrets"}}),
                ),
                None => secret_not_found(name),
            },
            _ => method_not_allowed(),
        },
        ["api", "v1", "namespaces", ns, "pods", name] => match seen.method.as_str() {
            "GET" => match s.lock().pods.get(&(ns.to_string(), name.to_string())) {
                Some(rec) => json_response(200, &rec.object),
                None => not_found(name),
            },
            "DELETE" => delete(&s, ns, name, &seen),
            _ => method_not_allowed(),
        },
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            None,
        ),
    }
}

fn secret_not_found(name: &str) -> Response {
    let mut r = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("secrets \"{name}\" not found"), "reason": "NotFound", "code": 404});
    r["details"] = json!({"name": name, "kind": "secrets"});
    json_response(404, &r)
}

/// Standard base64 (what the API server keeps a Secret's `data` in), decoded.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let body = text.trim_end_matches('=');
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in body.bytes() {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn create_secret(s: &Arc<Shared>, ns: &str, mut secret: Value) -> Response {
    if secret["kind"] != "Secret" {
        return status(
            400,
            "BadRequest",
            format!("the kind {} is not a Secret", secret["kind"]),
            None,
        );
    }
    let Some(name) = secret["metadata"]["name"].as_str().map(str::to_string) else {
        return status(
            422,
            "Invalid",
            "Secret \"\" is invalid: metadata.name: Required value".into(),
            None,
        );
    };
    for (key, value) in secret["data"].as_object().into_iter().flatten() {
        if value.as_str().and_then(base64_decode).is_none() {
            return status(
                400,
                "BadRequest",
                format!("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at data.{key}"),
                None,
            );
        }
    }
    let mut api = s.lock();
    let key = (ns.to_string(), name.clone());
    if api.secrets.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            format!("secrets \"{name}\" already exists"),
            Some(&name),
        );
    }
    api.rv += 1;
    secret["metadata"]["namespace"] = json!(ns);
    secret["metadata"]["uid"] = json!(new_uid());
    secret["metadata"]["resourceVersion"] = json!(api.rv.to_string());
    secret["metadata"]["creationTimestamp"] = json!(now());
    api.secrets.insert(key, secret.clone());
    json_response(201, &secret)
}

fn list_secrets(s: &Shared, ns: &str, seen: &Seen) -> Response {
    let api = s.lock();
    let items: Vec<Value> = api
        .secrets
        .iter()
        .filter(|((secret_ns, _), secret)| {
            secret_ns == ns && labels_match(seen.param("labelSelector").unwrap_or(""), secret)
        })
        .map(|(_, secret)| secret.clone())
        .collect();
    json_response(
        200,
        &json!({"kind": "SecretList", "apiVersion": "v1",
            "metadata": {"resourceVersion": api.rv.to_string()}, "items": items}),
    )
}

fn method_not_allowed() -> Response {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource".into(),
        None,
    )
}

fn list(s: &Shared, ns: &str, seen: &Seen) -> Response {
    let api = s.lock();
    let mut items = Vec::new();
    for ((pod_ns, _), rec) in &api.pods {
        if pod_ns != ns || !labels_match(seen.param("labelSelector").unwrap_or(""), &rec.object) {
            continue;
        }
        match fields_match(seen.param("fieldSelector").unwrap_or(""), &rec.object) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => return status(400, "BadRequest", e, None),
        }
        // The items of a list do not repeat their kind.
        let mut item = rec.object.clone();
        if let Some(o) = item.as_object_mut() {
            o.remove("kind");
            o.remove("apiVersion");
        }
        items.push(item);
    }
    json_response(
        200,
        &json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": api.rv.to_string()}, "items": items}),
    )
}

fn watch(s: Arc<Shared>, ns: &str, seen: &Seen) -> Response {
    let fields = seen.param("fieldSelector").unwrap_or("").to_string();
    let labels = seen.param("labelSelector").unwrap_or("").to_string();
    if let Err(e) = fields_match(&fields, &json!({})) {
        return status(400, "BadRequest", e, None);
    }
    let seconds = seen
        .param("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(1800u64);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let ns = ns.to_string();
    let matches = move |namespace: &str, object: &Value| {
        namespace == ns
            && labels_match(&labels, object)
            && fields_match(&fields, object).unwrap_or(false)
    };
    let mut changed = s.changed.subscribe();
    changed.borrow_and_update();
    let mut pending = VecDeque::new();
    let next = {
        let api = s.lock();
        match seen
            .param("resourceVersion")
            .filter(|v| !v.is_empty() && *v != "0")
        {
            Some(rv) => {
                let Ok(rv) = rv.parse::<u64>() else {
                    return status(
                        400,
                        "BadRequest",
                        format!("invalid resource version: {rv}"),
                        None,
                    );
                };
                // Every event after that version (none is ever compacted away here).
                api.events.partition_point(|e| e.rv <= rv)
            }
            // No version: the current state first, as ADDED events.
            None => {
                for ((pod_ns, _), rec) in &api.pods {
                    if matches(pod_ns, &rec.object) {
                        pending.push_back(
                            json!({"type": "ADDED", "object": rec.object}).to_string() + "\n",
                        );
                    }
                }
                api.events.len()
            }
        }
    };
    let state = (s, next, changed, pending);
    let stream =
        futures_util::stream::unfold(state, move |(s, mut next, mut changed, mut pending)| {
            let matches = matches.clone();
            async move {
                loop {
                    if let Some(line) = pending.pop_front() {
                        return Some((Ok::<_, std::io::Error>(line), (s, next, changed, pending)));
                    }
                    changed.borrow_and_update();
                    {
                        let api = s.lock();
                        for e in &api.events[next..] {
                            if matches(&e.namespace, &e.object) {
                                pending.push_back(
                                    json!({"type": e.kind, "object": e.object}).to_string() + "\n",
                                );
                            }
                        }
                        next = api.events.len();
                    }
                    if !pending.is_empty() {
                        continue;
                    }
                    tokio::select! {
                        r = changed.changed() => if r.is_err() { return None },
                        _ = tokio::time::sleep_until(deadline) => return None,
                    }
                }
            }
        });
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn create(s: &Arc<Shared>, ns: &str, pod: Value) -> Response {
    if !pod["kind"].is_null() && pod["kind"] != "Pod" {
        return status(
            400,
            "BadRequest",
            format!("the kind {} is not a Pod", pod["kind"]),
            None,
        );
    }
    let Some(name) = pod["metadata"]["name"].as_str().map(str::to_string) else {
        return status(
            422,
            "Invalid",
            "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
                .into(),
            None,
        );
    };
    if pod["metadata"]["namespace"]
        .as_str()
        .is_some_and(|n| n != ns)
    {
        return status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
            None,
        );
    }
    if let Some(why) = invalid(&pod) {
        let mut r = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("Pod \"{name}\" is invalid: {why}"), "reason": "Invalid",
            "details": {"name": name, "kind": "Pod"}, "code": 422});
        r["details"]["causes"] = json!([{"message": why}]);
        return json_response(422, &r);
    }
    let uid = new_uid();
    let object = {
        let mut api = s.lock();
        let key = (ns.to_string(), name.clone());
        if api.pods.contains_key(&key) {
            return status(
                409,
                "AlreadyExists",
                format!("pods \"{name}\" already exists"),
                Some(&name),
            );
        }
        let object = s.record(&mut api, "ADDED", ns, defaulted(pod, ns, &uid));
        api.pods.insert(
            key,
            PodRec {
                object: object.clone(),
                pid: None,
            },
        );
        object
    };
    let (s, ns) = (s.clone(), ns.to_string());
    std::thread::spawn(move || kubelet(&s, &ns, &name, &uid));
    json_response(201, &object)
}

fn delete(s: &Arc<Shared>, ns: &str, name: &str, seen: &Seen) -> Response {
    let mut api = s.lock();
    let Some(rec) = api.pods.get(&(ns.to_string(), name.to_string())) else {
        return not_found(name);
    };
    let (uid, rv) = (
        rec.object["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        rec.object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    );
    let pre = &seen.body["preconditions"];
    for (field, want, have) in [
        ("UID", &pre["uid"], &uid),
        ("ResourceVersion", &pre["resourceVersion"], &rv),
    ] {
        if let Some(want) = want.as_str() {
            if want != have {
                return status(
                    409,
                    "Conflict",
                    format!("Operation cannot be fulfilled on pods \"{name}\": Precondition failed: {field} in precondition: {want}, {field} in object meta: {have}"),
                    Some(name),
                );
            }
        }
    }
    if rec.object["metadata"]["deletionTimestamp"].is_string() {
        return json_response(200, &rec.object);
    }
    let grace = seen.body["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| {
            seen.param("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
        })
        .or_else(|| rec.object["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0);
    let pid = rec.pid;
    let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
    let object = s
        .modify(&mut api, ns, name, &uid, |p| {
            p["metadata"]["deletionTimestamp"] =
                json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        })
        .unwrap();
    match pid {
        // No container runs (it ended, or never started): the kubelet removes it at once.
        None => s.remove(&mut api, ns, name),
        Some(pid) => {
            signal(pid, nix::sys::signal::Signal::SIGTERM);
            let (s, ns, name) = (s.clone(), ns.to_string(), name.to_string());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(grace as u64));
                let api = s.lock();
                if api.pods.get(&(ns, name)).is_some_and(|r| {
                    r.pid == Some(pid) && r.object["metadata"]["uid"] == uid.as_str()
                }) {
                    signal(pid, nix::sys::signal::Signal::SIGKILL);
                }
            });
        }
    }
    json_response(200, &object)
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// What the kubelet runs for a pod's container.
struct Process {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    workdir: String,
}

/// What the kubelet runs for a pod, or why it cannot (`CreateContainerConfigError`, as the
/// real kubelet says for an env it cannot resolve; here also a mount this node cannot give).
fn container_of(api: &Api, ns: &str, pod: &Value, node: &Path) -> Result<Process, String> {
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().unwrap();
    if containers.len() != 1 {
        return Err("the mock kubelet runs pods of one container".into());
    }
    let c = &containers[0];
    // The image's entrypoint (tini) runs the args; a `command` would replace it.
    let mut argv: Vec<String> = c["command"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(c["args"].as_array().into_iter().flatten())
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    match argv.first_mut() {
        Some(first) if first == "project-worker" => *first = WORKER.to_string(),
        other => {
            return Err(format!(
            "exec: {other:?}: executable file not found in $PATH (the image holds project-worker)"
        ))
        }
    }
    let mut env = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(value) = e["value"].as_str() else {
            return Err(format!(
                "the mock kubelet cannot resolve env {} (valueFrom)",
                e["name"]
            ));
        };
        env.push((e["name"].as_str().unwrap().to_string(), value.to_string()));
    }
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let volume = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
        if let Some(secret_name) = volume["secret"]["secretName"].as_str() {
            let Some(secret) = api.secrets.get(&(ns.to_string(), secret_name.to_string())) else {
                return Err(format!(
                    "MountVolume.SetUp failed for volume {}: secret \"{secret_name}\" not found",
                    volume["name"]
                ));
            };
            let folder = node.join(m["name"].as_str().unwrap_or("secret"));
            std::fs::create_dir_all(&folder).unwrap();
            let mode = volume["secret"]["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            for item in volume["secret"]["items"].as_array().into_iter().flatten() {
                let key = item["key"].as_str().unwrap_or("");
                let Some(data) = secret["data"][key].as_str().and_then(base64_decode) else {
                    return Err(format!("secret \"{secret_name}\" has no key {key}"));
                };
                let file = folder.join(item["path"].as_str().unwrap_or(key));
                std::fs::write(&file, data).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            let mount = m["mountPath"].as_str().unwrap_or("").to_string();
            for (_, value) in env.iter_mut() {
                if let Some(rest) = value.strip_prefix(&format!("{mount}/")) {
                    *value = folder.join(rest).display().to_string();
                }
            }
            continue;
        }
        let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() else {
            // An emptyDir: this node cannot give the container a private one.
            continue;
        };
        let Some(root) = api.claims.get(&(ns.to_string(), claim.to_string())) else {
            return Err(format!("persistentvolumeclaim \"{claim}\" not found"));
        };
        let host = root.join(m["subPath"].as_str().unwrap_or(""));
        let mount = m["mountPath"].as_str().unwrap_or("");
        // No mount namespace here: the container sees the node's paths, so a mount stands
        // where the pod wants it only when the volume is at that very path on the node.
        if host != Path::new(mount) || !host.is_dir() {
            return Err(format!(
                "the mock node sees claim {claim} subPath {:?} at {}, not at the mountPath {mount}",
                m["subPath"],
                host.display()
            ));
        }
    }
    let workdir = c["workingDir"].as_str().unwrap_or("/").to_string();
    Ok(Process { argv, env, workdir })
}

/// The pod `ns/name` of `uid` while it exists and is not being deleted.
fn live(api: &Api, ns: &str, name: &str, uid: &str) -> Option<Value> {
    api.pods
        .get(&(ns.to_string(), name.to_string()))
        .filter(|r| r.object["metadata"]["uid"] == uid)
        .filter(|r| r.object["metadata"]["deletionTimestamp"].is_null())
        .map(|r| r.object.clone())
}

/// How often the kubelet looks again at a pod it cannot run yet (its sync loop).
const KUBELET_SYNC: Duration = Duration::from_millis(200);

/// The node's side of one pod: schedule it (once its claims exist), pull its image (while the
/// registry cannot be reached and the node does not have it: `ErrImagePull`, then
/// `ImagePullBackOff`), run its container, report its end, and remove it when it was
/// deleted. A pod deleted before its container runs is removed by the DELETE itself.
fn kubelet(s: &Shared, ns: &str, name: &str, uid: &str) {
    // The scheduler: a pod whose claim does not exist stays Pending, unschedulable.
    let mut told = false;
    loop {
        let mut api = s.lock();
        let Some(pod) = live(&api, ns, name, uid) else {
            return;
        };
        let missing = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            .find(|c| !api.claims.contains_key(&(ns.to_string(), c.to_string())))
            .map(str::to_string);
        match missing {
            None => {
                s.modify(&mut api, ns, name, uid, |p| {
                    p["spec"]["nodeName"] = json!("mock-node");
                    p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True",
                        "lastTransitionTime": now()}]);
                });
                break;
            }
            Some(claim) if !told => {
                told = true;
                s.modify(&mut api, ns, name, uid, |p| {
                    p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                        "reason": "Unschedulable", "lastTransitionTime": now(),
                        "message": format!("0/1 nodes are available: persistentvolumeclaim \"{claim}\" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")}]);
                });
            }
            Some(_) => {}
        }
        drop(api);
        std::thread::sleep(KUBELET_SYNC);
    }
    // The image: on the node already (loaded, as `kind load` does), or pulled.
    let mut pulls = 0;
    loop {
        let mut api = s.lock();
        let Some(pod) = live(&api, ns, name, uid) else {
            return;
        };
        let image = pod["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if api.images_on_node && image == IMAGE {
            break;
        }
        let (reason, message) = if pulls == 0 {
            let host = image.split('/').next().unwrap_or("");
            ("ErrImagePull", format!("failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": dial tcp: lookup {host} on 10.96.0.10:53: no such host"))
        } else {
            (
                "ImagePullBackOff",
                format!("Back-off pulling image \"{image}\""),
            )
        };
        if pulls < 2 {
            s.modify(&mut api, ns, name, uid, |p| {
                p["status"]["containerStatuses"] = json!([{"name": p["spec"]["containers"][0]["name"],
                    "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": message}}}]);
            });
        }
        pulls += 1;
        drop(api);
        std::thread::sleep(KUBELET_SYNC);
    }
    let mut api = s.lock();
    let Some(pod) = live(&api, ns, name, uid) else {
        return;
    };
    let project = pod["metadata"]["annotations"]["pegasus/project"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let image = pod["spec"]["containers"][0]["image"].clone();
    let container = pod["spec"]["containers"][0]["name"].clone();
    let log = s.logs.join(format!("{name}-{uid}.log"));
    let node = s.logs.with_file_name("node").join(uid);
    let started = container_of(&api, ns, &pod, &node).and_then(|Process { argv, env, workdir }| {
        let out = std::fs::File::create(&log).unwrap();
        Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            // What a container runtime adds; nothing else of the test's environment.
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(
                "HOME",
                std::env::var("HOME").unwrap_or_else(|_| "/root".into()),
            )
            .envs(env)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .map_err(|e| e.to_string())
    });
    let mut child = match started {
        Ok(child) => child,
        Err(why) => {
            // The container cannot be made: the pod stays Pending, waiting, as on a real node.
            api.problems.push(format!("pod {name}: {why}"));
            s.modify(&mut api, ns, name, uid, |p| {
                p["status"]["containerStatuses"] = json!([{"name": container, "image": image,
                    "imageID": "", "ready": false, "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "CreateContainerConfigError", "message": why}}}]);
            });
            return;
        }
    };
    let pid = child.id();
    let started_at = now();
    let container_id = format!("containerd://{}", random_hex(32));
    let image_id = format!("registry.example/pegasus-worker@sha256:{}", "5e".repeat(32));
    s.modify(&mut api, ns, name, uid, |p| {
        let st = &mut p["status"];
        st["phase"] = json!("Running");
        st["hostIP"] = json!("172.18.0.2");
        st["podIP"] = json!("10.244.0.7");
        st["startTime"] = json!(started_at);
        st["conditions"] = json!(["Initialized", "Ready", "ContainersReady", "PodScheduled"]
            .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": started_at})));
        st["containerStatuses"] = json!([{"name": container, "image": image, "imageID": image_id,
            "containerID": container_id, "ready": true, "started": true, "restartCount": 0,
            "state": {"running": {"startedAt": started_at}}}]);
    });
    if let Some(rec) = api.pods.get_mut(&(ns.to_string(), name.to_string())) {
        rec.pid = Some(pid);
    }
    let now_running = {
        let n = api.running.entry(project.clone()).or_default();
        *n += 1;
        *n
    };
    let most = api.most_at_once.entry(project.clone()).or_default();
    *most = (*most).max(now_running);
    drop(api);

    let exit = child.wait().unwrap();
    let code = {
        use std::os::unix::process::ExitStatusExt;
        exit.code()
            .unwrap_or_else(|| 128 + exit.signal().unwrap_or(0))
    };
    let mut api = s.lock();
    *api.running.entry(project).or_default() -= 1;
    let finished = now();
    let ended = s.modify(&mut api, ns, name, uid, |p| {
        let st = &mut p["status"];
        st["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
        let why = if code == 0 { "PodCompleted" } else { "PodFailed" };
        st["conditions"] = json!([
            {"type": "Initialized", "status": "True", "lastTransitionTime": started_at},
            {"type": "Ready", "status": "False", "reason": why, "lastTransitionTime": finished},
            {"type": "ContainersReady", "status": "False", "reason": why, "lastTransitionTime": finished},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started_at}]);
        st["containerStatuses"] = json!([{"name": container, "image": image, "imageID": image_id,
            "containerID": container_id, "ready": false, "started": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code,
                "reason": if code == 0 { "Completed" } else { "Error" },
                "startedAt": started_at, "finishedAt": finished, "containerID": container_id}}}]);
    });
    if let Some(rec) = api.pods.get_mut(&(ns.to_string(), name.to_string())) {
        if rec.object["metadata"]["uid"] == uid {
            rec.pid = None;
        }
    }
    if ended.is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string()) {
        s.remove(&mut api, ns, name);
    }
}

/// The mock cluster: its API server (on its own runtime) and the kubelet's state.
struct Cluster {
    shared: Arc<Shared>,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("pgk")
            .tempdir_in("/tmp")
            .unwrap();
        let logs = dir.path().join("pod-logs");
        std::fs::create_dir(&logs).unwrap();
        let shared = Arc::new(Shared {
            api: Mutex::new(Api {
                images_on_node: true,
                ..Api::default()
            }),
            changed: tokio::sync::watch::Sender::new(0),
            logs,
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        Cluster {
            shared,
            addr,
            dir,
            runtime: Some(runtime),
        }
    }

    /// The node sees the volume of `claim` (in namespace `pegasus`) at `root`.
    fn add_claim(&self, claim: &str, root: &Path) {
        self.shared
            .lock()
            .claims
            .insert((NS.to_string(), claim.to_string()), root.to_path_buf());
    }

    /// A kubeconfig for this cluster, as pegasusd reads it from `KUBECONFIG`.
    fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: mock\n  cluster:\n    server: http://{}\n\
                 users:\n- name: pegasusd\n  user:\n    token: {TOKEN}\n\
                 contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: pegasusd\n    namespace: {NS}\n\
                 current-context: mock\n",
                self.addr
            ),
        )
        .unwrap();
        path
    }

    /// `kubectl delete pod`: as pegasusd's DELETE, but not one of its requests.
    fn kubectl_delete(&self, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let seen = Seen {
            method: "DELETE".into(),
            path: format!("{PODS}/{name}"),
            query: Vec::new(),
            body: json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": uid(pod)}}),
            authorization: None,
        };
        assert_eq!(delete(&self.shared, NS, name, &seen).status(), 200);
    }

    /// Removes the worker image from the node (or loads it again).
    fn image_on_node(&self, there: bool) {
        self.shared.lock().images_on_node = there;
    }

    fn problems(&self) -> Vec<String> {
        self.shared.lock().problems.clone()
    }

    fn requests(&self) -> Vec<Seen> {
        self.shared.lock().requests.clone()
    }

    /// Every Secret the API server has now.
    fn secrets(&self) -> Vec<Value> {
        self.shared.lock().secrets.values().cloned().collect()
    }

    /// Every pod the API server has now.
    fn pods(&self) -> Vec<Value> {
        self.shared
            .lock()
            .pods
            .values()
            .map(|r| r.object.clone())
            .collect()
    }

    /// The pod of `project` now, if any.
    fn pod_of(&self, project: &str) -> Option<Value> {
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["annotations"]["pegasus/project"] == project)
    }

    /// The pid of the container of the pod of `uid`, while it runs.
    fn pid_of(&self, uid: &str) -> Option<u32> {
        self.shared
            .lock()
            .pods
            .values()
            .find(|r| r.object["metadata"]["uid"] == uid)
            .and_then(|r| r.pid)
    }

    /// The uids of every pod made for `project`, oldest first.
    fn uids_of(&self, project: &str) -> Vec<String> {
        self.shared
            .lock()
            .events
            .iter()
            .filter(|e| e.kind == "ADDED")
            .filter(|e| e.object["metadata"]["annotations"]["pegasus/project"] == project)
            .map(|e| uid(&e.object))
            .collect()
    }

    /// Every watch event of the pod of `uid`.
    fn events_of(&self, uid: &str) -> Vec<(&'static str, Value)> {
        self.shared
            .lock()
            .events
            .iter()
            .filter(|e| e.object["metadata"]["uid"] == uid)
            .map(|e| (e.kind, e.object.clone()))
            .collect()
    }

    fn running(&self) -> usize {
        self.shared.lock().running.values().sum()
    }

    /// The most worker processes ever running at once for one project.
    fn most_at_once(&self) -> usize {
        self.shared
            .lock()
            .most_at_once
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for rec in self.shared.lock().pods.values() {
            if let Some(pid) = rec.pid {
                signal(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The test.

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

fn home_for(fake: &FakeLlm) -> (Home, u16) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let home = Home::with_config(&format!(
        "{}agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n\
         workers: {{listen: \"127.0.0.1:{port}\", heartbeat_interval_s: 1, shutdown_timeout_s: 5, restart_backoff_ms: 200}}\n\
         launchers:\n  cluster: {{kind: kubernetes, connect: \"127.0.0.1:{port}\", namespace: {NS}, \
         image: \"{IMAGE}\", home_volume: {{claim: {CLAIM}}}, resources: {{cpu: \"500m\", memory: 256Mi}}}}\n\
         default_launcher: cluster\n",
        fake_provider_config(fake),
    ));
    (home, port)
}

fn start(home: &Home, kubeconfig: &Path) -> Daemon {
    home.start_with_env(&[
        (FAKE_KEY_ENV, FAKE_KEY),
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
        // The mock is plain HTTP on loopback: no proxy between.
        ("HTTPS_PROXY", ""),
        ("https_proxy", ""),
    ])
}

/// The pid of `name`'s ready worker once it is not `not`, within `within`.
fn ready_within(
    home: &Home,
    cluster: &Cluster,
    name: &str,
    not: Option<u32>,
    within: Duration,
) -> u32 {
    poll(within, &format!("a ready worker for {name}"), || {
        let problems = cluster.problems();
        assert!(
            problems.is_empty(),
            "the kubelet refused a pod: {problems:?}"
        );
        let p = home.json(&["project", "show", name]);
        let pid = p["worker_pid"].as_u64()? as u32;
        (p["worker_state"] == "ready" && Some(pid) != not).then_some(pid)
    })
}

/// The environment of a process, as `NAME=value` pairs.
fn environ(pid: u32) -> BTreeMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn projects_run_as_pods_that_pegasusd_creates_watches_deletes_and_adopts() {
    let began = Instant::now();
    let fake = answering_fake();
    let (home, port) = home_for(&fake);
    // Dropped before the home: a failing test leaves no worker behind in it.
    let cluster = Cluster::start();
    let projects = home.path().join("projects");
    std::fs::create_dir_all(&projects).unwrap();
    cluster.add_claim(CLAIM, &projects);
    let kubeconfig = cluster.kubeconfig();
    let mut daemon = start(&home, &kubeconfig);

    // At start, pegasusd looks for this home's pods, by label, and for nothing else.
    let home_id = std::fs::read_to_string(home.path().join("home-id"))
        .unwrap()
        .trim()
        .to_string();
    let selector = format!("app.kubernetes.io/managed-by=pegasus,pegasus/home={home_id}");
    let first = cluster.requests();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(
        (first[0].method.as_str(), first[0].path.as_str()),
        ("GET", PODS)
    );
    assert_eq!(first[0].param("labelSelector"), Some(selector.as_str()));
    assert_eq!(first[0].param("watch"), None);
    // And for the enrollment Secrets an earlier pegasusd may have left.
    assert_eq!(
        (first[1].method.as_str(), first[1].path.as_str()),
        ("GET", SECRETS)
    );
    assert_eq!(first[1].param("labelSelector"), Some(selector.as_str()));

    // (1) A project gets exactly one pod, made as DESIGN.md §14 says.
    home.ctl_ok(&["project", "create", "web", "--goal", "Goal of web"]);
    let w1 = ready_within(&home, &cluster, "web", None, Duration::from_secs(10));
    let pods = cluster.pods();
    assert_eq!(pods.len(), 1, "{pods:?}");
    let posts: Vec<Seen> = cluster
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == PODS)
        .collect();
    assert_eq!(posts.len(), 1);
    // Its one-time token went into a Secret made for this launch, just before the pod.
    let secret_posts: Vec<Seen> = cluster
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == SECRETS)
        .collect();
    assert_eq!(secret_posts.len(), 1);
    let made_secret = &secret_posts[0].body;
    let line =
        String::from_utf8(base64_decode(made_secret["data"]["enroll"].as_str().unwrap()).unwrap())
            .unwrap();
    let token = line
        .trim_end()
        .strip_prefix("PEGASUS_ENROLL=")
        .unwrap_or_else(|| panic!("not an enrollment line: {line:?}"))
        .to_string();
    assert_eq!(token.len(), 64);
    assert_eq!(posts[0].path, PODS);
    let sent = &posts[0].body;
    let pod_name = format!("pegasus-{}-web", &home_id[..8]);
    assert_eq!(sent["metadata"]["name"], pod_name.as_str());
    assert_eq!(sent["metadata"]["namespace"], NS);
    assert_eq!(
        sent["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "pegasus", "pegasus/home": home_id,
            "pegasus/project": "web"})
    );
    assert_eq!(sent["metadata"]["annotations"]["pegasus/project"], "web");
    let spec = &sent["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(
        json!(spec["volumes"].as_array().unwrap()[..2]),
        json!([{"name": "home", "emptyDir": {}},
            {"name": "projects", "persistentVolumeClaim": {"claimName": CLAIM}}])
    );
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], IMAGE);
    let web_dir = home.project_dir("web").display().to_string();
    assert_eq!(c["args"], json!(["project-worker", web_dir]));
    assert!(c["command"].is_null(), "the image's entrypoint stays");
    assert_eq!(
        json!(c["volumeMounts"].as_array().unwrap()[..2]),
        json!([{"name": "home", "mountPath": home.path().display().to_string()},
            {"name": "projects", "mountPath": web_dir, "subPath": "web"}])
    );
    let amounts = json!({"cpu": "500m", "memory": "256Mi"});
    assert_eq!(
        c["resources"],
        json!({"requests": amounts, "limits": amounts})
    );
    let env: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        env,
        [
            "PEGASUS_CONNECT",
            "PEGASUS_CA_SHA256",
            "PEGASUS_ENROLL_FILE"
        ]
    );
    assert_eq!(c["env"][0]["value"], format!("127.0.0.1:{port}"));
    let text = sent.to_string();
    assert!(
        !text.contains(&token) && !text.contains("PEGASUS_ENROLL\""),
        "no token in the pod's spec: {text}"
    );
    assert_eq!(
        made_secret["metadata"]["name"],
        pod_name.as_str(),
        "the Secret is named as its pod"
    );
    assert_eq!(
        made_secret["metadata"]["labels"],
        sent["metadata"]["labels"]
    );
    assert_eq!(
        spec["volumes"][2]["secret"]["secretName"],
        pod_name.as_str(),
        "the pod reads its token from that Secret"
    );
    assert_eq!(
        c["volumeMounts"][2],
        json!({"name": "enroll", "mountPath": "/run/pegasus-enroll", "readOnly": true})
    );
    assert!(
        !text.contains(FAKE_KEY) && !text.contains(FAKE_KEY_ENV),
        "no provider key in a pod: {text}"
    );
    // The worker is the pod's process, with only the pod's environment, and answers through
    // pegasusd's link.
    let pod1 = cluster.pod_of("web").unwrap();
    assert_eq!(pod1["status"]["phase"], "Running");
    assert_eq!(cluster.pid_of(&uid(&pod1)), Some(w1));
    let env = environ(w1);
    assert_eq!(
        env.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "HOME",
            "PATH",
            "PEGASUS_CA_SHA256",
            "PEGASUS_CONNECT",
            "PEGASUS_ENROLL_FILE"
        ],
    );
    assert!(
        env.values().all(|v| !v.contains(&token)),
        "no token in the worker's environment: {env:?}"
    );
    // Once its worker enrolled, the launch's Secret is deleted.
    poll(
        Duration::from_secs(5),
        "the enrollment Secret deleted",
        || cluster.secrets().is_empty().then_some(()),
    );
    assert!(cluster
        .requests()
        .iter()
        .any(|r| r.method == "DELETE" && r.path == format!("{SECRETS}/{pod_name}")));
    let p = home.json(&["project", "show", "web"]);
    assert_eq!(p["worker_host"], "127.0.0.1", "{p}");
    let reply = home.ctl_ok(&["project", "send", "web", "where do you run?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());

    // (2) kill -9 of the worker: the pod fails, pegasusd records the crash with the cluster's
    // reason, deletes that pod, makes a new one, and the project is ready within 10 s.
    kill9(w1);
    let killed = Instant::now();
    let w2 = ready_within(&home, &cluster, "web", Some(w1), Duration::from_secs(10));
    assert!(killed.elapsed() < Duration::from_secs(10));
    let pod2 = cluster.pod_of("web").unwrap();
    assert_ne!(uid(&pod2), uid(&pod1), "a new pod");
    assert_eq!(cluster.pid_of(&uid(&pod2)), Some(w2));
    let failed = cluster
        .events_of(&uid(&pod1))
        .into_iter()
        .find(|(_, p)| p["status"]["phase"] == "Failed")
        .expect("the killed worker's pod went Failed");
    assert_eq!(
        failed.1["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    assert!(
        cluster.requests().iter().any(|r| r.deletes(&uid(&pod1))),
        "the failed pod was deleted, by its uid"
    );
    assert!(cluster.events_of(&uid(&pod1)).last().unwrap().0 == "DELETED");
    let crash = home.json(&["project", "show", "web"])["last_crash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let recorded = std::fs::read_to_string(home.project_dir("web").join("crashes.jsonl")).unwrap();
    assert_eq!(recorded.lines().count(), 1, "one crash: {recorded}");
    assert!(crash.contains("link lost"), "{crash:?}");
    // The crash carries the cluster's reason for the pod's end (DESIGN.md §14).
    assert!(
        crash.contains("pod failed: worker exited with code 137 (Error)"),
        "the crash carries the pod's failure: {crash:?}; crashes.jsonl: {recorded}"
    );

    // A pod deleted behind pegasusd's back (`kubectl delete pod`): the kubelet SIGTERMs its
    // worker, the link goes, pegasusd records a crash and makes a new pod once the old worker
    // has let go of the project.
    cluster.kubectl_delete(&pod2);
    let w2b = ready_within(&home, &cluster, "web", Some(w2), Duration::from_secs(10));
    assert!(!alive(w2));
    let gone = cluster.events_of(&uid(&pod2));
    assert_eq!(gone.last().unwrap().0, "DELETED");
    assert_eq!(
        gone.last().unwrap().1["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        143,
        "the worker went on SIGTERM"
    );
    let recorded = std::fs::read_to_string(home.project_dir("web").join("crashes.jsonl")).unwrap();
    assert_eq!(recorded.lines().count(), 2, "a second crash: {recorded}");
    let (w2, pod2) = (w2b, cluster.pod_of("web").unwrap());
    assert_eq!(cluster.pid_of(&uid(&pod2)), Some(w2));

    // (3) Suspend deletes the pod; resume makes a new one.
    home.ctl_ok(&["project", "suspend", "web"]);
    poll(Duration::from_secs(10), "web's pod to be deleted", || {
        cluster.pod_of("web").is_none().then_some(())
    });
    assert!(cluster.requests().iter().any(|r| r.deletes(&uid(&pod2))));
    poll(
        Duration::from_secs(5),
        "the suspended worker to exit",
        || (!alive(w2)).then_some(()),
    );
    home.ctl_ok(&["project", "resume", "web"]);
    let w3 = ready_within(&home, &cluster, "web", Some(w2), Duration::from_secs(10));
    let pod3 = cluster.pod_of("web").unwrap();
    assert_ne!(uid(&pod3), uid(&pod2));
    assert_eq!(cluster.pid_of(&uid(&pod3)), Some(w3));

    // (4) pegasusd dies with two pods running; one project is no longer active when it comes
    // back. Both workers are held stopped (SIGSTOP) so that their pods are still Running when
    // the new pegasusd looks: a worker whose link is gone exits at once otherwise.
    home.ctl_ok(&["project", "create", "docs", "--goal", "Goal of docs"]);
    let d1 = ready_within(&home, &cluster, "docs", None, Duration::from_secs(10));
    let docs_pod = cluster.pod_of("docs").unwrap();
    assert_eq!(cluster.pods().len(), 2);
    for pid in [w3, d1] {
        signal(pid, nix::sys::signal::Signal::SIGSTOP);
    }
    daemon.kill9();
    let md = home.project_md("docs");
    assert!(md.contains("status: active"), "{md}");
    std::fs::write(
        home.project_dir("docs").join("PROJECT.md"),
        md.replace("status: active", "status: suspended"),
    )
    .unwrap();
    let before = cluster.requests().len();
    let mut daemon = start(&home, &kubeconfig);
    let after: Vec<Seen> = cluster.requests().split_off(before);
    assert!(!after.is_empty());
    assert_eq!(
        (after[0].method.as_str(), after[0].path.as_str()),
        ("GET", PODS)
    );
    assert_eq!(after[0].param("labelSelector"), Some(selector.as_str()));
    // The inactive project's live pod is deleted (by uid), the active one's is kept.
    assert!(
        after.iter().any(|r| r.deletes(&uid(&docs_pod))),
        "the pod of a project no longer active is deleted: {after:?}"
    );
    assert!(
        !after
            .iter()
            .any(|r| r.method == "DELETE" && r.path.ends_with("-web")),
        "the active project's running pod is adopted: {after:?}"
    );
    assert_eq!(cluster.pod_of("web").map(|p| uid(&p)), Some(uid(&pod3)));
    let marked = cluster
        .events_of(&uid(&docs_pod))
        .into_iter()
        .find(|(_, p)| p["metadata"]["deletionTimestamp"].is_string())
        .unwrap();
    assert_eq!(
        marked.1["status"]["phase"], "Running",
        "deleted for its project, not for having ended"
    );
    // The deleted pod's process had its SIGTERM; it goes once it runs again, and so does its pod.
    signal(d1, nix::sys::signal::Signal::SIGCONT);
    poll(Duration::from_secs(10), "docs's pod to go", || {
        cluster.pod_of("docs").is_none().then_some(())
    });
    assert!(!alive(d1));
    // The adopted pod's worker finds its link gone and exits; its project is served again, by
    // one worker at a time.
    signal(w3, nix::sys::signal::Signal::SIGCONT);
    let w4 = ready_within(&home, &cluster, "web", Some(w3), Duration::from_secs(15));
    let pod4 = cluster.pod_of("web").unwrap();
    assert_eq!(cluster.pid_of(&uid(&pod4)), Some(w4));
    assert_eq!(cluster.pods().len(), 1, "{:?}", cluster.pods());
    let p = home.json(&["project", "show", "docs"]);
    assert_eq!(p["status"], "suspended", "{p}");
    let reply = home.ctl_ok(&["project", "send", "web", "where now?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");

    // A pod that cannot start (the node lacks the image and cannot reach the registry): the
    // watch tells pegasusd, which counts it as a launch that never connected (a backoff, not a
    // crash, never crash-looping), deletes that pod and launches again; once the image is
    // back, the project is ready.
    cluster.image_on_node(false);
    home.ctl_ok(&["project", "create", "blog", "--goal", "Goal of blog"]);
    let (why, shown) = poll(
        Duration::from_secs(10),
        "blog's pod reported unstartable",
        || {
            let p = home.json(&["project", "show", "blog"]);
            let why = p["last_crash"].as_str()?.to_string();
            why.contains("ErrImagePull").then_some((why, p))
        },
    );
    assert!(why.contains("cannot start"), "{why}");
    assert!(why.contains("no such host"), "the cluster's words: {why}");
    assert_ne!(shown["worker_state"], "crash-looping", "{shown}");
    assert!(
        !home.project_dir("blog").join("crashes.jsonl").exists(),
        "a pod that never started is not a crash"
    );
    let unstartable = cluster.uids_of("blog")[0].clone();
    poll(
        Duration::from_secs(5),
        "the unstartable pod deleted",
        || {
            cluster
                .requests()
                .iter()
                .any(|r| r.deletes(&unstartable))
                .then_some(())
        },
    );
    cluster.image_on_node(true);
    let b1 = ready_within(&home, &cluster, "blog", None, Duration::from_secs(10));
    let blog_pod = cluster.pod_of("blog").unwrap();
    assert_ne!(uid(&blog_pod), unstartable);
    assert_eq!(cluster.pid_of(&uid(&blog_pod)), Some(b1));

    // (5) A graceful stop deletes every pod and leaves no worker.
    home.ctl_ok(&["stop"]);
    daemon.wait_exit(Duration::from_secs(20));
    poll(Duration::from_secs(10), "every pod deleted", || {
        cluster.pods().is_empty().then_some(())
    });
    for pod in [&pod4, &blog_pod] {
        assert!(cluster.requests().iter().any(|r| r.deletes(&uid(pod))));
    }
    poll(Duration::from_secs(5), "no worker left", || {
        (cluster.running() == 0 && workers_in(&home.path().join("projects")).is_empty())
            .then_some(())
    });

    // Throughout: never two workers of a project at once; every request in the namespace,
    // with the kubeconfig's credentials, and only the verbs SCALING.md's Role grants; every
    // pod with the bootstrap values alone.
    assert_eq!(cluster.most_at_once(), 1);
    assert!(
        cluster.secrets().is_empty(),
        "no enrollment Secret is left: {:?}",
        cluster.secrets()
    );
    let mut made = BTreeMap::<String, usize>::new();
    for r in cluster.requests() {
        assert!(
            r.path.starts_with(PODS) || r.path.starts_with(SECRETS),
            "{r:?}"
        );
        if r.method == "POST" && r.path == SECRETS {
            // Each launch's Secret: only its enrollment line, and deleted since.
            assert_eq!(
                r.body["data"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .collect::<Vec<_>>(),
                ["enroll"]
            );
            let name = r.body["metadata"]["name"].as_str().unwrap();
            assert!(cluster
                .requests()
                .iter()
                .any(|d| d.method == "DELETE" && d.path == format!("{SECRETS}/{name}")));
        }
        if r.method == "POST" && r.path == PODS {
            let project = r.body["metadata"]["annotations"]["pegasus/project"].to_string();
            *made
                .entry(project.trim_matches('"').to_string())
                .or_default() += 1;
            let text = r.body.to_string();
            assert!(
                !text.contains(FAKE_KEY) && !text.contains(FAKE_KEY_ENV),
                "{text}"
            );
            let env: Vec<&str> = r.body["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap())
                .collect();
            assert_eq!(
                env,
                [
                    "PEGASUS_CONNECT",
                    "PEGASUS_CA_SHA256",
                    "PEGASUS_ENROLL_FILE"
                ]
            );
            assert!(!text.contains("PEGASUS_ENROLL\""), "{text}");
            assert_eq!(r.body["spec"]["restartPolicy"], "Never");
        }
        assert_eq!(
            r.authorization.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(
            matches!(r.method.as_str(), "GET" | "POST" | "DELETE"),
            "{r:?}"
        );
    }
    // web: the first, after its crash, after its deletion, on resume, after pegasusd's
    // restart; blog: one per backoff while the image was missing, then the one that ran.
    assert_eq!((made["web"], made["docs"]), (5, 1), "{made:?}");
    assert!(made["blog"] >= 2, "{made:?}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "took {:?}",
        began.elapsed()
    );
}
