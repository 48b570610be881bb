//! The console's sessions and its `Host` and `Origin` rules, over HTTP against the real binary:
//! the login page holds no secret, a login is a session of its own (its cookie is not the token,
//! its CSRF token is its own, logout ends it on the server, a new `console.token` ends them
//! all), failed logins are limited, a change must come from the console's own origin, and a
//! request for another host (DNS rebinding) is refused whatever it asks for.

use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, HOST, ORIGIN, RETRY_AFTER, SET_COOKIE};
use support::bub_env::Env;
use support::postgres::free_port;
use support::wait::WAIT;

use super::{Rig, console, field, login, login_as};

/// What the console's changes touch on disk: `access.json`, `jobs.json` and the memory.
fn disk(rig: &Rig) -> String {
    let read = |path: &str| std::fs::read_to_string(rig.env.home.join(path)).unwrap_or_default();
    let memory = std::fs::read_dir(rig.env.home.join("memory"))
        .map(|dir| dir.count())
        .unwrap_or(0);
    format!(
        "{}\n--\n{}\n--\n{}\n--\n{memory} memory files",
        read("access.json"),
        read("jobs.json"),
        read("memory/global.md")
    )
}

/// A job to remove, and the changes a forged form would make: the stranger approved as owner,
/// the job removed, the global memory replaced.
async fn changes(rig: &Rig) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let added = rig
        .env
        .run(&[
            "run",
            ",schedule.add after_seconds=3600 message=console-job",
        ])
        .await;
    assert!(added.status.success());
    let job = rig.env.jobs()["jobs"][0]["id"].as_str().unwrap().to_owned();
    vec![
        (
            "/access/approve",
            vec![
                ("channel", "telegram".to_owned()),
                ("code", rig.code.clone()),
                ("role", "owner".to_owned()),
            ],
        ),
        ("/jobs/remove", vec![("id", job)]),
        ("/memory/edit", vec![("text", "- forged".to_owned())]),
    ]
}

/// `POST path` with `form`, `cookie` and `headers` as given (nothing added).
async fn post(
    rig: &Rig,
    path: &str,
    form: &[(&str, String)],
    cookie: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = rig
        .http
        .post(format!("{}{path}", rig.base))
        .header(COOKIE, cookie)
        .form(form);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// `form` with the CSRF field `csrf` added.
fn with_csrf(form: &[(&'static str, String)], csrf: &str) -> Vec<(&'static str, String)> {
    let mut form = form.to_vec();
    form.push(("csrf", csrf.to_owned()));
    form
}

#[tokio::test(flavor = "multi_thread")]
async fn the_login_page_holds_no_secret_and_the_cookie_is_a_session_not_the_token() {
    let rig = Rig::start().await;
    let (status, page) = rig.get("/", false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(page.contains("action=\"/login\""), "{page}");
    assert!(!page.contains("csrf"), "no CSRF token before login: {page}");
    assert!(!page.contains(&rig.token), "{page}");

    // A login's cookie holds a session's id, not the token.
    let response = login_as(&rig.http, &rig.base, &rig.token, Some(&rig.base)).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let set = response.headers()[SET_COOKIE].to_str().unwrap();
    let (name, value) = set.split(';').next().unwrap().split_once('=').unwrap();
    assert_eq!(name, "bub_console", "{set}");
    assert!(value.len() >= 32 && !rig.token.contains(value) && !set.contains(&rig.token));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{attribute}: {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP on loopback: {set}");

    // The token as the cookie (what the console set before) is no login.
    let old = format!("bub_console={}", rig.token);
    for path in ["/", "/jobs", "/access"] {
        let (status, page) = rig.get_as(path, Some(&old)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(!page.contains("csrf"), "{path}: {page}");
    }
    let (status, _) = rig.get("/jobs", true).await;
    assert_eq!(status, StatusCode::OK);
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_login_is_a_session_with_its_own_csrf_token_and_logout_ends_it() {
    let rig = Rig::start().await;
    let changes = changes(&rig).await;
    let other = login(&rig.http, &rig.base, &rig.token).await;
    assert_ne!(other, rig.cookie, "two logins, two sessions");
    let mine = rig.csrf().await;
    let (_, page) = rig.get_as("/jobs", Some(&other)).await;
    let theirs = field(&page, "csrf");
    assert_ne!(mine, theirs, "a CSRF token per session");

    // One session's CSRF token with the other's cookie: refused, nothing changed.
    let before = disk(&rig);
    let origin = [("origin", rig.base.as_str())];
    for (path, form) in &changes {
        let response = post(&rig, path, &with_csrf(form, &mine), &other, &origin).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(disk(&rig), before);

    // Logout ends the session on the server: its cookie, sent again, is no login.
    let out = post(
        &rig,
        "/logout",
        &[("csrf", theirs.clone())],
        &other,
        &origin,
    )
    .await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        out.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, page) = rig.get_as("/jobs", Some(&other)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");
    for (path, form) in &changes {
        let response = post(&rig, path, &with_csrf(form, &theirs), &other, &origin).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    assert_eq!(disk(&rig), before);

    // The other session is still logged in, and its own token works.
    let (status, _) = rig.get("/jobs", true).await;
    assert_eq!(status, StatusCode::OK);
    let (path, form) = &changes[2];
    let response = post(&rig, path, &with_csrf(form, &mine), &rig.cookie, &origin).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_ne!(disk(&rig), before);
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_from_another_origin_or_from_no_origin_changes_nothing() {
    let rig = Rig::start().await;
    let changes = changes(&rig).await;
    let csrf = rig.csrf().await;
    let before = disk(&rig);
    let elsewhere = free_port();
    let other = format!("http://127.0.0.1:{elsewhere}");
    let other_name = format!("http://localhost:{elsewhere}");
    let other_page = format!("{other}/page");
    let refused: [&[(&str, &str)]; 11] = [
        &[("origin", &other)],
        &[("origin", &other_name)],
        &[("origin", "null")],
        &[("origin", "null"), ("sec-fetch-site", "same-site")],
        &[("origin", "null"), ("sec-fetch-site", "cross-site")],
        &[("origin", "http://evil.example")],
        &[],
        &[("sec-fetch-site", "same-site")],
        &[("sec-fetch-site", "cross-site")],
        &[("referer", &other_page)],
        &[("origin", &other), ("sec-fetch-site", "same-origin")],
    ];
    for headers in refused {
        for (path, form) in &changes {
            let response = post(&rig, path, &with_csrf(form, &csrf), &rig.cookie, headers).await;
            assert_eq!(
                response.status(),
                StatusCode::FORBIDDEN,
                "{path} {headers:?}"
            );
        }
    }
    assert_eq!(disk(&rig), before, "nothing changed");
    // A login from another origin, or from none, is refused too.
    for origin in [Some(other.as_str()), None] {
        let response = login_as(&rig.http, &rig.base, &rig.token, origin).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin:?}");
        assert!(!response.headers().contains_key(SET_COOKIE));
    }

    // What a browser on the console's own page sends: its Origin (by either loopback name),
    // or without one (`null` under the console's no-referrer policy) `Sec-Fetch-Site:
    // same-origin`, or a Referer of the console.
    let own_name = format!("http://localhost:{}", rig.port);
    let own_page = format!("{}/memory", rig.base);
    let accepted: [&[(&str, &str)]; 5] = [
        &[("origin", &rig.base)],
        &[("origin", &own_name)],
        &[("sec-fetch-site", "same-origin")],
        &[("origin", "null"), ("sec-fetch-site", "same-origin")],
        &[("referer", &own_page)],
    ];
    for (i, headers) in accepted.iter().enumerate() {
        let text = format!("- accepted {i}");
        let form = [("text", text.clone()), ("csrf", csrf.clone())];
        let response = post(&rig, "/memory/edit", &form, &rig.cookie, headers).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{headers:?}");
        let memory = std::fs::read_to_string(rig.env.home.join("memory/global.md")).unwrap();
        assert!(memory.contains(&text), "{memory}");
    }
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_for_another_host_is_misdirected_whatever_it_asks() {
    let rig = Rig::start().await;
    let changes = changes(&rig).await;
    let csrf = rig.csrf().await;
    let before = disk(&rig);
    // DNS rebinding: evil.example resolves to 127.0.0.1 now, and its page asks the console.
    let evil = format!("evil.example:{}", rig.port);
    let other_port = format!("127.0.0.1:{}", free_port());
    for host in [evil.as_str(), other_port.as_str(), "127.0.0.1"] {
        for path in [
            "/",
            "/jobs",
            "/access",
            "/session?id=telegram%3A42",
            "/assets/console.css",
            "/assets/console.js",
        ] {
            let response = rig
                .http
                .get(format!("{}{path}", rig.base))
                .header(HOST, host)
                .header(COOKIE, &rig.cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::MISDIRECTED_REQUEST,
                "{host} {path}"
            );
            let body = response.text().await.unwrap();
            assert!(
                !body.contains("csrf") && !body.contains("<html") && !body.contains("All done"),
                "{host} {path}: {body}"
            );
        }
        let origin = format!("http://{host}");
        let headers = [("host", host), ("origin", origin.as_str())];
        for (path, form) in &changes {
            let response = post(&rig, path, &with_csrf(form, &csrf), &rig.cookie, &headers).await;
            assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST, "{path}");
        }
        let login = rig
            .http
            .post(format!("{}/login", rig.base))
            .header(HOST, host)
            .header(ORIGIN, &origin)
            .form(&[("token", rig.token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status(), StatusCode::MISDIRECTED_REQUEST);
        assert!(!login.headers().contains_key(SET_COOKIE));
    }
    assert_eq!(disk(&rig), before, "nothing changed");
    // Its own names on loopback are the console.
    let own = format!("localhost:{}", rig.port);
    let response = rig
        .http
        .get(format!("{}/jobs", rig.base))
        .header(HOST, own)
        .header(COOKIE, &rig.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    rig.daemon.stop().await;
}

/// `bub console` alone on a free port: the process, its base URL, its token, and a client.
async fn alone(env: &mut Env) -> (tokio::process::Child, String, String, reqwest::Client) {
    let port = free_port();
    env.set("BUB_CONSOLE_LISTEN", &port.to_string());
    let (child, _) = console(env).await;
    let token = std::fs::read_to_string(env.home.join("console.token")).unwrap();
    let http = super::client();
    let base = format!("http://127.0.0.1:{port}");
    (child, base, token.trim().to_owned(), http)
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_logins_are_limited_and_a_success_is_not() {
    let mut env = Env::cli().await;
    let (mut child, base, token, http) = alone(&mut env).await;
    let attempt = |token: &str| {
        let token = token.to_owned();
        let (http, base) = (http.clone(), base.clone());
        async move { login_as(&http, &base, &token, Some(&base)).await }
    };
    for _ in 0..4 {
        assert_eq!(attempt("wrong").await.status(), StatusCode::UNAUTHORIZED);
    }
    let right = attempt(&token).await;
    assert_eq!(
        right.status(),
        StatusCode::SEE_OTHER,
        "a success is not held"
    );
    let cookie = super::set_cookie(&right);
    assert_eq!(attempt("wrong").await.status(), StatusCode::UNAUTHORIZED);
    // A few failures a minute; then no attempt is checked, the right token's neither.
    for guess in ["wrong", token.as_str()] {
        let limited = attempt(guess).await;
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = limited.headers()[RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After: {wait}");
        assert!(!limited.headers().contains_key(SET_COOKIE));
    }
    // A session that exists is not affected.
    let page = http
        .get(format!("{base}/jobs"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_console_token_ends_every_session() {
    let mut env = Env::cli().await;
    let (mut child, base, token, http) = alone(&mut env).await;
    let first = login(&http, &base, &token).await;
    let second = login(&http, &base, &token).await;
    let status = |cookie: String| {
        let request = http.get(format!("{base}/jobs")).header(COOKIE, cookie);
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(status(first.clone()).await, StatusCode::OK);

    // The operator replaces the token (without restarting).
    let new = "0123456789abcdef".repeat(4);
    let path = env.home.join("console.token");
    let staged = env.home.join("console.token.new");
    std::fs::write(&staged, format!("{new}\n")).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    // Checked every few seconds: each old session ends within that.
    let deadline = tokio::time::Instant::now() + WAIT;
    while status(first.clone()).await != StatusCode::UNAUTHORIZED {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session outlived its token"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status(second).await, StatusCode::UNAUTHORIZED);
    let old = login_as(&http, &base, &token, Some(&base)).await;
    assert_eq!(old.status(), StatusCode::UNAUTHORIZED, "the old token");
    let fresh = login(&http, &base, &new).await;
    assert_eq!(status(fresh).await, StatusCode::OK);
    child.kill().await.unwrap();
}
