//! The webhook's serving certificate, generated and rotated by the manager itself.
//!
//! Expected flow, on every replica, every `--webhook-cert-check-interval`:
//! 1. [`ensure`] reads the Secret `--webhook-secret-name` in the manager's namespace. Missing, it
//!    generates a CA and a serving certificate and *creates* the Secret; a replica that loses the
//!    race gets `AlreadyExists` and reads the winner's Secret. Present, [`decide`] says whether to
//!    rotate; rotating *replaces* the Secret with its `resourceVersion` as a precondition, so of
//!    replicas rotating at once one wins and the others read its result (`Conflict`).
//! 2. [`super::run`] writes [`Material::ca_bundle`] into `caBundle` of every webhook of the
//!    configuration (a replace with its `resourceVersion`), then serves the Secret's certificate
//!    once the configuration's `caBundle` trusts its CA.
//!
//! Guarantees: every replica serves a certificate of the one Secret; a rotation generates a new
//! CA and serving certificate at two thirds of the validity, and the bundle keeps the previous
//! CA until that CA expires, so a replica still serving the previous certificate, and an API
//! server that has not seen the new bundle yet, keep working during the overlap. The CA's key
//! signs one certificate and is then dropped: it is never stored.
//!
//! Caveats: [`Material`] holds the serving key; it has no `Debug` and nothing logs it.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

/// Secret data keys.
pub mod keys {
    /// The serving certificate (PEM).
    pub const TLS_CRT: &str = "tls.crt";
    /// The serving key (PEM).
    pub const TLS_KEY: &str = "tls.key";
    /// The CA bundle the configuration's `caBundle` carries: the current CA, then the previous
    /// one while it is valid.
    pub const CA_BUNDLE: &str = "ca.crt";
    /// The CA that signed `tls.crt`.
    pub const CA_CURRENT: &str = "ca-current.crt";
    /// The CA before the last rotation (kept in the bundle until it expires).
    pub const CA_PREVIOUS: &str = "ca-previous.crt";
    /// When the current certificates were issued, RFC 3339.
    pub const NOT_BEFORE: &str = "not-before";
    /// `notAfter` of the current certificates, RFC 3339.
    pub const NOT_AFTER: &str = "not-after";
    /// `notAfter` of the previous CA, RFC 3339.
    pub const PREVIOUS_NOT_AFTER: &str = "previous-not-after";
    /// The names the serving certificate is valid for, comma-separated.
    pub const HOSTS: &str = "hosts";
}

/// How far before now a new certificate's `notBefore` is put (clock skew between replicas and
/// the API server).
const BACKDATE: Duration = Duration::from_secs(60);

/// Errors of certificate handling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen could not generate a key or certificate.
    #[error("generating the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The Kubernetes API refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Secret kept changing under us.
    #[error("the webhook certificate Secret {0} kept changing; retrying later")]
    Contended(String),
}

/// The certificates of one Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Material {
    /// The serving certificate, PEM.
    pub tls_crt: String,
    /// The serving key, PEM. Never logged.
    pub tls_key: String,
    /// The CA that signed it, PEM.
    pub ca_current: String,
    /// The previous CA and its `notAfter`, during the overlap after a rotation.
    pub previous: Option<(String, Timestamp)>,
    /// When the serving certificate and current CA were issued (their notBefore is a minute
    /// earlier, for clock skew).
    pub not_before: Timestamp,
    /// `notAfter` of the serving certificate and current CA.
    pub not_after: Timestamp,
    /// The names the serving certificate is valid for.
    pub hosts: Vec<String>,
}

impl Material {
    /// The CAs to trust at `now`: the current one, and the previous one until it expires.
    pub fn ca_bundle(&self, now: Timestamp) -> String {
        let mut bundle = self.ca_current.clone();
        if let Some((ca, not_after)) = &self.previous
            && *not_after > now
        {
            if !bundle.ends_with('\n') {
                bundle.push('\n');
            }
            bundle.push_str(ca);
        }
        bundle
    }

    /// The Secret's data.
    pub fn to_data(&self, now: Timestamp) -> BTreeMap<String, ByteString> {
        let mut d = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            d.insert(k.to_string(), ByteString(v.into_bytes()));
        };
        put(keys::TLS_CRT, self.tls_crt.clone());
        put(keys::TLS_KEY, self.tls_key.clone());
        put(keys::CA_BUNDLE, self.ca_bundle(now));
        put(keys::CA_CURRENT, self.ca_current.clone());
        put(keys::NOT_BEFORE, self.not_before.to_string());
        put(keys::NOT_AFTER, self.not_after.to_string());
        put(keys::HOSTS, self.hosts.join(","));
        if let Some((ca, not_after)) = &self.previous {
            put(keys::CA_PREVIOUS, ca.clone());
            put(keys::PREVIOUS_NOT_AFTER, not_after.to_string());
        }
        d
    }

    /// Read a Secret's data; `None` if anything is missing or unreadable (it is then replaced).
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Option<Material> {
        let s = |k: &str| data.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
        let t = |k: &str| s(k).and_then(|v| v.parse::<Timestamp>().ok());
        let previous = match (s(keys::CA_PREVIOUS), t(keys::PREVIOUS_NOT_AFTER)) {
            (Some(ca), Some(at)) => Some((ca, at)),
            _ => None,
        };
        Some(Material {
            tls_crt: s(keys::TLS_CRT)?,
            tls_key: s(keys::TLS_KEY)?,
            ca_current: s(keys::CA_CURRENT)?,
            previous,
            not_before: t(keys::NOT_BEFORE)?,
            not_after: t(keys::NOT_AFTER)?,
            hosts: s(keys::HOSTS)?.split(',').filter(|h| !h.is_empty()).map(String::from).collect(),
        })
    }
}

/// What to do with the Secret's certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// They are good.
    Keep,
    /// Generate new ones: two thirds of the validity have passed.
    RotateAging,
    /// Generate new ones: they are not valid for the names the webhook is reached at.
    RotateHosts,
}

/// Whether `material` needs a rotation at `now` for a webhook reached at `hosts`: at two thirds
/// of its validity (a third is left as overlap, during which the previous CA stays trusted), or
/// when its names differ.
pub fn decide(now: Timestamp, material: &Material, hosts: &[String]) -> Decision {
    if material.hosts != hosts {
        return Decision::RotateHosts;
    }
    let lifetime = material.not_after.as_second() - material.not_before.as_second();
    let rotate_at = material.not_before.as_second() + lifetime * 2 / 3;
    if now.as_second() >= rotate_at { Decision::RotateAging } else { Decision::Keep }
}

/// A new CA and a serving certificate it signs, valid for `hosts` from `now` (backdated a
/// minute) for `validity`. `previous`'s current CA becomes the previous CA.
pub fn generate(
    now: Timestamp,
    validity: Duration,
    hosts: &[String],
    previous: Option<&Material>,
) -> Result<Material, Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    // The rotation schedule counts from `now`; only the certificates' notBefore is backdated.
    let not_before = now;
    let not_after = now + validity;
    // rcgen takes `time`'s OffsetDateTime, which this crate does not name: from the epoch.
    let rcgen_time = |t: Timestamp| {
        rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(u64::try_from(t.as_second()).unwrap_or(0))
    };
    let (nb, na) = (rcgen_time(now - BACKDATE), rcgen_time(not_after));
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.distinguished_name.push(DnType::CommonName, format!("kuvryn-sync webhook CA {}", now.as_second()));
    ca_params.not_before = nb;
    ca_params.not_after = na;
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, hosts.first().cloned().unwrap_or_default());
    params.not_before = nb;
    params.not_after = na;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Material {
        tls_crt: cert.pem(),
        tls_key: key.serialize_pem(),
        ca_current: ca.pem(),
        previous: previous.map(|p| (p.ca_current.clone(), p.not_after)),
        not_before,
        not_after,
        hosts: hosts.to_vec(),
    })
}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Read the Secret as it was.
    Read,
    /// Created the Secret.
    Created,
    /// Rotated the certificates.
    Rotated(Decision),
}

/// The Secret's certificates, created or rotated as needed (see the module's flow).
pub async fn ensure(
    secrets: &Api<Secret>,
    name: &str,
    hosts: &[String],
    validity: Duration,
) -> Result<(Material, Outcome), Error> {
    let api = |what: String| move |source| Error::Api { what, source };
    for _ in 0..4 {
        let now = Timestamp::now();
        let existing = secrets.get_opt(name).await.map_err(api(format!("reading Secret {name}")))?;
        let Some(secret) = existing else {
            let material = generate(now, validity, hosts, None)?;
            let secret = secret_of(name, &material, now, None);
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => return Ok((material, Outcome::Created)),
                // Another replica created it first: read theirs.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(api(format!("creating Secret {name}"))(e)),
            }
        };
        let parsed = secret.data.as_ref().and_then(Material::from_data);
        let decision = match &parsed {
            Some(m) => decide(now, m, hosts),
            None => Decision::RotateHosts,
        };
        if decision == Decision::Keep {
            return Ok((parsed.expect("kept material was parsed"), Outcome::Read));
        }
        let material = generate(now, validity, hosts, parsed.as_ref())?;
        let replacement = secret_of(name, &material, now, secret.metadata.resource_version.clone());
        match secrets.replace(name, &PostParams::default(), &replacement).await {
            Ok(_) => return Ok((material, Outcome::Rotated(decision))),
            // Another replica rotated (or changed) it first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api(format!("rotating Secret {name}"))(e)),
        }
    }
    Err(Error::Contended(name.to_string()))
}

fn secret_of(name: &str, m: &Material, now: Timestamp, resource_version: Option<String>) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            resource_version,
            labels: Some(BTreeMap::from([(
                crate::api::names::labels::MANAGED_BY.to_string(),
                crate::api::names::labels::MANAGED_BY_VALUE.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(m.to_data(now)),
        ..Default::default()
    }
}

/// The PEM certificates in `bundle`, normalized (for comparing bundles).
pub fn pem_blocks(bundle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in bundle.lines().map(str::trim) {
        if line.starts_with("-----BEGIN ") {
            cur = Some(String::new());
        } else if line.starts_with("-----END ") {
            if let Some(c) = cur.take() {
                out.push(c);
            }
        } else if let Some(c) = cur.as_mut() {
            c.push_str(line);
        }
    }
    out
}

/// Whether `bundle` trusts the CA `ca` (both PEM).
pub fn bundle_trusts(bundle: &str, ca: &str) -> bool {
    let have = pem_blocks(bundle);
    pem_blocks(ca).iter().all(|c| have.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn material(not_before: &str, not_after: &str) -> Material {
        Material {
            tls_crt: String::new(),
            tls_key: String::new(),
            ca_current: "-----BEGIN CERTIFICATE-----\nCUR\n-----END CERTIFICATE-----\n".into(),
            previous: None,
            not_before: at(not_before),
            not_after: at(not_after),
            hosts: vec!["svc.ns.svc".into()],
        }
    }

    #[test]
    fn rotation_at_two_thirds_of_the_validity() {
        let hosts = vec!["svc.ns.svc".to_string()];
        let m = material("2026-01-01T00:00:00Z", "2026-01-31T00:00:00Z");
        for (now, want) in [
            ("2026-01-01T00:00:00Z", Decision::Keep),
            ("2026-01-20T23:59:59Z", Decision::Keep),
            ("2026-01-21T00:00:00Z", Decision::RotateAging),
            ("2026-01-30T00:00:00Z", Decision::RotateAging),
            ("2026-02-10T00:00:00Z", Decision::RotateAging),
        ] {
            assert_eq!(decide(at(now), &m, &hosts), want, "at {now}");
        }
        let other = vec!["other.ns.svc".to_string()];
        assert_eq!(decide(at("2026-01-02T00:00:00Z"), &m, &other), Decision::RotateHosts);
    }

    #[test]
    fn the_previous_ca_stays_in_the_bundle_until_it_expires() {
        let mut m = material("2026-01-01T00:00:00Z", "2026-01-31T00:00:00Z");
        m.previous =
            Some(("-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----\n".into(), at("2026-01-10T00:00:00Z")));
        let during = m.ca_bundle(at("2026-01-09T00:00:00Z"));
        assert_eq!(pem_blocks(&during), ["CUR", "OLD"]);
        let after = m.ca_bundle(at("2026-01-10T00:00:00Z"));
        assert_eq!(pem_blocks(&after), ["CUR"]);
        assert!(bundle_trusts(&during, &m.ca_current) && bundle_trusts(&after, &m.ca_current));
        assert!(!bundle_trusts(&after, &m.previous.as_ref().unwrap().0));
    }

    #[test]
    fn generated_material_round_trips_through_the_secret_and_chains_the_previous_ca() {
        let hosts = vec!["ksync-webhook.kuvryn-system.svc".to_string(), "127.0.0.1".to_string()];
        let now = at("2026-12-02T00:00:00Z");
        let first = generate(now, Duration::from_secs(3600), &hosts, None).unwrap();
        assert_eq!(first.not_after, at("2026-12-02T01:00:00Z"));
        assert!(first.tls_key.contains("PRIVATE KEY"));
        let data = first.to_data(now);
        assert!(Material::from_data(&data).unwrap() == first);
        let second = generate(at("2026-12-02T00:40:00Z"), Duration::from_secs(3600), &hosts, Some(&first)).unwrap();
        assert_ne!(second.ca_current, first.ca_current);
        let bundle = second.ca_bundle(at("2026-12-02T00:50:00Z"));
        assert!(bundle_trusts(&bundle, &first.ca_current) && bundle_trusts(&bundle, &second.ca_current));
        assert!(!bundle_trusts(&second.ca_bundle(at("2026-12-02T01:00:01Z")), &first.ca_current));
    }
}
