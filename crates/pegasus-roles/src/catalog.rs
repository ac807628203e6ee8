//! Finding roles: the built-ins embedded in the binary, overridden by `<home>/roles/<id>.md`.
//!
//! The built-in files are compiled in with `include_str!` so an installed `pegasusd` works
//! wherever it is copied, with no data directory to ship alongside it. A user file with the
//! same id replaces a built-in whole (there is no field-by-field merge: what the file says is
//! what the role is).

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use crate::error::RoleError;
use crate::role::{validate_id, Role, RoleSource};

/// Both tables below from one list of ids, so they cannot disagree.
macro_rules! builtins {
    ($($id:literal),* $(,)?) => {
        /// The ids of the built-in roles, in the order they are listed.
        pub const BUILTIN_IDS: [&str; 9] = [$($id),*];
        /// The embedded built-in role files: id and text.
        const BUILTIN_FILES: [(&str, &str); 9] =
            [$(($id, include_str!(concat!("../../../data/roles/", $id, ".md")))),*];
    };
}

builtins![
    "coder",
    "researcher",
    "reviewer",
    "planner",
    "designer",
    "devops",
    "tester",
    "refactor-finder",
    "duplicate-finder",
];

fn parse_builtin(id: &str, text: &str) -> Result<Role, RoleError> {
    Role::parse(text, &format!("data/roles/{id}.md (built-in)"), Some(id))
}

/// The built-in roles, sorted by id. Infallible because the embedded files are fixed at
/// compile time and a unit test parses every one of them; a file that failed to parse would
/// fail that test before it could ship.
pub fn builtin_roles() -> Vec<Role> {
    let mut roles: Vec<Role> = BUILTIN_FILES
        .iter()
        .filter_map(|(id, text)| parse_builtin(id, text).ok())
        .collect();
    roles.sort_by(|a, b| a.id.cmp(&b.id));
    roles
}

/// Every role: the built-ins, overridden or extended by `<user_roles_dir>/*.md`, sorted by id.
/// A missing directory means no user roles. A user file that does not parse is an error naming
/// it, not skipped: a silently missing override would run the built-in the user replaced.
pub fn load_roles(user_roles_dir: &Path) -> Result<Vec<Role>, RoleError> {
    let mut roles = builtin_roles();
    for role in user_roles(user_roles_dir)? {
        match roles.iter_mut().find(|r| r.id == role.id) {
            Some(slot) => *slot = role,
            None => roles.push(role),
        }
    }
    roles.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(roles)
}

/// One role by id: the user file `<user_roles_dir>/<id>.md` if there is one, else the
/// built-in. Only that one file is read, so a broken file of another role does not get in
/// the way.
pub fn find_role(user_roles_dir: &Path, id: &str) -> Result<Role, RoleError> {
    validate_id(id)?;
    let path = user_roles_dir.join(format!("{id}.md"));
    match read_role_file(&path) {
        Ok(text) => return parse_user(&path, &text, id),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(source) => return Err(RoleError::Io { path, source }),
    }
    BUILTIN_FILES
        .iter()
        .find(|(bid, _)| *bid == id)
        .map(|(bid, text)| parse_builtin(bid, text))
        .unwrap_or_else(|| Err(RoleError::NotFound(id.to_string())))
}

/// The largest role file read (256 KiB): a role is a prompt template, not a document.
const MAX_ROLE_FILE: u64 = 256 * 1024;

/// Reads a user role file: a regular file only, never through a symlink, never past the cap
/// (a FIFO or a device behind a role's name must not block or fill the reader, and a link
/// planted where roles are read must not make a role of a file the sandbox hides).
fn read_role_file(path: &Path) -> std::io::Result<String> {
    pegasus_store::read_text_nofollow(path, MAX_ROLE_FILE).map_err(|e| match e {
        pegasus_store::ReadError::NotFound => ErrorKind::NotFound.into(),
        pegasus_store::ReadError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    })
}

/// The `*.md` files of the user roles directory, parsed, in file-name order.
fn user_roles(dir: &Path) -> Result<Vec<Role>, RoleError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RoleError::io(dir)(e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(RoleError::io(dir))?;
        let path = entry.path();
        let is_md = path.extension().is_some_and(|e| e == "md");
        // Editors leave hidden swap and backup files next to the real ones.
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        // A regular file only: a symlink is never followed to a role (DESIGN.md §12).
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if is_md && !hidden && regular {
            paths.push(path);
        }
    }
    paths.sort();
    let mut roles = Vec::with_capacity(paths.len());
    for path in paths {
        let text = read_role_file(&path).map_err(RoleError::io(&path))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        roles.push(parse_user(&path, &text, &stem)?);
    }
    Ok(roles)
}

fn parse_user(path: &Path, text: &str, stem: &str) -> Result<Role, RoleError> {
    let origin = path.display().to_string();
    let mut role = Role::parse(text, &origin, Some(stem))?;
    role.source = RoleSource::User(origin);
    Ok(role)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use super::*;
    use crate::Thinking;

    const WRITER: &str =
        "---\nid: writer\nname: Writer\ndescription: Writes prose.\n---\nYou write.\n";

    #[test]
    fn every_builtin_parses_and_renders_with_its_defaults() {
        for (id, text) in BUILTIN_FILES {
            let role = parse_builtin(id, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(role.source, RoleSource::BuiltIn);
            assert!(
                !role.emoji.is_empty() && !role.description.is_empty(),
                "{id}"
            );
            let prompt = role
                .render(&BTreeMap::new())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!prompt.contains("{{"), "{id}: {prompt}");
            assert!(
                prompt.len() > 400,
                "{id}: the prompt should be a real prompt"
            );
        }
        let ids: Vec<String> = builtin_roles().into_iter().map(|r| r.id).collect();
        let mut expected: Vec<&str> = BUILTIN_IDS.to_vec();
        expected.sort();
        assert_eq!(ids, expected);
    }

    #[test]
    fn builtin_tool_allowlists_fit_each_job() {
        let by_id = |id: &str| builtin_roles().into_iter().find(|r| r.id == id).unwrap();
        for id in ["researcher", "reviewer", "planner"] {
            let r = by_id(id);
            for tool in ["exec", "write_file", "edit_file"] {
                assert!(!r.allows_tool(tool), "{id} must not have {tool}");
            }
            assert!(r.allows_tool("read_file"), "{id}");
        }
        assert!(by_id("coder").allows_tool("exec"));
        assert!(by_id("coder").allows_tool("edit_file"));
        // Reading the web changes nothing here: the researcher and the makers have it, the
        // reviewer and the planner judge what is in front of them.
        for id in ["researcher", "coder", "devops", "tester", "designer"] {
            assert!(by_id(id).allows_tool("web_fetch"), "{id}");
            assert!(by_id(id).allows_tool("web_search"), "{id}");
        }
        assert!(!by_id("reviewer").allows_tool("web_fetch"));
        assert!(by_id("tester").allows_tool("exec"));
        assert!(by_id("devops").allows_tool("exec"));
        let designer = by_id("designer");
        assert!(designer.allows_tool("write_file") && designer.allows_tool("edit_file"));
        assert!(!designer.allows_tool("exec"));
        for r in builtin_roles() {
            // Role agents are leaves: only the project agent hands out work.
            assert!(!r.allows_tool("spawn_subagent"), "{}", r.id);
            assert!(r.tools.is_some(), "{}: built-ins list their tools", r.id);
            assert_ne!(r.model.thinking, Thinking::Off, "{}", r.id);
        }
    }

    #[test]
    fn missing_user_dir_gives_the_builtins() {
        let dir = tempfile::tempdir().unwrap();
        let roles = load_roles(&dir.path().join("roles")).unwrap();
        assert_eq!(roles, builtin_roles());
    }

    #[test]
    fn user_role_overrides_a_builtin_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let text = "---\nid: coder\nname: My Coder\ndescription: Mine.\ntools: [read_file]\n---\nYou code my way.\n";
        fs::write(dir.path().join("coder.md"), text).unwrap();
        let roles = load_roles(dir.path()).unwrap();
        assert_eq!(roles.len(), BUILTIN_IDS.len());
        let coder = roles.iter().find(|r| r.id == "coder").unwrap();
        assert_eq!(coder.name, "My Coder");
        assert!(!coder.allows_tool("exec"));
        assert!(matches!(&coder.source, RoleSource::User(p) if p.ends_with("coder.md")));
        assert_eq!(find_role(dir.path(), "coder").unwrap(), *coder);
        assert_eq!(
            find_role(dir.path(), "tester").unwrap().source,
            RoleSource::BuiltIn
        );
    }

    #[test]
    fn user_role_file_with_a_byte_order_mark_and_crlf_loads() {
        let dir = tempfile::tempdir().unwrap();
        let text = "\u{feff}---\r\nid: coder\r\nname: My Coder\r\ndescription: Mine.\r\n--- \r\nYou code my way.\r\n";
        fs::write(dir.path().join("coder.md"), text).unwrap();
        let coder = find_role(dir.path(), "coder").unwrap();
        assert_eq!(coder.name, "My Coder");
        assert_eq!(coder.template, "You code my way.");
    }

    #[test]
    fn user_role_with_a_new_id_is_added_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("writer.md"), WRITER).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a role").unwrap();
        let roles = load_roles(dir.path()).unwrap();
        let ids: Vec<&str> = roles.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "coder",
                "designer",
                "devops",
                "duplicate-finder",
                "planner",
                "refactor-finder",
                "researcher",
                "reviewer",
                "tester",
                "writer"
            ]
        );
        assert_eq!(find_role(dir.path(), "writer").unwrap().name, "Writer");
    }

    #[test]
    fn broken_user_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("writer.md"), WRITER).unwrap();
        fs::write(dir.path().join("broken.md"), "no frontmatter\n").unwrap();
        let e = load_roles(dir.path()).unwrap_err().to_string();
        assert!(e.contains("broken.md:1:"), "{e}");
        // Looking up another role reads only its own file.
        assert_eq!(find_role(dir.path(), "writer").unwrap().id, "writer");
        // A file whose id is not its name is refused, so `<id>.md` is always role `<id>`.
        fs::remove_file(dir.path().join("broken.md")).unwrap();
        fs::write(dir.path().join("author.md"), WRITER).unwrap();
        let e = load_roles(dir.path()).unwrap_err().to_string();
        assert!(e.contains("author.md:2: key `id`"), "{e}");
    }

    #[test]
    fn unknown_and_invalid_ids_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = find_role(dir.path(), "pilot").unwrap_err();
        assert_eq!(e.to_string(), "no role `pilot`: see `pegasusctl role list`");
        let e = find_role(dir.path(), "../coder").unwrap_err();
        assert!(matches!(e, RoleError::BadId(_)), "{e}");
    }
}
