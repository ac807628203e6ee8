//! `docs/CONFIG.md` documents every key of config.yml and PROJECT.md; this keeps it true.
//!
//! The keys of config.yml are not listed here by hand: they are walked out of the serde types
//! themselves (`pegasus_store::Config` and everything under it) by a deserializer that answers
//! each struct with all of its fields, each map with one entry `*` and each list with one
//! element. So a field someone adds to a config struct fails this test, naming the key, until
//! CONFIG.md has a row for it; and a row whose key no type has fails too.
//!
//! Two kinds of value cannot be walked that way, because serde reads them with
//! `deserialize_any` (it asks the input what it is): a custom leaf (`limits.memory`, a size
//! such as `2G`) and an internally tagged enum (`launchers.*`, tagged by `kind`). Each such
//! place must be named in [`OPAQUE`]; a new one fails the test, naming its key, until it is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess};
use serde::Deserialize;

/// Where a config type is read with `deserialize_any`, and how this test handles it.
const OPAQUE: &[(&str, &str)] = &[
    ("limits.memory", "a size such as 2G: a leaf"),
    (
        "launchers.*",
        "tagged by `kind`: its variants are walked by `launcher_keys`",
    ),
];

// ---- the walking deserializer -------------------------------------------------------------

/// What one walk found.
#[derive(Default)]
struct Walk {
    /// Every key path, dotted, `*` for a map's key.
    keys: BTreeSet<String>,
    /// Paths read with `deserialize_any`.
    opaque: BTreeSet<String>,
    /// Paths this walk does not enter (they failed to deserialize in an earlier walk).
    skip: BTreeSet<String>,
    /// The deepest path whose value failed in this walk.
    failed: Option<String>,
}

#[derive(Debug)]
struct WalkError(String);

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WalkError {}

impl de::Error for WalkError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WalkError(msg.to_string())
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Walks the value at `path`.
struct Walker<'a> {
    path: String,
    walk: &'a RefCell<Walk>,
}

impl<'a> Walker<'a> {
    fn at(&self, path: String) -> Walker<'a> {
        Walker {
            path,
            walk: self.walk,
        }
    }

    /// Runs `f`, noting this path as the failure if nothing deeper failed first.
    fn noting<T>(&self, r: Result<T, WalkError>) -> Result<T, WalkError> {
        if r.is_err() {
            let mut w = self.walk.borrow_mut();
            if w.failed.is_none() {
                w.failed = Some(self.path.clone());
            }
        }
        r
    }
}

/// The entries of a mapping, each offered once with its value walked at `path.key`: a
/// struct's fields, or a map's one entry `*`. Keys in the walk's skip set are left out.
struct Entries<'a> {
    walker: Walker<'a>,
    keys: Vec<&'static str>,
    next: usize,
}

impl<'a> Entries<'a> {
    fn new(walker: Walker<'a>, keys: &[&'static str]) -> Self {
        let keys = {
            let w = walker.walk.borrow();
            keys.iter()
                .copied()
                .filter(|k| !w.skip.contains(&join(&walker.path, k)))
                .collect()
        };
        Entries {
            walker,
            keys,
            next: 0,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = WalkError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, WalkError> {
        match self.keys.get(self.next) {
            None => Ok(None),
            Some(k) => seed.deserialize((*k).into_deserializer()).map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, WalkError> {
        let key = self.keys[self.next];
        self.next += 1;
        let inner = self.walker.at(join(&self.walker.path, key));
        let r = seed.deserialize(inner.at(inner.path.clone()));
        inner.noting(r)
    }
}

/// A list with one element, walked at the list's own path.
struct OneElement<'a> {
    walker: Walker<'a>,
    done: bool,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = WalkError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, WalkError> {
        if self.done {
            return Ok(None);
        }
        self.done = true;
        seed.deserialize(self.walker.at(self.walker.path.clone()))
            .map(Some)
    }
}

/// An enum answered with its first variant.
struct FirstVariant<'a> {
    walker: Walker<'a>,
    variant: &'static str,
}

impl<'de, 'a> de::EnumAccess<'de> for FirstVariant<'a> {
    type Error = WalkError;
    type Variant = Walker<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Walker<'a>), WalkError> {
        let name: de::value::StrDeserializer<WalkError> = self.variant.into_deserializer();
        let v = seed.deserialize(name)?;
        Ok((v, self.walker))
    }
}

impl<'de> de::VariantAccess<'de> for Walker<'_> {
    type Error = WalkError;

    fn unit_variant(self) -> Result<(), WalkError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, WalkError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: de::Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_seq(OneElement {
            walker: self,
            done: false,
        })
    }

    fn struct_variant<V: de::Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        self.deserialize_struct("", fields, visitor)
    }
}

/// Integers are leaves: each answered with 0.
macro_rules! walk_int {
    ($($method:ident)*) => {$(
        fn $method<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
            visitor.visit_u64(0)
        }
    )*};
}

impl<'de> Deserializer<'de> for Walker<'_> {
    type Error = WalkError;

    fn deserialize_any<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        self.walk.borrow_mut().opaque.insert(self.path.clone());
        visitor.visit_str("")
    }

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        {
            let mut w = self.walk.borrow_mut();
            for f in fields {
                w.keys.insert(join(&self.path, f));
            }
        }
        let path = self.path.clone();
        let r = visitor.visit_map(Entries::new(self.at(path.clone()), fields));
        self.at(path).noting(r)
    }

    fn deserialize_map<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_map(Entries::new(self, &["*"]))
    }

    fn deserialize_seq<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_seq(OneElement {
            walker: self,
            done: false,
        })
    }

    fn deserialize_tuple<V: de::Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_option<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        let variant = variants.first().copied().unwrap_or("");
        visitor.visit_enum(FirstVariant {
            walker: self,
            variant,
        })
    }

    fn deserialize_bool<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bool(false)
    }

    fn deserialize_f32<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_f64(0.0)
    }

    fn deserialize_f64<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_f64(0.0)
    }

    fn deserialize_str<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_str("")
    }

    fn deserialize_string<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_str("")
    }

    fn deserialize_unit<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }

    fn deserialize_identifier<V: de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_str("")
    }

    walk_int! {
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
    }

    fn deserialize_char<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_char(' ')
    }

    fn deserialize_bytes<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bytes(b"")
    }

    fn deserialize_byte_buf<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bytes(b"")
    }
}

/// Every key path of `T`, read at `prefix`, and the paths it reads with `deserialize_any`.
/// A value that fails to deserialize (a size of `""`, a required field left out) is skipped in
/// the next walk, so one failure never hides the keys after it.
fn keys_of<T: for<'de> Deserialize<'de>>(prefix: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let walk = RefCell::new(Walk::default());
    for _ in 0..200 {
        walk.borrow_mut().failed = None;
        let walker = Walker {
            path: prefix.to_string(),
            walk: &walk,
        };
        if T::deserialize(walker).is_ok() {
            break;
        }
        let failed = walk.borrow_mut().failed.take();
        match failed {
            Some(path) if path != prefix && walk.borrow_mut().skip.insert(path.clone()) => {}
            _ => break,
        }
    }
    let w = walk.into_inner();
    (w.keys, w.opaque)
}

// ---- what CONFIG.md says -----------------------------------------------------------------

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CONFIG.md"))
        .expect("docs/CONFIG.md")
}

/// The keys of the tables under the `## ` heading that starts with `section`: the first
/// backquoted span of each table row.
fn documented(doc: &str, section: &str) -> BTreeSet<String> {
    let start = doc
        .find(&format!("\n## {section}"))
        .unwrap_or_else(|| panic!("docs/CONFIG.md has no `## {section}` section"));
    let rest = &doc[start + 4..];
    let body = rest.find("\n## ").map_or(rest, |end| &rest[..end]);
    body.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1))
        .map(str::to_string)
        .collect()
}

// ---- the keys the code has ----------------------------------------------------------------

/// The variants of config.yml `launchers:` entries, as serde names them.
fn launcher_variants() -> Vec<String> {
    let probe = serde_json::json!({"kind": "\u{1}"});
    let err = serde_json::from_value::<pegasus_store::launcher::LauncherConfig>(probe)
        .expect_err("no launcher kind is named \\u{1}")
        .to_string();
    let expected = err
        .split_once("expected ")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("serde's unknown-variant message changed: {err}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The keys of a `kubernetes` launcher entry: its settings are checked from an untyped value
/// by `crates/pegasus-kube/src/settings.rs`, whose `KNOWN_KEYS` lists them.
fn kubernetes_keys() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/pegasus-kube/src/settings.rs");
    let text = std::fs::read_to_string(&path).expect("crates/pegasus-kube/src/settings.rs");
    let list = text
        .split_once("KNOWN_KEYS: [&str;")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| list)
        .unwrap_or_else(|| {
            panic!(
                "{}: no `KNOWN_KEYS` any more: the kubernetes launcher's settings changed shape; \
                 walk their type with `keys_of` in tests/config_doc.rs",
                path.display()
            )
        });
    let mut keys: BTreeSet<String> = list
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|k| format!("launchers.*.{k}"))
        .collect();
    // Nested maps, checked key by key in settings.rs.
    keys.insert("launchers.*.home_volume.claim".into());
    keys.insert("launchers.*.resources.cpu".into());
    keys.insert("launchers.*.resources.memory".into());
    keys
}

/// Every key of one launcher entry, per kind.
fn launcher_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::from(["launchers.*.kind".to_string()]);
    for variant in launcher_variants() {
        match variant.as_str() {
            "command" => {
                let (k, opaque) =
                    keys_of::<pegasus_store::launcher::CommandLauncher>("launchers.*");
                assert!(
                    opaque.is_empty(),
                    "untyped keys in a command launcher: {opaque:?}"
                );
                keys.extend(k);
            }
            "kubernetes" => keys.extend(kubernetes_keys()),
            other => panic!(
                "config.yml `launchers.*` has a new kind `{other}`: walk its keys in \
                 tests/config_doc.rs `launcher_keys` and document them in docs/CONFIG.md"
            ),
        }
    }
    keys
}

/// Every key of config.yml.
fn config_keys() -> BTreeSet<String> {
    let (mut keys, opaque) = keys_of::<pegasus_store::Config>("");
    for path in &opaque {
        assert!(
            OPAQUE.iter().any(|(p, _)| p == path),
            "config.yml key `{path}` is read untyped (serde's deserialize_any): tell \
             tests/config_doc.rs how to walk it (OPAQUE)"
        );
    }
    keys.extend(launcher_keys());
    keys
}

/// Every key of PROJECT.md's frontmatter. The keys the typed parts of pegasus-store read
/// and pegasus-roles read (`approvals`, `limits`, `mcp_servers`, `roles`) are walked from their types; the rest are read one
/// by one where they are used, so they are listed here and each is checked to be read by the
/// code (a quoted key in a crate's source).
fn project_keys() -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = [
        "name",
        "status",
        "model",
        "fallback",
        "workdir",
        "created",
        "suspended",
        "completed",
        "budget_usd",
        "launcher",
        "repos",
        "repos.id",
        "repos.path",
        "repos.branch",
        "hydrate",
        "verify",
        "merge",
        "max_attempts",
        "review",
        "plan",
        "verify_timeout_s",
        "env_file",
        "approvals",
        "limits",
        "mcp_servers",
        "roles",
        "instruction_files",
        "hooks",
        "agent",
        "asana",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    let (approvals, _) = keys_of::<pegasus_store::approvals::ApprovalsConfig>("approvals");
    let (limits, _) = keys_of::<pegasus_store::limits::ProjectLimits>("limits");
    let (mcp, _) = keys_of::<pegasus_store::McpServerConfig>("mcp_servers.*");
    let (roles, _) = keys_of::<pegasus_roles::Assignment>("roles");
    let (asana, _) = keys_of::<pegasus_store::asana::AsanaBoard>("asana");
    keys.extend(asana);
    keys.extend(roles);
    keys.extend(approvals);
    keys.extend(limits);
    keys.extend(mcp);
    keys
}

/// The sources of every crate, to check that a listed PROJECT.md key is read somewhere.
fn crate_sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("crates"),
        &mut out,
    );
    out
}

// ---- the tests ----------------------------------------------------------------------------

fn compare(file: &str, code: &BTreeSet<String>, documented: &BTreeSet<String>) {
    let undocumented: Vec<_> = code.difference(documented).collect();
    let unknown: Vec<_> = documented.difference(code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/CONFIG.md and the {file} types disagree: keys missing from the doc (add a row \
         for each): {undocumented:?}; keys the doc has that no type has: {unknown:?}"
    );
}

#[test]
fn config_doc_has_every_config_yml_key_and_no_other() {
    let code = config_keys();
    assert!(code.len() > 60, "the walk found the keys: {code:?}");
    assert!(code.contains("llm.max_concurrency") && code.contains("providers.*.kind"));
    compare("config.yml", &code, &documented(&doc(), "config.yml"));
}

#[test]
fn config_doc_has_every_project_md_key_and_no_other() {
    let code = project_keys();
    compare("PROJECT.md", &code, &documented(&doc(), "PROJECT.md"));
    let sources = crate_sources();
    for key in &code {
        let last = key.rsplit('.').next().unwrap();
        assert!(
            last == "*"
                || sources.contains(&format!("\"{last}\""))
                || sources.contains(&format!("pub {last}:")),
            "PROJECT.md key `{key}` is documented but no crate reads it"
        );
    }
}

/// The walk itself: a struct's fields, nested structs, maps, options, lists and enums.
#[test]
fn the_walk_finds_every_kind_of_field() {
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        a: u64,
        b: Option<String>,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        On,
        Off,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        inner: Inner,
        map: BTreeMap<String, Inner>,
        list: Vec<Inner>,
        mode: Mode,
        flag: bool,
        n: i32,
    }
    let (keys, opaque) = keys_of::<Outer>("");
    let want: BTreeSet<String> = [
        "inner", "inner.a", "inner.b", "map", "map.*.a", "map.*.b", "list", "list.a", "list.b",
        "mode", "flag", "n",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(keys, want);
    assert!(opaque.is_empty(), "{opaque:?}");
}
