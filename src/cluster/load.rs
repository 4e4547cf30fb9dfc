//! Reading object documents: YAML or JSON, multi-document, `kind: List`,
//! from a file, a directory, or a request body.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A document that could not be read, with where it came from.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
}

/// Splits documents into objects: each document is an object or a `List`
/// (any kind ending in `List` with `items`); null documents are skipped.
pub fn flatten(docs: Vec<Value>, origin: &str) -> Result<Vec<Value>, LoadError> {
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(ref m)
                if m.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                match m.get("items") {
                    Some(Value::Array(items)) => out.extend(items.iter().cloned()),
                    Some(Value::Null) | None => {}
                    Some(_) => {
                        return Err(LoadError::Parse {
                            origin: origin.to_owned(),
                            message: format!("document {i}: items: must be a list"),
                        });
                    }
                }
            }
            Value::Object(_) => out.push(doc),
            _ => {
                return Err(LoadError::Parse {
                    origin: origin.to_owned(),
                    message: format!("document {i}: must be an object"),
                });
            }
        }
    }
    Ok(out)
}

/// Parses text as JSON (one value) when it looks like JSON, else as
/// multi-document YAML.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, LoadError> {
    let trimmed = text.trim_start();
    let docs = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| LoadError::Parse {
            origin: origin.to_owned(),
            message: format!("invalid JSON: {e}"),
        })?;
        match v {
            Value::Array(items) => items,
            v => vec![v],
        }
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| LoadError::Parse {
            origin: origin.to_owned(),
            message: format!("invalid YAML: {e}"),
        })?
    };
    flatten(docs, origin)
}

/// Reads a file, or every `.yaml`/`.yml`/`.json` file under a directory
/// (recursively, in path order). An empty directory is an empty cluster.
pub fn load_path(path: &Path) -> Result<Vec<Value>, LoadError> {
    let meta = std::fs::metadata(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut files = Vec::new();
    if meta.is_dir() {
        collect_files(path, &mut files)?;
        files.sort();
    } else {
        files.push(path.to_owned());
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| LoadError::Io {
            path: f.clone(),
            source,
        })?;
        out.extend(parse_documents(&text, &f.display().to_string())?);
    }
    Ok(out)
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let rd = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_owned(),
        source,
    })?;
    for entry in rd {
        let entry = entry.map_err(|source| LoadError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let p = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            collect_files(&p, out)?;
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(p);
        }
    }
    Ok(())
}

/// What [`skip_unmodelled`] left out: object counts by kind (`Kind` or,
/// for a kind of another API group under a modelled name,
/// `Kind.group`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped(pub std::collections::BTreeMap<String, usize>);

impl Skipped {
    /// Objects skipped.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Skipped {
    /// One line: `12 objects of kinds the scheduler does not model:
    /// ConfigMap 5, Deployment 4, Service 3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} objects of kinds the scheduler does not model:",
            self.total()
        )?;
        for (i, (kind, n)) in self.0.iter().enumerate() {
            write!(f, "{}{kind} {n}", if i == 0 { " " } else { ", " })?;
        }
        Ok(())
    }
}

/// The API group of an apiVersion (`""` for the core group's `v1`).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// `--state` snapshots (`kubectl get ... -A -o json`, a full cluster dump)
/// hold kinds the scheduler does not model: they are left out and counted.
/// An object is kept when its kind is one of the kind table's and its
/// apiVersion is in that kind's API group (any version: the store then
/// refuses a version it does not read, as the object API does), or when it
/// has no kind or apiVersion to judge by (the store then says what is
/// missing). `POST /v1/objects` does not call this: it stays strict.
pub fn skip_unmodelled(objects: Vec<Value>) -> (Vec<Value>, Skipped) {
    use super::kinds::Kind;
    let mut skipped = Skipped::default();
    let kept = objects
        .into_iter()
        .filter(|o| {
            let Some(kind) = o.get("kind").and_then(Value::as_str) else {
                return true;
            };
            let api_version = o.get("apiVersion").and_then(Value::as_str);
            let modelled = Kind::ALL.iter().find(|k| k.as_str() == kind);
            let keep = match (modelled, api_version) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(k), Some(v)) => group_of(v) == group_of(k.api_version()),
            };
            if !keep {
                let label = match (modelled, api_version) {
                    (Some(_), Some(v)) => format!("{kind}.{}", group_of(v)),
                    _ => kind.to_owned(),
                };
                *skipped.0.entry(label).or_default() += 1;
            }
            keep
        })
        .collect();
    (kept, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_multi_doc_and_lists() {
        let text = "kind: Pod\nmetadata: {name: a}\n---\nkind: List\nitems:\n- kind: Run\n  metadata: {name: r}\n---\n";
        let objs = parse_documents(text, "t").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "Run");
    }

    #[test]
    fn json_object_and_array() {
        let objs = parse_documents(r#"{"kind":"PodList","items":[{"kind":"Pod"}]}"#, "t").unwrap();
        assert_eq!(objs.len(), 1);
        let objs = parse_documents(r#"[{"kind":"Pod"},{"kind":"Run"}]"#, "t").unwrap();
        assert_eq!(objs.len(), 2);
    }

    #[test]
    fn errors_say_where() {
        let e = parse_documents("{not json", "body")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("body: invalid JSON"), "{e}");
        let e = parse_documents("- 1\n- 2\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be an object"), "{e}");
        let e = parse_documents("a: [1,\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.yaml: invalid YAML"), "{e}");
    }

    #[test]
    fn unmodelled_kinds_are_skipped_and_counted() {
        let objs = parse_documents(
            r#"{"kind":"List","apiVersion":"v1","items":[
                {"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}},
                {"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d"}},
                {"kind":"Service","apiVersion":"v1","metadata":{"name":"s1"}},
                {"kind":"Service","apiVersion":"v1","metadata":{"name":"s2"}},
                {"kind":"Node","apiVersion":"example.com/v1","metadata":{"name":"n"}},
                {"kind":"PodGroup","apiVersion":"scheduling.k8s.io/v1alpha9","metadata":{"name":"g"}},
                {"kind":"Run","metadata":{"name":"r"}},
                {"metadata":{"name":"nokind"}}
            ]}"#,
            "t",
        )
        .unwrap();
        let (kept, skipped) = skip_unmodelled(objs);
        let names: Vec<&str> = kept
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        // Another version of a modelled group is kept (the store refuses it
        // by name); no kind or no apiVersion is kept (the store says so).
        assert_eq!(names, ["p", "g", "r", "nokind"]);
        assert_eq!(skipped.total(), 4);
        assert_eq!(
            skipped.to_string(),
            "4 objects of kinds the scheduler does not model: Deployment 1, Node.example.com 1, Service 2"
        );
    }

    #[test]
    fn empty_directory_is_empty_cluster() {
        let dir = std::env::temp_dir().join(format!("krs-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load_path(&dir).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(load_path(&dir), Err(LoadError::Io { .. })));
    }
}
