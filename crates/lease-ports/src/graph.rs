//! A job's workflow as a graph: its ancestors (the jobs it runs after, and theirs) and its
//! descendants (the jobs that run after it, and theirs), read breadth first from the job and
//! bounded, for an operator's picture of a workflow.

use std::collections::{BTreeSet, HashMap, VecDeque};

use lease_domain::{JobId, QueueName, Status, Timestamp};

use crate::{LeaseStore, StoreError};

/// The most nodes a graph may be asked for.
pub const GRAPH_MOST: usize = 500;

/// One job of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The job.
    pub id: JobId,
    /// Where it stands; `None` for a parent purged since it finished.
    pub status: Option<Status>,
    /// Its queue (`None` when purged).
    pub queue: Option<QueueName>,
}

/// A job's workflow around it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    /// The job first, then its ancestors and descendants in the order they were met (nearest
    /// first).
    pub nodes: Vec<Node>,
    /// Each (parent, child) between two nodes of the graph.
    pub edges: Vec<(JobId, JobId)>,
    /// Jobs met beyond the bound and not read: the graph goes on past them.
    pub more: u64,
}

/// A graph being read: the jobs drawn (with the parents each names), the ones met beyond
/// the bound, the dependencies met.
struct Reading {
    graph: Graph,
    drawn: HashMap<JobId, Vec<JobId>>,
    missed: BTreeSet<JobId>,
    edges: BTreeSet<(JobId, JobId)>,
    limit: usize,
    now: Timestamp,
}

impl Reading {
    /// Meets `id`: draws it (reading its record) when it is new and the bound leaves room,
    /// else counts it as met beyond the bound. Whether it is drawn.
    async fn meet(
        &mut self,
        store: &(impl LeaseStore + ?Sized),
        id: &JobId,
    ) -> Result<bool, StoreError> {
        if self.drawn.contains_key(id) {
            return Ok(true);
        }
        if self.graph.nodes.len() >= self.limit {
            self.missed.insert(id.clone());
            return Ok(false);
        }
        let found = store.record(id).await?;
        self.graph.nodes.push(Node {
            id: id.clone(),
            status: found.as_ref().map(|r| r.job.status_at(self.now)),
            queue: found.as_ref().map(|r| r.job.queue.clone()),
        });
        self.drawn
            .insert(id.clone(), found.map(|r| r.job.after).unwrap_or_default());
        Ok(true)
    }
}

/// The graph of `job`'s ancestors and descendants, at most `limit` nodes (`job` counted), read
/// breadth first (ancestors first), with each job's status at `now`. `None` when the job is not
/// stored.
///
/// # Errors
/// The store's errors.
pub async fn workflow_graph(
    store: &(impl LeaseStore + ?Sized),
    job: &JobId,
    limit: usize,
    now: Timestamp,
) -> Result<Option<Graph>, StoreError> {
    let mut reading = Reading {
        graph: Graph::default(),
        drawn: HashMap::new(),
        missed: BTreeSet::new(),
        edges: BTreeSet::new(),
        limit: limit.clamp(1, GRAPH_MOST),
        now,
    };
    reading.meet(store, job).await?;
    // A job that is not stored reads as a node with no status.
    if reading
        .graph
        .nodes
        .first()
        .is_none_or(|n| n.status.is_none())
    {
        return Ok(None);
    }
    // Up: each drawn job's parents, nearest first.
    let mut up = VecDeque::from([job.clone()]);
    while let Some(child) = up.pop_front() {
        let parents = reading.drawn.get(&child).cloned().unwrap_or_default();
        for parent in parents {
            let new = !reading.drawn.contains_key(&parent);
            if reading.meet(store, &parent).await? && new {
                up.push_back(parent.clone());
            }
            reading.edges.insert((parent, child.clone()));
        }
    }
    // Down: each drawn descendant's children, nearest first.
    let mut down = VecDeque::from([job.clone()]);
    let mut descended: BTreeSet<JobId> = BTreeSet::from([job.clone()]);
    while let Some(parent) = down.pop_front() {
        for child in store.children(&parent, None, reading.limit + 1).await? {
            if reading.meet(store, &child).await? && descended.insert(child.clone()) {
                down.push_back(child.clone());
            }
            reading.edges.insert((parent.clone(), child));
        }
    }
    let Reading {
        mut graph,
        drawn,
        missed,
        edges,
        ..
    } = reading;
    graph.edges = edges
        .into_iter()
        .filter(|(p, c)| drawn.contains_key(p) && drawn.contains_key(c))
        .collect();
    graph.more = u64::try_from(missed.len()).unwrap_or(u64::MAX);
    Ok(Some(graph))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLeaseStore;
    use lease_domain::EnqueueSpec;

    fn id(name: &str) -> JobId {
        JobId::new(name).unwrap()
    }

    /// a; b and c after a; d after b and c; e after d.
    async fn diamond() -> MemoryLeaseStore {
        let store = MemoryLeaseStore::new();
        for (job, after) in [
            ("a", vec![]),
            ("b", vec!["a"]),
            ("c", vec!["a"]),
            ("d", vec!["b", "c"]),
            ("e", vec!["d"]),
        ] {
            let spec = EnqueueSpec {
                after: after.into_iter().map(id).collect(),
                ..EnqueueSpec::default()
            };
            assert!(store.enqueue_with(&id(job), &spec).await.unwrap());
        }
        store
    }

    fn names(graph: &Graph) -> (Vec<&str>, Vec<(&str, &str)>) {
        (
            graph.nodes.iter().map(|n| n.id.as_str()).collect(),
            graph
                .edges
                .iter()
                .map(|(p, c)| (p.as_str(), c.as_str()))
                .collect(),
        )
    }

    #[tokio::test]
    async fn a_job_in_the_middle_has_its_ancestors_then_its_descendants_with_every_edge() {
        let store = diamond().await;
        let graph = workflow_graph(&store, &id("d"), 100, Timestamp::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            names(&graph),
            (
                vec!["d", "b", "c", "a", "e"],
                vec![("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")]
            )
        );
        assert_eq!(graph.more, 0);
        let statuses: Vec<Option<Status>> = graph.nodes.iter().map(|n| n.status).collect();
        assert_eq!(
            statuses,
            [
                Status::Waiting,
                Status::Waiting,
                Status::Waiting,
                Status::Pending,
                Status::Waiting
            ]
            .map(Some)
        );
    }

    #[tokio::test]
    async fn a_bounded_graph_counts_the_jobs_it_met_and_did_not_draw() {
        let store = diamond().await;
        let graph = workflow_graph(&store, &id("a"), 3, Timestamp::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            names(&graph),
            (vec!["a", "b", "c"], vec![("a", "b"), ("a", "c")])
        );
        assert_eq!(graph.more, 1, "d, met as b's child");
        assert_eq!(
            workflow_graph(&store, &id("nobody"), 3, Timestamp::ZERO)
                .await
                .unwrap(),
            None
        );
    }
}
