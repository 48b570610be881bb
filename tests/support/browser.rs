//! A real headless Chromium for browser tests, driven through ChromeDriver's W3C WebDriver
//! HTTP API with the crate's own reqwest client (the dozen JSON endpoints a test needs, no
//! WebDriver crate).
//!
//! [`Browser::start`] runs `chromedriver` on a free loopback port and opens a session in a
//! fresh profile directory; dropping the [`Browser`] ends the session (best-effort, which
//! closes Chromium) and kills `chromedriver`. Every wait is bounded, and every error says what
//! was waited for and on which page. Without `chromium` and `chromium-driver` on the machine
//! (Debian's, at `/usr/bin/chromium` and `/usr/bin/chromedriver`, or `BUB_TEST_CHROMIUM` /
//! `BUB_TEST_CHROMEDRIVER`) the tests fail saying what to install — `.ci/run` installs them —
//! they never pass silently.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How long [`Browser::find`] and [`Browser::wait_text`] wait for the page.
pub const FIND: Duration = Duration::from_secs(10);
/// How long `chromedriver` may take to say it is ready.
const READY: Duration = Duration::from_secs(20);
/// The bound on one WebDriver request (a navigation, a script, starting Chromium).
const REQUEST: Duration = Duration::from_secs(30);
/// How often the waits look at the page again.
const POLL: Duration = Duration::from_millis(50);
/// The key of an element reference in WebDriver's JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// An element of the page: its WebDriver reference and the selector it was found by (for the
/// error messages).
#[derive(Debug, Clone)]
pub struct Element {
    id: String,
    css: String,
}

impl Element {
    /// The element as an argument of [`Browser::execute`] (`arguments[i]` in the script).
    pub fn to_arg(&self) -> Value {
        json!({ ELEMENT_KEY: self.id })
    }

    /// The CSS selector the element was found by.
    pub fn css(&self) -> &str {
        &self.css
    }
}

/// A cookie as the browser holds it (WebDriver's cookie object).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cookie {
    pub name: String,
    pub value: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub secure: bool,
    #[serde(default)]
    pub http_only: bool,
    /// `Strict`, `Lax` or `None`.
    #[serde(default)]
    pub same_site: Option<String>,
    /// Seconds since the epoch; none for a session cookie.
    #[serde(default)]
    pub expiry: Option<u64>,
}

/// Where the tests put their screenshots: `target/screenshots/` (of the target directory in
/// use, `CARGO_TARGET_DIR` included), created if missing.
pub fn screenshots() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A headless Chromium session behind a `chromedriver` of its own.
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>`, chromedriver's address.
    base: String,
    port: u16,
    session: String,
    // Field order is drop order: chromedriver is killed (kill_on_drop) before the profile
    // directory is removed.
    _driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session in a new profile directory.
    pub async fn start() -> Result<Browser> {
        let chromium = binary("BUB_TEST_CHROMIUM", "/usr/bin/chromium")?;
        let chromedriver = binary("BUB_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")?;
        let profile = tempfile::Builder::new()
            .prefix("bub-chromium-")
            .tempdir()
            .context("creating a profile directory for Chromium")?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST)
            .build()
            .context("building the WebDriver HTTP client")?;

        // The free port may be taken again before chromedriver binds it: then try another.
        let mut attempt = 0;
        let (driver, port) = loop {
            attempt += 1;
            match start_driver(&http, &chromedriver, profile.path()).await {
                Ok(started) => break started,
                Err(err) if attempt < 3 => {
                    eprintln!("chromedriver did not start (attempt {attempt}), retrying: {err:#}")
                }
                Err(err) => return Err(err),
            }
        };
        let base = format!("http://127.0.0.1:{port}");

        let user_data_dir = profile.path().join("profile");
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "timeouts": { "implicit": 0, "pageLoad": 20_000, "script": 20_000 },
                    "goog:chromeOptions": {
                        "binary": chromium,
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-quic",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--disable-dev-shm-usage",
                            "--window-size=1280,900",
                            format!("--user-data-dir={}", user_data_dir.display()),
                        ],
                    },
                },
            },
        });
        let created = request(
            &http,
            reqwest::Method::POST,
            &format!("{base}/session"),
            Some(capabilities),
        )
        .await
        .with_context(|| {
            format!(
                "creating a WebDriver session (Chromium at {}); chromedriver's log: {}",
                chromium.display(),
                log_tail(profile.path())
            )
        })?;
        let session = created["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId in chromedriver's answer: {created}"))?
            .to_owned();
        Ok(Browser {
            http,
            base,
            port,
            session,
            _driver: driver,
            _profile: profile,
        })
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) -> Result<()> {
        let result = self
            .cmd(reqwest::Method::POST, "url", Some(json!({ "url": url })))
            .await;
        self.on_page(format!("loading {url}"), result)
            .await
            .map(drop)
    }

    /// The URL of the current page.
    pub async fn url(&self) -> Result<String> {
        let value = self
            .cmd(reqwest::Method::GET, "url", None)
            .await
            .context("reading the page's URL")?;
        string(value)
    }

    /// The first element matching `css`, waiting up to [`FIND`] for one to exist.
    pub async fn find(&self, css: &str) -> Result<Element> {
        let deadline = Instant::now() + FIND;
        loop {
            let last = match self.find_all(css).await {
                Ok(mut found) if !found.is_empty() => return Ok(found.swap_remove(0)),
                Ok(_) => None,
                Err(err) => Some(err),
            };
            if Instant::now() >= deadline {
                let last = last
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default();
                return Err(anyhow!(
                    "no element matching `{css}` within {FIND:?} on {}{last}",
                    self.here().await
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The elements matching `css` now (none is not an error).
    pub async fn find_all(&self, css: &str) -> Result<Vec<Element>> {
        let body = json!({ "using": "css selector", "value": css });
        let result = self
            .cmd(reqwest::Method::POST, "elements", Some(body))
            .await;
        let value = self.on_page(format!("finding `{css}`"), result).await?;
        let list = value
            .as_array()
            .ok_or_else(|| anyhow!("finding `{css}`: not a list: {value}"))?;
        list.iter()
            .map(|reference| {
                let id = reference[ELEMENT_KEY]
                    .as_str()
                    .ok_or_else(|| anyhow!("finding `{css}`: not an element: {reference}"))?;
                Ok(Element {
                    id: id.to_owned(),
                    css: css.to_owned(),
                })
            })
            .collect()
    }

    /// The first element matching `css` whose text contains `needle`, waiting up to [`FIND`]
    /// for one (the page's scripts may still be changing it).
    pub async fn wait_text(&self, css: &str, needle: &str) -> Result<Element> {
        let deadline = Instant::now() + FIND;
        let mut seen: Vec<String> = Vec::new();
        loop {
            // An element may go stale between finding it and reading it: look again.
            if let Ok(found) = self.find_all(css).await {
                seen.clear();
                for element in found {
                    if let Ok(text) = self.element_text(&element).await {
                        if text.contains(needle) {
                            return Ok(element);
                        }
                        seen.push(text);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(anyhow!(
                    "no element matching `{css}` contained {needle:?} within {FIND:?} on {} \
                     (texts seen last: {seen:?})",
                    self.here().await
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks `element` (scrolled into view first, as a user would).
    pub async fn click(&self, element: &Element) -> Result<()> {
        let result = self
            .cmd(
                reqwest::Method::POST,
                &format!("element/{}/click", element.id),
                Some(json!({})),
            )
            .await;
        self.on_page(format!("clicking `{}`", element.css), result)
            .await
            .map(drop)
    }

    /// Types `text` into `element` (key by key, after focusing it).
    pub async fn type_text(&self, element: &Element, text: &str) -> Result<()> {
        let body = json!({ "text": text });
        let result = self
            .cmd(
                reqwest::Method::POST,
                &format!("element/{}/value", element.id),
                Some(body),
            )
            .await;
        self.on_page(format!("typing into `{}`", element.css), result)
            .await
            .map(drop)
    }

    /// The rendered text of `element` (what a user sees).
    pub async fn text(&self, element: &Element) -> Result<String> {
        let result = self.element_text(element).await;
        self.on_page(format!("reading the text of `{}`", element.css), result)
            .await
    }

    /// Attribute `name` of `element`; none when it has no such attribute.
    pub async fn attribute(&self, element: &Element, name: &str) -> Result<Option<String>> {
        let path = format!("element/{}/attribute/{name}", element.id);
        let result = self.cmd(reqwest::Method::GET, &path, None).await;
        let value = self
            .on_page(
                format!("reading attribute {name} of `{}`", element.css),
                result,
            )
            .await?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// DOM property `name` of `element` (an input's current `value`, a checkbox's `checked`).
    pub async fn property(&self, element: &Element, name: &str) -> Result<Value> {
        let path = format!("element/{}/property/{name}", element.id);
        let result = self.cmd(reqwest::Method::GET, &path, None).await;
        self.on_page(
            format!("reading property {name} of `{}`", element.css),
            result,
        )
        .await
    }

    /// The page's current DOM, serialized.
    pub async fn source(&self) -> Result<String> {
        let result = self.cmd(reqwest::Method::GET, "source", None).await;
        string(
            self.on_page("reading the page source".to_owned(), result)
                .await?,
        )
    }

    /// Runs `script` (a function body: `return …` gives the result; `arguments[i]` are `args`,
    /// elements passed by [`Element::to_arg`]) and returns its result.
    pub async fn execute(&self, script: &str, args: &[Value]) -> Result<Value> {
        let body = json!({ "script": script, "args": args });
        let result = self
            .cmd(reqwest::Method::POST, "execute/sync", Some(body))
            .await;
        self.on_page(format!("running script {script:?}"), result)
            .await
    }

    /// The cookies the browser holds for the current page, HttpOnly ones included.
    pub async fn cookies(&self) -> Result<Vec<Cookie>> {
        let result = self.cmd(reqwest::Method::GET, "cookie", None).await;
        let value = self
            .on_page("reading the cookies".to_owned(), result)
            .await?;
        serde_json::from_value(value.clone())
            .with_context(|| format!("reading the cookies: unexpected answer {value}"))
    }

    /// Saves a PNG screenshot of the viewport to `path` (creating its directory) and returns
    /// the PNG's bytes.
    pub async fn screenshot(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let path = path.as_ref();
        let result = self.cmd(reqwest::Method::GET, "screenshot", None).await;
        let encoded = string(
            self.on_page("taking a screenshot".to_owned(), result)
                .await?,
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .context("decoding the screenshot's base64")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, &png).with_context(|| format!("writing {}", path.display()))?;
        Ok(png)
    }

    /// Resizes the window to `width` × `height` CSS pixels (a phone's width, say).
    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<()> {
        let body = json!({ "width": width, "height": height });
        let result = self
            .cmd(reqwest::Method::POST, "window/rect", Some(body))
            .await;
        self.on_page(format!("resizing the window to {width}x{height}"), result)
            .await
            .map(drop)
    }

    async fn element_text(&self, element: &Element) -> Result<String> {
        let path = format!("element/{}/text", element.id);
        string(self.cmd(reqwest::Method::GET, &path, None).await?)
    }

    /// Command `path` of this session (`url`, `element/<id>/click`, …): its `value`.
    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        request(&self.http, method, &url, body).await
    }

    /// `result`, its error saying what was being done (`what`) and on which page.
    async fn on_page<T>(&self, what: String, result: Result<T>) -> Result<T> {
        match result {
            Ok(value) => Ok(value),
            Err(err) => Err(err.context(format!("{what} on {}", self.here().await))),
        }
    }

    /// The current page's URL for an error message (what went wrong reading it, if it did).
    async fn here(&self) -> String {
        match self.cmd(reqwest::Method::GET, "url", None).await {
            Ok(Value::String(url)) => url,
            Ok(other) => format!("<unexpected URL {other}>"),
            Err(err) => format!("<unknown page: {err:#}>"),
        }
    }
}

impl Drop for Browser {
    /// Ends the session, which closes Chromium, with a plain blocking request (no runtime is
    /// needed, and a test that failed still cleans up); chromedriver is killed afterwards.
    fn drop(&mut self) {
        let _ = delete_session(self.port, &self.session);
    }
}

/// `DELETE /session/<id>` over a bare TCP connection, bounded to a few seconds.
fn delete_session(port: u16, session: &str) -> std::io::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    // chromedriver answers once Chromium has quit (and may keep the connection open): read
    // up to the end of the answer's body.
    let mut answer = Vec::new();
    let mut chunk = [0; 1024];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        answer.extend_from_slice(&chunk[..n]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if answer.len() >= end + 4 + length {
                return Ok(());
            }
        }
    }
}

/// The program at `default` (or `$env`), or an error saying how to install it.
fn binary(env: &str, default: &str) -> Result<PathBuf> {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    if !path.is_file() {
        bail!(
            "{} not found (set {env} to use another): the browser tests need Debian's \
             `chromium chromium-driver`, which `.ci/run` installs \
             (apt-get install chromium chromium-driver)",
            path.display()
        );
    }
    Ok(path)
}

/// Runs chromedriver on a free port and waits (up to [`READY`]) for `GET /status` to say it
/// is ready. Its log goes to `chromedriver.log` in `dir`.
async fn start_driver(http: &reqwest::Client, program: &Path, dir: &Path) -> Result<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .context("finding a free port for chromedriver")?
        .port();
    let mut driver = Command::new(program)
        .arg(format!("--port={port}"))
        .arg(format!(
            "--log-path={}",
            dir.join("chromedriver.log").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let status = format!("http://127.0.0.1:{port}/status");
    let deadline = Instant::now() + READY;
    loop {
        if let Some(exit) = driver.try_wait()? {
            bail!(
                "chromedriver on port {port} exited ({exit}) before it was ready; its log: {}",
                log_tail(dir)
            );
        }
        if let Ok(answer) = request(http, reqwest::Method::GET, &status, None).await
            && answer["ready"] == Value::Bool(true)
        {
            return Ok((driver, port));
        }
        if Instant::now() >= deadline {
            bail!(
                "chromedriver on port {port} did not say it was ready (GET /status) within \
                 {READY:?}; its log: {}",
                log_tail(dir)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The end of chromedriver's log in `dir`, for an error message.
fn log_tail(dir: &Path) -> String {
    match std::fs::read_to_string(dir.join("chromedriver.log")) {
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(err) => format!("<none: {err}>"),
    }
}

/// One WebDriver request: the answer's `value`, or an error with WebDriver's error code and
/// message.
async fn request(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Value> {
    let mut builder = http.request(method.clone(), url);
    if let Some(body) = body {
        builder = builder.json(&body);
    }
    let response = builder
        .send()
        .await
        .with_context(|| format!("WebDriver {method} {url}"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("WebDriver {method} {url}: reading the answer"))?;
    let mut answer: Value = serde_json::from_str(&text)
        .with_context(|| format!("WebDriver {method} {url}: {status}, not JSON: {text}"))?;
    let value = answer["value"].take();
    if !status.is_success() {
        bail!(
            "WebDriver {method} {url}: {status} {}: {}",
            value["error"].as_str().unwrap_or("?"),
            value["message"].as_str().unwrap_or(&text)
        );
    }
    Ok(value)
}

fn string(value: Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(anyhow!("expected a string from WebDriver, got {other}")),
    }
}
