//! The console in a real headless Chromium, beside the running daemon: log in through the form,
//! read the Telegram conversation (the tool call behind the work-lane toggle, each step one
//! folded line, the anchor, the `<script>` shown as text, Bub's "Continue the task." as a note),
//! search, watch a new answer arrive without reloading (its Markdown bold), read the status
//! cards, approve the
//! stranger's pairing and see the daemon answer them — and the page's own requests refused
//! without the cookie (401) or the CSRF token (403) — and a page on another loopback port, which
//! is the same *site* to the browser, unable to approve a stranger through the operator's
//! login. Screenshots go to `target/screenshots/`.

use crate::support;

use std::sync::{Arc, Mutex};

use serde_json::Value;
use support::browser::{Browser, screenshots};
use support::fake_telegram::private_text;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Rig;

/// What a script in the page gets for `fetch(path, options)`: the status.
async fn status_of(browser: &Browser, path: &str, options: &str) -> u64 {
    let script = format!("return fetch({path:?}, {options}).then(r => r.status);");
    let status = browser.execute(&script, &[]).await.unwrap();
    status.as_u64().unwrap_or_else(|| panic!("{status}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_reads_the_timeline_and_approves_a_pairing_in_chromium() {
    let rig = Rig::start().await;
    let browser = Browser::start().await.unwrap();
    let shots = screenshots();

    // Logged out, any page is the login form; the token logs in and goes on to that page.
    browser
        .goto(&format!("{}/session?id=telegram%3A42", rig.base))
        .await
        .unwrap();
    let token = browser.find("#token").await.unwrap();
    browser.type_text(&token, &rig.token).await.unwrap();
    let submit = browser.find("form.login button").await.unwrap();
    browser.click(&submit).await.unwrap();
    browser
        .wait_text("#timeline", "All done: tool-ran.")
        .await
        .unwrap();
    let cookies = browser.cookies().await.unwrap();
    let login = cookies.iter().find(|c| c.name == "bub_console").unwrap();
    assert!(login.http_only, "{login:?}");
    assert_eq!(login.same_site.as_deref(), Some("Strict"));

    // The message with markup is text, its secret redacted; no script of its own ran.
    let said = browser.find("li.message.user .text").await.unwrap();
    let said = browser.text(&said).await.unwrap();
    assert!(
        said.contains("run it <script>alert(1)</script> with [redacted]"),
        "{said}"
    );
    let scripts = "return document.querySelectorAll('main script').length;";
    assert_eq!(browser.execute(scripts, &[]).await.unwrap(), Value::from(0));
    // The loop's "Continue the task." after the tool call is Bub's: a runtime note, not the
    // owner's bubble.
    browser
        .wait_text("li.note", "Continue the task.")
        .await
        .unwrap();
    let bubbles = "return Array.from(document.querySelectorAll('li.message.user'))\
                   .filter(li => li.textContent.includes('Continue the task.')).length;";
    assert_eq!(browser.execute(bubbles, &[]).await.unwrap(), Value::from(0));
    browser.wait_text("li.anchor", "phase1").await.unwrap();
    browser
        .wait_text("li.anchor", "The first part is done.")
        .await
        .unwrap();
    browser
        .screenshot(shots.join("console-timeline.png"))
        .await
        .unwrap();

    // The work lane: the tool call with its arguments.
    let toggle = browser.find("#work-toggle").await.unwrap();
    browser.click(&toggle).await.unwrap();
    let call = browser.wait_text("li.work.call", "bash").await.unwrap();
    browser.click(&call).await.unwrap();
    browser
        .wait_text("li.work.call pre", "echo tool-ran")
        .await
        .unwrap();
    // Each step's bookkeeping is one folded line, which opens on its records.
    let steps = browser.find_all("li.work.step").await.unwrap();
    assert_eq!(steps.len(), 2, "two steps, one line each");
    let first = browser.text(&steps[0]).await.unwrap();
    assert!(
        first.starts_with("step 1 · ") && first.contains(" tok") && first.contains("bash ✓"),
        "{first}"
    );
    let second = browser.text(&steps[1]).await.unwrap();
    assert!(second.starts_with("step 2 · "), "{second}");
    let bookkeeping = "return Array.from(document.querySelectorAll('li.work.event summary'))\
                       .map(s => s.textContent).filter(t => /loop\\.step|loop\\.result|• run/.test(t)).length;";
    assert_eq!(
        browser.execute(bookkeeping, &[]).await.unwrap(),
        Value::from(0)
    );
    let fold = browser.find("li.work.step summary").await.unwrap();
    browser.click(&fold).await.unwrap();
    browser
        .wait_text("li.work.step dl", "loop.step.start")
        .await
        .unwrap();
    browser
        .screenshot(shots.join("console-work-lane.png"))
        .await
        .unwrap();

    // Search within the session.
    let search = browser.find("#search").await.unwrap();
    browser.type_text(&search, "tool-ran").await.unwrap();
    let go = browser.find("form.search button").await.unwrap();
    browser.click(&go).await.unwrap();
    browser.wait_text("p.hint", "match(es)").await.unwrap();
    browser.wait_text("#timeline", "tool-ran").await.unwrap();

    // Live: a new answer appears without a reload.
    browser
        .goto(&format!("{}/session?id=telegram%3A42", rig.base))
        .await
        .unwrap();
    browser.find("#timeline").await.unwrap();
    let marker = "document.body.dataset.unreloaded = 'yes'; return true;";
    browser.execute(marker, &[]).await.unwrap();
    rig.env.model.push_text("A **live** answer.");
    rig.env
        .telegram
        .push_message(private_text(42, 42, "anything new?"));
    browser
        .wait_text("#timeline", "A live answer.")
        .await
        .unwrap();
    // Markdown: `**live**` is bold, in the live fragment and on the page.
    let bold = browser
        .wait_text("li.message.assistant strong", "live")
        .await
        .unwrap();
    assert_eq!(browser.text(&bold).await.unwrap(), "live");
    let kept = "return document.body.dataset.unreloaded || null;";
    assert_eq!(
        browser.execute(kept, &[]).await.unwrap(),
        Value::from("yes")
    );

    // The page's own requests: 401 without the cookie, 403 without the CSRF token.
    assert_eq!(
        status_of(&browser, "/jobs", "{credentials: 'omit'}").await,
        401
    );
    let forged = "{method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'}, \
                  body: 'channel=telegram&code=AAAAAAAA&role=owner'}";
    assert_eq!(status_of(&browser, "/access/approve", forged).await, 403);

    // The session list and the status page with its usage plot.
    browser.goto(&format!("{}/", rig.base)).await.unwrap();
    browser
        .wait_text("table.sessions", "telegram:42")
        .await
        .unwrap();
    browser
        .screenshot(shots.join("console-sessions.png"))
        .await
        .unwrap();
    browser.goto(&format!("{}/status", rig.base)).await.unwrap();
    browser.find("svg.plot rect.bar").await.unwrap();
    // Cards, not the text of `bub status`.
    browser
        .wait_text("section.card.channels li.ready", "telegram · connected")
        .await
        .unwrap();
    browser
        .wait_text("section.card.sessions", "running")
        .await
        .unwrap();
    browser
        .wait_text("section.card.jobs", "scheduled")
        .await
        .unwrap();
    browser
        .wait_text("section.card.today", "tokens")
        .await
        .unwrap();
    browser
        .wait_text("section.card.errors", "None")
        .await
        .unwrap();
    browser.find("section.card.daemon").await.unwrap();
    assert!(browser.find_all("pre.status").await.unwrap().is_empty());
    browser
        .screenshot(shots.join("console-status.png"))
        .await
        .unwrap();

    // Approve the stranger as a guest: the running daemon answers them at once.
    browser.goto(&format!("{}/access", rig.base)).await.unwrap();
    browser.wait_text("ul.pending", &rig.code).await.unwrap();
    let approve = browser
        .find("ul.pending button[value=guest]")
        .await
        .unwrap();
    browser.click(&approve).await.unwrap();
    browser
        .wait_text("p.done", "Approved telegram user 50")
        .await
        .unwrap();
    browser.wait_text("ul.users", "guest").await.unwrap();
    rig.env.model.push_text("Welcome aboard.");
    rig.env
        .telegram
        .push_message(private_text(50, 50, "thanks for letting me in"));
    rig.env.wait_for_chat_text("Welcome aboard.").await;

    // Readable on a phone.
    browser.set_window_size(390, 844).await.unwrap();
    browser
        .goto(&format!("{}/session?id=telegram%3A42", rig.base))
        .await
        .unwrap();
    browser.find("#timeline").await.unwrap();
    let wide = "return document.documentElement.scrollWidth <= window.innerWidth + 1;";
    assert_eq!(browser.execute(wide, &[]).await.unwrap(), Value::from(true));
    browser
        .screenshot(shots.join("console-phone.png"))
        .await
        .unwrap();
    rig.daemon.stop().await;
}

/// A web app on another loopback port, as any local program (a guest's `python3 -m
/// http.server`) can serve: its page posts a form to the console as soon as it loads, and every
/// request it receives is recorded (its head: the request line and the headers).
struct Hostile {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Hostile {
    async fn start(page: String) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let recorded = heads.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(tokio::spawn(answer(stream, page.clone(), recorded.clone())));
            }
        });
        Hostile { url, heads, server }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Reads a request's head (bounded), records it, and answers with `page` (`GET /`) or 404.
async fn answer(mut stream: tokio::net::TcpStream, page: String, heads: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut chunk = [0; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let (status, body) = match head.starts_with("GET / ") {
        true => ("200 OK", page),
        false => ("404 Not Found", String::new()),
    };
    heads.lock().unwrap().push(head);
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_on_another_loopback_port_cannot_approve_a_stranger_in_chromium() {
    let rig = Rig::start().await;
    let browser = Browser::start().await.unwrap();

    // The operator logs in and sees the stranger's request.
    browser.goto(&format!("{}/access", rig.base)).await.unwrap();
    let token = browser.find("#token").await.unwrap();
    browser.type_text(&token, &rig.token).await.unwrap();
    let submit = browser.find("form.login button").await.unwrap();
    browser.click(&submit).await.unwrap();
    browser.wait_text("ul.pending", &rig.code).await.unwrap();

    // The hostile app takes whatever CSRF token the console's login page shows anyone, and
    // serves a page that approves the stranger as owner.
    let (_, login) = rig.get("/", false).await;
    let csrf = super::field_if(&login, "csrf").unwrap_or_default();
    let page = format!(
        "<!doctype html><html><body><h1>Cat pictures</h1>\
         <form id=\"f\" method=\"post\" action=\"{}/access/approve\">\
         <input type=\"hidden\" name=\"channel\" value=\"telegram\">\
         <input type=\"hidden\" name=\"code\" value=\"{}\">\
         <input type=\"hidden\" name=\"role\" value=\"owner\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"></form>\
         <script>document.getElementById('f').submit();</script></body></html>",
        rig.base, rig.code
    );
    let hostile = Hostile::start(page).await;
    let access = || std::fs::read_to_string(rig.env.home.join("access.json")).unwrap();
    let before = access();

    // The operator opens the hostile page; it posts itself to the console.
    browser.goto(&hostile.url).await.unwrap();
    let deadline = tokio::time::Instant::now() + support::browser::FIND;
    loop {
        let url = browser.url().await.unwrap();
        let ready = "return document.readyState;";
        if url.starts_with(&rig.base) && browser.execute(ready, &[]).await.unwrap() == "complete" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hostile form was not posted: still on {url}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let after = access();
    let file: Value = serde_json::from_str(&after).unwrap();
    assert_eq!(
        file["users"].as_array().map_or(0, Vec::len),
        0,
        "the stranger was approved: {after}"
    );
    assert_eq!(before, after, "access.json unchanged");
    browser.wait_text("body", "forbidden").await.unwrap();
    browser
        .screenshot(screenshots().join("console-cross-port-refused.png"))
        .await
        .unwrap();

    // The hostile app saw the browser's requests, never the login token.
    let heads = hostile.heads();
    assert!(heads.iter().any(|h| h.starts_with("GET / ")), "{heads:?}");
    for head in &heads {
        assert!(!head.contains(&rig.token), "the token reached it: {head}");
    }

    // The request is still pending, for the operator to decide in the console itself.
    browser.goto(&format!("{}/access", rig.base)).await.unwrap();
    browser.wait_text("ul.pending", &rig.code).await.unwrap();
    rig.daemon.stop().await;
}
