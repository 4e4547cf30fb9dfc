//! Reading object documents: YAML or JSON, multi-document, `kind: List`,
//! from a file, a directory, or a request body.

use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
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
        objects_of(doc, i, origin, &mut |o| {
            out.push(o);
            Ok::<_, LoadError>(())
        })?;
    }
    Ok(out)
}

/// Whether an object is a `List` document: its kind ends in `List`.
fn is_list(kind: Option<&str>) -> bool {
    kind.is_some_and(|k| k.ends_with("List"))
}

fn not_an_object(origin: &str, i: usize) -> LoadError {
    LoadError::Parse {
        origin: origin.to_owned(),
        message: format!("document {i}: must be an object"),
    }
}

fn items_not_a_list(origin: &str, i: usize) -> LoadError {
    LoadError::Parse {
        origin: origin.to_owned(),
        message: format!("document {i}: items: must be a list"),
    }
}

fn invalid_json(origin: &str, e: &serde_json::Error) -> LoadError {
    LoadError::Parse {
        origin: origin.to_owned(),
        message: format!("invalid JSON: {e}"),
    }
}

/// Hands document `i`'s objects to `f`, moving a `List`'s items out.
fn objects_of<E: From<LoadError>>(
    doc: Value,
    i: usize,
    origin: &str,
    f: &mut impl FnMut(Value) -> Result<(), E>,
) -> Result<(), E> {
    match doc {
        Value::Null => Ok(()),
        Value::Object(mut m) if is_list(m.get("kind").and_then(Value::as_str)) => {
            match m.remove("items") {
                Some(Value::Array(items)) => items.into_iter().try_for_each(f),
                Some(Value::Null) | None => Ok(()),
                Some(_) => Err(items_not_a_list(origin, i).into()),
            }
        }
        doc @ Value::Object(_) => f(doc),
        _ => Err(not_an_object(origin, i).into()),
    }
}

/// Hands every object of a text to `f`, in the order [`parse_documents`]
/// returns them, without holding them all: JSON is split into documents
/// and `List` items as raw text first, and one object's tree is built at a
/// time. (YAML is read whole, then handed out object by object.)
pub fn for_each_object<E: From<LoadError>>(
    text: &str,
    origin: &str,
    f: &mut impl FnMut(Value) -> Result<(), E>,
) -> Result<(), E> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let docs: Vec<&RawValue> =
            serde_json::from_str(text).map_err(|e| invalid_json(origin, &e))?;
        for (i, doc) in docs.into_iter().enumerate() {
            raw_objects_of(doc.get(), i, origin, f)?;
        }
        Ok(())
    } else if trimmed.starts_with('{') {
        raw_objects_of(text, 0, origin, f)
    } else {
        let docs = parse_yaml(text, origin)?;
        for (i, doc) in docs.into_iter().enumerate() {
            objects_of(doc, i, origin, f)?;
        }
        Ok(())
    }
}

/// [`objects_of`] for one JSON document given as text: a `List`'s items
/// are parsed one by one.
fn raw_objects_of<E: From<LoadError>>(
    text: &str,
    i: usize,
    origin: &str,
    f: &mut impl FnMut(Value) -> Result<(), E>,
) -> Result<(), E> {
    let parse = |t: &str| serde_json::from_str::<Value>(t).map_err(|e| invalid_json(origin, &e));
    if !text.trim_start().starts_with('{') {
        return objects_of(parse(text)?, i, origin, f);
    }
    // The top-level fields, their values unparsed (the last of a repeated
    // field wins, as in a tree).
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|e| invalid_json(origin, &e))?;
    let kind = match fields.get("kind") {
        Some(k) => parse(k.get())?,
        None => Value::Null,
    };
    if !is_list(kind.as_str()) {
        return f(parse(text)?);
    }
    let Some(items) = fields.get("items").map(|v| v.get()) else {
        return Ok(());
    };
    if items == "null" {
        return Ok(());
    }
    if !items.starts_with('[') {
        return Err(items_not_a_list(origin, i).into());
    }
    let items: Vec<&RawValue> =
        serde_json::from_str(items).map_err(|e| invalid_json(origin, &e))?;
    items.into_iter().try_for_each(|item| f(parse(item.get())?))
}

fn parse_yaml(text: &str, origin: &str) -> Result<Vec<Value>, LoadError> {
    serde_saphyr::from_multiple::<Value>(text).map_err(|e| LoadError::Parse {
        origin: origin.to_owned(),
        message: format!("invalid YAML: {e}"),
    })
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
        parse_yaml(text, origin)?
    };
    flatten(docs, origin)
}

/// Reads a file, or every `.yaml`/`.yml`/`.json` file under a directory
/// (recursively, in path order). An empty directory is an empty cluster.
pub fn load_path(path: &Path) -> Result<Vec<Value>, LoadError> {
    let mut out = Vec::new();
    for_each_in_path(path, &mut |o| {
        out.push(o);
        Ok::<_, LoadError>(())
    })?;
    Ok(out)
}

/// Hands the objects [`load_path`] would return to `f`, one at a time
/// ([`for_each_object`]), reading one file at a time: a big `--state`
/// snapshot is never held as one tree.
pub fn for_each_in_path<E: From<LoadError>>(
    path: &Path,
    f: &mut impl FnMut(Value) -> Result<(), E>,
) -> Result<(), E> {
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
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| LoadError::Io {
            path: file.clone(),
            source,
        })?;
        for_each_object(&text, &file.display().to_string(), f)?;
    }
    Ok(())
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
    let mut skipped = Skipped::default();
    let kept = objects.into_iter().filter(|o| skipped.admit(o)).collect();
    (kept, skipped)
}

impl Skipped {
    /// [`skip_unmodelled`] for one object: true to keep it; false (and
    /// counted) to leave it out.
    pub fn admit(&mut self, o: &Value) -> bool {
        use super::kinds::Kind;
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
            *self.0.entry(label).or_default() += 1;
        }
        keep
    }
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

    /// What `for_each_object` hands out, in order.
    fn streamed(text: &str) -> Result<Vec<Value>, LoadError> {
        let mut out = Vec::new();
        for_each_object(text, "t", &mut |o| {
            out.push(o);
            Ok::<_, LoadError>(())
        })?;
        Ok(out)
    }

    #[test]
    fn streaming_hands_out_what_parse_documents_returns() {
        for text in [
            // `items` before `kind`, as a sorted serializer writes a List.
            r#"{"apiVersion":"v1","items":[{"kind":"Pod","metadata":{"name":"a"}},{"kind":"Run"}],"kind":"List"}"#,
            r#"  {"kind":"PodList","items":null}"#,
            r#"{"kind":"List"}"#,
            r#"{"kind":"Pod","items":[1,2],"metadata":{"name":"not a list"}}"#,
            r#"{"kind":7,"items":[{"kind":"Pod"}]}"#,
            r#"{"kind":"List","items":[{"kind":"Pod"}]}"#,
            r#"{"kind":"Pod","kind":"List","items":[{"kind":"Run"}]}"#,
            r#"[null,{"kind":"Pod"},{"kind":"NodeList","items":[{"kind":"Node"}]},{"kind":"List","items":[]}]"#,
            "[]",
            "kind: Pod\nmetadata: {name: a}\n---\nkind: List\nitems:\n- kind: Run\n---\n",
        ] {
            assert_eq!(
                streamed(text).unwrap(),
                parse_documents(text, "t").unwrap(),
                "{text}"
            );
        }
    }

    #[test]
    fn streaming_refuses_what_parse_documents_refuses() {
        for text in [
            "{not json",
            r#"{"kind":"List","items":[{"kind":"Pod"},]}"#,
            r#"{"kind":"List","items":{"kind":"Pod"}}"#,
            r#"[{"kind":"Pod"},3]"#,
            r#"{"kind":"Pod"} trailing"#,
            "- 1\n- 2\n",
        ] {
            let want = parse_documents(text, "t").unwrap_err().to_string();
            let got = streamed(text).unwrap_err().to_string();
            assert_eq!(
                got.split(':').take(2).collect::<Vec<_>>(),
                want.split(':').take(2).collect::<Vec<_>>(),
                "{text}: {got} / {want}"
            );
        }
        // Items before a refusal are handed out; none after it.
        let mut seen = 0;
        let e = for_each_object(r#"[{"kind":"Pod"},3,{"kind":"Run"}]"#, "t", &mut |_| {
            seen += 1;
            Ok::<_, LoadError>(())
        })
        .unwrap_err();
        assert_eq!(
            (seen, e.to_string().as_str()),
            (1, "t: document 1: must be an object")
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
