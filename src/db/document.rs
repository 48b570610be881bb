//! Small documents replicas share (`bub_documents`): what one box keeps as a small file under
//! `BUB_HOME` (`access.json`, memory's Markdown files), by the same relative name, read whole
//! and replaced whole. A change is optimistic (`document::Rows`): read the body and its
//! version, let the caller compute the new body, write it only if the version is still the
//! same ([`Database::write_document`]) — else read again and retry — so no lock is held while
//! the caller computes, and no replica's change overwrites
//! another's. Versions come from one sequence: never reused, so a cache can compare them.

use super::{Cached, Database};

impl Database {
    /// The document `name`, with its version; `None` when there is none.
    pub async fn document(&self, name: &str) -> anyhow::Result<Option<(String, i64)>> {
        let client = super::client(&self.pool).await?;
        let row = client
            .opt(
                "SELECT body, version FROM bub_documents WHERE name = $1",
                &[&name],
            )
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// The version of document `name` (0: there is none): cheap, for a cache to compare.
    pub(crate) async fn document_version(&self, name: &str) -> anyhow::Result<i64> {
        let client = super::client(&self.pool).await?;
        let row = client
            .opt(
                "SELECT version FROM bub_documents WHERE name = $1",
                &[&name],
            )
            .await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// The names of the documents that start with `prefix`, sorted.
    pub(crate) async fn document_names(&self, prefix: &str) -> anyhow::Result<Vec<String>> {
        let client = super::client(&self.pool).await?;
        let rows = client
            .rows(
                "SELECT name FROM bub_documents WHERE starts_with(name, $1) ORDER BY name",
                &[&prefix],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Writes document `name` as `body` (`None`: removes it) if it is still at `version`
    /// (`None`: there is none); whether it was written (else another writer came first).
    pub(crate) async fn write_document(
        &self,
        name: &str,
        version: Option<i64>,
        body: Option<String>,
    ) -> anyhow::Result<bool> {
        let client = super::client(&self.pool).await?;
        let rows = match (version, body) {
            (None, Some(body)) => {
                client
                    .run(
                        "INSERT INTO bub_documents (name, body) VALUES ($1, $2) \
                             ON CONFLICT (name) DO NOTHING",
                        &[&name, &body],
                    )
                    .await?
            }
            (Some(v), Some(body)) => {
                client
                    .run(
                        "UPDATE bub_documents SET body = $2, updated_at = now(), \
                             version = nextval('bub_documents_version') \
                             WHERE name = $1 AND version = $3",
                        &[&name, &body, &v],
                    )
                    .await?
            }
            (Some(v), None) => {
                client
                    .run(
                        "DELETE FROM bub_documents WHERE name = $1 AND version = $2",
                        &[&name, &v],
                    )
                    .await?
            }
            (None, None) => 1,
        };
        Ok(rows == 1)
    }
}
