//! `redis-server`s of the TLS and auth tests' own, on loopback: a CA and certificates made in
//! process (rcgen), a server started with any arguments (TLS, `requirepass`, ACL users) and
//! killed when dropped, its files removed with it.
//!
//! Without `redis-server` on PATH a test FAILS with a message saying how to provide one, as
//! the other Redis tests do; `TOLLGATE_REDIS_SKIP=1` skips them on purpose.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// How long a server may take to listen.
const START: Duration = Duration::from_secs(10);

/// A directory of the test's own under the system's temp dir, removed when dropped.
pub struct Dir(PathBuf);

impl Dir {
    pub fn new(test: &str) -> Dir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "tollgate-{test}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("a temp dir");
        Dir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `name` in the directory; its path as a string for redis-server's arguments.
    pub fn write(&self, name: &str, bytes: &[u8]) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).expect("a temp file");
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate and its key, PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A CA of the test's own, and what it signed.
pub struct Pki {
    /// The CA's certificate (what `tls_root_ca` is given).
    pub ca: String,
    /// The server's certificate for `127.0.0.1` and `localhost`, signed by the CA.
    pub server: Pem,
    /// A client certificate signed by the CA.
    pub client: Pem,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().expect("a key")).expect("a ca")
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Pem {
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(sans).expect("leaf params");
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("a key");
    let cert = p.signed_by(&key, issuer).expect("a signed certificate");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

impl Pki {
    /// A new CA (named `name`) with a server and a client certificate.
    pub fn new(name: &str) -> Pki {
        let ca = ca(name);
        Pki {
            ca: ca.pem(),
            server: leaf(
                &ca,
                "redis",
                &["127.0.0.1", "localhost"],
                ExtendedKeyUsagePurpose::ServerAuth,
            ),
            client: leaf(&ca, "tollgate", &[], ExtendedKeyUsagePurpose::ClientAuth),
        }
    }
}

/// A `redis-server` this test started; killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    /// Holds the server's files (certificates, its log); removed after the server is gone.
    dir: Dir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Server {
    /// A server on a free loopback port with `args`, `{port}` in them replaced by the port.
    /// `None` (after saying why) if there is no `redis-server` and the Redis tests are
    /// skipped on purpose; a panic otherwise.
    pub fn start(test: &str, dir: Dir, args: &[String]) -> Option<Server> {
        // A port picked free can be picked by a test running beside this one before either
        // server binds it: the loser exits with "Address already in use" while a connect to
        // the port reaches the winner. So the server is ready when its own log says so, and a
        // lost race is tried again on another port.
        for _ in 0..8 {
            let port = free_port();
            let log = dir.path().join("redis.log");
            let _ = std::fs::remove_file(&log);
            let args: Vec<String> = args
                .iter()
                .map(|a| a.replace("{port}", &port.to_string()))
                .collect();
            let spawned = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--logfile", &log.to_string_lossy()])
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    if std::env::var_os("TOLLGATE_REDIS_SKIP").is_some_and(|v| v == "1") {
                        eprintln!("SKIPPED {test}: no redis-server ({e}) (TOLLGATE_REDIS_SKIP=1)");
                        return None;
                    }
                    panic!(
                        "{test}: redis-server could not be started ({e}): install it (apt-get \
                         install redis-server, built with TLS as Debian's is), or set \
                         TOLLGATE_REDIS_SKIP=1 to skip the Redis tests on purpose"
                    );
                }
            };
            let mut child = child;
            let t0 = Instant::now();
            let mut lost = false;
            while t0.elapsed() < START {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("Ready to accept connections")
                    && TcpStream::connect(("127.0.0.1", port)).is_ok()
                {
                    return Some(Server { child, port, dir });
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if text.contains("Address already in use") {
                        lost = true;
                        break;
                    }
                    panic!("{test}: redis-server {args:?} exited ({status}):\n{text}");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !lost {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{test}: redis-server did not listen on {port} within {START:?}");
            }
        }
        panic!("{test}: every port tried was taken before redis-server could bind it");
    }

    /// A server speaking TLS only, with the certificates of `pki`; `auth_clients` asks every
    /// client for a certificate signed by the CA (`tls-auth-clients yes`).
    pub fn tls(test: &str, pki: &Pki, auth_clients: bool) -> Option<Server> {
        Server::tls_with(test, pki, auth_clients, &[])
    }

    /// As [`tls`](Self::tls), with `extra` arguments.
    pub fn tls_with(test: &str, pki: &Pki, auth_clients: bool, extra: &[&str]) -> Option<Server> {
        let dir = Dir::new(test);
        let cert = dir.write("server.pem", pki.server.cert.as_bytes());
        let key = dir.write("server.key", pki.server.key.as_bytes());
        let ca = dir.write("ca.pem", pki.ca.as_bytes());
        let args = [
            "--port",
            "0",
            "--tls-port",
            "{port}",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            if auth_clients { "yes" } else { "no" },
        ];
        let args: Vec<String> = args.iter().chain(extra).map(|a| a.to_string()).collect();
        Server::start(test, dir, &args)
    }

    /// A plain server with `args`.
    pub fn plain(test: &str, args: &[&str]) -> Option<Server> {
        let mut all = vec!["--port".to_owned(), "{port}".to_owned()];
        all.extend(args.iter().map(|a| a.to_string()));
        Server::start(test, Dir::new(test), &all)
    }

    /// A plain connection for the test's own commands, as the default user with `password`.
    pub fn admin(&self, password: Option<&str>) -> redis::Connection {
        let url = match password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        };
        redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("an admin connection to the test's redis")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
