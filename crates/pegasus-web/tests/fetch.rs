//! `web_fetch`'s client against a scripted site on 127.0.0.1: pages, charsets, redirects and
//! their limit, the caps, and the address rule (loopback refused unless `allow_private`,
//! metadata endpoints always, at every hop).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pegasus_fakellm::{FakeSite, SitePage};
use pegasus_store::web::FetchConfig;
use pegasus_web::address::Class;
use pegasus_web::{FetchError, Fetcher};

fn fetcher(allow_private: bool) -> Fetcher {
    Fetcher::new(FetchConfig {
        max_bytes: 64 * 1024,
        timeout_s: 5,
        allow_private,
    })
}

#[tokio::test]
async fn an_html_page_comes_back_as_markdown() {
    let site = FakeSite::start().unwrap();
    site.page(
        "/doc",
        SitePage::ok(
            "text/html; charset=utf-8",
            "<html><head><title>The Doc</title><script>evil()</script></head><body><h2>Usage</h2><p>Call <code>fetch</code> with a <a href=\"/more\">URL</a>.</p></body></html>",
        ),
    );
    let page = fetcher(true)
        .fetch(&format!("{}/doc", site.base_url()))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert_eq!(page.title.as_deref(), Some("The Doc"));
    assert!(page.text.contains("## Usage"), "{}", page.text);
    assert!(page.text.contains("`fetch`"), "{}", page.text);
    assert!(page.text.contains("[URL](/more)"), "{}", page.text);
    assert!(!page.text.contains("evil"), "{}", page.text);
    assert!(!page.cut);
}

#[tokio::test]
async fn charsets_from_the_header_and_from_the_meta_tag_are_decoded() {
    let site = FakeSite::start().unwrap();
    site.page(
        "/latin",
        SitePage::ok(
            "text/plain; charset=ISO-8859-1",
            b"Caf\xe9 cr\xe8me".to_vec(),
        ),
    );
    let sjis = [
        b"<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset=Shift_JIS\"></head><body><p>".as_slice(),
        &[0x93, 0xfa, 0x96, 0x7b, 0x8c, 0xea],
        b"</p></body></html>",
    ]
    .concat();
    site.page("/sjis", SitePage::ok("text/html", sjis));
    let f = fetcher(true);
    let latin = f
        .fetch(&format!("{}/latin", site.base_url()))
        .await
        .unwrap();
    assert_eq!(latin.text, "Café crème");
    let jp = f.fetch(&format!("{}/sjis", site.base_url())).await.unwrap();
    assert_eq!(jp.charset, "Shift_JIS");
    assert!(jp.text.contains("日本語"), "{}", jp.text);
}

#[tokio::test]
async fn loopback_is_refused_unless_private_addresses_are_allowed() {
    let site = FakeSite::start().unwrap();
    site.page("/", SitePage::ok("text/plain", "secret"));
    let f = fetcher(false);
    for url in [
        format!("http://127.0.0.1:{}/", site.port()),
        format!("http://localhost:{}/", site.port()),
        format!("http://[::ffff:127.0.0.1]:{}/", site.port()),
        format!("http://[::1]:{}/", site.port()),
    ] {
        let e = f.fetch(&url).await.unwrap_err();
        assert!(
            matches!(
                e,
                FetchError::Refused {
                    class: Class::Loopback,
                    ..
                }
            ),
            "{url}: {e}"
        );
        assert!(e.to_string().contains("web.fetch.allow_private"), "{e}");
    }
    for (url, class) in [
        ("http://10.1.2.3/", Class::Private),
        ("http://192.168.0.1/", Class::Private),
        ("http://169.254.1.1/", Class::LinkLocal),
        ("http://100.64.0.1/", Class::SharedNat),
        ("http://[fd00::1]/", Class::Private),
        ("http://[fe80::1]/", Class::LinkLocal),
        ("http://0.0.0.0/", Class::Unspecified),
    ] {
        let e = f.fetch(url).await.unwrap_err();
        assert!(
            matches!(e, FetchError::Refused { class: c, .. } if c == class),
            "{url}: {e}"
        );
    }
    assert!(
        site.hits().is_empty(),
        "nothing reached the site: {:?}",
        site.hits()
    );
    assert_eq!(
        fetcher(true)
            .fetch(&format!("http://localhost:{}/", site.port()))
            .await
            .unwrap()
            .text,
        "secret"
    );
}

#[tokio::test]
async fn metadata_endpoints_are_refused_even_with_private_allowed() {
    let f = fetcher(true);
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/computeMetadata/v1/",
    ] {
        let e = f.fetch(url).await.unwrap_err();
        assert!(
            matches!(
                e,
                FetchError::Refused {
                    class: Class::Metadata,
                    ..
                } | FetchError::MetadataName { .. }
            ),
            "{url}: {e}"
        );
    }
}

#[tokio::test]
async fn a_redirect_is_checked_at_its_hop() {
    let site = FakeSite::start().unwrap();
    site.page("/go", SitePage::redirect("/step"));
    site.page(
        "/step",
        SitePage::redirect("http://169.254.169.254/latest/meta-data/iam/"),
    );
    let e = fetcher(true)
        .fetch(&format!("{}/go", site.base_url()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            FetchError::Refused {
                class: Class::Metadata,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(site.hits(), vec!["/go", "/step"]);
    // And a redirect to another scheme.
    site.page("/ftp", SitePage::redirect("ftp://example.com/x"));
    let e = fetcher(true)
        .fetch(&format!("{}/ftp", site.base_url()))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::Scheme { .. }), "{e}");
}

#[tokio::test]
async fn five_redirects_are_followed_and_the_sixth_refused() {
    let site = FakeSite::start().unwrap();
    for i in 0..6 {
        site.page(
            &format!("/r{i}"),
            SitePage::redirect(&format!("/r{}", i + 1)),
        );
    }
    site.page("/r6", SitePage::ok("text/plain", "end"));
    let f = fetcher(true);
    let page = f.fetch(&format!("{}/r1", site.base_url())).await.unwrap();
    assert_eq!(page.text, "end");
    assert_eq!(page.redirects.len(), 5);
    assert!(page.url.ends_with("/r6"));
    let e = f
        .fetch(&format!("{}/r0", site.base_url()))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::TooManyRedirects { .. }), "{e}");
    assert!(e.to_string().contains("more than 5 redirects"), "{e}");
}

#[tokio::test]
async fn a_large_body_is_cut_at_max_bytes_and_a_slow_one_times_out() {
    let site = FakeSite::start().unwrap();
    site.page(
        "/big",
        SitePage::ok("text/plain", "0123456789".repeat(1000)).endless(),
    );
    site.page(
        "/slow",
        SitePage::ok("text/plain", "late").after(Duration::from_secs(4)),
    );
    let f = Fetcher::new(FetchConfig {
        max_bytes: 4096,
        timeout_s: 1,
        allow_private: true,
    });
    let page = f.fetch(&format!("{}/big", site.base_url())).await.unwrap();
    assert!(page.cut);
    assert_eq!(page.bytes, 4096);
    assert_eq!(page.text.len(), 4096);
    let started = std::time::Instant::now();
    let e = f
        .fetch(&format!("{}/slow", site.base_url()))
        .await
        .unwrap_err();
    assert_eq!(e, FetchError::Timeout { secs: 1 });
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn binary_and_other_schemes_are_refused_in_one_line() {
    let site = FakeSite::start().unwrap();
    site.page(
        "/logo.png",
        SitePage::ok("image/png", b"\x89PNG\r\n\x1a\n\0\0".to_vec()),
    );
    let f = fetcher(true);
    let e = f
        .fetch(&format!("{}/logo.png", site.base_url()))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("is image/png, not text or HTML"),
        "{e}"
    );
    for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://x/"] {
        assert!(
            matches!(f.fetch(url).await.unwrap_err(), FetchError::Scheme { .. }),
            "{url}"
        );
    }
    assert!(matches!(
        f.fetch("not a url").await.unwrap_err(),
        FetchError::BadUrl { .. }
    ));
    // An error status still shows its page.
    let page = f
        .fetch(&format!("{}/missing", site.base_url()))
        .await
        .unwrap();
    assert_eq!(page.status, 404);
    assert!(page.text.contains("Not Found"));
}
