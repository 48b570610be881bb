//! PostgreSQL, when `BUB_DATABASE_URL` names one: where replicas keep the state they share.
//! Without it nothing here runs, and nothing of it is in memory; without the `postgres` feature
//! none of it is built (`absent.rs` stands in).
//!
//! One [`Database`] per process, URL and runtime ([`Database::shared`]): pools of connections
//! made on the caller's runtime, which every store (the tape, jobs, usage, documents, the
//! inbox) awaits directly. Creating one does no I/O: connections are made when first used.
//! The schema is versioned and migrated at start ([`migrate`]).
//!
//! TLS: `sslmode=prefer` (the default) or `require` in the URL uses rustls with the webpki
//! roots, so a server's certificate must chain to a public root; `sslmode=disable` turns it
//! off. The URL's password is a secret: it is never logged, and errors name the server by
//! host, port and database only ([`Database::label`]).

mod document;
mod lease;
mod lock;
pub mod migrate;
pub mod replica;

use std::collections::HashMap;
use std::future::Future;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use anyhow::Context as _;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

pub use lease::{Leases, NOTICES};
pub use lock::SessionLock;
pub use migrate::{NewerSchema, SchemaStatus};
pub use replica::{Replica, ReplicaRow};

/// The advisory lock of the scheduler: one owner among the replicas ("bub" in ASCII, then 2).
pub(crate) const SCHEDULER_LOCK: i64 = 0x0062_7562_0000_0002;
/// The advisory lock of Telegram's long polling: one poller among the replicas.
pub(crate) const TELEGRAM_POLL_LOCK: i64 = 0x0062_7562_0000_0004;
/// The advisory lock of Discord's gateway: one gateway session among the replicas.
pub(crate) const DISCORD_GATEWAY_LOCK: i64 = 0x0062_7562_0000_0005;
/// The advisory lock of the heartbeat: one replica beats.
pub(crate) const HEARTBEAT_LOCK: i64 = 0x0062_7562_0000_0006;

/// Connections one process keeps open at most.
const POOL_SIZE: usize = 8;

/// A pooled connection.
pub type Client = deadpool_postgres::Object;

/// A PostgreSQL database and the pool that reaches it.
pub struct Database {
    /// Where the pools connect (and [`Leases`] with a connection of its own).
    config: tokio_postgres::Config,
    pool: Pool,
    relaxed: Pool,
    label: String,
}

/// The databases open in this process, by URL and runtime (one pool each; dropped with their
/// last user). A pool's connections are tasks of the runtime that made them: another runtime
/// (a test's, after the one that made them ended) gets pools of its own.
static OPEN: LazyLock<Mutex<HashMap<Key, Weak<Database>>>> = LazyLock::new(Mutex::default);

/// What [`OPEN`] is keyed by: the URL and the runtime (`None`: outside one).
type Key = (String, Option<tokio::runtime::Id>);

impl Database {
    /// The database of `url` (`postgres://…`), shared by everything in the process (on the
    /// caller's runtime) that uses it. No connection is made here.
    pub fn shared(url: &str) -> anyhow::Result<Arc<Database>> {
        let key = (
            url.to_owned(),
            tokio::runtime::Handle::try_current().ok().map(|h| h.id()),
        );
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, db| db.strong_count() > 0);
        if let Some(db) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(db);
        }
        let db = Arc::new(Database::new(url)?);
        open.insert(key, Arc::downgrade(&db));
        Ok(db)
    }

    fn new(url: &str) -> anyhow::Result<Database> {
        // The URL is a secret: a parse error must not quote it.
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|_| anyhow::anyhow!("BUB_DATABASE_URL is not a valid PostgreSQL URL"))?;
        let label = label(&config);
        let mut relaxed = config.clone();
        relaxed.options(&match config.get_options() {
            Some(options) => format!("{options} {RELAXED}"),
            None => RELAXED.to_owned(),
        });
        Ok(Database {
            pool: pool(config.clone())?,
            config,
            relaxed: pool(relaxed)?,
            label,
        })
    }

    /// The server, for messages: `host:port/database`, never the password.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether the database answers (a `SELECT 1` through the pool).
    pub async fn ping(&self) -> anyhow::Result<()> {
        client(&self.pool).await?.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// The pool (cheap to clone). A commit returns once it is durable on the server.
    pub fn pool(&self) -> Pool {
        self.pool.clone()
    }

    /// A pool whose commits do not wait for the server's disk (`synchronous_commit=off`): a
    /// crash of Bub loses nothing committed, a crash of the database server may lose its last
    /// moments — what appending to a file without `fsync` promises. For tapes, whose appends
    /// are most of the writes of a turn.
    pub(crate) fn relaxed_pool(&self) -> Pool {
        self.relaxed.clone()
    }
}

/// What the connections of [`Database::relaxed_pool`] are started with.
const RELAXED: &str = "-c synchronous_commit=off";

/// A pool of at most [`POOL_SIZE`] connections to `config`, made when first needed.
fn pool(config: tokio_postgres::Config) -> anyhow::Result<Pool> {
    let manager = Manager::from_config(
        config,
        tls(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .context("cannot build the database pool")
}

/// A connection from `pool` (made when none is idle).
pub async fn client(pool: &Pool) -> anyhow::Result<Client> {
    pool.get()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the database: {e}"))
}

/// Queries through statements prepared once per connection (deadpool's cache): one round trip
/// each, where a query by text costs two (prepare, then run).
pub(crate) trait Cached: deadpool_postgres::GenericClient {
    /// The rows of `sql`.
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        async move { self.query(&self.prepare_cached(sql).await?, params).await }
    }

    /// The one row of `sql` (an error when there is none).
    fn one<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, tokio_postgres::Error>> + Send + 'a {
        async move {
            self.query_one(&self.prepare_cached(sql).await?, params)
                .await
        }
    }

    /// The row of `sql`, if there is one.
    fn opt<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, tokio_postgres::Error>> + Send + 'a {
        async move {
            self.query_opt(&self.prepare_cached(sql).await?, params)
                .await
        }
    }

    /// Runs `sql`; the number of rows it changed.
    fn run<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a {
        async move { self.execute(&self.prepare_cached(sql).await?, params).await }
    }
}

impl<C: deadpool_postgres::GenericClient> Cached for C {}

/// `host:port/database` of `config`.
fn label(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().or(config.get_user()).unwrap_or("");
    format!("{host}:{port}/{db}")
}

/// rustls with the webpki roots (used when the URL's `sslmode` asks for TLS).
fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// The password in `url` (a `postgres://` URL or its `password=` parameter), for the redactor.
pub fn password(url: &str) -> Option<String> {
    let config = tokio_postgres::Config::from_str(url).ok()?;
    let password = config.get_password()?;
    Some(String::from_utf8_lossy(password).into_owned())
}

#[cfg(test)]
#[path = "../../tests/support/postgres.rs"]
pub(crate) mod cluster;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_server_but_never_the_password() {
        let db = Database::shared("postgres://bub:s3cret@db.example:6543/bubdb").unwrap();
        assert_eq!(db.label(), "db.example:6543/bubdb");
        assert_eq!(
            password("postgres://bub:s3cret@db.example/bubdb").as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            password("postgres://bub@db.example/bubdb?password=p%20w").as_deref(),
            Some("p w")
        );
        let again = Database::shared("postgres://bub:s3cret@db.example:6543/bubdb").unwrap();
        assert!(Arc::ptr_eq(&db, &again), "one pool per URL");
        let err = Database::shared("postgres://bub:s3cret@db.example:badport/x").err();
        let err = format!("{:#}", err.expect("a bad URL is an error"));
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[tokio::test]
    async fn only_the_relaxed_pool_skips_waiting_for_the_disk() {
        let db = Database::shared(&cluster::database()).unwrap();
        let show = async |pool: Pool| {
            let client = client(&pool).await.unwrap();
            let row = client.query_one("SHOW synchronous_commit", &[]).await;
            row.unwrap().get::<_, String>(0)
        };
        assert_eq!(show(db.pool()).await, "on");
        assert_eq!(show(db.relaxed_pool()).await, "off");
    }
}
