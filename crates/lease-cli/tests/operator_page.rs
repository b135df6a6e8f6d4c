//! The operator page in a real browser: headless Chromium (Debian's package; `.ci/run`
//! installs it) driven over the DevTools protocol (chromiumoxide), against a real
//! `lease serve` on SQLite. Each test collects the page's console errors, uncaught exceptions
//! and browser log errors (CSP violations, failed loads) and asserts there are none, and keeps a
//! screenshot of each screen under `target/operator-page/`.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::emulation::{
    MediaFeature, SetDeviceMetricsOverrideParams,
};
use chromiumoxide::cdp::browser_protocol::log::{EventEntryAdded, LogEntryLevel};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use serde_json::{Value, json};

use support::{Server, fresh_db, key_secret, lease};

fn chromium() -> PathBuf {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("Chromium is installed (.ci/run installs Debian's `chromium`)")
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join("operator-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A browser with one page whose errors are collected.
struct Session {
    browser: Browser,
    page: Page,
    errors: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    base: String,
    _profile: tempfile::TempDir,
}

impl Session {
    async fn open(addr: &str) -> Session {
        let profile = tempfile::tempdir().unwrap();
        let config = BrowserConfig::builder()
            .chrome_executable(chromium())
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(1280, 900)
            .arg("--disable-gpu")
            .arg("--disable-dev-shm-usage")
            .build()
            .unwrap();
        let (browser, mut handler) = Browser::launch(config).await.expect("Chromium starts");
        let mut tasks = vec![tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if event.is_err() {
                    // A message chromiumoxide cannot parse; the page carries on.
                }
            }
        })];
        let page = browser.new_page("about:blank").await.unwrap();
        page.enable_log().await.unwrap();
        page.enable_runtime().await.unwrap();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let mut console = page
            .event_listener::<EventConsoleApiCalled>()
            .await
            .unwrap();
        let into = Arc::clone(&errors);
        tasks.push(tokio::spawn(async move {
            while let Some(event) = console.next().await {
                if matches!(
                    event.r#type,
                    ConsoleApiCalledType::Error | ConsoleApiCalledType::Assert
                ) {
                    into.lock()
                        .unwrap()
                        .push(format!("console: {:?}", event.args));
                }
            }
        }));
        let mut thrown = page.event_listener::<EventExceptionThrown>().await.unwrap();
        let into = Arc::clone(&errors);
        tasks.push(tokio::spawn(async move {
            while let Some(event) = thrown.next().await {
                into.lock()
                    .unwrap()
                    .push(format!("exception: {:?}", event.exception_details));
            }
        }));
        let mut log = page.event_listener::<EventEntryAdded>().await.unwrap();
        let into = Arc::clone(&errors);
        tasks.push(tokio::spawn(async move {
            while let Some(event) = log.next().await {
                if event.entry.level == LogEntryLevel::Error {
                    into.lock().unwrap().push(format!(
                        "log ({:?}): {} {}",
                        event.entry.source,
                        event.entry.text,
                        event.entry.url.clone().unwrap_or_default()
                    ));
                }
            }
        }));
        Session {
            browser,
            page,
            errors,
            tasks,
            base: format!("http://{addr}"),
            _profile: profile,
        }
    }

    async fn goto(&self, path: &str) {
        self.page
            .goto(format!("{}{path}", self.base))
            .await
            .expect("the page loads");
    }

    /// Moves within the page (a fragment change loads nothing, so `goto` would wait for a
    /// load that never comes).
    /// Checks, at a phone's width, the cell of `table` that holds `text`: one line high (it
    /// used to wrap a letter a line), the whole value in its title and shown on a tap, and the
    /// page no wider than the screen.
    async fn one_line_on_a_phone(&self, table: &str, text: &str) {
        let find = format!(
            "[...document.querySelectorAll('#{table} td.id')].find(td => td.textContent === {})",
            json!(text)
        );
        self.until(&format!("{text} in #{table}"), &format!("!!{find}"))
            .await;
        let height = self
            .eval(&format!("{find}.getBoundingClientRect().height"))
            .await;
        let line = self
            .eval(&format!("parseFloat(getComputedStyle({find}).lineHeight)"))
            .await;
        let (height, line) = (height.as_f64().unwrap(), line.as_f64().unwrap());
        assert!(
            height < 2.5 * line,
            "#{table}: the cell of {text} is {height} px tall, {line} px a line"
        );
        assert_eq!(self.eval(&format!("{find}.title")).await, json!(text));
        assert_eq!(
            self.eval("window.innerWidth <= 390 && document.documentElement.scrollWidth <= window.innerWidth")
                .await,
            json!(true),
            "#{table}: not a phone's width, or the page is wider than the screen"
        );
        // Shortened: the value is wider than what shows of it.
        let clip = format!("{find}.querySelector('.clip')");
        let shortened = format!("{clip}.scrollWidth > {clip}.clientWidth");
        assert_eq!(
            self.eval(&shortened).await,
            json!(true),
            "#{table}: not shortened"
        );
        // A tap shows it whole, on one line, and the page still fits (the table scrolls in
        // its own box); a second tap shortens it again.
        self.eval(&format!("{clip}.click()")).await;
        let whole = format!(
            "{clip}.scrollWidth <= {clip}.clientWidth \
             && document.documentElement.scrollWidth <= window.innerWidth"
        );
        assert_eq!(
            self.eval(&whole).await,
            json!(true),
            "#{table}: a tap does not show the whole of {text}"
        );
        self.eval(&format!("{clip}.click()")).await;
        assert_eq!(
            self.eval(&shortened).await,
            json!(true),
            "#{table}: a second tap"
        );
    }

    async fn visit(&self, hash: &str) {
        self.eval(&format!("location.hash = {}", json!(hash))).await;
    }

    async fn eval(&self, script: &str) -> Value {
        self.page
            .evaluate(script)
            .await
            .unwrap_or_else(|e| panic!("{script}: {e}"))
            .into_value()
            .unwrap_or(Value::Null)
    }

    /// Waits until `script` is true, failing after 5 s.
    async fn until(&self, what: &str, script: &str) {
        self.until_within(what, script, Duration::from_secs(5))
            .await;
    }

    /// Waits until `script` is true, failing after `within`. A script that throws (an element
    /// the page has not drawn yet) counts as not yet; the last error is shown on failure.
    async fn until_within(&self, what: &str, script: &str, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let error = match self.page.evaluate(script).await {
                Ok(value) => {
                    if value.into_value().unwrap_or(Value::Null) == json!(true) {
                        return start.elapsed();
                    }
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            assert!(
                start.elapsed() < within,
                "{what}: not within {within:?} (the last error: {error:?}); the page shows: {}",
                self.eval("document.body.innerText").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the page of job `id`.
    async fn job_page(&self, id: &str) {
        let script = format!(
            "!document.getElementById('job').hidden && document.getElementById('job-id').innerText === {}",
            json!(id)
        );
        self.until("the job's page", &script).await;
    }

    /// Clicks `button`, waits for the confirmation (keeping its screenshot as `shot`, if
    /// named) and confirms. The click goes through the page's script: the live tables above a
    /// form are drawn again as their values change (a waiting time that grows widens its
    /// column, and a wrapped cell then takes another line), so a pointer click aimed at where
    /// the button was may land beside it (CI saw the schedule form's button missed so).
    async fn confirm(&self, button: &str, shot: Option<&str>) {
        self.eval(&format!(
            "document.querySelector({}).click(); true",
            json!(button)
        ))
        .await;
        self.until(
            "the confirmation",
            "document.getElementById('confirm').open",
        )
        .await;
        if let Some(shot) = shot {
            self.screenshot(shot).await;
        }
        self.click("#confirm-yes").await;
    }

    /// Clicks `button` of a table the page draws again on its own (on every event of the
    /// stream, after every action) through the page's script, which finds the button of the
    /// moment (a pointer click may land after the row under it was replaced), then confirms.
    async fn confirm_drawn(&self, button: &str) {
        self.eval(&format!(
            "document.querySelector({}).click(); true",
            json!(button)
        ))
        .await;
        self.until(
            "the confirmation",
            "document.getElementById('confirm').open",
        )
        .await;
        self.click("#confirm-yes").await;
    }

    /// Acts on the job shown with `button`, confirming, and waits for its new `status`.
    async fn act_on_job(&self, button: &str, status: &str, shot: Option<&str>) {
        self.confirm(button, shot).await;
        let script = format!(
            "[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === {})",
            json!(status)
        );
        self.until(&format!("the {status} status"), &script).await;
    }

    /// Makes the window `width` by `height` CSS pixels (a phone's, touch and twice as dense,
    /// when at most 390 wide) in the `scheme` colour scheme (`light` or `dark`).
    async fn looks_like(&self, width: i64, height: i64, scheme: &str) {
        let phone = width <= 390;
        self.page
            .execute(SetDeviceMetricsOverrideParams::new(
                width,
                height,
                if phone { 2.0 } else { 1.0 },
                phone,
            ))
            .await
            .unwrap();
        self.page
            .emulate_media_features(vec![MediaFeature::new("prefers-color-scheme", scheme)])
            .await
            .unwrap();
    }

    async fn click(&self, selector: &str) {
        self.page
            .find_element(selector)
            .await
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {selector}: {e}"));
    }

    async fn sign_in(&self, key: &str) {
        self.goto("/").await;
        self.until(
            "the sign-in form",
            "!document.getElementById('sign-in').hidden",
        )
        .await;
        self.page
            .find_element("#key")
            .await
            .unwrap()
            .click()
            .await
            .unwrap()
            .type_str(key)
            .await
            .unwrap();
        self.click("#sign-in-form button").await;
        self.until(
            "the overview after signing in",
            "!document.getElementById('overview').hidden",
        )
        .await;
    }

    async fn screenshot(&self, name: &str) {
        let path = screenshots().join(format!("{name}.png"));
        self.page
            .save_screenshot(
                ScreenshotParams::builder()
                    .format(CaptureScreenshotFormat::Png)
                    .full_page(true)
                    .build(),
                &path,
            )
            .await
            .unwrap();
    }

    fn assert_no_errors(&self) {
        let errors = self.errors.lock().unwrap().clone();
        assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
    }

    /// Closes the browser, asserting that the page logged no error.
    async fn close(self) {
        // Let late log events arrive.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.assert_no_errors();
        self.close_unchecked().await;
    }

    async fn close_unchecked(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        for task in self.tasks {
            task.abort();
        }
    }
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// The jobs' status through the API.
fn status(server: &Server, key: &str, job: &str) -> String {
    let (code, body) = server.call(
        "GET",
        &format!("/v1/jobs/{}", encode(job)),
        &[("Authorization", &bearer(key))],
        "",
    );
    assert_eq!(code, 200, "{body}");
    body["status"].as_str().unwrap().to_owned()
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_sees_counts_and_a_refused_stale_write_live_pages_the_jobs_and_cancels_one() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let worker = key_secret(&db, "w", "worker");
    let server = Server::start(&db, &["--client-clock"], &[("LEASE_AUDIT", "1")]);
    let auth = bearer(&worker);
    let headers = [("Authorization", auth.as_str())];
    // 120 jobs in `bulk`, one in `mail`.
    let jobs: Vec<Value> = (0..120)
        .map(|i| json!({"id": format!("bulk-{i:03}")}))
        .collect();
    let (code, body) = server.call(
        "POST",
        "/v1/queues/bulk/jobs/batch",
        &headers,
        &json!({ "jobs": jobs }).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    // 1,234 in `big`, to show the thousands separator. (This server trusts caller clocks,
    // for the stale story below, so it keeps the enqueue time a client gives, as the HTTP
    // client does when its caller gives one.)
    let enqueued = now() - 90.0;
    let big: Vec<Value> = (0..1234)
        .map(|i| json!({"id": format!("big-{i}"), "enqueued_at": enqueued}))
        .collect();
    let (code, body) = server.call(
        "POST",
        "/v1/queues/big/jobs/batch",
        &headers,
        &json!({ "jobs": big }).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.call(
        "POST",
        "/v1/queues/mail/jobs",
        &headers,
        r#"{"id":"invoice-42"}"#,
    );
    assert_eq!(code, 201);

    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    session
        .until("the bulk queue's pending count, with a thousands separator where the locale has one", "[...document.querySelectorAll('#queues tbody tr')].some(r => r.cells[0].innerText === 'bulk' && r.cells[1].innerText === '120')")
        .await;
    // Due now and how long the oldest has waited (enqueued through the API: the server
    // knows when), with the viewer's thousands separator.
    session
        .until(
            "the big queue's counts",
            "[...document.querySelectorAll('#queues tbody tr')].some(r => r.cells[0].innerText === 'big' && r.cells[1].innerText === (1234).toLocaleString() && r.cells[2].innerText === (1234).toLocaleString() && r.cells[3].innerText !== '—')",
        )
        .await;
    assert_eq!(
        session.eval("(1234).toLocaleString()").await,
        json!("1,234")
    );
    session.screenshot("1-overview").await;

    // The stale-worker story through the API: A's lease ends, B takes over, A writes late.
    let t = now();
    let claim = |who: &str, at: f64| {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/mail/claims",
            &headers,
            &json!({"ttl": 5, "owner": format!("w/{who}"), "now": at}).to_string(),
        );
        assert_eq!(code, 200, "{body}");
        body["leases"][0].clone()
    };
    let a = claim("a", t - 20.0);
    let b = claim("b", t - 10.0);
    assert_eq!(
        (a["fence"].clone(), b["fence"].clone()),
        (json!(1), json!(2))
    );
    let (code, _) = server.call(
        "POST",
        "/v1/jobs/invoice-42/complete",
        &[
            ("Authorization", &auth),
            ("Lease-Token", b["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": 2, "result": "B's result", "now": t - 9.0}).to_string(),
    );
    assert_eq!(code, 200);
    let refused_at = Instant::now();
    let (code, body) = server.call(
        "POST",
        "/v1/jobs/invoice-42/complete",
        &[
            ("Authorization", &auth),
            ("Lease-Token", a["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": 1, "result": "A's late result", "owner": "w/a", "now": t}).to_string(),
    );
    assert_eq!(
        (code, body["reason"].clone()),
        (409, json!("stale")),
        "{body}"
    );
    // It appears on the page without a reload, within 2 s of the refusal.
    session
        .until_within("the refused write in the table", "[...document.querySelectorAll('#refusals tbody tr')].some(r => r.cells[1].innerText === 'invoice-42' && r.cells[2].innerText === 'w/a' && r.cells[4].innerText === '1' && r.cells[5].innerText === '2' && r.cells[6].innerText === 'stale')",
            Duration::from_secs(2).saturating_sub(refused_at.elapsed()),
        )
        .await;
    assert_eq!(
        session
            .eval("performance.getEntriesByType('navigation').length")
            .await,
        json!(1),
        "no reload"
    );
    session.screenshot("2-refused-write").await;

    // The job table, filtered and paged.
    session.click("nav a[href='#/jobs']").await;
    session
        .until(
            "the jobs section",
            "!document.getElementById('jobs').hidden",
        )
        .await;
    session
        .page
        .find_element("#filter-queue")
        .await
        .unwrap()
        .click()
        .await
        .unwrap()
        .type_str("bulk")
        .await
        .unwrap();
    session
        .eval("document.getElementById('filter-status').value = 'pending'")
        .await;
    session.click("#job-filter button").await;
    let rows = "document.querySelectorAll('#job-table tbody tr').length";
    let first = "document.querySelector('#job-table tbody tr a').innerText";
    session
        .until(
            "a first page of 50",
            &format!("{rows} === 50 && {first} === 'bulk-000'"),
        )
        .await;
    session.screenshot("3-jobs").await;
    session.click("#next-page").await;
    session
        .until(
            "the second page",
            &format!("{rows} === 50 && {first} === 'bulk-050'"),
        )
        .await;
    session.click("#next-page").await;
    session
        .until("the last page", &format!("{rows} === 20 && {first} === 'bulk-100' && document.getElementById('next-page').disabled"))
        .await;

    // A job's page, then cancel it as admin.
    session.click("#job-table tbody tr a").await;
    session.job_page("bulk-100").await;
    assert_eq!(
        session
            .eval("document.getElementById('job-actions').hidden")
            .await,
        json!(false)
    );
    session
        .act_on_job("#cancel-job", "cancelled", Some("4-confirm-cancel"))
        .await;
    assert_eq!(status(&server, &worker, "bulk-100"), "cancelled");
    session.screenshot("5-job-cancelled").await;
    // Retry puts it back in the queue.
    session.act_on_job("#retry-job", "pending", None).await;
    assert_eq!(status(&server, &worker, "bulk-100"), "pending");

    // The stale job's own page: B's result and fence stand, and A's refusal is listed.
    session.visit("#/job/invoice-42").await;
    session
        .until("the stored result and the job's refusals", "[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === \"B's result\") && document.querySelectorAll('#job-refusals tbody tr').length === 1")
        .await;
    // Its attempts on one timeline: A's (fence 1) lost its lease, B's (fence 2) completed,
    // and A's late completion is a mark on A's attempt, after its end.
    session
        .until(
            "the timeline's two attempts",
            "document.querySelectorAll('#job-timeline svg rect.bar').length === 2 && document.querySelectorAll('#job-timeline ol.attempts li').length === 2",
        )
        .await;
    let attempts = session
        .eval("[...document.querySelectorAll('#job-timeline ol.attempts li')].map(li => li.innerText)")
        .await;
    let attempts: Vec<String> = serde_json::from_value(attempts).unwrap();
    assert!(
        attempts[0].starts_with("Fence 1 · w/a · lease lost"),
        "{attempts:?}"
    );
    assert!(
        attempts[0].contains("complete by w/a refused (stale)"),
        "{attempts:?}"
    );
    assert!(
        attempts[1].starts_with("Fence 2 · w/b · done"),
        "{attempts:?}"
    );
    assert_eq!(
        session
            .eval("[...document.querySelectorAll('#job-timeline svg .mark')].map(m => m.dataset.fence)")
            .await,
        json!(["1"]),
        "one refused write, on fence 1's attempt"
    );
    assert_eq!(
        session
            .eval("[...document.querySelectorAll('#job-timeline svg text.label')].map(t => t.textContent)")
            .await,
        json!(["fence 1 · w/a · lease lost", "fence 2 · w/b · done"])
    );
    // The mark comes after fence 1's bar ends (its lease's deadline).
    assert_eq!(
        session
            .eval("(() => { const bar = document.querySelector('#job-timeline rect.bar[data-fence=\"1\"]').getBBox(); const mark = document.querySelector('#job-timeline .mark').getBBox(); return mark.x > bar.x + bar.width; })()")
            .await,
        json!(true)
    );
    session.screenshot("6-job-with-refusal").await;
    assert_eq!(
        session
            .eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true),
        "the job page scrolls sideways on a 1280-pixel desktop"
    );
    // On a phone, dark: the timeline fits the screen.
    session.looks_like(390, 844, "dark").await;
    session
        .until(
            "the job page on a phone, without sideways scrolling",
            "window.innerWidth <= 390 && getComputedStyle(document.body).backgroundColor === 'rgb(17, 19, 21)' && document.documentElement.scrollWidth <= window.innerWidth && document.querySelector('#job-timeline svg').getBoundingClientRect().right <= window.innerWidth",
        )
        .await;
    session.screenshot("6a-timeline-phone-dark").await;
    session.looks_like(1280, 900, "light").await;
    // Back on the overview, the mail queue's chart counts B's completion and A's refusal.
    session.click("nav a[href='#/']").await;
    session
        .until(
            "the mail queue's chart",
            "[...document.querySelectorAll('#queues tbody tr')].some(r => r.cells[0].innerText === 'mail' && r.cells[8].querySelector('svg title').textContent === 'last hour: 1 completed, 0 failed, 0 dead, 0 cancelled, 1 refused' && r.cells[8].querySelectorAll('rect').length === 2)",
        )
        .await;
    session.screenshot("6b-overview-with-activity").await;
    // Purge the done jobs last changed before now: invoice-42 goes; the API no longer has it.
    session
        .eval("document.getElementById('purge-age').value = '0'")
        .await;
    session.confirm("#purge-form button", None).await;
    session
        .until(
            "the purge's answer",
            "document.getElementById('status-line').innerText === 'Purged 1 job.'",
        )
        .await;
    let (code, _) = server.call(
        "GET",
        "/v1/jobs/invoice-42",
        &[("Authorization", &bearer(&worker))],
        "",
    );
    assert_eq!(code, 404, "the purged job is gone");
    // The page logged nothing wrong up to here (the browser reports the stream's end below).
    session.assert_no_errors();
    // SIGTERM while the page's event stream is open: the stream ends and the server drains
    // at once (it would otherwise wait out the stream, 5 minutes).
    let (code, log) = server
        .stop_within(Duration::from_secs(5))
        .expect("the server stops within 5 s with an event stream open");
    assert_eq!(code, Some(0), "{log}");
    session.close_unchecked().await;
}

/// Percent-encodes a value for the page's URL (every byte but letters, digits and `-._~`).
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_has_no_actions_and_a_forged_cross_site_request_is_refused() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let viewer = key_secret(&db, "look", "viewer");
    assert_eq!(
        lease(&db, &["enqueue", "target", "--queue", "mail"])
            .status
            .code(),
        Some(0)
    );
    // A 60-character id in a 60-character queue, which used to make columns 30 lines tall on
    // a phone.
    let long_id = format!("report-{}", "0123456789abcdef".repeat(4))[..60].to_owned();
    let long_queue = format!("exports-{}", "fedcba9876543210".repeat(4))[..60].to_owned();
    assert_eq!(
        lease(&db, &["enqueue", &long_id, "--queue", &long_queue])
            .status
            .code(),
        Some(0)
    );
    let server = Server::start(&db, &[], &[]);

    let session = Session::open(&server.addr).await;
    session.sign_in(&viewer).await;
    // The audit trail is off: the page says how to turn it on.
    session
        .until("the note on the audit trail", "!document.getElementById('audit-off').hidden && document.getElementById('audit-off').innerText.includes('--audit')")
        .await;
    session.screenshot("7-viewer-overview").await;
    // On a phone, in a dark theme: the page follows the system's colours, and nothing but
    // the tables' own scrolling areas is wider than the screen.
    session
        .page
        .execute(SetDeviceMetricsOverrideParams::new(390, 844, 2.0, true))
        .await
        .unwrap();
    session
        .page
        .emulate_media_features(vec![MediaFeature::new("prefers-color-scheme", "dark")])
        .await
        .unwrap();
    session
        .until(
            "the dark theme",
            "getComputedStyle(document.body).backgroundColor === 'rgb(17, 19, 21)'",
        )
        .await;
    assert_eq!(
        session
            .eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true),
        "the page is wider than a phone's screen"
    );
    // On the phone the long queue name (overview) and the long id (its jobs) keep their rows
    // one line high, the whole value is the cell's title and shows in full on a tap, and the
    // tables scroll in their own boxes.
    session.one_line_on_a_phone("queues", &long_queue).await;
    session.screenshot("7b-viewer-overview-phone-dark").await;
    // A full-page screenshot ends the device override: the phone again.
    session
        .page
        .execute(SetDeviceMetricsOverrideParams::new(390, 844, 2.0, true))
        .await
        .unwrap();
    session
        .visit(&format!("#/jobs?queue={}", urlencode(&long_queue)))
        .await;
    session.one_line_on_a_phone("job-table", &long_id).await;
    session.screenshot("7c-viewer-jobs-phone-long-id").await;
    session
        .page
        .execute(SetDeviceMetricsOverrideParams::new(1280, 900, 1.0, false))
        .await
        .unwrap();
    session
        .page
        .emulate_media_features(vec![MediaFeature::new("prefers-color-scheme", "light")])
        .await
        .unwrap();
    session.visit("#/job/target").await;
    session.job_page("target").await;
    let visible_buttons = "[...document.querySelectorAll('button')].filter(b => b.offsetParent !== null).map(b => b.innerText)";
    assert_eq!(session.eval(visible_buttons).await, json!(["Sign out"]));
    session.screenshot("8-viewer-job").await;
    session.close().await;

    // An admin signed in, then a page of another origin (same site: another port of
    // 127.0.0.1, so the SameSite=Strict cookie is still sent) posts a form to cancel.
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    let evil = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let evil_addr = evil.local_addr().unwrap();
    let form = format!(
        "<!doctype html><form id=f method=post action='http://{}/v1/jobs/target/cancel'></form><script>document.getElementById('f').submit()</script>",
        server.addr
    );
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in evil.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut buffer = [0_u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
                form.len()
            );
        }
    });
    let attacker = session.browser.new_page("about:blank").await.unwrap();
    attacker.goto(format!("http://{evil_addr}/")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let answer = loop {
        let shown: Value = attacker
            .evaluate("document.body ? document.body.innerText : ''")
            .await
            .unwrap()
            .into_value()
            .unwrap_or(Value::Null);
        if shown.as_str().is_some_and(|s| s.contains("\"status\"")) {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "the forged form was not answered: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(answer.as_str().unwrap().contains("\"csrf\""), "{answer}");
    assert_eq!(
        status(&server, &admin, "target"),
        "pending",
        "nothing changed"
    );
    // The same request from the page itself, with the session's token, is taken.
    session.visit("#/job/target").await;
    session.job_page("target").await;
    // (The screenshot also makes the tab paint again after the other tab closed; a click
    // sent before that paint is never answered.)
    session.screenshot("8b-admin-job-after-the-forgery").await;
    session
        .act_on_job("#cancel-job", "cancelled", Some("8c-admin-confirms"))
        .await;
    session.close().await;
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_job_ids_results_and_payloads_render_as_text_a_sealed_payload_and_result_by_their_key_and_a_trace()
 {
    use base64::Engine;
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let hostile = [
        "<img src=x onerror=alert(1)>",
        "\"><script>alert(2)</script>",
        "a/b c?d#e&f=%41",
    ];
    let server = Server::start(&db, &["--client-clock"], &[]);
    let auth = bearer(&admin);
    for id in hostile {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/x/jobs",
            &[("Authorization", &auth)],
            &json!({"id": id, "payload": "<b>bold</b>"}).to_string(),
        );
        assert_eq!(code, 201, "{body}");
    }
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    session.visit("#/jobs?queue=x").await;
    session
        .until(
            "three rows",
            "document.querySelectorAll('#job-table tbody tr').length === 3",
        )
        .await;
    let shown = session
        .eval(
            "[...document.querySelectorAll('#job-table tbody tr a')].map(a => a.innerText).sort()",
        )
        .await;
    let mut expected: Vec<&str> = hostile.to_vec();
    expected.sort_unstable();
    assert_eq!(shown, json!(expected));
    assert_eq!(
        session
            .eval("document.querySelectorAll('main img, main script, main b').length")
            .await,
        json!(0)
    );
    session.screenshot("9-hostile-ids").await;
    for id in hostile {
        session.visit(&format!("#/job/{}", encode(id))).await;
        session.job_page(id).await;
        assert_eq!(
            session
                .eval("[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === '<b>bold</b>')")
                .await,
            json!(true)
        );
        assert_eq!(
            session
                .eval("document.querySelectorAll('main img, main script, main b').length")
                .await,
            json!(0)
        );
    }
    // A sealed payload is shown by its key's name, never as its bytes.
    let mut sealed = lease_domain::sealed_payload_header("ops-2026");
    sealed.extend([0x41u8; 40]);
    let (code, body) = server.call(
        "POST",
        "/v1/queues/x/jobs",
        &[("Authorization", &auth)],
        &json!({"id": "sealed", "priority": 10, "payload_base64": base64::engine::general_purpose::STANDARD.encode(&sealed)}).to_string(),
    );
    assert_eq!(code, 201, "{body}");
    // Its worker stores a sealed result.
    let (code, body) = server.call(
        "POST",
        "/v1/queues/x/claims",
        &[("Authorization", &auth)],
        &json!({"ttl": 60, "owner": "ops"}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    let lease = &body["leases"][0];
    assert_eq!(lease["id"], "sealed");
    // ... and, sealing results, its progress and a checkpoint sealed too.
    let sealed_text = "lease-sealed:v1:ops-2026:QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ==";
    for (route, body) in [
        (
            "progress",
            json!({"fence": lease["fence"], "progress": sealed_text}),
        ),
        (
            "checkpoints",
            json!({"fence": lease["fence"], "name": "fetch", "value": sealed_text}),
        ),
    ] {
        let (code, answer) = server.call(
            "POST",
            &format!("/v1/jobs/sealed/{route}"),
            &[
                ("Authorization", &auth),
                ("Lease-Token", lease["lease_token"].as_str().unwrap()),
            ],
            &body.to_string(),
        );
        assert_eq!(code, 200, "{route}: {answer}");
    }
    let (code, body) = server.call(
        "POST",
        "/v1/jobs/sealed/complete",
        &[
            ("Authorization", &auth),
            ("Lease-Token", lease["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": lease["fence"], "result": "lease-sealed:v1:ops-2026:QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ=="}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    session.visit("#/job/sealed").await;
    session.job_page("sealed").await;
    assert_eq!(
        session
            .eval("[...document.querySelectorAll('#job-fields dd')].filter(d => d.innerText === 'encrypted (key ops-2026)').length === 3 && document.querySelector('#job-fields .checkpoints pre').innerText === 'encrypted (key ops-2026)' && !document.querySelector('main').innerText.includes('QUFB')")
            .await,
        json!(true)
    );
    // A job enqueued inside a trace shows the trace and the span that enqueued it.
    let (code, body) = server.call(
        "POST",
        "/v1/queues/x/jobs",
        &[
            ("Authorization", &auth),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        ],
        &json!({"id": "traced"}).to_string(),
    );
    assert_eq!(code, 201, "{body}");
    session.visit("#/job/traced").await;
    session.job_page("traced").await;
    assert_eq!(
        session
            .eval("[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === '4bf92f3577b34da6a3ce929d0e0e4736 (enqueued by span 00f067aa0ba902b7)')")
            .await,
        json!(true)
    );
    // A dead job can be cancelled from its page (it keeps its record, and frees its group).
    let (code, body) = server.call(
        "POST",
        "/v1/queues/dead/jobs",
        &[("Authorization", &auth)],
        &json!({"id": "buried"}).to_string(),
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = server.call(
        "POST",
        "/v1/queues/dead/claims",
        &[("Authorization", &auth)],
        &json!({"ttl": 60, "owner": "ops"}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    let lease = &body["leases"][0];
    let (code, body) = server.call(
        "POST",
        "/v1/jobs/buried/fail",
        &[
            ("Authorization", &auth),
            ("Lease-Token", lease["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": lease["fence"], "error": "bad invoice", "retry": false}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    session.visit("#/job/buried").await;
    session.job_page("buried").await;
    assert_eq!(
        session
            .eval("!document.getElementById('cancel-job').disabled && !document.getElementById('retry-job').disabled")
            .await,
        json!(true),
        "a dead job's cancel and retry buttons are enabled"
    );
    session.close().await;
}

/// Flow control and schedules from the page: an admin pauses a queue (confirmed) and claims
/// lease nothing from it, resumes it, sets its limit, makes a schedule and removes it; a job's
/// progress shows on its page. Each change is checked through the API, not only on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pauses_limits_and_schedules_from_the_page_and_a_job_shows_its_progress() {
    let (_dir, db) = fresh_db();
    // A store restored once: its fences are in epoch 1, which the job's page shows.
    assert_eq!(lease(&db, &["epoch", "--raise"]).status.code(), Some(0));
    let admin = key_secret(&db, "ops", "admin");
    let worker = key_secret(&db, "w", "worker");
    for id in ["m1", "m2", "m3"] {
        let group = format!("acct-{id}");
        assert_eq!(
            lease(&db, &["enqueue", id, "--queue", "mail", "--group", &group])
                .status
                .code(),
            Some(0)
        );
    }
    let server = Server::start(&db, &[], &[]);
    let (admin_auth, worker_auth) = (bearer(&admin), bearer(&worker));
    let as_admin = [("Authorization", admin_auth.as_str())];
    let as_worker = [("Authorization", worker_auth.as_str())];
    let claim = |limit: u32| {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/mail/claims",
            &as_worker,
            &json!({"ttl": 60, "owner": "w", "limit": limit}).to_string(),
        );
        assert_eq!(code, 200, "{body}");
        body["leases"].as_array().unwrap().clone()
    };
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    // The row may not be drawn yet when the first check runs (the table comes with the
    // stream's first event): an absent row reads as '', never as a script error.
    let mail_flow = "([...document.querySelectorAll('#queues tbody tr')].find(r => r.cells[0].innerText === 'mail')?.cells[9].innerText ?? '')";
    session
        .until(
            "the mail queue, running freely",
            &format!("{mail_flow} === '—'"),
        )
        .await;
    // The table is drawn again on every event of the stream: click through the page's own
    // script, which finds the button of the moment.
    let pause_button =
        "document.querySelector('#queues button[data-queue=\"mail\"]').click(); true";
    session.eval(pause_button).await;
    session
        .until(
            "the confirmation",
            "document.getElementById('confirm').open",
        )
        .await;
    session.screenshot("9-admin-pauses-a-queue").await;
    session.click("#confirm-yes").await;
    session
        .until(
            "the mail queue, paused",
            &format!("{mail_flow} === 'paused'"),
        )
        .await;
    let (_, queues) = server.call("GET", "/v1/queues", &as_admin, "");
    assert_eq!(queues["queues"][0]["paused"], true, "{queues}");
    assert!(
        claim(1).is_empty(),
        "a queue paused from the page leased a job"
    );
    session.eval(pause_button).await;
    session
        .until(
            "the confirmation",
            "document.getElementById('confirm').open",
        )
        .await;
    session.click("#confirm-yes").await;
    session
        .until("the mail queue, resumed", &format!("{mail_flow} === '—'"))
        .await;
    // A limit of 2, one job a group, groups in order and in turn, all from the form (each
    // job of the mail queue is in a group of its own).
    session
        .eval("document.getElementById('limit-queue').value = 'mail'; document.getElementById('limit-concurrency').value = '2'; document.getElementById('limit-per-group').value = '1'; document.getElementById('limit-ordered').value = 'yes'; document.getElementById('limit-fair').value = 'yes'; document.getElementById('limit-rate').value = '1000/1h'; document.getElementById('limit-rate-per-group').value = '100/1h'")
        .await;
    session.confirm("#limit-form button", None).await;
    session
        .until(
            "the mail queue's limits",
            &format!("{mail_flow}.startsWith('≤ 2') && {mail_flow}.includes('≤ 1 a group, groups in order, groups served in turn, ≤ 1000/1h, ≤ 100/1h a group')"),
        )
        .await;
    let (_, queues) = server.call("GET", "/v1/queues", &as_admin, "");
    assert_eq!(
        (
            &queues["queues"][0]["per_group"],
            &queues["queues"][0]["ordered"],
            &queues["queues"][0]["rate"],
            &queues["queues"][0]["rate_per_group"],
            &queues["queues"][0]["fair"]
        ),
        (
            &json!(1),
            &json!(true),
            &json!("1000/1h"),
            &json!("100/1h"),
            &json!(true)
        ),
        "{queues}"
    );
    // One group paused from the page, and resumed.
    session
        .eval("document.getElementById('group-queue').value = 'mail'; document.getElementById('group-name').value = 'acct-m1'; document.getElementById('group-action').value = 'pause'")
        .await;
    session.confirm("#group-form button", None).await;
    session
        .until(
            "the mail queue's paused group",
            &format!("{mail_flow}.includes('group acct-m1 paused')"),
        )
        .await;
    let (_, queues) = server.call("GET", "/v1/queues", &as_admin, "");
    assert_eq!(
        queues["queues"][0]["paused_groups"],
        json!([{"group": "acct-m1", "until": null}]),
        "{queues}"
    );
    // The busiest groups show it paused, and its row's button resumes it.
    let busiest = "document.querySelector('#groups tbody').textContent";
    session
        .until(
            "the paused group among the busiest",
            &format!("{busiest}.includes('acct-m1') && {busiest}.includes('paused')"),
        )
        .await;
    let (_, groups) = server.call("GET", "/v1/queues/mail/groups", &as_admin, "");
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == "acct-m1" && g["paused"] == true),
        "{groups}"
    );
    session
        .confirm("#groups button[data-group='acct-m1']", None)
        .await;
    session
        .until(
            "the mail queue's group resumed",
            &format!("!{mail_flow}.includes('paused')"),
        )
        .await;
    let leases = claim(3);
    assert_eq!(
        leases.len(),
        2,
        "a claim for 3 past a limit of 2 set on the page"
    );
    // On a desktop (1280 pixels) the overview fits without sideways scrolling, with every
    // column in sight: a long queue name, a pause until a time, a limit and a timeout.
    let long_queue = "notifications-for-enterprise-customers";
    assert_eq!(
        lease(&db, &["enqueue", "n1", "--queue", long_queue])
            .status
            .code(),
        Some(0)
    );
    for (path, body) in [
        (
            format!("/v1/queues/{long_queue}/pause"),
            json!({"until": now() + 86_400.0}),
        ),
        (
            format!("/v1/queues/{long_queue}/limits"),
            json!({"concurrency": 25, "timeout": 3600}),
        ),
    ] {
        let method = if path.ends_with("limits") {
            "PUT"
        } else {
            "POST"
        };
        let (code, body) = server.call(method, &path, &as_admin, &body.to_string());
        assert_eq!(code, 200, "{body}");
    }
    session
        .page
        .execute(SetDeviceMetricsOverrideParams::new(1280, 900, 1.0, false))
        .await
        .unwrap();
    let long_flow = format!(
        "([...document.querySelectorAll('#queues tbody tr')].find(r => r.cells[0].innerText === '{long_queue}')?.cells[9].innerText ?? '')"
    );
    session
        .until(
            "the long queue's flow control",
            &format!("{long_flow}.includes('timeout')"),
        )
        .await;
    session.screenshot("9b-overview-on-a-desktop").await;
    let box_fits = "(() => { const b = document.querySelector('#overview .scroll'); return b.scrollWidth <= b.clientWidth; })()";
    assert_eq!(
        (
            session
                .eval("document.documentElement.scrollWidth <= window.innerWidth")
                .await,
            session.eval(box_fits).await,
        ),
        (json!(true), json!(true)),
        "the overview scrolls sideways on a 1280-pixel desktop"
    );
    // A schedule from the form: listed with its next tick, then removed.
    session
        .eval("document.getElementById('schedule-name').value = 'nightly'; document.getElementById('schedule-cron').value = '0 3 * * *'; document.getElementById('schedule-zone').value = 'Europe/Paris'; document.getElementById('schedule-queue').value = 'reports'")
        .await;
    session.confirm("#schedule-form button", None).await;
    let row = "[...document.querySelectorAll('#schedules tbody tr')].find(r => r.cells[0].innerText === 'nightly')";
    session
        .until(
            "the schedule with its next tick",
            &format!("!!{row} && {row}.cells[1].innerText === '0 3 * * * (Europe/Paris)' && {row}.cells[5].innerText !== '—'"),
        )
        .await;
    session.screenshot("10-admin-schedules-and-limits").await;
    let (_, schedules) = server.call("GET", "/v1/schedules", &as_admin, "");
    assert_eq!(
        schedules["schedules"][0]["zone"], "Europe/Paris",
        "{schedules}"
    );
    // Run now: the schedule's job once, outside its ticks.
    session
        .confirm_drawn("#schedules tbody tr:first-child button[data-run]")
        .await;
    session
        .until(
            "the run's job",
            "document.getElementById('status-line').innerText.includes('enqueued in queue reports')",
        )
        .await;
    let (code, reports) = server.call("GET", "/v1/jobs?queue=reports", &as_admin, "");
    assert_eq!(code, 200, "{reports}");
    let ran = reports["jobs"].as_array().unwrap();
    assert!(
        ran.len() == 1 && ran[0]["id"].as_str().unwrap().starts_with("nightly@run-"),
        "{reports}"
    );
    // A cron expression the calendar cannot read is refused, and the page says why.
    session
        .eval("document.getElementById('schedule-name').value = 'bad'; document.getElementById('schedule-cron').value = '61 * * * *'")
        .await;
    session.confirm("#schedule-form button", None).await;
    session
        .until(
            "the refusal of a bad cron expression",
            "document.getElementById('status-line').innerText.includes('cron')",
        )
        .await;
    session
        .confirm_drawn("#schedules tbody tr:first-child button[data-remove]")
        .await;
    session
        .until(
            "no schedule",
            "!document.getElementById('no-schedules').hidden",
        )
        .await;
    let (_, schedules) = server.call("GET", "/v1/schedules", &as_admin, "");
    assert_eq!(schedules["schedules"], json!([]));
    // A running job's progress on its page.
    let lease = &leases[0];
    let id = lease["id"].as_str().unwrap();
    let (code, body) = server.call(
        "POST",
        &format!("/v1/jobs/{id}/progress"),
        &[
            ("Authorization", worker_auth.as_str()),
            ("Lease-Token", lease["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": lease["fence"], "ttl": 60, "progress": "12 of 40 files"}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    // And a step it kept.
    let (code, body) = server.call(
        "POST",
        &format!("/v1/jobs/{id}/checkpoints"),
        &[
            ("Authorization", worker_auth.as_str()),
            ("Lease-Token", lease["lease_token"].as_str().unwrap()),
        ],
        &json!({"fence": lease["fence"], "name": "extract", "value": "rows=1200"}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    session.visit(&format!("#/job/{id}")).await;
    session.job_page(id).await;
    session
        .until(
            "the job's progress",
            "[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === '12 of 40 files')",
        )
        .await;
    session
        .until(
            "the job's fence, with its epoch",
            "[...document.querySelectorAll('#job-fields dt')].some(t => t.innerText === 'Fence' && t.nextElementSibling.innerText.endsWith('(epoch 1, #1)'))",
        )
        .await;
    session
        .until(
            "the job's group",
            &format!("[...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === 'acct-{id}')"),
        )
        .await;
    session
        .until(
            "the job's checkpoint, its name, value and fence",
            "[...document.querySelectorAll('#job-fields ul.checkpoints li')].some(li => li.innerText.includes('extract') && li.innerText.includes('rows=1200') && li.innerText.includes('fence'))",
        )
        .await;
    session.screenshot("11-job-progress").await;
    // A job that runs after another: its page links its parent with the parent's status,
    // and the overview counts it beside its queue's pending jobs.
    for body in [
        json!({"id": "wf-parent"}),
        json!({"id": "wf-child", "after": ["wf-parent"], "on_parent_failure": "run"}),
    ] {
        let (code, answer) =
            server.call("POST", "/v1/queues/flow/jobs", &as_admin, &body.to_string());
        assert_eq!(code, 201, "{answer}");
    }
    session.visit("#/job/wf-child").await;
    session.job_page("wf-child").await;
    session
        .until(
            "the child's parent, linked, with its status, and its policy",
            "[...document.querySelectorAll('#job-fields ul.parents li')].some(li => li.querySelector('a')?.getAttribute('href') === '#/job/wf-parent' && li.innerText.includes('pending')) && [...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === 'runs anyway') && [...document.querySelectorAll('#job-fields dd')].some(d => d.innerText === 'waiting')",
        )
        .await;
    session.screenshot("12-job-after-its-parent").await;
    session.visit("#/job/wf-parent").await;
    session.job_page("wf-parent").await;
    session
        .until(
            "the parent's child, linked, with its status",
            "[...document.querySelectorAll('#job-fields dt')].some(t => t.innerText === 'Runs before') && [...document.querySelectorAll('#job-fields ul.parents li')].some(li => li.querySelector('a')?.getAttribute('href') === '#/job/wf-child' && li.innerText.includes('waiting'))",
        )
        .await;
    session.click("nav a[href='#/']").await;
    session
        .until(
            "the flow queue's waiting job beside its pending one",
            "[...document.querySelectorAll('#queues tbody tr')].some(r => r.cells[0].innerText === 'flow' && r.cells[1].innerText.includes('+ 1 waiting'))",
        )
        .await;
    // A child the parent's end cancelled names that parent, linked.
    let (code, answer) = server.call(
        "POST",
        "/v1/queues/flow/jobs",
        &as_admin,
        &json!({"id": "wf-child2", "after": ["wf-parent"]}).to_string(),
    );
    assert_eq!(code, 201, "{answer}");
    let (code, answer) = server.call("POST", "/v1/jobs/wf-parent/cancel", &as_admin, "{}");
    assert_eq!(code, 200, "{answer}");
    session.visit("#/job/wf-child2").await;
    session.job_page("wf-child2").await;
    session
        .until(
            "the parent that cancelled the child, linked",
            "[...document.querySelectorAll('#job-fields dt')].some(t => t.innerText === 'Cancelled by' && t.nextElementSibling.querySelector('a')?.getAttribute('href') === '#/job/wf-parent')",
        )
        .await;
    // The one error logged is the refused schedule's answer, which the page showed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let errors = session.errors.lock().unwrap().clone();
    assert!(
        errors.len() == 1 && errors[0].contains("422") && errors[0].ends_with("/v1/schedules/bad"),
        "the page logged other errors: {errors:#?}"
    );
    session.close_unchecked().await;
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// The job list shows each job's group and filters by group and by the id's start, and shows
/// every time as RFC 3339 (UTC, to the second) with its age beside it; the overview's last
/// hour is drawn with its axes, or says a queue was quiet; the limit form is one labelled field
/// per setting, which fits a 1280-px window and a 390-px phone without scrolling sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_list_shows_groups_and_rfc_3339_times_with_their_age_and_the_limit_form_fits() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let server = Server::start(&db, &[], &[]);
    let auth = bearer(&admin);
    let headers = [("Authorization", auth.as_str())];
    for (id, group) in [
        ("inv-1", Some("acme")),
        ("inv-2", None),
        ("pay-1", Some("acme")),
    ] {
        let body = match group {
            Some(g) => json!({"id": id, "group": g}),
            None => json!({"id": id}),
        };
        let (code, body) = server.call(
            "POST",
            "/v1/queues/billing/jobs",
            &headers,
            &body.to_string(),
        );
        assert_eq!(code, 201, "{body}");
    }
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    session.visit("#/jobs?queue=billing").await;
    session
        .until(
            "the three jobs listed",
            "document.querySelectorAll('#job-table tbody tr').length === 3",
        )
        .await;
    let rows = session
        .eval("[...document.querySelectorAll('#job-table tbody tr')].map(r => [r.cells[0].innerText, r.cells[2].innerText, r.cells[7].innerText])")
        .await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows[0][1], json!("acme"), "inv-1's group: {rows:?}");
    assert_eq!(rows[1][1], json!("—"), "inv-2 has no group: {rows:?}");
    // Checked by the page's own regular expressions (the test crate has none).
    let rfc3339_with_age = r"[...document.querySelectorAll('#job-table tbody tr')].every(r => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((now|[0-9.,]+ (ms|s|min|h|d) ago)\)$/.test(r.cells[7].innerText))";
    assert_eq!(
        session.eval(rfc3339_with_age).await,
        json!(true),
        "every time is RFC 3339 with its age: {rows:?}"
    );
    // The filters by group and by the id's start, alone and together, through the form.
    let shown =
        "[...document.querySelectorAll('#job-table tbody tr a')].map(a => a.innerText).join(' ')";
    for (group, prefix, expected) in [
        ("acme", "", "inv-1 pay-1"),
        ("", "inv", "inv-1 inv-2"),
        ("acme", "inv", "inv-1"),
    ] {
        session
            .eval(&format!(
                "document.getElementById('filter-group').value = '{group}'; document.getElementById('filter-prefix').value = '{prefix}'; document.getElementById('job-filter').requestSubmit()"
            ))
            .await;
        session
            .until(
                &format!("the jobs of group '{group}' whose id starts with '{prefix}'"),
                &format!("{shown} === '{expected}' && location.hash.includes('queue=billing')"),
            )
            .await;
    }
    // The last hour: a queue with nothing finished says so; one with a completion is drawn
    // with its axes.
    session.visit("#/").await;
    let last_hour = |queue: &str| {
        format!(
            "[...document.querySelectorAll('#queues tbody tr')].find(r => r.cells[0].innerText === '{queue}')?.cells[8]"
        )
    };
    session
        .until(
            "the quiet queue's last hour",
            &format!(
                "{}?.innerText === 'none in the last hour'",
                last_hour("billing")
            ),
        )
        .await;
    let (code, body) = server.call(
        "POST",
        "/v1/queues/busy/jobs",
        &headers,
        r#"{"id": "busy-1"}"#,
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = server.call("POST", "/v1/queues/busy/claims", &headers, r#"{"ttl": 30}"#);
    assert_eq!(code, 200, "{body}");
    let lease = &body["leases"][0];
    let token = lease["lease_token"].as_str().unwrap();
    let (code, body) = server.call(
        "POST",
        "/v1/jobs/busy-1/complete",
        &[("Authorization", auth.as_str()), ("Lease-Token", token)],
        &json!({"fence": lease["fence"], "result": "ok"}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    // A failure at the last attempt (a failed attempt and a dead job) and a cancel, in the
    // same queue: each in its colour, stacked in this minute.
    for id in ["busy-2", "busy-3"] {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/busy/jobs",
            &headers,
            &json!({ "id": id }).to_string(),
        );
        assert_eq!(code, 201, "{body}");
    }
    let (code, body) = server.call("POST", "/v1/queues/busy/claims", &headers, r#"{"ttl": 30}"#);
    assert_eq!(code, 200, "{body}");
    let lease = &body["leases"][0];
    assert_eq!(lease["id"], json!("busy-2"));
    let token = lease["lease_token"].as_str().unwrap();
    let (code, body) = server.call(
        "POST",
        "/v1/jobs/busy-2/fail",
        &[("Authorization", auth.as_str()), ("Lease-Token", token)],
        &json!({"fence": lease["fence"], "error": "boom", "retry": false}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.call("POST", "/v1/jobs/busy-3/cancel", &headers, "{}");
    assert_eq!(code, 200, "{body}");
    session.visit("#/jobs").await;
    session.visit("#/").await;
    session
        .until(
            "the busy queue's last hour, drawn with its axes",
            &format!(
                "(() => {{ const c = {}; return !!c && ['done', 'failed', 'dead', 'cancelled'].every(k => c.querySelectorAll('svg rect.' + k).length === 1) && c.querySelectorAll('svg rect.refused').length === 0 && [...c.querySelectorAll('svg text.axis')].map(t => t.textContent).join(' ') === '4/min −60 min now'; }})()",
                last_hour("busy")
            ),
        )
        .await;
    assert_eq!(
        session
            .eval(&format!(
                "{}.querySelector('svg title').textContent",
                last_hour("busy")
            ))
            .await,
        json!("last hour: 1 completed, 1 failed, 1 dead, 1 cancelled, 0 refused")
    );
    assert_eq!(
        session
            .eval(
                "[...document.querySelectorAll('#queues thead .legend .key')].map(k => k.innerText)"
            )
            .await,
        json!(["done", "failed", "dead", "cancelled", "refused"]),
        "the chart's legend names each colour"
    );
    // The limit form: every input and select has its own label, and nothing is cut off.
    session.visit("#/").await;
    session
        .until(
            "the limit form",
            "!document.getElementById('limit-form').hidden",
        )
        .await;
    let unlabelled = "[...document.querySelectorAll('#limit-form input, #limit-form select')].filter(i => !i.closest('label') || i.closest('label').querySelector('span').innerText.trim() === '').length";
    assert_eq!(session.eval(unlabelled).await, json!(0));
    let fits = "(() => { const f = document.getElementById('limit-form'); return f.scrollWidth <= f.clientWidth && [...f.querySelectorAll('input, select')].every(i => i.getBoundingClientRect().right <= f.getBoundingClientRect().right + 1) && document.documentElement.scrollWidth <= window.innerWidth; })()";
    assert_eq!(
        session.eval(fits).await,
        json!(true),
        "the limit form at 1280 px"
    );
    session.screenshot("9-limit-form-desktop").await;
    session
        .page
        .execute(SetDeviceMetricsOverrideParams::new(390, 844, 2.0, true))
        .await
        .unwrap();
    session
        .until("the phone's width", "window.innerWidth <= 390")
        .await;
    assert_eq!(
        session.eval(fits).await,
        json!(true),
        "the limit form on a phone"
    );
    session.screenshot("9b-limit-form-phone").await;
    session.close().await;
}

/// An admin retries a queue's 1,000 dead jobs from the job list in one action: the
/// confirmation says how many, the page answers the count, and every one of them is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_retries_a_thousand_dead_jobs_in_one_action_after_a_confirmation_with_the_count() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let server = Server::start(&db, &[], &[]);
    let auth = bearer(&admin);
    let headers = [("Authorization", auth.as_str())];
    // 1,000 jobs of one attempt each, leased for a second: dead once their leases end.
    let jobs: Vec<Value> = (0..1000)
        .map(|i| json!({"id": format!("m-{i:04}"), "max_attempts": 1}))
        .collect();
    let (code, body) = server.call(
        "POST",
        "/v1/queues/mass/jobs/batch",
        &headers,
        &json!({ "jobs": jobs }).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    let mut leased = 0;
    while leased < 1000 {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/mass/claims",
            &headers,
            r#"{"ttl": 1, "limit": 100}"#,
        );
        assert_eq!(code, 200, "{body}");
        let n = body["leases"].as_array().unwrap().len();
        assert!(n > 0, "every job is leased");
        leased += n;
    }
    std::thread::sleep(Duration::from_millis(1100));
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    session.visit("#/jobs?queue=mass&status=dead").await;
    session
        .until(
            "a page of dead jobs",
            "document.querySelectorAll('#job-table tbody tr').length === 50",
        )
        .await;
    session
        .confirm("#bulk-retry", Some("10-bulk-retry-confirm"))
        .await;
    assert_eq!(
        session
            .eval("document.getElementById('confirm-text').innerText")
            .await,
        json!(format!(
            "Retry {} dead jobs of queue “mass”?",
            session
                .eval("(1000).toLocaleString()")
                .await
                .as_str()
                .unwrap()
        ))
    );
    session
        .until(
            "the count retried",
            "document.getElementById('status-line').innerText === `Retried ${(1000).toLocaleString()} of ${(1000).toLocaleString()} dead jobs.`",
        )
        .await;
    session
        .until(
            "no dead job left in the list",
            "!document.getElementById('no-jobs').hidden",
        )
        .await;
    let (code, body) = server.call(
        "GET",
        "/v1/jobs?queue=mass&status=pending&limit=1000",
        &headers,
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["jobs"].as_array().unwrap().len(),
        1000,
        "every job is pending"
    );
    session.screenshot("10b-bulk-retried").await;
    session.close().await;
}

/// A workflow of 20 jobs drawn whole on its root's page: every job a box that links to its
/// page, every dependency a line; on a phone in the dark theme it fits the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_twenty_jobs_is_drawn_whole_with_every_job_a_link() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let server = Server::start(&db, &[], &[]);
    let auth = bearer(&admin);
    let headers = [("Authorization", auth.as_str())];
    // r; a1..a4 after r; b1..b8 after two a's each; c1..c6 after two b's each; z after c1..c6.
    let mut jobs: Vec<(String, Vec<String>)> = vec![("r".to_owned(), vec![])];
    jobs.extend((1..=4).map(|i| (format!("a{i}"), vec!["r".to_owned()])));
    jobs.extend((1..=8).map(|i| {
        let first = (i - 1) % 4 + 1;
        let second = i % 4 + 1;
        (
            format!("b{i}"),
            vec![format!("a{first}"), format!("a{second}")],
        )
    }));
    jobs.extend((1..=6).map(|i| {
        (
            format!("c{i}"),
            vec![format!("b{i}"), format!("b{}", i + 2)],
        )
    }));
    jobs.push(("z".to_owned(), (1..=6).map(|i| format!("c{i}")).collect()));
    assert_eq!(jobs.len(), 20);
    let dependencies: usize = jobs.iter().map(|(_, after)| after.len()).sum();
    for (id, after) in &jobs {
        let (code, body) = server.call(
            "POST",
            "/v1/queues/flow/jobs",
            &headers,
            &json!({ "id": id, "after": after }).to_string(),
        );
        assert_eq!(code, 201, "{body}");
    }
    let session = Session::open(&server.addr).await;
    session.sign_in(&admin).await;
    session.visit("#/job/r").await;
    session.job_page("r").await;
    session
        .until(
            "the workflow's twenty jobs",
            "!document.getElementById('job-workflow').hidden && document.querySelectorAll('#job-graph svg a.node').length === 20",
        )
        .await;
    let links = session
        .eval("[...document.querySelectorAll('#job-graph svg a.node')].map(a => a.getAttribute('href')).sort()")
        .await;
    let mut expected: Vec<String> = jobs.iter().map(|(id, _)| format!("#/job/{id}")).collect();
    expected.sort();
    assert_eq!(links, json!(expected), "every job is a link to its page");
    assert_eq!(
        session
            .eval("document.querySelectorAll('#job-graph svg path.edge').length")
            .await,
        json!(dependencies),
        "every dependency is drawn"
    );
    // Parents above their children: every line runs down the page.
    assert_eq!(
        session
            .eval("[...document.querySelectorAll('#job-graph svg path.edge')].every(p => { const b = p.getBBox(); return b.height > 0; }) && (() => { const y = (id) => document.querySelector(`#job-graph a.node[href='#/job/${id}'] rect`).getBBox().y; return y('r') < y('a1') && y('a1') < y('b1') && y('b1') < y('c1') && y('c1') < y('z'); })()")
            .await,
        json!(true)
    );
    assert_eq!(
        session
            .eval("document.querySelector('#job-graph a.node.current').getAttribute('href')")
            .await,
        json!("#/job/r"),
        "the job shown is marked"
    );
    session.screenshot("13-workflow-graph").await;
    // A node leads to its job's page, which draws the workflow around that job.
    session
        .eval("document.querySelector(\"#job-graph a.node[href='#/job/z']\").dispatchEvent(new MouseEvent('click', {bubbles: true})); true")
        .await;
    session.job_page("z").await;
    session
        .until(
            "z's ancestors, all 20 jobs",
            "document.querySelectorAll('#job-graph svg a.node').length === 20 && document.querySelector('#job-graph a.node.current').getAttribute('href') === '#/job/z'",
        )
        .await;
    session.looks_like(390, 844, "dark").await;
    session
        .until(
            "the workflow on a phone, without sideways scrolling",
            "window.innerWidth <= 390 && document.documentElement.scrollWidth <= window.innerWidth && document.querySelector('#job-graph svg').getBoundingClientRect().right <= window.innerWidth",
        )
        .await;
    session.screenshot("13b-workflow-graph-phone-dark").await;
    session.close().await;
}
