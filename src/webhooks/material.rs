//! The certificate material kept in the webhook Secret, and the decision
//! whether it can be served as it is, needs a new serving certificate, or
//! needs a new CA. Pure: no API calls, the clock is a parameter.
//!
//! Secret keys:
//!
//! | key | content |
//! | --- | --- |
//! | `ca.crt` | the signing CA first, then older CAs still valid (the `caBundle`) |
//! | `ca.key` | the signing CA's private key |
//! | `tls.crt` | the serving certificate, then the signing CA |
//! | `tls.key` | the serving certificate's private key |
//!
//! A new CA is made only when the current one is unusable or would expire
//! before a fresh serving certificate does; the CAs it replaces stay in
//! `ca.crt` until they expire, so a replica still serving a certificate of
//! the old CA is trusted while it catches up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use time::OffsetDateTime;

/// Secret key of the CA bundle.
pub const CA_CRT: &str = "ca.crt";
/// Secret key of the signing CA's private key.
pub const CA_KEY: &str = "ca.key";
/// Secret key of the served chain.
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the served certificate's private key.
pub const TLS_KEY: &str = "tls.key";

/// `not_before` is set this far in the past, for clocks slightly behind.
const BACKDATE: time::Duration = time::Duration::hours(1);

/// The four PEM values of the Secret; a missing key is an empty string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Material {
    /// Signing CA first, then older CAs kept for the overlap.
    pub ca_crt: String,
    /// Signing CA key.
    pub ca_key: String,
    /// Serving certificate, then the signing CA.
    pub tls_crt: String,
    /// Serving key.
    pub tls_key: String,
}

/// How long certificates live and when they are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// Validity of a new CA.
    pub ca_validity: Duration,
    /// Validity of a new serving certificate.
    pub serving_validity: Duration,
    /// A serving certificate with less than this left is replaced. A CA is
    /// replaced when less than `serving_validity + renew_before` is left,
    /// so a serving certificate never outlives its CA.
    pub renew_before: Duration,
}

impl Lifetimes {
    /// Checks the lifetimes fit together; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.renew_before.is_zero() {
            return Err("--cert-renew-before must be greater than zero".into());
        }
        if self.renew_before >= self.serving_validity {
            return Err(format!(
                "--cert-renew-before ({}) must be shorter than --cert-validity ({})",
                humantime::format_duration(self.renew_before),
                humantime::format_duration(self.serving_validity)
            ));
        }
        if self.ca_validity <= (self.serving_validity + self.renew_before) * 2 {
            return Err(format!(
                "--ca-validity ({}) must be more than twice --cert-validity plus --cert-renew-before",
                humantime::format_duration(self.ca_validity)
            ));
        }
        Ok(())
    }

    fn ca_renew_before(&self) -> Duration {
        self.serving_validity + self.renew_before
    }
}

/// Expiry of what is served, for the metric and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// `notAfter` of the serving certificate.
    pub serving: OffsetDateTime,
    /// `notAfter` of the signing CA.
    pub ca: OffsetDateTime,
}

/// What to do with material read from the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assessment {
    /// Serve it as it is.
    Valid(Expiry),
    /// The CA is fine; issue a new serving certificate (the reason says why).
    RenewServing(String),
    /// Make a new CA and serving certificate (the reason says why).
    Rotate(String),
}

/// Why material could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MaterialError {
    /// rcgen refused.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// What was just made does not verify (a bug, never expected).
    #[error("generated certificates do not verify: {0}")]
    Inconsistent(String),
}

fn to_time(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// PEM blocks of `pem` as DER certificates (blocks that are not certificates are an error).
fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let out: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("unreadable PEM: {e}"))?;
    if out.is_empty() {
        return Err("no certificate".into());
    }
    Ok(out)
}

/// `notAfter`, whether it is a CA, and the SubjectPublicKeyInfo of one certificate.
fn facts(der: &CertificateDer<'_>) -> Result<(OffsetDateTime, bool, Vec<u8>), String> {
    let (_, x509) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("unparsable certificate: {e}"))?;
    Ok((
        x509.validity().not_after.to_datetime(),
        x509.is_ca(),
        x509.public_key().raw.to_vec(),
    ))
}

impl Material {
    /// Reads the four keys of a Secret's `data` (missing: empty, not UTF-8: empty).
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        let get = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.clone()).ok())
                .unwrap_or_default()
        };
        Material {
            ca_crt: get(CA_CRT),
            ca_key: get(CA_KEY),
            tls_crt: get(TLS_CRT),
            tls_key: get(TLS_KEY),
        }
    }

    /// The four keys for a Secret's `data`.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        [
            (CA_CRT, &self.ca_crt),
            (CA_KEY, &self.ca_key),
            (TLS_CRT, &self.tls_crt),
            (TLS_KEY, &self.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect()
    }

    /// Decides whether this material can be served for `names` at `now`.
    pub fn assess(
        &self,
        names: &[String],
        lifetimes: &Lifetimes,
        now: OffsetDateTime,
    ) -> Assessment {
        let ca = match self.check_ca(lifetimes, now) {
            Ok(ca) => ca,
            Err(why) => return Assessment::Rotate(why),
        };
        match self.check_serving(names, lifetimes, now) {
            Ok(serving) => Assessment::Valid(Expiry { serving, ca }),
            Err(why) => Assessment::RenewServing(why),
        }
    }

    /// The signing CA: parses, is a CA, matches `ca.key`, is not near expiry.
    fn check_ca(
        &self,
        lifetimes: &Lifetimes,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, String> {
        let bundle = certs(&self.ca_crt).map_err(|e| format!("{CA_CRT}: {e}"))?;
        let (not_after, is_ca, spki) = facts(&bundle[0]).map_err(|e| format!("{CA_CRT}: {e}"))?;
        if !is_ca {
            return Err(format!("{CA_CRT}: the first certificate is not a CA"));
        }
        let key = KeyPair::from_pem(&self.ca_key).map_err(|e| format!("{CA_KEY}: {e}"))?;
        if key.subject_public_key_info() != spki {
            return Err(format!("{CA_KEY} does not belong to the CA in {CA_CRT}"));
        }
        if not_after - now < to_time(lifetimes.ca_renew_before()) {
            return Err(format!("the CA expires at {not_after}"));
        }
        Ok(not_after)
    }

    /// The serving certificate: matches its key, chains to the signing CA,
    /// is valid for every name now, and is not inside the renewal window.
    fn check_serving(
        &self,
        names: &[String],
        lifetimes: &Lifetimes,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, String> {
        crate::tls::TlsConfigHandle::from_pem(self.tls_crt.as_bytes(), self.tls_key.as_bytes())
            .map_err(|e| format!("{TLS_CRT}/{TLS_KEY}: {e}"))?;
        let chain = certs(&self.tls_crt).map_err(|e| format!("{TLS_CRT}: {e}"))?;
        let signing = certs(&self.ca_crt).map_err(|e| format!("{CA_CRT}: {e}"))?;
        verify(&chain[0], &signing[0], names, now).map_err(|e| format!("{TLS_CRT}: {e}"))?;
        let (not_after, _, _) = facts(&chain[0]).map_err(|e| format!("{TLS_CRT}: {e}"))?;
        if not_after - now < to_time(lifetimes.renew_before) {
            return Err(format!("the serving certificate expires at {not_after}"));
        }
        Ok(not_after)
    }

    /// New material replacing `prev` as `assessment` says (`Rotate` when
    /// there is nothing usable). Older CAs of `prev` that are still valid
    /// stay in `ca.crt`.
    pub fn renew(
        prev: Option<&Material>,
        assessment: &Assessment,
        names: &[String],
        lifetimes: &Lifetimes,
        now: OffsetDateTime,
    ) -> Result<Material, MaterialError> {
        let keep_ca = matches!(assessment, Assessment::RenewServing(_));
        let (ca_pem, ca_key) = match prev {
            Some(p) if keep_ca => (first_pem(&p.ca_crt), p.ca_key.clone()),
            _ => new_ca(lifetimes.ca_validity, now)?,
        };
        // The signing CA, then every other still-valid CA of the old bundle.
        let mut bundle = vec![ca_pem.clone()];
        if let Some(p) = prev {
            for der in certs(&p.ca_crt).unwrap_or_default() {
                let pem = to_pem(&der);
                if bundle.contains(&pem) {
                    continue;
                }
                if let Ok((not_after, true, _)) = facts(&der)
                    && not_after > now
                {
                    bundle.push(pem);
                }
            }
        }
        let (leaf, key) = issue_serving(&ca_pem, &ca_key, names, lifetimes.serving_validity, now)?;
        let m = Material {
            ca_crt: bundle.concat(),
            ca_key,
            tls_crt: format!("{leaf}{ca_pem}"),
            tls_key: key,
        };
        match m.assess(names, lifetimes, now) {
            Assessment::Valid(_) => Ok(m),
            Assessment::RenewServing(why) | Assessment::Rotate(why) => {
                Err(MaterialError::Inconsistent(why))
            }
        }
    }

    /// The `caBundle`: every CA of `ca.crt`, PEM.
    pub fn ca_bundle(&self) -> &str {
        &self.ca_crt
    }

    /// Whether the CA that signs this material's serving certificate (the
    /// first of `ca.crt`) is in `other`'s bundle.
    pub fn signer_trusted_by(&self, other: &Material) -> bool {
        let Some(signer) = certs(&self.ca_crt).ok().and_then(|c| c.into_iter().next()) else {
            return false;
        };
        certs(&other.ca_crt).is_ok_and(|b| b.contains(&signer))
    }
}

fn to_pem(der: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn first_pem(bundle: &str) -> String {
    certs(bundle)
        .ok()
        .and_then(|c| c.first().map(to_pem))
        .unwrap_or_default()
}

/// Verifies `leaf` was issued by `ca` and is valid for each of `names` at `now`.
pub fn verify(
    leaf: &CertificateDer<'_>,
    ca: &CertificateDer<'_>,
    names: &[String],
    now: OffsetDateTime,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.clone().into_owned())
        .map_err(|e| format!("CA not usable as a trust anchor: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    let secs = u64::try_from(now.unix_timestamp()).unwrap_or_default();
    let at = UnixTime::since_unix_epoch(Duration::from_secs(secs));
    for name in names {
        let server = ServerName::try_from(name.clone()).map_err(|e| format!("{name}: {e}"))?;
        verifier
            .verify_server_cert(leaf, &[], &server, &[], at)
            .map_err(|e| format!("not valid for {name}: {e}"))?;
    }
    Ok(())
}

pub(crate) fn new_ca(
    validity: Duration,
    now: OffsetDateTime,
) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("kruntimes-scheduler webhook CA {}", now.unix_timestamp()),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = now - BACKDATE;
    params.not_after = now + to_time(validity);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((to_pem(cert.der()), key.serialize_pem()))
}

pub(crate) fn issue_serving(
    ca_pem: &str,
    ca_key: &str,
    names: &[String],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<(String, String), rcgen::Error> {
    let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(ca_key)?)?;
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = now + to_time(validity);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((to_pem(cert.der()), key.serialize_pem()))
}

/// The DNS names a Service is reached by from inside the cluster.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn names() -> Vec<String> {
        service_dns_names("svc", "ns")
    }

    fn lifetimes() -> Lifetimes {
        Lifetimes {
            ca_validity: 3650 * DAY,
            serving_validity: 365 * DAY,
            renew_before: 30 * DAY,
        }
    }

    fn fresh(now: OffsetDateTime) -> Material {
        Material::renew(
            None,
            &Assessment::Rotate("absent".into()),
            &names(),
            &lifetimes(),
            now,
        )
        .expect("generate")
    }

    #[test]
    fn fresh_material_is_valid_until_the_renewal_window() {
        let now = OffsetDateTime::now_utc();
        let m = fresh(now);
        let Assessment::Valid(expiry) = m.assess(&names(), &lifetimes(), now) else {
            panic!("fresh material must be valid");
        };
        assert!(expiry.serving - now > to_time(364 * DAY));
        assert!(expiry.ca - now > to_time(3600 * DAY));
        // 336 days on, less than 30 days are left: a new serving certificate.
        let later = now + to_time(336 * DAY);
        assert!(matches!(
            m.assess(&names(), &lifetimes(), later),
            Assessment::RenewServing(why) if why.contains("expires")
        ));
    }

    #[test]
    fn renewing_the_serving_certificate_keeps_the_ca() {
        let now = OffsetDateTime::now_utc();
        let m = fresh(now);
        let later = now + to_time(340 * DAY);
        let a = m.assess(&names(), &lifetimes(), later);
        let r = Material::renew(Some(&m), &a, &names(), &lifetimes(), later).expect("renew");
        assert_eq!(r.ca_crt, m.ca_crt);
        assert_eq!(r.ca_key, m.ca_key);
        assert_ne!(r.tls_crt, m.tls_crt);
        assert!(matches!(
            r.assess(&names(), &lifetimes(), later),
            Assessment::Valid(_)
        ));
    }

    #[test]
    fn a_ca_near_expiry_rotates_and_the_old_ca_stays_in_the_bundle() {
        let now = OffsetDateTime::now_utc();
        let m = fresh(now);
        // 3650 - 3300 = 350 days left < 365 + 30.
        let later = now + to_time(3300 * DAY);
        let a = m.assess(&names(), &lifetimes(), later);
        assert!(matches!(&a, Assessment::Rotate(why) if why.contains("CA expires")));
        let r = Material::renew(Some(&m), &a, &names(), &lifetimes(), later).expect("rotate");
        assert_ne!(r.ca_key, m.ca_key);
        let bundle = certs(&r.ca_crt).expect("bundle");
        assert_eq!(bundle.len(), 2, "new CA and the old one");
        assert_eq!(to_pem(&bundle[1]), m.ca_crt);
        // The old CA, still valid, is the issuer certificates served before the rotation chain to.
        let old_leaf = certs(&m.tls_crt).expect("old chain");
        verify(&old_leaf[0], &bundle[1], &names(), now).expect("old leaf trusted");
        assert!(facts(&bundle[1]).expect("old CA").0 > later);
        // Once the old CA has expired, the next renewal drops it.
        let much_later = now + to_time(3651 * DAY);
        let r2 = Material::renew(
            Some(&r),
            &Assessment::RenewServing("test".into()),
            &names(),
            &lifetimes(),
            much_later,
        )
        .expect("renew");
        assert_eq!(certs(&r2.ca_crt).expect("bundle").len(), 1);
    }

    #[test]
    fn corrupt_or_foreign_material_is_rotated_or_renewed() {
        let now = OffsetDateTime::now_utc();
        let m = fresh(now);
        let mut bad = m.clone();
        bad.ca_crt = "garbage".into();
        assert!(matches!(
            bad.assess(&names(), &lifetimes(), now),
            Assessment::Rotate(_)
        ));
        let mut no_key = m.clone();
        no_key.ca_key.clear();
        assert!(
            matches!(no_key.assess(&names(), &lifetimes(), now), Assessment::Rotate(why) if why.contains(CA_KEY))
        );
        let other = fresh(now);
        let mut foreign_key = m.clone();
        foreign_key.ca_key = other.ca_key.clone();
        assert!(
            matches!(foreign_key.assess(&names(), &lifetimes(), now), Assessment::Rotate(why) if why.contains("does not belong"))
        );
        // A serving certificate of another CA.
        let mut foreign_leaf = m.clone();
        foreign_leaf.tls_crt = other.tls_crt.clone();
        foreign_leaf.tls_key = other.tls_key.clone();
        assert!(matches!(
            foreign_leaf.assess(&names(), &lifetimes(), now),
            Assessment::RenewServing(_)
        ));
        // A serving key that does not match.
        let mut wrong_key = m.clone();
        wrong_key.tls_key = other.tls_key.clone();
        assert!(matches!(
            wrong_key.assess(&names(), &lifetimes(), now),
            Assessment::RenewServing(_)
        ));
        // Names of another Service.
        let other_names = service_dns_names("other", "ns");
        assert!(matches!(
            m.assess(&other_names, &lifetimes(), now),
            Assessment::RenewServing(why) if why.contains("not valid for other")
        ));
        // Renewing after a corrupt CA keeps no garbage.
        let r = Material::renew(
            Some(&bad),
            &bad.assess(&names(), &lifetimes(), now),
            &names(),
            &lifetimes(),
            now,
        )
        .expect("rotate");
        assert_eq!(certs(&r.ca_crt).expect("bundle").len(), 1);
    }

    #[test]
    fn a_new_ca_is_not_trusted_by_the_old_bundle_until_seen() {
        let now = OffsetDateTime::now_utc();
        let m = fresh(now);
        let later = now + to_time(3300 * DAY);
        let r = Material::renew(
            Some(&m),
            &m.assess(&names(), &lifetimes(), later),
            &names(),
            &lifetimes(),
            later,
        )
        .expect("rotate");
        assert!(m.signer_trusted_by(&m));
        assert!(
            m.signer_trusted_by(&r),
            "the old CA stays in the new bundle"
        );
        assert!(
            !r.signer_trusted_by(&m),
            "the new CA is not in the old bundle"
        );
        assert!(r.signer_trusted_by(&r));
    }

    #[test]
    fn secret_data_round_trips() {
        let m = fresh(OffsetDateTime::now_utc());
        assert_eq!(Material::from_data(&m.to_data()), m);
        assert_eq!(Material::from_data(&BTreeMap::new()), Material::default());
    }

    #[test]
    fn lifetimes_are_checked() {
        assert!(lifetimes().validate().is_ok());
        let mut l = lifetimes();
        l.renew_before = l.serving_validity;
        assert!(l.validate().unwrap_err().contains("--cert-renew-before"));
        let mut l = lifetimes();
        l.ca_validity = l.serving_validity;
        assert!(l.validate().unwrap_err().contains("--ca-validity"));
    }
}
