//! XRootD's `gsi` authentication: the user's X.509 proxy (what `voms-proxy-init` writes)
//! proves who reads, over `root://` as over `roots://`.
//!
//! Two rounds of `kXR_auth`, each carrying an XrdSut buffer (the protocol's name, a step, then
//! type-length-value buckets ending with a zero type):
//! 1. `kXGC_certreq`: the crypto module, the protocol version, the hash of the CA behind the
//!    proxy, and a random tag for the server to sign.
//! 2. The server answers `kXGS_cert`: its certificate, its tag signed with that certificate's
//!    key, a tag of its own, its Diffie-Hellman parameters and public value, its ciphers and
//!    digests. The server is checked here as a TLS server is: its certificate against the CAs
//!    in `X509_CERT_DIR` and the host's name (for a bare IP address, where the certificate
//!    does not name it, the name DNS gives it), and its signature of the tag.
//! 3. `kXGC_cert`: the client's Diffie-Hellman public value, and encrypted with the agreed key
//!    (AES-128-CBC) the proxy's certificates and the server's tag signed with the proxy's key.
//!
//! The version sent is 10300, the last before XRootD signed its Diffie-Hellman values
//! (10400): servers keep that exchange for older clients, and the checks above bind the
//! server to its certificate all the same. Delegating the proxy to the server (which a server
//! asks for only where configured to) is refused with a message.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use num_bigint::BigUint;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::{Pkcs1v15Sign, PrivateKey as RsaPrivateKey, PublicKey as RsaPublicKey};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::connection::Connection;
use crate::source::tls::{ca_dir, trusted_roots, x509_proxy};

/// The credential type `kXR_auth` carries.
pub(super) const CREDENTIAL_TYPE: [u8; 4] = *b"gsi\0";

/// The protocol version this client speaks: unsigned Diffie-Hellman values.
const VERSION: u32 = 10300;
/// The client's options as a stock client sends them, without delegation.
const CLIENT_OPTIONS: u32 = 0x80;
/// Why a server asking for the proxy (`kXGS_pxyreq`) is refused.
const NO_DELEGATION: &str =
    "the server asks for the proxy to be delegated to it, which this reader does not do";
/// The session cipher; its key is the first 16 bytes of the Diffie-Hellman secret.
const CIPHER: &str = "aes-128-cbc";
const KEY_LEN: usize = 16;
/// The bytes of the client's Diffie-Hellman private exponent.
const PRIVATE_LEN: usize = 64;

// The steps: the client's (kXGC_*) and the server's (kXGS_*).
const CLIENT_CERTREQ: u32 = 1000;
const CLIENT_CERT: u32 = 1001;
const SERVER_CERT: u32 = 2001;
const SERVER_PROXY_REQUEST: u32 = 2002;

// The buckets' types (XrdSutAux's kXRS_*).
const CRYPTO_MODULE: u32 = 3000;
const MAIN: u32 = 3001;
const PUBLIC_KEY: u32 = 3004;
const SIGNED_CIPHER: u32 = 3005;
const RANDOM_TAG: u32 = 3006;
const SIGNED_RANDOM_TAG: u32 = 3007;
const MESSAGE: u32 = 3011;
const VERSION_BUCKET: u32 = 3014;
const CLIENT_OPTIONS_BUCKET: u32 = 3019;
const X509: u32 = 3022;
const ISSUER_HASH: u32 = 3023;
const CIPHER_ALGORITHMS: u32 = 3025;
const DIGEST_ALGORITHMS: u32 = 3026;

/// The user's proxy as `gsi` presents it.
pub(super) struct Proxy {
    path: PathBuf,
    /// The certificates (the proxy first), as PEM.
    chain_pem: Vec<u8>,
    key: RsaPrivateKey,
    /// The hash (`<hash>.0` in `X509_CERT_DIR`) of the CA that signed the user's certificate.
    issuer_hash: Option<String>,
    /// When the first of its certificates expires (seconds since 1970).
    expires: Option<i64>,
}

/// The user's X.509 proxy for `gsi`, read once: `None` where there is none.
pub(super) fn proxy() -> io::Result<Option<Arc<Proxy>>> {
    static PROXY: OnceLock<Result<Option<Arc<Proxy>>, String>> = OnceLock::new();
    PROXY
        .get_or_init(|| {
            let Some((path, chain, key)) = x509_proxy()? else {
                return Ok(None);
            };
            let bad = |what: String| {
                format!(
                    "the X.509 proxy {} (X509_USER_PROXY): {what}",
                    path.display()
                )
            };
            let key = match &key {
                PrivateKeyDer::Pkcs1(k) => RsaPrivateKey::from_pkcs1_der(k.secret_pkcs1_der())
                    .map_err(|e| bad(format!("its RSA key: {e}")))?,
                PrivateKeyDer::Pkcs8(k) => RsaPrivateKey::from_pkcs8_der(k.secret_pkcs8_der())
                    .map_err(|e| bad(format!("its key is not an RSA key ({e})")))?,
                _ => return Err(bad("its key is not an RSA key, which gsi needs".into())),
            };
            let chain_pem = chain.iter().flat_map(|c| pem("CERTIFICATE", c)).collect();
            let issuer_hash = issuer_hash(&chain);
            let expires = chain.iter().filter_map(|c| not_after(c)).min();
            Ok(Some(Arc::new(Proxy {
                path,
                chain_pem,
                key,
                issuer_hash,
                expires,
            })))
        })
        .clone()
        .map_err(io::Error::other)
}

/// Authenticates `c` with `proxy`, `params` being what the server's login offered for gsi
/// (`v:10600,c:ssl,ca:<hash>.0|<hash>.0`), `host` the name the URL gave the server.
pub(super) fn authenticate(
    c: &mut Connection,
    params: &str,
    host: &str,
    proxy: &Proxy,
) -> io::Result<()> {
    let server = c.server.clone();
    let context = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "gsi authentication with {server} (X.509 proxy {}): {e}",
                proxy.path.display()
            ),
        )
    };
    let failed = |what: String| context(io::Error::new(io::ErrorKind::PermissionDenied, what));
    let offered = |key: &str| {
        params
            .split(',')
            .find_map(|p| p.trim().strip_prefix(key))
            .unwrap_or_default()
            .to_owned()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if let Some(expired) = proxy.expires.filter(|&t| t < now) {
        let minutes = (now - expired) / 60;
        return Err(failed(format!(
            "the proxy expired {} h {} min ago: renew it (voms-proxy-init)",
            minutes / 60,
            minutes % 60
        )));
    }
    let modules = offered("c:");
    if !modules.is_empty() && !modules.split([':', '|']).any(|m| m == "ssl") {
        return Err(failed(format!(
            "the server offers the crypto modules {modules}, not ssl"
        )));
    }
    let issuer = proxy.issuer_hash.clone().unwrap_or_else(|| offered("ca:"));
    let tag = random_bytes(8)?;
    let request = Buffer::new(
        CLIENT_CERTREQ,
        vec![
            (CRYPTO_MODULE, b"ssl".to_vec()),
            (VERSION_BUCKET, VERSION.to_be_bytes().to_vec()),
            (ISSUER_HASH, issuer.into_bytes()),
            (CLIENT_OPTIONS_BUCKET, CLIENT_OPTIONS.to_be_bytes().to_vec()),
            (
                MAIN,
                Buffer::new(CLIENT_CERTREQ, vec![(RANDOM_TAG, tag.clone())]).encode(),
            ),
        ],
    );
    let Some(answer) = c
        .auth_step(CREDENTIAL_TYPE, &request.encode())
        .map_err(context)?
    else {
        return Err(failed(
            "the server accepted a certificate request as a login".into(),
        ));
    };
    let answer = Buffer::decode(&answer).map_err(context)?;
    let reply = respond(&answer, &tag, host, proxy).map_err(context)?;
    match c
        .auth_step(CREDENTIAL_TYPE, &reply.encode())
        .map_err(context)?
    {
        None => Ok(()),
        Some(more) => {
            let step = Buffer::decode(&more).map(|b| b.step).unwrap_or(0);
            Err(failed(if step == SERVER_PROXY_REQUEST {
                NO_DELEGATION.into()
            } else {
                format!("the server asked for more after the certificate (step {step})")
            }))
        }
    }
}

/// The answer to the server's `kXGS_cert`, once the server is checked.
fn respond(answer: &Buffer, tag: &[u8], host: &str, proxy: &Proxy) -> io::Result<Buffer> {
    match answer.step {
        SERVER_CERT => {}
        SERVER_PROXY_REQUEST => return Err(invalid(NO_DELEGATION)),
        step => return Err(invalid(format!("the server answered step {step}"))),
    }
    if let Some(message) = answer.get(MESSAGE) {
        return Err(invalid(String::from_utf8_lossy(message).into_owned()));
    }
    let main = Buffer::decode(answer.need(MAIN)?)?;
    let server_key = check_server(answer.need(X509)?, host)?;
    let signed = main.get(SIGNED_RANDOM_TAG).ok_or_else(|| {
        invalid("the server did not sign the client's random tag with its certificate's key")
    })?;
    server_key
        .verify(Pkcs1v15Sign::new_unprefixed(), tag, signed)
        .map_err(|_| {
            invalid("the server's signature of the random tag does not match its certificate's key")
        })?;
    let digest = session_digest(answer)?;
    let Some(blob) = answer.get(PUBLIC_KEY) else {
        if answer.get(SIGNED_CIPHER).is_some() {
            return Err(invalid(
                "the server signed its Diffie-Hellman values, which it does for clients of \
                 version 10400 and later only",
            ));
        }
        return Err(invalid("the server sent no Diffie-Hellman public value"));
    };
    let peer = PeerKey::parse(blob)?;
    let (public, key) = peer.agree()?;
    let server_tag = main.need(RANDOM_TAG)?;
    let signed_tag = proxy
        .key
        .sign(Pkcs1v15Sign::new_unprefixed(), server_tag)
        .map_err(|e| invalid(format!("signing with the proxy's key: {e}")))?;
    let inner = Buffer::new(
        CLIENT_CERT,
        vec![
            (X509, proxy.chain_pem.clone()),
            (SIGNED_RANDOM_TAG, signed_tag),
            (RANDOM_TAG, random_bytes(8)?),
        ],
    );
    let mut blob = peer.params_pem;
    blob.extend_from_slice(b"---BPUB---");
    blob.extend_from_slice(hex_upper(&public.to_bytes_be()).as_bytes());
    blob.extend_from_slice(b"---EPUB---");
    Ok(Buffer::new(
        CLIENT_CERT,
        vec![
            (CRYPTO_MODULE, b"ssl".to_vec()),
            (PUBLIC_KEY, blob),
            (CIPHER_ALGORITHMS, CIPHER.as_bytes().to_vec()),
            (DIGEST_ALGORITHMS, digest.into_bytes()),
            (MAIN, aes128_cbc_encrypt(&key, &inner.encode())),
        ],
    ))
}

/// The digest named back to the server (its first: this client signs no requests), once the
/// session cipher is found among the server's.
fn session_digest(answer: &Buffer) -> io::Result<String> {
    let listed = |kind| {
        answer
            .need(kind)
            .map(|b| String::from_utf8_lossy(b).trim_end_matches('\0').to_owned())
    };
    let ciphers = listed(CIPHER_ALGORITHMS)?;
    if !ciphers.split(':').any(|c| c == CIPHER) {
        return Err(invalid(format!(
            "the server offers the ciphers {ciphers}, not {CIPHER}"
        )));
    }
    let digests = listed(DIGEST_ALGORITHMS)?;
    Ok(digests.split(':').next().unwrap_or("sha1").to_owned())
}

/// The server's RSA key, once its certificate (PEM, the first in `pem`) is found trusted by
/// the CAs of every remote read and valid for `host`, as a TLS server's would be. A server
/// reached at a bare IP address (a redirect to one, as storage systems send) is checked
/// against the name DNS gives that address where the certificate does not name the address
/// itself, as XRootD's own client checks it.
fn check_server(pem: &[u8], host: &str) -> io::Result<RsaPublicKey> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("the server's certificate: {e}")))?;
    let (end, intermediates) = certs
        .split_first()
        .ok_or_else(|| invalid("the server sent no certificate"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(trusted_roots(), provider)
            .build()
            .map_err(|e| invalid(format!("checking the server's certificate: {e}")))?;
    let valid_for = |name: &str| -> io::Result<Result<(), rustls::Error>> {
        let name =
            ServerName::try_from(name.to_owned()).map_err(|e| invalid(format!("{name}: {e}")))?;
        Ok(
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                verifier.as_ref(),
                end,
                intermediates,
                &name,
                &[],
                UnixTime::now(),
            )
            .map(|_| ()),
        )
    };
    let checked = match (valid_for(host)?, host.parse::<std::net::IpAddr>()) {
        (Err(e), Ok(ip)) if not_for_name(&e) => match dns_lookup::lookup_addr(&ip) {
            Ok(named) => valid_for(&named)?.map_err(|e| {
                let named = format!("{host} ({named} in DNS)");
                if not_for_name(&e) {
                    rustls::Error::General(format!("not valid for {named}: {e}"))
                } else {
                    e
                }
            }),
            Err(_) => Err(rustls::Error::General(format!(
                "not valid for {host}, which has no name in DNS: {e}"
            ))),
        },
        (checked, _) => checked,
    };
    checked.map_err(|e| {
        let hint = match e {
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                " (is the server's CA trusted? Set X509_CERT_DIR to the folder of your site's CAs)"
            }
            _ => "",
        };
        invalid(format!("the server's certificate: {e}{hint}"))
    })?;
    let parsed = webpki::EndEntityCert::try_from(end)
        .map_err(|e| invalid(format!("the server's certificate: {e}")))?;
    RsaPublicKey::from_public_key_der(parsed.subject_public_key_info().as_ref())
        .map_err(|e| invalid(format!("the server's key is not an RSA key ({e})")))
}

/// Whether `e` says a certificate does not name the server.
fn not_for_name(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. }
        )
    )
}

/// The server's Diffie-Hellman parameters (PEM, sent back as they came) and public value.
struct PeerKey {
    params_pem: Vec<u8>,
    prime: BigUint,
    generator: BigUint,
    public: BigUint,
}

impl PeerKey {
    /// `<PEM parameters>---BPUB---<hex public value>---EPUB--` (the server writes the
    /// closing marker one dash short).
    fn parse(blob: &[u8]) -> io::Result<PeerKey> {
        let find = |needle: &[u8], from: usize| {
            blob.get(from..)?
                .windows(needle.len())
                .position(|w| w == needle)
                .map(|at| from + at)
        };
        let start = find(b"---BPUB---", 0)
            .ok_or_else(|| invalid("the server's Diffie-Hellman value has no ---BPUB---"))?;
        let end = find(b"---EPUB--", start + 10)
            .ok_or_else(|| invalid("the server's Diffie-Hellman value has no ---EPUB---"))?;
        let public = BigUint::parse_bytes(blob[start + 10..end].trim_ascii(), 16)
            .ok_or_else(|| invalid("the server's Diffie-Hellman value is not hexadecimal"))?;
        let params_pem = blob[..start].to_vec();
        let der = std::str::from_utf8(&params_pem)
            .ok()
            .and_then(pem_body)
            .ok_or_else(|| invalid("the server's Diffie-Hellman parameters are not PEM"))?;
        let (prime, generator) = dh_parameters(&der)
            .ok_or_else(|| invalid("the server's Diffie-Hellman parameters are not DER"))?;
        if prime.bits() < 512 || public <= BigUint::from(1u8) || public >= prime {
            return Err(invalid(
                "the server's Diffie-Hellman parameters or value are out of range",
            ));
        }
        Ok(PeerKey {
            params_pem,
            prime,
            generator,
            public,
        })
    }

    /// A fresh key pair in the server's group: the client's public value, and the session
    /// key (the first bytes of the shared secret, its leading zeros dropped as OpenSSL's
    /// `DH_compute_key` drops them).
    fn agree(&self) -> io::Result<(BigUint, Vec<u8>)> {
        // A 512-bit private exponent: at least twice the security strength of the group.
        let three = BigUint::from(3u8);
        let private = BigUint::from_bytes_be(&random_bytes(PRIVATE_LEN)?) % (&self.prime - &three)
            + BigUint::from(2u8);
        let public = self.generator.modpow(&private, &self.prime);
        let secret = self.public.modpow(&private, &self.prime).to_bytes_be();
        if secret.len() < KEY_LEN {
            return Err(invalid("the Diffie-Hellman secret is too short; try again"));
        }
        Ok((public, secret[..KEY_LEN].to_vec()))
    }
}

/// An XrdSut buffer: the protocol's name, a step, buckets.
#[derive(Debug, PartialEq)]
struct Buffer {
    step: u32,
    buckets: Vec<(u32, Vec<u8>)>,
}

impl Buffer {
    fn new(step: u32, buckets: Vec<(u32, Vec<u8>)>) -> Buffer {
        Buffer { step, buckets }
    }

    /// `gsi\0`, the step, each bucket's type, length and bytes, then a zero type (all
    /// big-endian).
    fn encode(&self) -> Vec<u8> {
        let mut out = b"gsi\0".to_vec();
        out.extend_from_slice(&self.step.to_be_bytes());
        for (kind, data) in &self.buckets {
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            out.extend_from_slice(data);
        }
        out.extend_from_slice(&0u32.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> io::Result<Buffer> {
        let name_end = bytes
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| invalid("a gsi message without its protocol's name"))?;
        if &bytes[..name_end] != b"gsi" {
            return Err(invalid(format!(
                "a message of protocol {:?}, not gsi",
                String::from_utf8_lossy(&bytes[..name_end])
            )));
        }
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
                .ok_or_else(|| invalid("a gsi message shorter than its buckets"))
        };
        let mut at = name_end + 1;
        let step = word(at)?;
        at += 4;
        let mut buckets = Vec::new();
        while at < bytes.len() {
            let kind = word(at)?;
            if kind == 0 {
                break;
            }
            let len = word(at + 4)? as usize;
            let data = bytes
                .get(at + 8..at + 8 + len)
                .ok_or_else(|| invalid("a gsi message shorter than its buckets"))?;
            buckets.push((kind, data.to_vec()));
            at += 8 + len;
        }
        Ok(Buffer { step, buckets })
    }

    fn get(&self, kind: u32) -> Option<&[u8]> {
        self.buckets
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, d)| d.as_slice())
    }

    fn need(&self, kind: u32) -> io::Result<&[u8]> {
        self.get(kind)
            .ok_or_else(|| invalid(format!("the server's message has no bucket {kind}")))
    }
}

/// `data` encrypted with AES-128 in CBC mode, a zero IV and PKCS#7 padding: what XRootD's
/// session cipher does for clients before version 10400.
fn aes128_cbc_encrypt(key: &[u8], data: &[u8]) -> Vec<u8> {
    use aes::cipher::{BlockEncrypt, KeyInit, generic_array::GenericArray};
    let cipher = aes::Aes128::new(GenericArray::from_slice(key));
    let pad = 16 - data.len() % 16;
    let mut out = data.to_vec();
    out.extend(std::iter::repeat_n(pad as u8, pad));
    let mut previous = [0u8; 16];
    for block in out.chunks_exact_mut(16) {
        for (b, p) in block.iter_mut().zip(previous) {
            *b ^= p;
        }
        cipher.encrypt_block(GenericArray::from_mut_slice(block));
        previous.copy_from_slice(block);
    }
    out
}

/// The hash naming, in `X509_CERT_DIR`, the CA that signed the user's certificate (the last
/// certificate of the proxy's chain that is not a CA's): the `<hash>` of its `<hash>.0`.
fn issuer_hash(chain: &[CertificateDer<'_>]) -> Option<String> {
    let user = chain.iter().rev().find_map(|c| {
        let cert = webpki::EndEntityCert::try_from(c).ok()?;
        (cert.issuer() != cert.subject()).then(|| cert.issuer().to_vec())
    })?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(ca_dir())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "0"))
        .collect();
    names.sort();
    names.into_iter().find_map(|path| {
        let ca = CertificateDer::from_pem_file(&path).ok()?;
        let parsed = webpki::EndEntityCert::try_from(&ca).ok()?;
        (parsed.subject() == user.as_slice())
            .then(|| path.file_stem()?.to_str().map(|s| format!("{s}.0")))
            .flatten()
    })
}

/// When the certificate `der` stops being valid (its `notAfter`), in seconds since 1970.
fn not_after(der: &[u8]) -> Option<i64> {
    let (_, certificate, _) = der_item(der)?;
    let (_, tbs, _) = der_item(certificate)?;
    // An explicit version ([0]) comes first where there is one.
    let (tag, _, after_version) = der_item(tbs)?;
    let mut rest = if tag == 0xa0 { after_version } else { tbs };
    // The serial number, the signature's algorithm, the issuer.
    for _ in 0..3 {
        rest = der_item(rest)?.2;
    }
    let (_, validity, _) = der_item(rest)?;
    let (_, _, after_start) = der_item(validity)?;
    let (tag, time, _) = der_item(after_start)?;
    asn1_time(tag, std::str::from_utf8(time).ok()?)
}

/// An ASN.1 UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, 0x18) in
/// seconds since 1970.
fn asn1_time(tag: u8, text: &str) -> Option<i64> {
    let digits = text
        .strip_suffix('Z')
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?;
    let (year, rest) = match tag {
        0x17 if digits.len() == 12 => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        0x18 if digits.len() == 14 => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |k: usize| rest.get(2 * k..2 * k + 2)?.parse::<i64>().ok();
    let (month, day) = (field(0)?, field(1)?);
    // Days since 1970-01-01 of the civil date (years counted from March).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + field(2)? * 3600 + field(3)? * 60 + field(4)?)
}

/// `der` as a PEM block labelled `label`.
fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

/// The bytes of the first PEM block in `text`, whatever its label.
fn pem_body(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let begin = text.find("-----BEGIN ")?;
    let body_start = begin + text[begin..].find('\n')? + 1;
    let body_end = body_start + text[body_start..].find("-----END ")?;
    let body: String = text[body_start..body_end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// The prime and generator of DER Diffie-Hellman parameters: a SEQUENCE whose first two
/// INTEGERs they are (PKCS #3, and X9.42 too).
fn dh_parameters(der: &[u8]) -> Option<(BigUint, BigUint)> {
    let (tag, sequence, _) = der_item(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag_p, p, rest) = der_item(sequence)?;
    let (tag_g, g, _) = der_item(rest)?;
    (tag_p == 0x02 && tag_g == 0x02).then(|| (BigUint::from_bytes_be(p), BigUint::from_bytes_be(g)))
}

/// One DER item: its tag, its contents and what follows it.
fn der_item(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |l, &b| (l << 8) | b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn random_bytes(n: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; n];
    getrandom::fill(&mut out).map_err(|e| io::Error::other(format!("random bytes: {e}")))?;
    Ok(out)
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_reads_back_as_written_and_a_short_one_is_refused() {
        let inner = Buffer::new(CLIENT_CERTREQ, vec![(RANDOM_TAG, b"12345678".to_vec())]);
        let outer = Buffer::new(
            CLIENT_CERTREQ,
            vec![(CRYPTO_MODULE, b"ssl".to_vec()), (MAIN, inner.encode())],
        );
        let bytes = outer.encode();
        assert_eq!(&bytes[..8], b"gsi\0\0\0\x03\xe8");
        let back = Buffer::decode(&bytes).expect("decodes");
        assert_eq!(back, outer);
        assert_eq!(Buffer::decode(back.get(MAIN).unwrap()).unwrap(), inner);
        let err = Buffer::decode(&bytes[..bytes.len() - 10]).unwrap_err();
        assert!(err.to_string().contains("shorter"), "{err}");
        assert!(Buffer::decode(b"ztn\0\0\0\0\0").is_err());
    }

    #[test]
    fn certificate_times_read_as_seconds_since_1970() {
        assert_eq!(asn1_time(0x17, "000101000000Z"), Some(946_684_800));
        assert_eq!(asn1_time(0x17, "991231235959Z"), Some(946_684_799));
        assert_eq!(asn1_time(0x18, "20500101000000Z"), Some(2_524_608_000));
        assert_eq!(asn1_time(0x18, "20240229120000Z"), Some(1_709_208_000));
        assert_eq!(asn1_time(0x17, "000101000000"), None);
        assert_eq!(asn1_time(0x04, "000101000000Z"), None);
        assert_eq!(asn1_time(0x17, "0001010000é0Z"), None);
    }

    #[test]
    fn aes128_cbc_gives_the_nist_vectors() {
        // NIST SP 800-38A, F.2.1 (CBC-AES128.Encrypt), with a zero IV: the first block's
        // input is the plaintext XOR the IV of the vector.
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let key = hex("2b7e151628aed2a6abf7158809cf4f3c");
        let iv = hex("000102030405060708090a0b0c0d0e0f");
        let plain = hex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51");
        let mut shifted = plain;
        for (b, v) in shifted.iter_mut().zip(&iv) {
            *b ^= v;
        }
        let out = aes128_cbc_encrypt(&key, &shifted);
        assert_eq!(
            hex_upper(&out[..32]),
            "7649ABAC8119B246CEE98E9B12E9197D5086CB9B507219EE95DB113A917678B2"
        );
        // A whole block of padding after a whole number of blocks.
        assert_eq!(out.len(), 48);
    }

    #[test]
    fn a_diffie_hellman_exchange_agrees_on_one_key() {
        // RFC 3526's 1536-bit MODP group (generator 2) as OpenSSL writes DH parameters.
        let prime = BigUint::parse_bytes(
            b"FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA237327FFFFFFFFFFFFFFFF",
            16,
        )
        .unwrap();
        let mut der = vec![0x02, 0x81, 0xc1, 0x00];
        der.extend_from_slice(&prime.to_bytes_be());
        der.extend_from_slice(&[0x02, 0x01, 0x02]);
        let mut sequence = vec![0x30, 0x81, der.len() as u8];
        sequence.extend_from_slice(&der);
        let params = pem("DH PARAMETERS", &sequence);
        let server_private = BigUint::from_bytes_be(&random_bytes(64).unwrap());
        let server_public = BigUint::from(2u8).modpow(&server_private, &prime);
        let mut blob = params.clone();
        blob.extend_from_slice(b"---BPUB---");
        blob.extend_from_slice(hex_upper(&server_public.to_bytes_be()).as_bytes());
        blob.extend_from_slice(b"---EPUB--");
        let peer = PeerKey::parse(&blob).expect("parses");
        assert_eq!(peer.params_pem, params);
        assert_eq!(
            (peer.prime.clone(), peer.generator.clone()),
            (prime.clone(), 2u8.into())
        );
        let (client_public, key) = peer.agree().expect("agrees");
        let server_secret = client_public.modpow(&server_private, &prime).to_bytes_be();
        assert_eq!(key, server_secret[..KEY_LEN]);
        assert!(PeerKey::parse(b"no markers").is_err());
        assert!(PeerKey::parse(b"---BPUB---EPUB--").is_err());
        assert!(PeerKey::parse(b"\xff\xfe---BPUB---12---EPUB--").is_err());
    }
}
