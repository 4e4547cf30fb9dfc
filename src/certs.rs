//! `kruntimes-scheduler certs`: a private CA and a serving certificate for
//! the webhook and extender Service, for clusters without cert-manager.
//!
//! Writes `ca.crt`, `tls.crt` (leaf, then CA) and `tls.key` (mode 0600)
//! and prints the base64 `caBundle` for the webhook configurations.

use crate::webhooks::material::service_dns_names;
use std::path::{Path, PathBuf};

use base64::Engine as _;

/// How long the CA is valid.
pub const CA_VALIDITY_DAYS: i64 = 10 * 365;
/// How long the serving certificate is valid.
pub const SERVING_VALIDITY_DAYS: i64 = 365;

/// Flags of `certs`.
#[derive(Debug, Clone, clap::Args)]
pub struct CertsArgs {
    /// Directory to write `ca.crt`, `tls.crt` and `tls.key` into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Name of the Service in front of the scheduler.
    #[arg(long, default_value = "kruntimes-scheduler")]
    pub service: String,
    /// Namespace of that Service.
    #[arg(long, default_value = "kruntimes-system")]
    pub namespace: String,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// Errors of `certs`.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// Service or namespace is not a DNS label.
    #[error(
        "--{flag} {value:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"
    )]
    BadName {
        /// Which flag.
        flag: &'static str,
        /// Its value.
        value: String,
    },
    /// A file exists and `--force` was not given.
    #[error("{0} exists; pass --force to overwrite it")]
    Exists(PathBuf),
    /// Writing failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Generating failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
}

/// A generated CA and serving certificate, PEM encoded.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The CA certificate.
    pub ca_pem: String,
    /// The serving certificate followed by the CA.
    pub chain_pem: String,
    /// The serving key (PKCS#8).
    pub key_pem: String,
}

impl Generated {
    /// The `caBundle` value: base64 of the CA PEM.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

/// Generates a CA and a serving certificate for `names` (ECDSA P-256),
/// with the same profiles `--manage-webhooks` issues.
pub fn generate(names: &[String]) -> Result<Generated, CertsError> {
    use crate::webhooks::material::{issue_serving, new_ca};
    let now = time::OffsetDateTime::now_utc();
    let day = std::time::Duration::from_secs(86_400);
    let (ca_pem, ca_key) = new_ca(day * CA_VALIDITY_DAYS as u32, now)?;
    let (leaf_pem, key_pem) = issue_serving(
        &ca_pem,
        &ca_key,
        names,
        day * SERVING_VALIDITY_DAYS as u32,
        now,
    )?;
    Ok(Generated {
        chain_pem: format!("{leaf_pem}{ca_pem}"),
        ca_pem,
        key_pem,
    })
}

/// Writes the three files into `dir`; `tls.key` is created with mode 0600.
pub fn write(dir: &Path, generated: &Generated, force: bool) -> Result<(), CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let files = [
        ("ca.crt", &generated.ca_pem, 0o644),
        ("tls.crt", &generated.chain_pem, 0o644),
        ("tls.key", &generated.key_pem, 0o600),
    ];
    if !force {
        for (name, _, _) in &files {
            let path = dir.join(name);
            if path.exists() {
                return Err(CertsError::Exists(path));
            }
        }
    }
    for (name, content, mode) in files {
        let path = dir.join(name);
        write_file(&path, content.as_bytes(), mode).map_err(|source| CertsError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Writes to a temporary file with `mode` and renames it into place, so the
/// key is never readable by others, even for a moment.
fn write_file(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = options.open(&tmp)?;
    f.write_all(content)?;
    f.sync_all()?;
    drop(f);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    }
    std::fs::rename(&tmp, path)
}

/// Runs `certs`: generate, write, print the `caBundle` on stdout (and what
/// was written on stderr).
pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    for (flag, value) in [("service", &args.service), ("namespace", &args.namespace)] {
        if !crate::workload::is_dns_label(value) {
            return Err(CertsError::BadName {
                flag,
                value: value.clone(),
            }
            .into());
        }
    }
    let names = service_dns_names(&args.service, &args.namespace);
    let generated = generate(&names)?;
    write(&args.out, &generated, args.force)?;
    eprintln!(
        "wrote {dir}/ca.crt, {dir}/tls.crt and {dir}/tls.key (0600) for {names}",
        dir = args.out.display(),
        names = names.join(", ")
    );
    eprintln!("caBundle (base64 of ca.crt) follows on stdout");
    println!("{}", generated.ca_bundle());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_the_service() {
        assert_eq!(
            service_dns_names("s", "ns"),
            vec!["s", "s.ns", "s.ns.svc", "s.ns.svc.cluster.local"]
        );
    }

    #[test]
    fn writes_key_private() {
        let dir = std::env::temp_dir().join(format!("krs-certs-{}", uuid::Uuid::new_v4()));
        let g = generate(&service_dns_names("s", "ns")).expect("generate");
        write(&dir, &g, false).expect("write");
        assert!(matches!(write(&dir, &g, false), Err(CertsError::Exists(_))));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("tls.key"))
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
