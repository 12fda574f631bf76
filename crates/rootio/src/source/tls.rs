//! TLS for every remote read (HTTPS, `roots://`, XRootD servers that start TLS): which server
//! certificates are trusted, and the X.509 proxy presented to a server that asks for one.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::net::user_id;

/// The TLS settings of every remote read, made once: the Mozilla roots, the CA bundle
/// `SSL_CERT_FILE` names or the system's, and the CAs in `X509_CERT_DIR` (default
/// `/etc/grid-security/certificates`: the IGTF CAs of grid sites, CERN's included); the user's
/// X.509 proxy, when there is one, for servers that ask for a client certificate.
pub(super) fn tls_config() -> io::Result<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS settings: {e}"))?
                .with_root_certificates(trusted_roots());
            let config = match x509_proxy()? {
                Some((path, chain, key)) => {
                    // Presented as it is: a proxy's own certificate carries an extension
                    // (`proxyCertInfo`) that only the server needs to understand.
                    let key = provider
                        .key_provider
                        .load_private_key(key)
                        .map_err(|e| format!("the X.509 proxy {}: its key: {e}", path.display()))?;
                    let certified = Arc::new(rustls::sign::CertifiedKey::new(chain, key));
                    builder.with_client_cert_resolver(Arc::new(ClientCertificate(certified)))
                }
                None => builder.with_no_client_auth(),
            };
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(io::Error::other)
}

/// The CAs every remote read trusts, read once: the Mozilla roots, the CA bundle
/// `SSL_CERT_FILE` names or the system's, and the CAs in `X509_CERT_DIR`.
pub(super) fn trusted_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for file in ca_files() {
            let Ok(certs) = CertificateDer::pem_file_iter(&file) else {
                continue;
            };
            for cert in certs.flatten() {
                // A certificate the store cannot use is left out, as OpenSSL does.
                let _ = roots.add(cert);
            }
        }
        Arc::new(roots)
    }))
}

/// The certificate chain and key presented to every server that asks for one.
#[derive(Debug)]
struct ClientCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for ClientCertificate {
    fn resolve(
        &self,
        _issuers: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The PEM files holding CAs to trust: `SSL_CERT_FILE` (else the system's bundle) and every
/// file in `X509_CERT_DIR` (else `/etc/grid-security/certificates`).
fn ca_files() -> Vec<PathBuf> {
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into(), Into::into);
    let in_dir = std::fs::read_dir(ca_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "pem" || x == "crt" || x == "0")
        });
    [bundle]
        .into_iter()
        .chain(in_dir)
        .filter(|p| p.is_file())
        .collect()
}

/// The folder of the sites' CAs, hashed as OpenSSL's `c_rehash` names them: `X509_CERT_DIR`,
/// else `/etc/grid-security/certificates`.
pub(super) fn ca_dir() -> PathBuf {
    std::env::var_os("X509_CERT_DIR")
        .map_or_else(|| "/etc/grid-security/certificates".into(), Into::into)
}

/// The proxy's file, its certificate chain (the proxy first) and its key.
pub(super) type Proxy = (
    PathBuf,
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
);

/// The user's X.509 proxy (what `voms-proxy-init` or `grid-proxy-init` writes: certificates
/// and key in one PEM file): the file `X509_USER_PROXY` names, else `/tmp/x509up_u$UID` when it
/// exists. A file named but unreadable is an error naming it.
pub(super) fn x509_proxy() -> Result<Option<Proxy>, String> {
    let (path, named) = match std::env::var_os("X509_USER_PROXY").filter(|p| !p.is_empty()) {
        Some(p) => (PathBuf::from(p), true),
        None => match user_id() {
            Some(uid) => (PathBuf::from(format!("/tmp/x509up_u{uid}")), false),
            None => return Ok(None),
        },
    };
    if !named && !path.is_file() {
        return Ok(None);
    }
    let bad = |what: String| {
        format!(
            "the X.509 proxy {} (X509_USER_PROXY): {what}",
            path.display()
        )
    };
    let chain = CertificateDer::pem_file_iter(&path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&path).map_err(|e| bad(format!("its key: {e}")))?;
    Ok(Some((path, chain, key)))
}
