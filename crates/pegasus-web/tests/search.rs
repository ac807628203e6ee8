//! `web_search`'s backends against strict fakes of SearXNG's JSON API and Brave Search's API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pegasus_fakellm::{FakeBrave, FakeHit, FakeSearxng};
use pegasus_store::web::{SearchConfig, SearchKind};
use pegasus_web::{SearchError, Searcher};

fn hits() -> Vec<FakeHit> {
    (1..=12)
        .map(|i| {
            FakeHit::new(
                &format!("Result {i}"),
                &format!("https://example.org/{i}"),
                &format!("About <strong>rust</strong> &amp; {i}"),
            )
        })
        .collect()
}

fn config(kind: SearchKind, base_url: String) -> SearchConfig {
    SearchConfig {
        kind,
        base_url: Some(base_url),
        api_key_env: None,
    }
}

#[tokio::test]
async fn searxng_answers_through_its_json_api() {
    let sx = FakeSearxng::start(true).unwrap();
    sx.set_results(hits());
    let s = Searcher::new(&config(SearchKind::Searxng, sx.base_url()), None);
    let found = s.search("rust lang", Some(3)).await.unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].title, "Result 1");
    assert_eq!(found[0].url, "https://example.org/1");
    assert_eq!(found[0].snippet, "About rust & 1");
    let r = &sx.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/search"));
    assert_eq!(r.param("q"), Some("rust lang"));
    assert_eq!(r.param("format"), Some("json"));
    assert_eq!(r.status, 200);
    // The default count.
    assert_eq!(s.search("rust", None).await.unwrap().len(), 10);
}

#[tokio::test]
async fn a_searxng_without_json_is_said_as_such() {
    let sx = FakeSearxng::start(false).unwrap();
    let s = Searcher::new(&config(SearchKind::Searxng, sx.base_url()), None);
    let e = s.search("rust", None).await.unwrap_err();
    assert!(matches!(e, SearchError::JsonDisabled { .. }), "{e}");
    assert!(
        e.to_string().contains("add `json` to `search.formats`"),
        "{e}"
    );
    assert_eq!(sx.requests()[0].status, 403);
}

#[tokio::test]
async fn brave_answers_with_its_key_and_count() {
    let b = FakeBrave::start("key-123").unwrap();
    b.set_results(hits());
    let s = Searcher::new(
        &config(SearchKind::Brave, b.base_url()),
        Some("key-123".into()),
    );
    let found = s.search("rust", Some(4)).await.unwrap();
    assert_eq!(found.len(), 4);
    assert_eq!(found[3].url, "https://example.org/4");
    assert_eq!(found[3].snippet, "About rust & 4");
    let r = &b.requests()[0];
    assert_eq!(r.path, "/res/v1/web/search");
    assert_eq!(r.param("count"), Some("4"));
    assert_eq!(r.header("x-subscription-token"), Some("key-123"));
    // Counts are bounded to Brave's range before they are sent.
    s.search("rust", Some(500)).await.unwrap();
    assert_eq!(b.requests()[1].param("count"), Some("20"));
    assert!(b.requests().iter().all(|r| r.status == 200));
}

#[tokio::test]
async fn brave_refusals_say_what_to_do() {
    let b = FakeBrave::start("right").unwrap();
    let wrong = Searcher::new(
        &config(SearchKind::Brave, b.base_url()),
        Some("wrong".into()),
    );
    let e = wrong.search("rust", None).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("422") && text.contains("SUBSCRIPTION_TOKEN_INVALID"),
        "{text}"
    );
    assert!(text.contains("api_key_env"), "{text}");
    let right = Searcher::new(
        &config(SearchKind::Brave, b.base_url()),
        Some("right".into()),
    );
    b.rate_limit_next(1);
    let e = right.search("rust", None).await.unwrap_err();
    assert!(matches!(e, SearchError::RateLimited { .. }), "{e}");
    assert!(e.to_string().contains("try again in 1 s"), "{e}");
    assert!(right.search("rust", None).await.is_ok());
    // No key: no request at all.
    let before = b.requests().len();
    let none = Searcher::new(&config(SearchKind::Brave, b.base_url()), None);
    let e = none.search("rust", None).await.unwrap_err();
    assert!(e.to_string().contains("BRAVE_API_KEY was not set"), "{e}");
    assert_eq!(b.requests().len(), before);
    // The fake is as strict as Brave: no token header, a count out of range.
    let client = reqwest::Client::new();
    let r = client
        .get(format!("{}/res/v1/web/search?q=x", b.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "VALIDATION");
    let r = client
        .get(format!("{}/res/v1/web/search?q=x&count=21", b.base_url()))
        .header("X-Subscription-Token", "right")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}
