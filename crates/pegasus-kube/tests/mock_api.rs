//! The launcher against a mock API server, as kube-rs tests its own client: a
//! `tower_test::mock::pair` serves a `kube::Client`, and each test plays the server's side of
//! one scenario, asserting every request the launcher makes (method, path, query, body) and
//! answering as a real API server would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use http::{Method, Request, Response};
use kube::client::Body;
use pegasus_kube::{
    enroll_secret, pod_manifest, Adoption, HomeId, KubeError, KubeSettings, LaunchedPod, PodEnd,
    PodLauncher,
};
use serde_json::{json, Value};
use tower_test::mock::{Handle, SendResponse};

const HOME: &str = "3f9a2c71d0e4";
const PODS: &str = "/api/v1/namespaces/pegasus/pods";
const WEB_POD: &str = "/api/v1/namespaces/pegasus/pods/pegasus-3f9a2c71-web";
const SECRETS: &str = "/api/v1/namespaces/pegasus/secrets";
const WEB_SECRET: &str = "/api/v1/namespaces/pegasus/secrets/pegasus-3f9a2c71-web";
/// A launch's enrollment line (a token of pegasus-remote's form).
const LINE: &str =
    "PEGASUS_ENROLL=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";

fn settings() -> KubeSettings {
    KubeSettings::from_value(
        &json!({"kind": "kubernetes", "connect": "pegasusd.pegasus.svc:7475", "namespace": "pegasus",
            "image": "registry.example/pegasus-worker:0.1", "home_volume": {"claim": "pegasus-home"},
            "resources": {"cpu": "500m", "memory": "256Mi"}}),
        &PathBuf::from("/srv/pegasus"),
    )
    .unwrap()
}

fn home() -> HomeId {
    HomeId::new(HOME).unwrap()
}

fn env() -> Vec<(String, String)> {
    vec![
        ("PEGASUS_CONNECT".into(), "pegasusd.pegasus.svc:7475".into()),
        ("PEGASUS_CA_SHA256".into(), "ab".repeat(32)),
    ]
}

fn cmd() -> Vec<String> {
    vec!["project-worker".into(), "/srv/pegasus/projects/web".into()]
}

/// A pod as the API server shows it.
fn pod(project: &str, home: &str, uid: &str, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("pegasus-{}-{project}", &home[..8]),
            "namespace": "pegasus", "uid": uid, "resourceVersion": "41",
            "labels": {"app.kubernetes.io/managed-by": "pegasus", "pegasus/home": home,
                       "pegasus/project": project},
            "annotations": {"pegasus/project": project}
        },
        "spec": {"containers": [{"name": "worker", "image": "registry.example/pegasus-worker:0.1"}]},
        "status": status
    })
}

/// An enrollment Secret as the API server shows it.
fn secret(project: &str, home: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": format!("pegasus-{}-{project}", &home[..8]),
            "namespace": "pegasus", "uid": format!("uid-secret-{project}"), "resourceVersion": "42",
            "labels": {"app.kubernetes.io/managed-by": "pegasus", "pegasus/home": home,
                       "pegasus/project": project},
            "annotations": {"pegasus/project": project}
        },
        "type": "Opaque", "immutable": true, "data": {"enroll": "cmVkYWN0ZWQ="}
    })
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
}

/// The server's side of a launch's Secret: none there yet, then its creation; the body sent.
async fn secret_made(server: &mut ApiServer) -> Value {
    let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
    reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
    let (seen, send) = server.expect(Method::POST, SECRETS).await;
    reply(send, 201, &seen.body);
    seen.body
}

fn running() -> Value {
    json!({"phase": "Running"})
}

fn not_found(name: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
           "message": format!("pods \"{name}\" not found"), "code": 404})
}

/// A request as the server saw it.
struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

/// The server's side of the mock.
struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// The next request, which must come within 5 s, and its responder.
    async fn next(&mut self) -> (Seen, SendResponse<Response<Body>>) {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), self.0.next_request())
            .await
            .expect("the launcher made no request within 5 s")
            .expect("the client went away");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let seen = Seen {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: urldecode(parts.uri.query().unwrap_or("")),
            body,
        };
        (seen, send)
    }

    /// The next request, asserted to be `method path`.
    async fn expect(&mut self, method: Method, path: &str) -> (Seen, SendResponse<Response<Body>>) {
        let (seen, send) = self.next().await;
        assert_eq!(
            (&seen.method, seen.path.as_str()),
            (&method, path),
            "query: {}",
            seen.query
        );
        (seen, send)
    }

    /// Asserts the launcher makes no further request once it is dropped.
    async fn no_more(mut self) {
        let next = tokio::time::timeout(Duration::from_secs(5), self.0.next_request())
            .await
            .expect("the client did not go away");
        if let Some((request, _)) = next {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

fn reply(send: SendResponse<Response<Body>>, code: u16, body: &Value) {
    send.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

/// A watch answer: one JSON event per line, then the end of the stream.
fn reply_events(send: SendResponse<Response<Body>>, events: &[Value]) {
    let mut text = String::new();
    for e in events {
        text.push_str(&e.to_string());
        text.push('\n');
    }
    send.send_response(
        Response::builder()
            .status(200)
            .body(Body::from(text.into_bytes()))
            .unwrap(),
    );
}

fn urldecode(q: &str) -> String {
    let mut out = Vec::new();
    let b = q.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
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
    String::from_utf8(out).unwrap()
}

fn mock() -> (PodLauncher, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    (
        PodLauncher::new(client, settings(), home()),
        ApiServer(handle),
    )
}

#[tokio::test]
async fn launch_posts_the_manifest_to_the_namespace() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        // The Secret first: the pod mounts it.
        let secret = secret_made(&mut server).await;
        let (seen, send) = server.expect(Method::POST, PODS).await;
        let mut created = seen.body.clone();
        created["metadata"]["uid"] = json!("uid-1");
        reply(send, 201, &created);
        (seen, secret, server)
    });
    let launched = launcher.launch("web", &env(), LINE, &cmd()).await.unwrap();
    let (seen, secret, server) = scenario.await.unwrap();
    let made = enroll_secret(&settings(), &home(), "web", LINE).unwrap();
    assert_eq!(secret, serde_json::to_value(&made).unwrap());
    // The token is in the Secret, and nowhere in the pod.
    let token = LINE.trim_end().strip_prefix("PEGASUS_ENROLL=").unwrap();
    assert!(!seen.body.to_string().contains(token), "{}", seen.body);
    assert_eq!(
        seen.body["spec"]["volumes"][2]["secret"]["secretName"],
        "pegasus-3f9a2c71-web"
    );

    assert_eq!(
        launched,
        LaunchedPod {
            project: "web".into(),
            name: "pegasus-3f9a2c71-web".into(),
            uid: "uid-1".into()
        }
    );
    let manifest = pod_manifest(&settings(), &home(), "web", &env(), &cmd()).unwrap();
    assert_eq!(seen.body, serde_json::to_value(&manifest).unwrap());
    assert_eq!(seen.body["spec"]["restartPolicy"], "Never");
    let names: Vec<&str> = seen.body["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "PEGASUS_CONNECT",
            "PEGASUS_CA_SHA256",
            "PEGASUS_ENROLL_FILE"
        ]
    );
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn launch_deletes_the_projects_old_pod_and_waits_for_it_to_go() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(
            send,
            200,
            &pod("web", HOME, "uid-old", json!({"phase": "Failed"})),
        );
        // Exactly the old pod is deleted: its uid is a precondition.
        let (seen, send) = server.expect(Method::DELETE, WEB_POD).await;
        assert_eq!(seen.body["preconditions"], json!({"uid": "uid-old"}));
        let mut terminating = pod("web", HOME, "uid-old", json!({"phase": "Failed"}));
        terminating["metadata"]["deletionTimestamp"] = json!("2026-11-25T10:00:00Z");
        reply(send, 200, &terminating);
        // Still there once, then gone.
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &terminating);
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        secret_made(&mut server).await;
        let (seen, send) = server.expect(Method::POST, PODS).await;
        let mut created = seen.body.clone();
        created["metadata"]["uid"] = json!("uid-new");
        reply(send, 201, &created);
        server
    });
    let launched = launcher.launch("web", &env(), LINE, &cmd()).await.unwrap();
    let server = scenario.await.unwrap();
    assert_eq!(launched.uid, "uid-new");
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn another_homes_pod_of_the_same_name_is_never_touched() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        for _ in 0..2 {
            let (_, send) = server.expect(Method::GET, WEB_POD).await;
            reply(
                send,
                200,
                &pod("web", "3f9a2c71ffff", "uid-theirs", running()),
            );
        }
        server
    });
    let launch = launcher.launch("web", &env(), LINE, &cmd()).await;
    let delete = launcher.delete("web").await;
    let server = scenario.await.unwrap();
    for result in [launch.map(|_| ()), delete] {
        match result {
            Err(KubeError::NameTaken { pod, owner, .. }) => {
                assert_eq!(
                    (pod.as_str(), owner.as_str()),
                    ("pegasus-3f9a2c71-web", "3f9a2c71ffff")
                )
            }
            other => panic!("expected NameTaken, got {other:?}"),
        }
    }
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn a_failed_phase_seen_by_the_watch_ends_it_with_the_reason() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(
            send,
            200,
            &pod("web", HOME, "uid-1", json!({"phase": "Pending"})),
        );
        let (seen, send) = server.expect(Method::GET, PODS).await;
        for part in [
            "watch=true",
            "fieldSelector=metadata.name=pegasus-3f9a2c71-web",
            "resourceVersion=41",
            "timeoutSeconds=290",
        ] {
            assert!(seen.query.contains(part), "{part} not in {}", seen.query);
        }
        let oom = json!({"phase": "Failed", "containerStatuses": [{"name": "worker",
            "image": "registry.example/pegasus-worker:0.1", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]});
        reply_events(
            send,
            &[
                json!({"type": "MODIFIED", "object": pod("web", HOME, "uid-1", running())}),
                json!({"type": "MODIFIED", "object": pod("web", HOME, "uid-1", oom)}),
            ],
        );
        server
    });
    let pod = LaunchedPod {
        project: "web".into(),
        name: "pegasus-3f9a2c71-web".into(),
        uid: "uid-1".into(),
    };
    let end = launcher.wait_for_end(&pod).await.unwrap();
    let server = scenario.await.unwrap();
    assert_eq!(
        end,
        PodEnd::Failed {
            reason: "worker exited with code 137 (OOMKilled)".into()
        }
    );
    drop(launcher);
    server.no_more().await;
}

/// A watch the server ends is made again; an expired version (410) is read again; a pod of the
/// same name with another uid is a new pod, so ours is gone.
#[tokio::test(start_paused = true)]
async fn the_watch_outlives_the_servers_ends_and_sees_a_replaced_pod_as_gone() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-1", running()));
        let (_, send) = server.expect(Method::GET, PODS).await;
        reply_events(send, &[]);
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-1", running()));
        let (_, send) = server.expect(Method::GET, PODS).await;
        reply_events(
            send,
            &[
                json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "Expired", "message": "too old resource version", "code": 410}}),
            ],
        );
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-2", running()));
        server
    });
    let pod = LaunchedPod {
        project: "web".into(),
        name: "pegasus-3f9a2c71-web".into(),
        uid: "uid-1".into(),
    };
    assert_eq!(launcher.wait_for_end(&pod).await.unwrap(), PodEnd::Gone);
    let server = scenario.await.unwrap();
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn a_deleted_pod_ends_the_watch_as_gone() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-1", running()));
        let (_, send) = server.expect(Method::GET, PODS).await;
        reply_events(
            send,
            &[json!({"type": "DELETED", "object": pod("web", HOME, "uid-1", running())})],
        );
        server
    });
    let pod = LaunchedPod {
        project: "web".into(),
        name: "pegasus-3f9a2c71-web".into(),
        uid: "uid-1".into(),
    };
    assert_eq!(launcher.wait_for_end(&pod).await.unwrap(), PodEnd::Gone);
    let server = scenario.await.unwrap();
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn delete_sends_delete_and_a_missing_pod_is_fine() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        // A pod that vanishes between the look and the delete: the DELETE's 404 is fine.
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-1", running()));
        let (seen, send) = server.expect(Method::DELETE, WEB_POD).await;
        assert_eq!(seen.body["preconditions"], json!({"uid": "uid-1"}));
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        // The pod's enrollment Secret goes with it.
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 200, &secret("web", HOME));
        let (_, send) = server.expect(Method::DELETE, WEB_SECRET).await;
        reply(send, 200, &success());
        // No pod at all: nothing to delete.
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        // A pod deleted at once (the server answers with a Status).
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(send, 200, &pod("web", HOME, "uid-2", running()));
        let (_, send) = server.expect(Method::DELETE, WEB_POD).await;
        reply(send, 200, &success());
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        // Once its worker enrolled, the Secret alone; one that vanished meanwhile is fine.
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 200, &secret("web", HOME));
        let (_, send) = server.expect(Method::DELETE, WEB_SECRET).await;
        reply(send, 404, &not_found("pegasus-3f9a2c71-web"));
        // Another home's Secret of that name is never touched.
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 200, &secret("web", "3f9a2c71ffff"));
        server
    });
    launcher.delete("web").await.unwrap();
    launcher.delete("web").await.unwrap();
    launcher.delete("web").await.unwrap();
    launcher.forget_enrollment("web").await.unwrap();
    assert!(matches!(
        launcher.forget_enrollment("web").await,
        Err(KubeError::NameTaken { .. })
    ));
    let server = scenario.await.unwrap();
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn adoption_keeps_live_pods_of_active_projects_and_deletes_the_rest() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (seen, send) = server.expect(Method::GET, PODS).await;
        // Listed by this home's label: other homes' pods are never even seen.
        assert!(
            seen.query.contains(
                "labelSelector=app.kubernetes.io/managed-by=pegasus,pegasus/home=3f9a2c71d0e4"
            ),
            "{}",
            seen.query
        );
        assert!(!seen.query.contains("watch"), "{}", seen.query);
        let mut terminating = pod("docs", HOME, "uid-docs", running());
        terminating["metadata"]["deletionTimestamp"] = json!("2026-11-25T10:00:00Z");
        let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "50"},
        "items": [
            pod("web", HOME, "uid-web", running()),                    // active, running: kept
            pod("api", HOME, "uid-api", json!({"phase": "Pending"})),   // active, pending: kept
            pod("blog", HOME, "uid-blog", running()),                  // not active: deleted
            pod("shop", HOME, "uid-shop", json!({"phase": "Failed"})), // active but ended: deleted
            terminating,                                                // active, being deleted: deleted
            pod("web", "aaaaaaaa0000", "uid-theirs", running()),       // another home: untouched
        ]});
        reply(send, 200, &list);
        let mut deleted = Vec::new();
        for _ in 0..3 {
            let (seen, send) = server.next().await;
            assert_eq!(seen.method, Method::DELETE);
            deleted.push((seen.path.clone(), seen.body["preconditions"]["uid"].clone()));
            reply(send, 200, &success());
        }
        // Every enrollment Secret of this home is an earlier pegasusd's: deleted.
        let (seen, send) = server.expect(Method::GET, SECRETS).await;
        assert!(
            seen.query.contains(
                "labelSelector=app.kubernetes.io/managed-by=pegasus,pegasus/home=3f9a2c71d0e4"
            ),
            "{}",
            seen.query
        );
        let list = json!({"kind": "SecretList", "apiVersion": "v1", "metadata": {"resourceVersion": "51"},
            "items": [secret("web", HOME), secret("web", "aaaaaaaa0000")]});
        reply(send, 200, &list);
        let (_, send) = server.expect(Method::GET, WEB_SECRET).await;
        reply(send, 200, &secret("web", HOME));
        let (_, send) = server.expect(Method::DELETE, WEB_SECRET).await;
        reply(send, 200, &success());
        (deleted, server)
    });
    let active: Vec<String> = ["web", "api", "shop", "docs"].map(String::from).to_vec();
    let adoption = launcher.adopt_or_delete(&active).await.unwrap();
    let (deleted, server) = scenario.await.unwrap();

    let launched = |project: &str, uid: &str| LaunchedPod {
        project: project.into(),
        name: format!("pegasus-3f9a2c71-{project}"),
        uid: uid.into(),
    };
    assert_eq!(
        adoption,
        Adoption {
            adopted: vec![launched("web", "uid-web"), launched("api", "uid-api")],
            deleted: ["blog", "shop", "docs"]
                .map(|p| format!("pegasus-3f9a2c71-{p}"))
                .to_vec(),
        }
    );
    assert_eq!(
        deleted,
        [
            ("blog", "uid-blog"),
            ("shop", "uid-shop"),
            ("docs", "uid-docs")
        ]
        .map(|(p, uid)| (format!("{PODS}/pegasus-3f9a2c71-{p}"), json!(uid)))
        .to_vec()
    );
    drop(launcher);
    server.no_more().await;
}

#[tokio::test]
async fn a_refused_launch_says_which_rights_are_missing() {
    let (launcher, mut server) = mock();
    let scenario = tokio::spawn(async move {
        let (_, send) = server.expect(Method::GET, WEB_POD).await;
        reply(
            send,
            403,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                "message": "pods \"pegasus-3f9a2c71-web\" is forbidden: User \"pegasusd\" cannot get resource \"pods\""}),
        );
        server
    });
    let err = launcher
        .launch("web", &env(), LINE, &cmd())
        .await
        .unwrap_err();
    let server = scenario.await.unwrap();
    let text = err.to_string();
    assert!(text.starts_with("Kubernetes could not read pod `pegasus-3f9a2c71-web` in namespace `pegasus`: 403 Forbidden: pods"), "{text}");
    assert!(
        text.contains("a Role allowing pods create, get, list, watch and delete"),
        "{text}"
    );
    drop(launcher);
    server.no_more().await;
}
