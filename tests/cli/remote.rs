//! Files read where physicists keep them: a real XRootD server (Debian's `xrootd-server`)
//! started on localhost, read over its own protocol (`root://`, `roots://`) and its HTTP door
//! (`XrdHttp`). Built with `--features remote-tests`; CI installs the server and runs these.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gnn4c_data::{EventRecord, read_cache, read_manifest};

use super::*;

/// An `xrootd` serving a folder over XRootD and HTTP (with `tls`: `roots://` and HTTPS) on
/// free local ports, stopped when dropped.
struct Server {
    child: Child,
    xrd: u16,
    http: u16,
    tls: bool,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Server {
    /// `xrootd` exporting `root` (read-only), its HTTP door on a free port; with `tls`, TLS
    /// (HTTPS, `roots://`) with a certificate for 127.0.0.1 from a CA of the test's own
    /// (`ca_dir`).
    fn start(root: &Path, tls: bool) -> Server {
        Server::start_with(root, tls, "", None)
    }

    /// As [`Server::start`], with more configuration lines (`{xrd}` in them: its own port;
    /// `{dir}`: its folder, where its CA and certificate are) and the cache folder of its token
    /// library (`XDG_CACHE_HOME`).
    fn start_with(root: &Path, tls: bool, more: &str, cache_home: Option<&Path>) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let (xrd, http) = (free_port(), free_port());
        let config = dir.path().join("xrd.cfg");
        let d = dir.path().display();
        let mut text = format!(
            "xrd.port {xrd}\nxrd.protocol XrdHttp:{http} libXrdHttp.so\nall.export /\n\
             oss.localroot {root}\nall.adminpath {d}/admin\nall.pidpath {d}/run\n",
            root = root.display()
        );
        if tls {
            // A CA (hashed into a folder, as grid CAs are) and the certificates it signs: the
            // host's for 127.0.0.1 (TLS), and for gsi one naming `localhost` only (as a grid
            // host's names its host) and one naming another host.
            let script = "set -e\n\
                openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj '/CN=gnn4c test CA'\n\
                openssl req -newkey rsa:2048 -nodes -keyout host.key -out host.csr -subj '/CN=localhost'\n\
                printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext.cnf\n\
                openssl x509 -req -in host.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out host.pem -days 1 -extfile ext.cnf\n\
                for name in localhost elsewhere.invalid; do\n\
                  openssl req -newkey rsa:2048 -nodes -keyout $name.key -out $name.csr -subj /CN=$name\n\
                  printf 'subjectAltName=DNS:%s\\nextendedKeyUsage=serverAuth\\n' $name > $name.cnf\n\
                  openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $name.pem -days 1 -extfile $name.cnf\n\
                done\n\
                mkdir -p ca && cp ca.pem ca/ && openssl rehash ca\n\
                chmod 600 *.key\n";
            let made = Command::new("sh")
                .current_dir(dir.path())
                .args(["-c", script])
                .output()
                .expect("openssl runs");
            assert!(made.status.success(), "{}", text_of(&made));
            text.push_str(&format!(
                "xrd.tls {d}/host.pem {d}/host.key\nxrd.tlsca certdir {d}/ca\n"
            ));
        }
        text.push_str(
            &more
                .replace("{xrd}", &xrd.to_string())
                .replace("{dir}", &d.to_string()),
        );
        std::fs::write(&config, text).expect("config");
        // XRootD refuses to run as root: it then runs as the package's `xrootd` user.
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let mut cmd = Command::new("xrootd");
        if as_root {
            for owned in [Some(dir.path()), cache_home].into_iter().flatten() {
                let chown = Command::new("chown")
                    .args(["-R", "xrootd"])
                    .arg(owned)
                    .status();
                assert!(chown.is_ok_and(|s| s.success()), "chown to xrootd");
            }
            cmd.args(["-R", "xrootd"]);
        }
        if let Some(home) = cache_home {
            cmd.env("XDG_CACHE_HOME", home);
        }
        let child = cmd
            .arg("-c")
            .arg(&config)
            .args(["-n", "gnn4c", "-l"])
            .arg(dir.path().join("xrd.log"))
            .spawn()
            .expect("xrootd runs (install Debian's xrootd-server; .ci/run does)");
        let server = Server {
            child,
            xrd,
            http,
            tls,
            dir,
        };
        let start = Instant::now();
        while [xrd, http]
            .iter()
            .any(|&p| std::net::TcpStream::connect(("127.0.0.1", p)).is_err())
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "xrootd did not open its ports"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The URL of `rel` over `protocol` ("http" or "root"; with TLS, "https" or "roots").
    fn url(&self, protocol: &str, rel: &str) -> String {
        match protocol {
            "http" => {
                let scheme = if self.tls { "https" } else { "http" };
                format!("{scheme}://127.0.0.1:{}/{rel}", self.http)
            }
            _ => {
                let scheme = if self.tls { "roots" } else { "root" };
                format!("{scheme}://127.0.0.1:{}//{rel}", self.xrd)
            }
        }
    }

    /// The folder of the CA that signed an HTTPS server's certificate.
    fn ca_dir(&self) -> PathBuf {
        self.dir.path().join("ca")
    }
}

/// `inspect url` trusting `server`'s CA, retrying nothing, with no credential but
/// `credential` (an environment variable and its value).
fn inspect_with(server: &Server, url: &str, credential: Option<(&str, &Path)>) -> Output {
    let mut cmd = bin();
    cmd.env("X509_CERT_DIR", server.ca_dir())
        .env("GNN4C_NET_RETRIES", "0")
        .env_remove("BEARER_TOKEN")
        .env_remove("BEARER_TOKEN_FILE")
        .env_remove("X509_USER_PROXY")
        .env("XDG_RUNTIME_DIR", server.dir.path().join("no-runtime-dir"));
    if let Some((var, value)) = credential {
        cmd.env(var, value);
    }
    cmd.args(["inspect", url])
        .output()
        .expect("the binary runs")
}

fn text_of(o: &Output) -> String {
    let (out, err) = text(o);
    format!("{out}{err}")
}

/// The cache's records, the file each event came from left out.
fn records(cache: &Path) -> Vec<EventRecord> {
    let manifest = read_manifest(cache).expect("manifest");
    let mut out = read_cache(cache, &manifest, &|_| true).expect("records");
    for r in &mut out {
        r.id.source_file = PathBuf::from("-").into();
    }
    out
}

#[test]
fn a_dataset_over_root_and_http_caches_what_the_local_files_give_and_bad_urls_are_named() {
    // The export: the shared files (linked), and a file the server may not read.
    let export = tempfile::tempdir().expect("tempdir");
    for folder in ["real", "rntuple"] {
        std::os::unix::fs::symlink(
            shared(&format!("data/{folder}")),
            export.path().join(folder),
        )
        .expect("link");
    }
    let secret = export.path().join("secret.root");
    std::fs::write(&secret, b"root").expect("secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    std::fs::set_permissions(export.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(export.path(), false);
    // A redirector (as EOS's manager is): `real/` on the server above, `loop/` on itself.
    let nothing = tempfile::tempdir().expect("tempdir");
    let redirector = Server::start_with(
        nothing.path(),
        false,
        &format!(
            "xrootd.redirect 127.0.0.1:{} /real\nxrootd.redirect 127.0.0.1:{{xrd}} /loop\n",
            server.xrd
        ),
        None,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let local = |rel: &str| shared(&format!("data/{rel}")).display().to_string();
    let (tree, ntuple) = ("real/uproot-HZZ.root", "rntuple/nano_rntuple_zstd.root");
    let hzz = |file: &str| {
        format!(
            "name: hzz\ntree: events\nschema: hzz\nclasses: [a, b]\nsamples:\n  - {{name: a, files: ['{file}'], label: 0, entry_stop: 1200}}\n  - {{name: b, files: ['{file}'], label: 1, entry_start: 1200}}\n"
        )
    };
    let nano = |files: &str| {
        format!(
            "name: nano\ntree: Events\nschema: nanoaod\nclasses: [a]\nsamples:\n  - {{name: a, {files}, label: 0}}\n"
        )
    };
    // Two columns of jets and one of a quark's momentum, whose baskets lie 340 kB apart in the
    // uncompressed HZZ file (past what an open reads first): one request of two ranges over
    // HTTP (a multi-range answer), one vector read over XRootD.
    let sparse_tree = "real/uproot-HZZ-uncompressed.root";
    let sparse = |file: &str| {
        format!(
            "name: sparse\ntree: events\nclasses: [a]\ninputs:\n  objects:\n    - {{name: jets, px: Jet_Px, py: Jet_Py}}\n  node_features:\n    - {{name: px, expr: px}}\n  globals:\n    - {{name: quark, expr: MChadronicWDecayQuarkBar_px}}\nsamples:\n  - {{name: a, files: ['{file}'], label: 0}}\n"
        )
    };
    let mut configs = vec![
        ("hzz_local".to_owned(), hzz(&local(tree))),
        (
            "nano_local".to_owned(),
            nano(&format!("files: ['{}']", local(ntuple))),
        ),
        ("sparse_local".to_owned(), sparse(&local(sparse_tree))),
    ];
    for protocol in ["root", "http"] {
        // A TTree, and an RNTuple listed in a `files_from` file (a Rucio listing).
        std::fs::write(
            cwd.join(format!("{protocol}.txt")),
            format!("# listing\n{}\n", server.url(protocol, ntuple)),
        )
        .expect("list");
        configs.push((format!("hzz_{protocol}"), hzz(&server.url(protocol, tree))));
        configs.push((
            format!("sparse_{protocol}"),
            sparse(&server.url(protocol, sparse_tree)),
        ));
        configs.push((
            format!("nano_{protocol}"),
            nano(&format!("files_from: {protocol}.txt")),
        ));
    }
    configs.push((
        "hzz_redirected".to_owned(),
        hzz(&redirector.url("root", tree)),
    ));
    for (name, config) in &configs {
        std::fs::write(cwd.join(format!("{name}.yaml")), config).expect("config");
        let o = run(
            cwd,
            &["preprocess", &format!("{name}.yaml"), "--cache", name],
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {out}{err}");
    }
    let size = std::fs::metadata(shared(&format!("data/{tree}")))
        .expect("size")
        .len();
    assert_eq!(
        records(&cwd.join("hzz_local")),
        records(&cwd.join("hzz_redirected")),
        "the cache through a redirector differs from the local one"
    );
    // WebDAV's scheme, as Rucio lists a dCache door, reads as HTTP.
    let dav = server.url("http", tree).replace("http://", "dav://");
    let o = run(cwd, &["inspect", &dav]);
    assert!(text(&o).0.contains("2421 entries"), "{}", text_of(&o));
    // A redirect loop: stopped, and said.
    let looping = redirector.url("root", "loop/f.root");
    let o = run(cwd, &["inspect", &looping]);
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&looping) && err.contains("redirects"), "{err}");
    for protocol in ["root", "http"] {
        for which in ["hzz", "nano", "sparse"] {
            let (l, r) = (
                records(&cwd.join(format!("{which}_local"))),
                records(&cwd.join(format!("{which}_{protocol}"))),
            );
            assert!(!l.is_empty(), "{which}: events cached");
            assert_eq!(
                l, r,
                "{which}: the cache over {protocol} differs from the local one"
            );
        }
        // The manifest names the URL, its size and what the server says of its version.
        let manifest = json(&cwd.join(format!("hzz_{protocol}/manifest.json"))).to_string();
        assert!(manifest.contains(&server.url(protocol, tree)), "{manifest}");
        assert!(manifest.contains(&format!("\"size\":{size}")), "{manifest}");

        // A file smaller than what an open reads first (19 kB): read as the local file is.
        let small = "real/uproot-small-dy-nooffsets.root";
        let (here, there) = (local(small), server.url(protocol, small));
        let (o_here, o_there) = (
            run(cwd, &["inspect", &here]),
            run(cwd, &["inspect", &there]),
        );
        assert!(
            o_there.status.success(),
            "{protocol}: {}",
            text_of(&o_there)
        );
        assert_eq!(
            text(&o_there).0.replace(&there, "FILE"),
            text(&o_here).0.replace(&here, "FILE"),
            "{protocol}: a small file"
        );

        // A missing file: named, exit code 2 as for a missing local file.
        let missing = server.url(protocol, "real/no-such-file.root");
        let o = run(cwd, &["inspect", &missing]);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{out}{err}");
        assert!(err.contains(&missing) && err.contains("not found"), "{err}");

        // A file the server may not read: refused, named, and the token hint given.
        let refused = server.url(protocol, "secret.root");
        let o = run(cwd, &["inspect", &refused]);
        let err = text(&o).1;
        assert!(!o.status.success(), "{err}");
        let says = if protocol == "http" {
            "HTTP 403"
        } else {
            "not authorized"
        };
        assert!(
            err.contains(&refused) && err.contains(says) && err.contains("BEARER_TOKEN"),
            "{err}"
        );
    }

    // A server that stops answering (the process stopped: connections are accepted, nothing
    // comes back): each request times out, is retried, then a clear error naming the URL.
    let pid = server.child.id().to_string();
    let signal = |sig: &str| {
        let sent = Command::new("kill").args([sig, &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {sig}");
    };
    signal("-STOP");
    let silent: Vec<String> = ["root", "http"]
        .iter()
        .map(|p| server.url(p, tree))
        .collect();
    let outputs: Vec<Output> = silent
        .iter()
        .map(|url| {
            bin()
                .current_dir(cwd)
                .env("GNN4C_NET_TIMEOUT_S", "1")
                .env("GNN4C_NET_RETRIES", "1")
                .args(["inspect", url])
                .output()
                .expect("the binary runs")
        })
        .collect();
    signal("-CONT");
    for (url, o) in silent.iter().zip(&outputs) {
        let (out, err) = text(o);
        assert!(!o.status.success(), "{out}{err}");
        assert!(
            err.contains(url.as_str())
                && err.contains("timed out")
                && err.contains("after 2 tries"),
            "{err}"
        );
    }

    // A server that is gone: retried, then a clear error naming the URL.
    let gone: Vec<String> = ["root", "http"]
        .iter()
        .map(|p| server.url(p, tree))
        .collect();
    drop(server);
    for url in &gone {
        let o = bin()
            .current_dir(cwd)
            .env("GNN4C_NET_RETRIES", "1")
            .args(["inspect", url])
            .output()
            .expect("the binary runs");
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{out}{err}");
        assert!(
            err.contains(url.as_str()) && err.contains("after 2 tries"),
            "{err}"
        );
    }
    // With `on_bad_file: skip` the files of a server that is gone are left out and named;
    // the local file is cached as alone.
    let files = format!("files: ['{}', '{}', '{}']", local(ntuple), gone[0], gone[1]);
    let config = nano(&files).replace("samples:", "on_bad_file: skip\nsamples:");
    std::fs::write(cwd.join("nano_skip.yaml"), config).expect("config");
    let o = bin()
        .current_dir(cwd)
        .env("GNN4C_NET_RETRIES", "0")
        .args(["preprocess", "nano_skip.yaml", "--cache", "nano_skip"])
        .output()
        .expect("the binary runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("2 input files could not be read")
            && gone.iter().all(|url| out.contains(url.as_str())),
        "{out}"
    );
    assert_eq!(
        records(&cwd.join("nano_skip")),
        records(&cwd.join("nano_local"))
    );
}

#[test]
fn tls_trusts_the_sites_ca_from_x509_cert_dir_and_refuses_an_unknown_one() {
    let server = Server::start(&shared("data"), true);
    let plain = Server::start(&shared("data"), false);
    for protocol in ["root", "http"] {
        let url = server.url(protocol, "real/uproot-HZZ.root");
        let inspect = |ca_dir: &Path| {
            bin()
                .env("X509_CERT_DIR", ca_dir)
                .env("GNN4C_NET_RETRIES", "0")
                .args(["inspect", &url])
                .output()
                .expect("the binary runs")
        };
        let o = inspect(&server.ca_dir());
        assert!(o.status.success(), "{}", text_of(&o));
        assert!(
            text(&o).0.contains("tree 'events': 2421 entries"),
            "{}",
            text_of(&o)
        );
        // A CA nobody trusts: refused, naming the URL and the certificate.
        let empty = tempfile::tempdir().expect("tempdir");
        let o = inspect(empty.path());
        let err = text(&o).1;
        assert!(!o.status.success(), "{err}");
        assert!(err.contains(&url) && err.contains("certificate"), "{err}");
    }
    // roots:// of a server without TLS: refused, not read in the clear.
    let url = plain
        .url("root", "real/uproot-HZZ.root")
        .replace("root://", "roots://");
    let o = run(Path::new("."), &["inspect", &url]);
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&url) && err.contains("TLS"), "{err}");
}

/// Mints a WLCG token (ES256 JWT) of issuer `ISSUER` for audience `AUDIENCE`, reading `/`, with
/// a key of its own, and puts the issuer's public key where the server's token library looks
/// for it (`<cache>/scitokens/scitokens_cpp.sqllite`, as if fetched from the issuer); prints
/// the token. Python's standard library and the openssl command only.
const MINT_TOKEN: &str = r#"
import base64, json, os, sqlite3, subprocess, sys, time
cache, iss, aud = sys.argv[1:4]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
key = os.path.join(cache, "token.key")
subprocess.run(["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", key], check=True)
pub = subprocess.run(["openssl", "ec", "-in", key, "-pubout", "-outform", "DER"], capture_output=True, check=True).stdout[-65:]
jwks = {"keys": [{"kty": "EC", "crv": "P-256", "x": b64(pub[1:33]), "y": b64(pub[33:]), "kid": "k1", "alg": "ES256", "use": "sig"}]}
now = int(time.time())
os.makedirs(os.path.join(cache, "scitokens"), exist_ok=True)
db = sqlite3.connect(os.path.join(cache, "scitokens", "scitokens_cpp.sqllite"))
db.execute("CREATE TABLE IF NOT EXISTS keycache (issuer text UNIQUE PRIMARY KEY NOT NULL, keys text NOT NULL)")
db.execute("INSERT INTO keycache VALUES (?, ?)", (iss, json.dumps({"jwks": jwks, "next_update": now + 3600, "expires": now + 7200})))
db.commit()
head = b64(json.dumps({"alg": "ES256", "typ": "JWT", "kid": "k1"}).encode())
claims = {"iss": iss, "aud": aud, "sub": "tester", "scope": "storage.read:/", "wlcg.ver": "1.0",
          "iat": now, "nbf": now - 60, "exp": now + 3600, "jti": "gnn4c-test"}
body = b64(json.dumps(claims).encode())
der = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=(head + "." + body).encode(), capture_output=True, check=True).stdout
# The DER signature (SEQUENCE of the integers r and s) as JWS wants it: r and s, 32 bytes each.
at = 4 if der[1] & 0x80 else 2
r = der[at + 2 : at + 2 + der[at + 1]]
at += 2 + der[at + 1]
s = der[at + 2 : at + 2 + der[at + 1]]
print(head + "." + body + "." + b64(r[-32:].rjust(32, b"\0") + s[-32:].rjust(32, b"\0")))
"#;

#[test]
fn a_token_protected_export_is_read_with_a_token_and_refused_without() {
    // XRootD's token authentication (`ztn`, over TLS) and its SciTokens authorization, over
    // both protocols (the HTTP door passes `Authorization` on to the same library).
    let keys = tempfile::tempdir().expect("tempdir");
    let (issuer, audience) = ("https://issuer.gnn4c.test", "https://gnn4c.test");
    let minted = Command::new("python3")
        .args(["-c", MINT_TOKEN])
        .arg(keys.path())
        .args([issuer, audience])
        .output()
        .expect("python3 runs");
    assert!(minted.status.success(), "{}", text_of(&minted));
    let token = String::from_utf8_lossy(&minted.stdout).trim().to_owned();
    let scitokens = keys.path().join("scitokens.cfg");
    std::fs::write(
        &scitokens,
        format!(
            "[Global]\naudience = {audience}\n\n[Issuer test]\nissuer = {issuer}\nbase_path = /\n"
        ),
    )
    .expect("scitokens.cfg");
    let server = Server::start_with(
        &shared("data"),
        true,
        &format!(
            "xrootd.seclib libXrdSec.so\nsec.protocol ztn\nofs.authorize 1\n\
             ofs.authlib libXrdAccSciTokens.so config={}\nhttp.header2cgi Authorization authz\n",
            scitokens.display()
        ),
        Some(keys.path()),
    );
    let token_file = keys.path().join("bt");
    std::fs::write(&token_file, &token).expect("token file");
    for protocol in ["root", "http"] {
        let url = server.url(protocol, "real/uproot-HZZ.root");
        let inspect = |token| inspect_with(&server, &url, token);
        // With the token (found as the WLCG discovery says: a file named by BEARER_TOKEN_FILE).
        let o = inspect(Some(("BEARER_TOKEN_FILE", &token_file)));
        assert!(o.status.success(), "{protocol}: {}", text_of(&o));
        assert!(text(&o).0.contains("2421 entries"), "{}", text_of(&o));
        // Without one: refused, named, and told where a token is looked for.
        let o = inspect(None);
        let err = text(&o).1;
        assert!(!o.status.success(), "{err}");
        assert!(err.contains(&url) && err.contains("BEARER_TOKEN"), "{err}");
        // A token the server does not trust: refused, and said so.
        let o = inspect(Some(("BEARER_TOKEN", Path::new("e30.e30.c2ln"))));
        let err = text(&o).1;
        assert!(!o.status.success(), "{err}");
        assert!(
            err.contains(&url) && err.contains("token was refused"),
            "{err}"
        );
    }
}

/// A folder with a grid-mapfile mapping the subject `/CN=gnn4c tester` to the user `gnn4c`, and
/// an authorization file letting `gnn4c` alone read everything: the folder and the two files.
fn tester_may_read() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let auth = tempfile::tempdir().expect("tempdir");
    let (gridmap, authdb) = (auth.path().join("grid-mapfile"), auth.path().join("authdb"));
    std::fs::write(&gridmap, "\"/CN=gnn4c tester\" gnn4c\n").expect("grid-mapfile");
    std::fs::write(&authdb, "u gnn4c / rl\n").expect("authdb");
    (auth, gridmap, authdb)
}

#[test]
fn an_x509_proxy_is_presented_to_an_https_server_that_maps_its_subject() {
    // The server lets the user its grid-mapfile names read, by the subject of the certificate
    // behind the proxy; anyone else is refused.
    let (auth, gridmap, authdb) = tester_may_read();
    let server = Server::start_with(
        &shared("data"),
        true,
        &format!(
            "http.gridmap {}\nofs.authorize 1\nacc.authdb {}\n",
            gridmap.display(),
            authdb.display()
        ),
        Some(auth.path()),
    );
    let proxy = make_proxy(&server, "gnn4c tester", 1);
    let url = server.url("http", "real/uproot-HZZ.root");
    let inspect =
        |proxy: Option<&Path>| inspect_with(&server, &url, proxy.map(|p| ("X509_USER_PROXY", p)));
    let o = inspect(Some(&proxy));
    assert!(o.status.success(), "{}", text_of(&o));
    assert!(text(&o).0.contains("2421 entries"), "{}", text_of(&o));
    let o = inspect(None);
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&url) && err.contains("HTTP 403"), "{err}");
    // A proxy file that is not there: named.
    let missing = auth.path().join("x509up_missing");
    let o = inspect(Some(&missing));
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("X509_USER_PROXY") && err.contains("x509up_missing"),
        "{err}"
    );
}

/// A user certificate for `/CN=<user>` from `server`'s CA, and a proxy it signs (RFC 3820) valid
/// for `days` (0: expiring as it is made), in one file as `voms-proxy-init` writes it (the
/// proxy, its key, the user certificate): its path.
fn make_proxy(server: &Server, user: &str, days: u32) -> PathBuf {
    let file = format!("x509up_{}_{days}", user.replace(' ', "_"));
    let script = format!(
        "set -e\n\
        openssl req -newkey rsa:2048 -nodes -keyout user.key -out user.csr -subj '/CN={user}'\n\
        printf 'extendedKeyUsage=clientAuth\\n' > user.cnf\n\
        openssl x509 -req -in user.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out user.pem -days 1 -extfile user.cnf\n\
        openssl req -newkey rsa:2048 -nodes -keyout proxy.key -out proxy.csr -subj '/CN={user}/CN=1234567'\n\
        printf 'proxyCertInfo=critical,language:id-ppl-inheritAll\\nkeyUsage=critical,digitalSignature,keyEncipherment\\n' > proxy.cnf\n\
        openssl x509 -req -in proxy.csr -CA user.pem -CAkey user.key -set_serial 1234567 -out proxy.pem -days {days} -extfile proxy.cnf\n\
        cat proxy.pem proxy.key user.pem > {file}\n\
        chmod 600 {file}\n"
    );
    let made = Command::new("sh")
        .current_dir(server.dir.path())
        .args(["-c", &script])
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", text_of(&made));
    server.dir.path().join(file)
}

#[test]
fn an_x509_proxy_authenticates_over_root_with_gsi_and_the_server_is_checked() {
    // XRootD's gsi, as grid storage asks for it: the proxy's subject mapped by the
    // grid-mapfile (required) to the one user the authorization file lets read. The server's
    // gsi certificate names `localhost`, the name DNS gives the address the URLs give.
    let (auth, gridmap, authdb) = tester_may_read();
    let gsi_server = |cert: &str| {
        Server::start_with(
            &shared("data"),
            true,
            &format!(
                "xrootd.seclib libXrdSec.so\n\
                 sec.protocol gsi -certdir:{{dir}}/ca -cert:{{dir}}/{cert}.pem \
                 -key:{{dir}}/{cert}.key -crl:0 -gridmap:{} -gmapopt:2\n\
                 ofs.authorize 1\nacc.authdb {}\nacc.audit deny grant\n",
                gridmap.display(),
                authdb.display()
            ),
            Some(auth.path()),
        )
    };
    let server = gsi_server("localhost");
    let proxy = make_proxy(&server, "gnn4c tester", 1);
    let plain = format!("root://127.0.0.1:{}//real/uproot-HZZ.root", server.xrd);
    let inspect = |url: &str, proxy: Option<&Path>| {
        inspect_with(&server, url, proxy.map(|p| ("X509_USER_PROXY", p)))
    };
    // Over root:// and over roots://, as the mapped user.
    for url in [plain.clone(), server.url("root", "real/uproot-HZZ.root")] {
        let o = inspect(&url, Some(&proxy));
        assert!(o.status.success(), "{url}: {}", text_of(&o));
        assert!(text(&o).0.contains("2421 entries"), "{}", text_of(&o));
    }
    let log = std::fs::read_to_string(server.dir.path().join("gnn4c/xrd.log")).unwrap_or_default();
    assert!(log.contains("grant gsi gnn4c@"), "{log}");
    // No proxy: refused, and said so.
    let o = inspect(&plain, None);
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&plain) && err.contains("no X.509 proxy was found"),
        "{err}"
    );
    // A proxy of a user the grid-mapfile does not know: the server's refusal, named.
    let stranger = make_proxy(&server, "gnn4c stranger", 1);
    let o = inspect(&plain, Some(&stranger));
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&plain) && err.contains("x509up_gnn4c_stranger"),
        "{err}"
    );
    // An expired proxy: not sent, and said so.
    let expired = make_proxy(&server, "gnn4c tester", 0);
    std::thread::sleep(Duration::from_millis(1100));
    let o = inspect(&plain, Some(&expired));
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("expired") && err.contains("voms-proxy-init"),
        "{err}"
    );
    // A server whose CA this client does not trust is not given the proxy.
    let mut cmd = bin();
    let o = cmd
        .env("X509_CERT_DIR", auth.path())
        .env("X509_USER_PROXY", &proxy)
        .env("GNN4C_NET_RETRIES", "0")
        .args(["inspect", &plain])
        .output()
        .expect("the binary runs");
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the server's certificate") && err.contains("X509_CERT_DIR"),
        "{err}"
    );
    // A certificate naming neither the address nor the name DNS gives it: not given the proxy.
    let elsewhere = gsi_server("elsewhere.invalid");
    let url = format!("root://127.0.0.1:{}//real/uproot-HZZ.root", elsewhere.xrd);
    let proxy = make_proxy(&elsewhere, "gnn4c tester", 1);
    let o = inspect_with(&elsewhere, &url, Some(("X509_USER_PROXY", proxy.as_path())));
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the server's certificate") && err.contains("127.0.0.1 (localhost in DNS)"),
        "{err}"
    );
}

/// A TCP relay on a free local port to a server's `port`: bytes pass both ways until `cut_after`
/// bytes have come back from the server, in the middle of a response; then every connection is
/// dropped and, with `gone`, the port is closed too (the server went away mid-read). Without
/// `gone` later connections pass untouched (a connection that broke once). It counts the
/// connections it passed.
struct Relay {
    port: u16,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Relay {
    fn start(port: u16, cut_after: usize, gone: bool) -> Relay {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let relay_port = listener.local_addr().expect("address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let done = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stop, was_cut, counted) = (done.clone(), cut.clone(), connections.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) && (!gone || !cut.load(Ordering::SeqCst)) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).expect("blocking");
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let cutting = !cut.load(Ordering::SeqCst);
                {
                    let mut open = open.lock().expect("lock");
                    open.push(client.try_clone().expect("clone"));
                    open.push(server.try_clone().expect("clone"));
                }
                let pump = |mut from: TcpStream, mut to: TcpStream, counted: bool| {
                    let (cut, passed, open) = (cut.clone(), passed.clone(), open.clone());
                    let (cutting, cut_after) = (cutting, cut_after);
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            let mut n = n;
                            if counted && cutting && !cut.load(Ordering::SeqCst) {
                                let before = passed.fetch_add(n, Ordering::SeqCst);
                                if before + n >= cut_after {
                                    n = cut_after.saturating_sub(before);
                                    let _ = to.write_all(&buf[..n]);
                                    cut.store(true, Ordering::SeqCst);
                                    for s in open.lock().expect("lock").drain(..) {
                                        let _ = s.shutdown(Shutdown::Both);
                                    }
                                    break;
                                }
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                };
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                pump(client, server, false);
                pump(s2, c2, true);
            }
        });
        Relay {
            port: relay_port,
            done,
            cut: was_cut,
            connections,
        }
    }

    /// The connections it has passed.
    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether it has cut the connections.
    fn cut(&self) -> bool {
        self.cut.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn a_server_that_breaks_or_goes_away_mid_read_is_retried_then_named_or_skipped() {
    let export = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(shared("data/real"), export.path().join("real")).expect("link");
    std::fs::set_permissions(export.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(export.path(), false);
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    // 682 kB, uncompressed: a read goes on well past the file's two ends (128 kB each), which
    // the first request fetches.
    let tree = "real/uproot-HZZ-uncompressed.root";
    let hzz = |files: &str, extra: &str| {
        format!(
            "name: hzz\ntree: events\nschema: hzz\nclasses: [a]\n{extra}samples:\n  - {{name: a, files: [{files}], label: 0}}\n"
        )
    };
    let local = shared(&format!("data/{tree}")).display().to_string();
    let preprocess = |name: &str, config: &str| {
        std::fs::write(cwd.join(format!("{name}.yaml")), config).expect("config");
        bin()
            .current_dir(cwd)
            .env("GNN4C_NET_RETRIES", "1")
            .args(["preprocess", &format!("{name}.yaml"), "--cache", name])
            .output()
            .expect("the binary runs")
    };
    let o = preprocess("local", &hzz(&format!("'{local}'"), ""));
    assert!(o.status.success(), "{}", text_of(&o));
    let url = |protocol: &str, port: u16| match protocol {
        "http" => format!("http://127.0.0.1:{port}/{tree}"),
        _ => format!("root://127.0.0.1:{port}//{tree}"),
    };
    for (protocol, port) in [("root", server.xrd), ("http", server.http)] {
        // A connection that breaks in the middle of a response: the request is sent again on
        // a new connection (the file opened again), and the cache is the local one.
        let relay = Relay::start(port, 400_000, false);
        let name = format!("broken_{protocol}");
        let o = preprocess(&name, &hzz(&format!("'{}'", url(protocol, relay.port)), ""));
        assert!(o.status.success(), "{protocol}: {}", text_of(&o));
        assert!(relay.cut(), "{protocol}: the connection broke mid-read");
        assert_eq!(
            records(&cwd.join("local")),
            records(&cwd.join(&name)),
            "{protocol}: a read retried after a broken connection"
        );

        // A server that goes away mid-read: retried, then an error naming the URL; under
        // `on_bad_file: skip` the file is named and left out, the other file cached.
        let relay = Relay::start(port, 400_000, true);
        let gone = url(protocol, relay.port);
        let o = preprocess(&format!("gone_{protocol}"), &hzz(&format!("'{gone}'"), ""));
        let err = text(&o).1;
        assert!(!o.status.success(), "{protocol}: {}", text_of(&o));
        assert!(
            err.contains(&gone) && err.contains("after 2 tries"),
            "{protocol}: {err}"
        );
        let relay = Relay::start(port, 400_000, true);
        let gone = url(protocol, relay.port);
        let name = format!("skipped_{protocol}");
        let o = preprocess(
            &name,
            &hzz(&format!("'{local}', '{gone}'"), "on_bad_file: skip\n"),
        );
        let out = text(&o).0;
        assert!(o.status.success(), "{protocol}: {}", text_of(&o));
        assert!(
            out.contains("1 input files could not be read") && out.contains(&gone),
            "{protocol}: {out}"
        );
        assert_eq!(
            records(&cwd.join("local")),
            records(&cwd.join(&name)),
            "{protocol}: the local file alone"
        );
    }
}

#[test]
fn many_files_on_one_server_are_read_over_a_few_shared_connections() {
    // A dataset of 96 files on one server (96 names for the HZZ file).
    const FILES: usize = 96;
    let export = tempfile::tempdir().expect("tempdir");
    for i in 0..FILES {
        std::os::unix::fs::symlink(
            shared("data/real/uproot-HZZ.root"),
            export.path().join(format!("hzz-{i}.root")),
        )
        .expect("link");
    }
    std::fs::set_permissions(export.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(export.path(), false);
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let preprocess = |name: &str, files: &[String]| {
        let files: Vec<String> = files.iter().map(|f| format!("'{f}'")).collect();
        let config = format!(
            "name: many\ntree: events\nschema: hzz\nclasses: [a]\nsamples:\n  - {{name: a, files: [{}], label: 0}}\n",
            files.join(", ")
        );
        std::fs::write(cwd.join(format!("{name}.yaml")), config).expect("config");
        let o = run(
            cwd,
            &["preprocess", &format!("{name}.yaml"), "--cache", name],
        );
        assert!(o.status.success(), "{name}: {}", text_of(&o));
    };
    let local: Vec<String> = (0..FILES)
        .map(|i| {
            export
                .path()
                .join(format!("hzz-{i}.root"))
                .display()
                .to_string()
        })
        .collect();
    preprocess("local", &local);
    for (protocol, port) in [("root", server.xrd), ("http", server.http)] {
        let relay = Relay::start(port, usize::MAX, false);
        let urls: Vec<String> = (0..FILES)
            .map(|i| match protocol {
                "http" => format!("http://127.0.0.1:{}/hzz-{i}.root", relay.port),
                _ => format!("root://127.0.0.1:{}//hzz-{i}.root", relay.port),
            })
            .collect();
        preprocess(protocol, &urls);
        assert_eq!(
            records(&cwd.join("local")),
            records(&cwd.join(protocol)),
            "{protocol}: the cache of the files read over the network"
        );
        // Each file is opened twice (its fingerprint, several at once; its read); the
        // connections are kept between files, not made again for each (which took three a
        // file).
        let connections = relay.connections();
        assert!(
            connections <= FILES / 2,
            "{protocol}: {connections} connections for {FILES} files"
        );
    }
}
