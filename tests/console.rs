//! The web console through the real binary: `bub message` with `BUB_CONSOLE=true` beside the
//! fake Telegram and the fake model, whose conversation (a tool call, an anchor, a message with
//! `<script>` and a secret in it, a stranger asking to pair) is what the console shows. These
//! tests speak HTTP (status codes, escaping, redaction, the login and CSRF rules, every page and
//! action, the live updates, paging); `console/login.rs` the sessions and the `Host` and
//! `Origin` rules; `console/browser.rs` drives the same pages in a real headless Chromium.

use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::json;
use support::bub_env::{Daemon, Env, assert_exit, code_in};
use support::fake_telegram::{TOKEN, private_text};
use support::postgres::free_port;
use support::wait::WAIT;

#[path = "console/browser.rs"]
mod browser;
#[path = "console/login.rs"]
mod login;

/// The API key of the test environment (in a chat message the console must not show).
const API_KEY: &str = "sk-test-secret";
/// What the owner says first: markup and a secret.
const HOSTILE: &str = "run it <script>alert(1)</script> with sk-test-secret";

/// A running daemon with its console, after a conversation.
pub(crate) struct Rig {
    pub env: Env,
    pub daemon: Daemon,
    pub base: String,
    pub token: String,
    /// The code the stranger (user 50) was given.
    pub code: String,
    /// The console's port.
    pub port: u16,
    /// The login cookie (`name=value`) of the session the rig logged in with.
    pub cookie: String,
    http: reqwest::Client,
}

impl Rig {
    /// `bub message` with the console on a free port; user 42 (the owner) has the model run a
    /// tool and makes an anchor, user 50 (a stranger) asks to pair.
    pub(crate) async fn start() -> Rig {
        let mut env = Env::new().await;
        let port = free_port();
        env.set("BUB_TELEGRAM_ALLOW_FROM", "42");
        env.set("BUB_TELEGRAM_OWNERS", "42");
        env.set("BUB_CONSOLE", "true");
        env.set("BUB_CONSOLE_LISTEN", &port.to_string());
        let daemon = env.start();
        // The tool's output holds the console's token: the tape gets it redacted.
        let cat = format!("echo tool-ran; cat {}/console.token", env.home.display());
        env.model.push_tool_calls(&[("bash", json!({"cmd": cat}))]);
        env.model.push_text("All done: tool-ran.");
        env.telegram.push_message(private_text(42, 42, HOSTILE));
        env.wait_for_chat_text("All done: tool-ran.").await;
        env.telegram.push_message(private_text(
            42,
            42,
            ",tape.handoff name=phase1 summary=\"The first part is done.\"",
        ));
        env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
        env.telegram
            .push_message(private_text(50, 50, "hello, may I come in?"));
        let code = code_in(&env.wait_for_sent_to(50, 1).await[0]);
        let http = client();
        let base = format!("http://127.0.0.1:{port}");
        support::wait::wait_until(WAIT, "the console to answer", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        let token = std::fs::read_to_string(env.home.join("console.token"))
            .unwrap()
            .trim()
            .to_owned();
        assert!(!env.tape_text().contains(&token), "the token is a secret");
        assert!(env.tape_text().contains("[redacted]"));
        let cookie = login(&http, &base, &token).await;
        Rig {
            env,
            daemon,
            base,
            token,
            code,
            port,
            cookie,
            http,
        }
    }

    /// `GET path` with the login cookie (or without: `cookie` false): status and body.
    async fn get(&self, path: &str, cookie: bool) -> (StatusCode, String) {
        let cookie = cookie.then_some(self.cookie.as_str());
        self.get_as(path, cookie).await
    }

    /// `GET path` with `cookie` (`name=value`) if any: status and body.
    async fn get_as(&self, path: &str, cookie: Option<&str>) -> (StatusCode, String) {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }

    /// `POST path` with `form`, the cookie, the console's own `Origin`, and the page's CSRF
    /// token when `csrf`.
    async fn post(&self, path: &str, form: &[(&str, &str)], csrf: bool) -> reqwest::Response {
        let mut fields: Vec<(String, String)> = form
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if csrf {
            fields.push(("csrf".into(), self.csrf().await));
        }
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .header(ORIGIN, &self.base)
            .form(&fields)
            .send()
            .await
            .unwrap()
    }

    /// The CSRF token of the pages.
    async fn csrf(&self) -> String {
        let (_, page) = self.get("/jobs", true).await;
        field(&page, "csrf")
    }
}

/// A client that shows redirects instead of following them, each request bounded.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Logs in to the console at `base` with `token` through the login form, as a browser on the
/// console's own page does (its `Origin`): the session's cookie, `name=value`.
pub(crate) async fn login(http: &reqwest::Client, base: &str, token: &str) -> String {
    let response = login_as(http, base, token, Some(base)).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER, "logged in");
    set_cookie(&response)
}

/// `POST /login` with `token` and `origin` (none: no `Origin` header). The login page's CSRF
/// field is sent back when it has one (the console before sessions printed one).
pub(crate) async fn login_as(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    origin: Option<&str>,
) -> reqwest::Response {
    let page = http.get(format!("{base}/")).send().await.unwrap();
    let page = page.text().await.unwrap();
    let mut form = vec![("token", token.to_owned()), ("next", "/".to_owned())];
    if let Some(csrf) = field_if(&page, "csrf") {
        form.push(("csrf", csrf));
    }
    let mut request = http.post(format!("{base}/login")).form(&form);
    if let Some(origin) = origin {
        request = request.header(ORIGIN, origin);
    }
    request.send().await.unwrap()
}

/// The cookie an answer sets, `name=value`.
pub(crate) fn set_cookie(response: &reqwest::Response) -> String {
    let set = response.headers()[SET_COOKIE].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// The value of the hidden input `name` in `page`.
pub(crate) fn field(page: &str, name: &str) -> String {
    field_if(page, name).unwrap_or_else(|| panic!("no {name} field in {page}"))
}

/// The value of the hidden input `name` in `page`, if it has one.
fn field_if(page: &str, name: &str) -> Option<String> {
    let at = page.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &page[at + name.len() + 15..];
    Some(rest[..rest.find('"').unwrap()].to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_page_needs_the_login_and_shows_the_conversation_escaped_and_redacted() {
    let rig = Rig::start().await;
    let pages = [
        "/",
        "/status",
        "/jobs",
        "/access",
        "/memory",
        "/session?id=telegram%3A42",
        "/session?id=telegram%3A42&work=1",
        "/session?id=telegram%3A42&q=tool-ran",
    ];
    for page in pages {
        let (status, body) = rig.get(page, false).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");
        assert!(body.contains("action=\"/login\""), "{page}: the login form");
        assert!(!body.contains("All done"), "{page}: nothing else");
        let (status, body) = rig.get(page, true).await;
        assert_eq!(status, StatusCode::OK, "{page}: {body}");
        for secret in [API_KEY, TOKEN, rig.token.as_str()] {
            assert!(!body.contains(secret), "{page} shows a secret: {body}");
        }
        assert!(!body.contains("<script>alert"), "{page}: unescaped markup");
    }
    // A wrong cookie is no cookie.
    let wrong = rig
        .http
        .get(format!("{}/", rig.base))
        .header(COOKIE, "bub_console=0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let (_, sessions) = rig.get("/", true).await;
    assert!(
        sessions.contains("href=\"/session?id=telegram%3A42\""),
        "{sessions}"
    );
    let (_, timeline) = rig.get("/session?id=telegram%3A42", true).await;
    assert!(
        timeline.contains("run it &lt;script&gt;alert(1)&lt;/script&gt; with [redacted]"),
        "the message as text, the key redacted: {timeline}"
    );
    assert!(timeline.contains("All done: tool-ran."), "{timeline}");
    assert!(timeline.contains("⚓ phase1") && timeline.contains("The first part is done."));
    assert!(!timeline.contains("→ bash"), "the work lane is folded away");
    let (_, work) = rig.get("/session?id=telegram%3A42&work=1", true).await;
    assert!(work.contains("→ bash"), "{work}");
    assert!(work.contains("echo tool-ran"), "the arguments: {work}");
    let (_, found) = rig.get("/session?id=telegram%3A42&q=tool-ran", true).await;
    assert!(found.contains("match(es) for “tool-ran”"), "{found}");
    let (status, _) = rig.get("/session?id=telegram%3A999", true).await;
    assert_eq!(status, StatusCode::OK, "an empty tape is an empty page");
    let (status, _) = rig.get("/session", true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    for header in [
        "content-security-policy",
        "x-frame-options",
        "cache-control",
    ] {
        let response = rig.http.get(format!("{}/", rig.base)).send().await.unwrap();
        assert!(response.headers().contains_key(header), "{header}");
    }
    rig.daemon.stop().await;
}

/// An answer in Markdown with everything a chat could try to turn into markup.
const MARKDOWN: &str = "**bold** and `code`\n\n```rust\nlet a = 1 < 2;\n```\n\n\
    <script>alert(1)</script> <img src=x onerror=alert(2)>\n\n\
    [bad](javascript:alert(3)) [good](https://example.com/ \"t\\\" onmouseover=\\\"alert(4)\")";

/// The list items of `page` with `class` (from `<li class="…">` to the next `</li>`).
fn items<'a>(page: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!("<li class=\"{class}\"");
    page.match_indices(&open)
        .map(|(at, _)| {
            let rest = &page[at..];
            &rest[..rest.find("</li>").unwrap_or(rest.len())]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_markdown_is_rendered_safely_bubs_prompts_are_notes_and_steps_fold() {
    let rig = Rig::start().await;
    rig.env.model.push_text(MARKDOWN);
    rig.env
        .telegram
        .push_message(private_text(42, 42, "show me **markdown**"));
    rig.env
        .telegram
        .wait_for_calls("sendMessage", 4, WAIT)
        .await;
    // A scheduled run in the chat: Bub's header, not the owner's words.
    let add = ",schedule.add after_seconds=1 message=scheduled-ping";
    let out = rig
        .env
        .run(&["run", "--session-id", "telegram:42", add])
        .await;
    assert!(out.status.success(), "{}", support::bub_env::stderr(&out));
    rig.env.model.push_text("Scheduled answer.");
    rig.env.wait_for_chat_text("Scheduled answer.").await;

    let (status, page) = rig.get("/session?id=telegram%3A42", true).await;
    assert_eq!(status, StatusCode::OK);
    // Markdown, in the agent's answer and the owner's message.
    assert!(
        page.contains("<strong>bold</strong> and <code>code</code>"),
        "{page}"
    );
    assert!(
        page.contains("<pre><code class=\"language-rust\">let a = 1 &lt; 2;"),
        "{page}"
    );
    assert!(page.contains("show me <strong>markdown</strong>"), "{page}");
    // Raw HTML is text; only web links, with their values escaped and rel set.
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "{page}"
    );
    assert!(page.contains("bad (javascript:alert(3))"), "{page}");
    assert!(
        page.contains(
            "<a href=\"https://example.com/\" title=\"t&quot; onmouseover=&quot;alert(4)\" \
             rel=\"noopener noreferrer\">good</a>"
        ),
        "{page}"
    );
    for markup in [
        "<script",
        "<img",
        "href=\"javascript",
        "\" onmouseover",
        "onerror=\"",
    ] {
        let main = &page[page.find("<main>").unwrap()..];
        assert!(!main.contains(markup), "{markup} in the page: {main}");
    }

    // Bub's prompts are notes: the loop's "Continue the task.", the scheduled run's header.
    let notes = items(&page, "note");
    assert!(
        notes.iter().any(|n| n.contains("Continue the task.")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("a scheduled run") && n.contains("scheduled-ping")),
        "{notes:?}"
    );
    for bubble in items(&page, "message user") {
        assert!(
            !bubble.contains("Continue the task.") && !bubble.contains("Scheduled run of job"),
            "a user bubble of Bub's: {bubble}"
        );
    }

    // The work lane: one line per step where four records were.
    let (_, work) = rig.get("/session?id=telegram%3A42&work=1", true).await;
    let steps = items(&work, "work step");
    assert_eq!(steps.len(), 4, "two steps, then one each turn: {steps:?}");
    assert!(
        steps[0].contains("step 1 · ") && steps[0].contains(" tok") && steps[0].contains("bash ✓"),
        "{}",
        steps[0]
    );
    for record in ["loop.step.start", "loop.step.finish", "loop.result"] {
        assert!(
            !work.contains(&format!("• {record}")),
            "{record} has a line of its own"
        );
    }
    assert!(
        !work.contains("• run<"),
        "a run record has a line of its own"
    );
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn login_sets_a_strict_http_only_cookie_and_every_change_needs_the_csrf_token() {
    let rig = Rig::start().await;
    let post = |form: Vec<(&'static str, String)>, origin: bool| {
        let request = rig.http.post(format!("{}/login", rig.base)).form(&form);
        match origin {
            true => request.header(ORIGIN, &rig.base).send(),
            false => request.send(),
        }
    };
    let wrong = post(vec![("token", "nope".into())], true);
    assert_eq!(wrong.await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let forged = post(
        vec![("token", rig.token.clone()), ("next", "/".into())],
        false,
    );
    assert_eq!(forged.await.unwrap().status(), StatusCode::FORBIDDEN);
    let ok = post(
        vec![
            ("token", rig.token.clone()),
            ("next", "//evil.example/".into()),
        ],
        true,
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert_eq!(ok.headers()[LOCATION], "/", "never to another site");
    let cookie = ok.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("bub_console="), "{cookie}");
    assert!(
        !cookie.contains(&rig.token),
        "a session, not the token: {cookie}"
    );
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    // Every action refuses a form without the token, and changes nothing.
    rig.env
        .run(&[
            "run",
            ",schedule.add after_seconds=3600 message=console-job",
        ])
        .await;
    let job = rig.env.jobs()["jobs"][0]["id"].as_str().unwrap().to_owned();
    let access_before = std::fs::read_to_string(rig.env.home.join("access.json")).unwrap();
    let actions: [(&str, Vec<(&str, &str)>); 7] = [
        ("/jobs/remove", vec![("id", &job)]),
        ("/commands/end", vec![("id", "1")]),
        (
            "/access/approve",
            vec![
                ("channel", "telegram"),
                ("code", &rig.code),
                ("role", "owner"),
            ],
        ),
        (
            "/access/reject",
            vec![("channel", "telegram"), ("code", &rig.code)],
        ),
        (
            "/access/revoke",
            vec![("channel", "telegram"), ("user_id", "50")],
        ),
        ("/memory/edit", vec![("text", "- forged")]),
        ("/logout", vec![]),
    ];
    for (path, form) in &actions {
        let response = rig.post(path, form, false).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
        let unauthenticated = rig
            .http
            .post(format!("{}{path}", rig.base))
            .header(ORIGIN, &rig.base)
            .form(form)
            .send()
            .await
            .unwrap();
        assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    assert_eq!(rig.env.jobs()["jobs"].as_array().unwrap().len(), 1);
    let access_after = std::fs::read_to_string(rig.env.home.join("access.json")).unwrap();
    assert_eq!(access_before, access_after);

    // With it, each does what its command does.
    let removed = rig.post("/jobs/remove", &[("id", &job)], true).await;
    assert_eq!(removed.status(), StatusCode::SEE_OTHER);
    assert!(rig.env.jobs()["jobs"].as_array().unwrap().is_empty());
    let (_, jobs) = rig
        .get(removed.headers()[LOCATION].to_str().unwrap(), true)
        .await;
    assert!(jobs.contains(&format!("Removed job {job}.")), "{jobs}");

    let edited = rig
        .post(
            "/memory/edit",
            &[("text", "- likes <b>tea</b>\n- owns a cat")],
            true,
        )
        .await;
    assert_eq!(edited.status(), StatusCode::SEE_OTHER);
    let global = std::fs::read_to_string(rig.env.home.join("memory/global.md")).unwrap();
    assert!(
        global.contains("likes <b>tea</b>") && global.contains("owns a cat"),
        "{global}"
    );
    let (_, memory) = rig.get("/memory", true).await;
    assert!(
        memory.contains("- likes &lt;b&gt;tea&lt;/b&gt;"),
        "{memory}"
    );
    let chat = rig
        .post(
            "/memory/edit",
            &[("chat", "telegram:42"), ("text", "- prefers short answers")],
            true,
        )
        .await;
    assert_eq!(chat.status(), StatusCode::SEE_OTHER);
    let list = rig.env.run(&["memory", "list"]).await;
    assert!(support::bub_env::stdout(&list).contains("prefers short answers"));

    let (_, access) = rig.get("/access", true).await;
    assert!(access.contains(&rig.code), "the pending request: {access}");
    let approve = [
        ("channel", "telegram"),
        ("code", &rig.code),
        ("role", "guest"),
    ];
    let approved = rig.post("/access/approve", &approve, true).await;
    assert_eq!(approved.status(), StatusCode::SEE_OTHER);
    let paired = |rig: &Rig| {
        let text = std::fs::read_to_string(rig.env.home.join("access.json")).unwrap();
        let file: serde_json::Value = serde_json::from_str(&text).unwrap();
        file["users"].as_array().unwrap().len()
    };
    assert_eq!(paired(&rig), 1, "user 50 approved");
    let back = approved.headers()[LOCATION].to_str().unwrap();
    let (_, access) = rig.get(back, true).await;
    let done = "Approved telegram user 50 @user50 as guest.";
    assert!(access.contains(done), "{access}");
    let revoke = [("channel", "telegram"), ("user_id", "50")];
    let revoked = rig.post("/access/revoke", &revoke, true).await;
    assert_eq!(revoked.status(), StatusCode::SEE_OTHER);
    assert_eq!(paired(&rig), 0, "user 50 revoked");

    // Another stranger's request, rejected: gone, nobody admitted.
    rig.env
        .telegram
        .push_message(private_text(60, 60, "me too, please"));
    let code = code_in(&rig.env.wait_for_sent_to(60, 1).await[0]);
    let reject = [("channel", "telegram"), ("code", code.as_str())];
    let rejected = rig.post("/access/reject", &reject, true).await;
    assert_eq!(rejected.status(), StatusCode::SEE_OTHER);
    let (_, access) = rig.get("/access", true).await;
    assert!(!access.contains(&code), "rejected: {access}");
    assert_eq!(paired(&rig), 0);
    let (_, explained) = rig.get("/access?explain=telegram%3A42&user=42", true).await;
    assert!(explained.contains("owner"), "{explained}");

    let out = rig.post("/logout", &[], true).await;
    assert!(
        out.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_timeline_pages_a_long_tape_and_sends_only_new_entries() {
    let rig = Rig::start().await;
    // A tape of 10,000 entries.
    let session = "telegram:7";
    let name = bub::tape::tape_name_for("bub", session);
    let path = bub::tape::tape_path(&rig.env.home, &rig.env.workspace, &name);
    let mut lines = vec![
        json!({"id": 1, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human", "session": session}}, "meta": {}, "date": "2026-11-27T10:00:00.000Z"}).to_string(),
    ];
    for id in 2..=10_000 {
        let role = if id % 2 == 0 { "user" } else { "assistant" };
        lines.push(json!({"id": id, "kind": "message", "payload": {"role": role, "content": format!("line {id}")}, "meta": {}, "date": "2026-11-27T10:00:01.000Z"}).to_string());
    }
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (status, page) = rig.get("/session?id=telegram%3A7", true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page.matches("<li class=\"message").count(), 200, "one page");
    assert!(page.contains(">line 10000<") && !page.contains(">line 9800<"));
    assert!(page.contains("before=9801"), "a link to the older ones");
    let (_, older) = rig.get("/session?id=telegram%3A7&before=9801", true).await;
    assert!(older.contains(">line 9800<") && older.contains(">line 9601<"));
    assert!(!older.contains(">line 9801<"));
    assert!(
        !older.contains("data-live"),
        "no live updates on an older page"
    );

    // Live: nothing while the tape is unchanged; the new entries after the last one.
    let live = "/session/live?id=telegram%3A42&after=";
    let (_, timeline) = rig.get("/session?id=telegram%3A42", true).await;
    let after = attribute(&timeline, "data-after");
    let len = attribute(&timeline, "data-len");
    let (status, _) = rig.get(&format!("{live}{after}&len={len}"), true).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    rig.env.model.push_text("A newer answer.");
    rig.env
        .telegram
        .push_message(private_text(42, 42, "one more thing"));
    rig.env.wait_for_chat_text("A newer answer.").await;
    let (status, fresh) = rig.get(&format!("{live}{after}&len={len}"), true).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        fresh.contains("one more thing") && fresh.contains("A newer answer."),
        "{fresh}"
    );
    assert!(
        !fresh.contains("All done: tool-ran."),
        "only what is new: {fresh}"
    );
    rig.daemon.stop().await;
}

/// The value of the first `name="…"` attribute in `page`.
fn attribute(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("{name}=\""))
        .unwrap_or_else(|| panic!("no {name}"));
    let rest = &page[at + name.len() + 2..];
    rest[..rest.find('"').unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_console_beyond_loopback_needs_the_operators_word() {
    let mut env = Env::cli().await;
    env.set("BUB_CONSOLE_LISTEN", "0.0.0.0:8787");
    let out = env.run(&["console"]).await;
    assert_exit(&out, 2, "BUB_CONSOLE_LISTEN");
    assert!(!env.home.join("console.token").exists(), "nothing written");
}

/// `bub console` started, and what it printed up to its login line.
async fn console(env: &Env) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut cmd = env.command(&["console"]);
    cmd.stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    while !printed.contains("Log in") {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await;
        let line = line.expect("bub console printed in time").unwrap();
        printed.push_str(&line.expect("bub console printed its login line"));
        printed.push('\n');
    }
    (child, printed)
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_console_prints_its_token_once_and_serves_alone() {
    let mut env = Env::cli().await;
    let port = free_port();
    env.set("BUB_CONSOLE_LISTEN", &port.to_string());
    let (mut first, printed) = console(&env).await;
    let token = std::fs::read_to_string(env.home.join("console.token")).unwrap();
    let token = token.trim();
    assert!(
        printed.contains(&format!("http://127.0.0.1:{port}/")),
        "{printed}"
    );
    assert!(printed.contains(token), "printed when created: {printed}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(env.home.join("console.token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    first.kill().await.unwrap();
    // Beyond loopback it needs the address browsers reach it at (behind TLS)...
    env.set("BUB_CONSOLE_ALLOW_REMOTE", "true");
    let out = env.run(&["console"]).await;
    assert_exit(&out, 2, "BUB_CONSOLE_PUBLIC_URL");
    // ... and then its cookie is for TLS only, and that name is its Host and Origin.
    env.set("BUB_CONSOLE_PUBLIC_URL", "https://bub.example.com");
    let (mut second, printed) = console(&env).await;
    assert!(!printed.contains(token), "not printed again: {printed}");
    let http = client();
    let base = format!("http://127.0.0.1:{port}");
    let logged_in = http
        .post(format!("{base}/login"))
        .header(HOST, "bub.example.com")
        .header(ORIGIN, "https://bub.example.com")
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(logged_in.status(), StatusCode::SEE_OTHER);
    let cookie = logged_in.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("__Host-bub_console="), "{cookie}");
    assert!(
        cookie.contains("; Secure") && cookie.contains("Path=/") && !cookie.contains(token),
        "{cookie}"
    );
    let page = http
        .get(format!("{base}/status"))
        .header(HOST, "bub.example.com")
        .header(COOKIE, set_cookie(&logged_in))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("No daemon answers"));
    // Not another name, nor that name on another port; a change only from that origin (or
    // the listener's own, as a proxy passing its own Host on would be).
    for host in ["evil.example", "bub.example.com:8443"] {
        let misdirected = http
            .get(format!("{base}/status"))
            .header(HOST, host)
            .header(COOKIE, set_cookie(&logged_in))
            .send()
            .await
            .unwrap();
        assert_eq!(
            misdirected.status(),
            StatusCode::MISDIRECTED_REQUEST,
            "{host}"
        );
    }
    let jobs = http
        .get(format!("{base}/jobs"))
        .header(COOKIE, set_cookie(&logged_in))
        .send()
        .await
        .unwrap();
    let csrf = field(&jobs.text().await.unwrap(), "csrf");
    for (origin, status) in [
        ("http://bub.example.com", StatusCode::FORBIDDEN),
        ("https://bub.example.com:8443", StatusCode::FORBIDDEN),
        ("https://bub.example.com", StatusCode::SEE_OTHER),
    ] {
        let edited = http
            .post(format!("{base}/memory/edit"))
            .header(HOST, "bub.example.com")
            .header(ORIGIN, origin)
            .header(COOKIE, set_cookie(&logged_in))
            .form(&[("text", "- via the proxy"), ("csrf", &csrf)])
            .send()
            .await
            .unwrap();
        assert_eq!(edited.status(), status, "{origin}");
    }
    second.kill().await.unwrap();
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread")]
async fn the_console_reads_and_changes_the_database_as_it_does_files() {
    let mut env = Env::cli().await;
    env.set("BUB_DATABASE_URL", &support::postgres::database());
    let port = free_port();
    env.set("BUB_CONSOLE_LISTEN", &port.to_string());
    env.model.push_text("Kept in <i>PostgreSQL</i>.");
    let said = env
        .run(&["run", "--session-id", "telegram:5", "where is this kept?"])
        .await;
    assert!(said.status.success(), "{}", support::bub_env::stderr(&said));
    let job = ",schedule.add after_seconds=3600 message=db-job";
    let added = env.run(&["run", "--session-id", "telegram:5", job]).await;
    assert!(
        added.status.success(),
        "{}",
        support::bub_env::stderr(&added)
    );
    assert!(
        env.tape_paths().is_empty(),
        "no tape file: the database has it"
    );

    let (mut child, _) = console(&env).await;
    let token = std::fs::read_to_string(env.home.join("console.token")).unwrap();
    let http = client();
    let base = format!("http://127.0.0.1:{port}");
    let cookie = login(&http, &base, token.trim()).await;
    let get = |path: &str| {
        http.get(format!("{base}{path}"))
            .header(COOKIE, &cookie)
            .send()
    };
    let sessions = get("/").await.unwrap().text().await.unwrap();
    assert!(sessions.contains("/session?id=telegram%3A5"), "{sessions}");
    let timeline = get("/session?id=telegram%3A5")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(timeline.contains("where is this kept?"), "{timeline}");
    assert!(
        timeline.contains("Kept in &lt;i&gt;PostgreSQL&lt;/i&gt;."),
        "{timeline}"
    );
    let jobs = get("/jobs").await.unwrap().text().await.unwrap();
    assert!(jobs.contains("db-job"), "{jobs}");
    let csrf = field(&jobs, "csrf");
    let edited = http
        .post(format!("{base}/memory/edit"))
        .header(COOKIE, &cookie)
        .header(ORIGIN, &base)
        .form(&[
            ("chat", "telegram:5"),
            ("text", "- kept in the database"),
            ("csrf", &csrf),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(edited.status(), StatusCode::SEE_OTHER);
    let list = env.run(&["memory", "list"]).await;
    assert!(support::bub_env::stdout(&list).contains("kept in the database"));
    assert!(!env.home.join("memory").exists(), "no memory file");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chats_files_are_links_served_only_from_its_folder() {
    let rig = Rig::start().await;
    let body = b"quarterly numbers".to_vec();
    rig.env.telegram.add_file("doc-1", body.clone());
    rig.env.model.push_text("Read it.");
    let document = private_text(42, 42, "").document_file(
        "doc-1",
        "report.txt",
        "text/plain",
        body.len() as u64,
        Some("see attached"),
    );
    rig.env.telegram.push_message(document);
    rig.env.wait_for_chat_text("Read it.").await;
    let (_, timeline) = rig.get("/session?id=telegram%3A42", true).await;
    let at = timeline
        .find("href=\"/file?id=telegram%3A42&amp;name=")
        .expect(&timeline);
    let link = &timeline[at + 6..];
    let link = link[..link.find('"').unwrap()].replace("&amp;", "&");
    assert!(link.ends_with("report%2Etxt"), "{link}");
    let served = rig
        .http
        .get(format!("{}{link}", rig.base))
        .header(COOKIE, &rig.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()["content-disposition"], "attachment");
    assert_eq!(served.bytes().await.unwrap().as_ref(), body.as_slice());
    let (status, _) = rig.get(&link, false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Nothing outside the chat's own folder: another chat, a path, a hidden or secret name, a
    // link out of the folder.
    let folder = rig.env.workspace.join("chats/telegram-42");
    std::fs::write(rig.env.workspace.join("notes.txt"), "workspace file").unwrap();
    std::fs::write(folder.join(".env"), "X=1").unwrap();
    std::fs::write(folder.join("id_rsa"), "key").unwrap();
    std::os::unix::fs::symlink(rig.env.workspace.join("notes.txt"), folder.join("out.txt"))
        .unwrap();
    let name = link.rsplit("name=").next().unwrap();
    for refused in [
        format!("/file?id=telegram%3A50&name={name}"),
        "/file?id=telegram%3A42&name=..%2Fnotes.txt".to_owned(),
        "/file?id=telegram%3A42&name=%2E%2E".to_owned(),
        "/file?id=telegram%3A42&name=.env".to_owned(),
        "/file?id=telegram%3A42&name=id_rsa".to_owned(),
        "/file?id=telegram%3A42&name=out.txt".to_owned(),
        "/file?id=cli&name=notes.txt".to_owned(),
    ] {
        let (status, body) = rig.get(&refused, true).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{refused}: {body}");
        assert!(!body.contains("workspace file") && !body.contains("X=1"));
    }
    rig.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shares_the_health_listener_when_given_its_address() {
    let mut env = Env::new().await;
    let port = free_port();
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    env.set("BUB_CONSOLE", "true");
    env.set("BUB_CONSOLE_LISTEN", &format!("127.0.0.1:{port}"));
    let daemon = env.start();
    daemon.wait_for_log("console.listen").await;
    let get = |path: &str| reqwest::get(format!("http://127.0.0.1:{port}{path}"));
    support::wait::wait_until(WAIT, "the listener", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let health = get("/healthz").await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok\n");
    let console = get("/").await.unwrap();
    assert_eq!(console.status(), StatusCode::UNAUTHORIZED);
    assert!(console.text().await.unwrap().contains("action=\"/login\""));
    let metrics = get("/metrics").await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK, "both on one listener");
    // The console's Host rule holds on the console's routes, and only there.
    let http = reqwest::Client::new();
    let rebound = |path: &str| {
        http.get(format!("http://127.0.0.1:{port}{path}"))
            .header(HOST, format!("evil.example:{port}"))
            .send()
    };
    for console in ["/", "/assets/console.css"] {
        let refused = rebound(console).await.unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::MISDIRECTED_REQUEST,
            "{console}"
        );
    }
    for health in ["/healthz", "/metrics"] {
        assert_eq!(rebound(health).await.unwrap().status(), StatusCode::OK);
    }
    daemon.stop().await;
}
