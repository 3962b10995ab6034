//! A Redis Cluster on loopback for the cluster tests: 6 `redis-server` processes (3 masters, 3
//! replicas), children of the test, each on free ports (client and `--cluster-port`) in a
//! directory of its own for its `nodes.conf`, joined by `redis-cli --cluster create` and
//! waited for until every node says `cluster_state:ok`. Dropping the cluster kills them.
//!
//! [`shared`] hands the tests of one binary the same cluster while any of them holds it (they
//! run in parallel, each with its own key prefix); destructive tests start their own with
//! [`Cluster::start`]. Without `redis-server` and `redis-cli` on `PATH` the tests fail saying
//! so, or are skipped with `TOLLGATE_REDIS_SKIP=1`, as the other Redis tests.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// One node: its client port and its process.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

impl Node {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }
}

/// A running cluster; its processes die with it.
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

fn skip_or_fail<T>(test: &str, why: &str) -> Option<T> {
    if std::env::var_os("TOLLGATE_REDIS_SKIP").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED {test}: {why} (TOLLGATE_REDIS_SKIP=1)");
        return None;
    }
    panic!(
        "{test}: {why}. Install redis-server and redis-cli (apt-get install redis-server), \
         or set TOLLGATE_REDIS_SKIP=1 to skip the Redis tests on purpose"
    );
}

/// The binary's shared cluster, started by the first test that asks while no other holds it.
pub fn shared(test: &str) -> Option<Arc<Cluster>> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = slot.upgrade() {
        return Some(c);
    }
    let c = own(test)?;
    *slot = Arc::downgrade(&c);
    Some(c)
}

/// A cluster of the test's own.
pub fn own(test: &str) -> Option<Arc<Cluster>> {
    own_mut(test).map(Arc::new)
}

/// A cluster of the test's own, to kill nodes of.
pub fn own_mut(test: &str) -> Option<Cluster> {
    match Cluster::start() {
        Ok(c) => Some(c),
        Err(why) => skip_or_fail(test, &why),
    }
}

/// `n` distinct free loopback ports (the listeners are held until all are chosen).
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl Cluster {
    pub fn start() -> Result<Cluster, String> {
        let t0 = Instant::now();
        let ports = free_ports(12).map_err(|e| format!("no free ports: {e}"))?;
        let dir = std::env::temp_dir().join(format!(
            "tollgate-cluster-{}-{}",
            std::process::id(),
            ports[0]
        ));
        let mut c = Cluster {
            nodes: Vec::new(),
            dir,
        };
        for i in 0..6 {
            let (port, bus) = (ports[i], ports[i + 6]);
            let dir = c.dir.join(port.to_string());
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--cluster-port", &bus.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--cluster-config-file", "nodes.conf"])
                // A replica syncs at once (the default waits 5 s for more replicas): one that
                // never synced cannot take over its master.
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("redis-server could not be started ({e})"))?;
            c.nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        for n in &c.nodes {
            wait_until(Duration::from_secs(10), || ping(n.port))
                .map_err(|_| format!("node {} did not answer within 10 s", n.port))?;
        }
        let addrs: Vec<String> = c
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli could not be started ({e})"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        c.wait_ok(Duration::from_secs(30))
            .map_err(|e| format!("the cluster never settled: {e}"))?;
        eprintln!(
            "cluster on ports {:?} ready in {:?}",
            c.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            t0.elapsed()
        );
        Ok(c)
    }

    /// Waits until every live node says `cluster_state:ok`, knows all 16384 slots as ok, and
    /// agrees with the others on the masters, and every replica has synced with its master.
    pub fn wait_ok(&self, within: Duration) -> Result<(), String> {
        wait_until(within, || {
            let live: Vec<&Node> = self.nodes.iter().filter(|n| n.alive()).collect();
            let ok = live.iter().all(|n| {
                info(n.port).is_some_and(|i| {
                    i.contains("cluster_state:ok") && i.contains("cluster_slots_ok:16384")
                })
            });
            let views: Vec<Vec<u16>> = live.iter().map(|n| masters_seen_by(n.port)).collect();
            let synced = live.iter().all(|n| {
                replication(n.port).is_some_and(|i| {
                    i.contains("role:master") || i.contains("master_link_status:up")
                })
            });
            ok && synced && views.windows(2).all(|w| w[0] == w[1])
        })
    }

    /// The client ports of the masters that own slots, as the first live node sees them.
    pub fn masters(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .find(|n| n.alive())
            .map_or_else(Vec::new, |n| masters_seen_by(n.port))
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &Node {
        self.nodes.iter().find(|n| n.port == port).expect("a node")
    }

    /// `kill -9` of the node on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// A plain connection to one node, for the test's own commands.
    pub fn connection(&self, port: u16) -> redis::Connection {
        connection(port)
    }

    /// The slot Redis computes for `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let mut con = connection(self.masters()[0]);
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .expect("CLUSTER KEYSLOT")
    }

    /// `redis-cli --cluster reshard`: moves `slots` slots from `from` to `to` (node ports).
    pub fn reshard(&self, from: u16, to: u16, slots: u32) -> Result<String, String> {
        let id = |p: u16| -> String {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut connection(p))
                .expect("CLUSTER MYID")
        };
        let out = Command::new("redis-cli")
            .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
            .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli could not be started ({e})"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!(
                "{text}{}",
                String::from_utf8_lossy(&out.stderr).into_owned()
            ))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("not within {within:?}"))
}

fn try_connection(port: u16) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(con)
}

pub fn connection(port: u16) -> redis::Connection {
    try_connection(port).expect("a connection to a cluster node")
}

fn ping(port: u16) -> bool {
    try_connection(port).is_some_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
}

fn info(port: u16) -> Option<String> {
    let mut c = try_connection(port)?;
    redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()
}

fn replication(port: u16) -> Option<String> {
    let mut c = try_connection(port)?;
    redis::cmd("INFO").arg("replication").query(&mut c).ok()
}

/// The ports of the masters that own slots, in `CLUSTER NODES` of the node on `port`.
fn masters_seen_by(port: u16) -> Vec<u16> {
    let Some(mut c) = try_connection(port) else {
        return Vec::new();
    };
    let Ok(text) = redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c) else {
        return Vec::new();
    };
    let mut ports: Vec<u16> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            // id addr flags master ping pong epoch link slot...
            let master = f.get(2)?.split(',').any(|x| x == "master");
            let failed = f.get(2)?.contains("fail");
            if !master || failed || f.len() < 9 {
                return None;
            }
            let addr = f.get(1)?.split('@').next()?;
            addr.rsplit(':').next()?.parse().ok()
        })
        .collect();
    ports.sort_unstable();
    ports
}
