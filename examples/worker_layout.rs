//! Regenerates `bin/project-worker.ld`, the worker's text layout: every function an idle worker
//! runs from `exec` to idle, placed together at the start of its code.
//!
//! Why: a worker's resident code is not the code it runs but the 64 KiB windows around it. On a
//! read fault in a file mapping the kernel maps every neighbouring page that is already in the
//! page cache ("fault-around"), and a worker binary is always in the page cache. Linked in the
//! default order (crate by crate), the ~450 KB of functions a worker touches to get ready are
//! spread over all of its 3.6 MB of code, so almost all of it became resident in every worker
//! (VmRSS) and each start took a fault per window. Gathered in one place they cost a fraction.
//!
//! How: pegasusd runs one worker under valgrind's callgrind (`PEGASUS_WORKER_BIN` points at a
//! wrapper script); once the worker is ready and idle, `callgrind_control --dump` writes the
//! functions it has executed so far. Each becomes one input-section glob of a linker script
//! with the symbol's hash replaced by `*` (`…17h*` for legacy names, crate disambiguators
//! `Cs*_` for v0 names), so the file keeps working as long as the functions keep their paths:
//! a function renamed since simply falls back to the default place. `build.rs` links the worker
//! with the script (`--script`); lld and GNU ld understand its `INSERT AFTER .init`, gold does
//! not (set `PEGASUS_WORKER_TEXT_LAYOUT=0` to build without it).
//!
//! Run after changes to what a worker does at start (needs valgrind), on the binaries as
//! `cargo install --locked` builds them (building the examples in the same command would unify
//! the dev-dependencies' features into the binaries and change every symbol hash; installing
//! without `--locked` takes the newest dependency versions, with other hashes too):
//!
//! ```sh
//! cargo build --release --bins && cargo build --release --examples
//! target/release/examples/worker_layout          # or `--add`: keep the names already there
//! ```
//!
//! then rebuild and check `bench_foundation` (c) and (a). It writes the file in the source tree
//! this example was built from. With `--add` the exact names of the file are kept beside the
//! new ones, so one script can serve two builds (say, after running it once more on a
//! `cargo build --release --bins --examples` build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeSet,
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long the worker may take under valgrind to become ready (it runs ~50× slower).
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// The worker counts as idle once its CPU time has not moved for this long.
const IDLE_FOR: Duration = Duration::from_millis(1500);

fn main() {
    if let Err(e) = run() {
        eprintln!("worker_layout: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let add = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--add") => true,
        Some(other) => {
            return Err(format!("unknown argument {other}; the only one is --add").into())
        }
    };
    let bins = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate target/release beside this example")?
        .to_path_buf();
    let worker = bins.join("project-worker").canonicalize()?;
    let (pegasusd, pegasusctl) = (bins.join("pegasusd"), bins.join("pegasusctl"));
    for tool in ["valgrind", "callgrind_control"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(
                format!("{tool} not found: install valgrind (apt-get install valgrind)").into(),
            );
        }
    }

    let tmp = tempfile::Builder::new()
        .prefix("pegasus-layout-")
        .tempdir()?;
    let home = tmp.path().join("home");
    std::fs::create_dir(&home)?;
    let out_prefix = tmp.path().join("callgrind");
    let wrapper = tmp.path().join("worker-under-callgrind");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind --demangle=no --compress-strings=no \
             --compress-pos=no --dump-instr=no --callgrind-out-file='{}.%p' '{}' \"$@\"\n",
            out_prefix.display(),
            worker.display()
        ),
    )?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;

    let paths = Paths {
        pegasusd,
        pegasusctl,
        wrapper,
        home,
        out_prefix,
        log: tmp.path().join("pegasusd.log"),
    };
    // A project's first start, then its start when pegasusd resumes it (existing PROJECT.md,
    // session, task index): the two ways a worker comes up.
    let mut dumps = Vec::new();
    for first in [true, false] {
        dumps.push(dump_idle_worker(&paths, first)?);
    }
    let mut functions = BTreeSet::new();
    for dump in &dumps {
        functions.extend(executed_functions(
            &std::fs::read_to_string(dump)?,
            &worker.to_string_lossy(),
        ));
    }
    let dump = dumps.join(" and ");
    let patterns: BTreeSet<String> = functions.iter().filter_map(|f| pattern(f)).collect();
    if patterns.len() < 100 {
        let kept = tmp.keep();
        return Err(format!(
            "only {} functions of {} found in {} (kept in {}); is the dump from the worker?",
            patterns.len(),
            worker.display(),
            dump,
            kept.display()
        )
        .into());
    }
    let mut script = String::from(HEADER);
    // First the functions exactly as this build names them, so that the ones run are packed
    // tight; then, by pattern, their other instantiations and whatever a later build renames
    // (a different hash), so the layout degrades slowly as the code changes.
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("bin/project-worker.ld");
    let mut exact: BTreeSet<String> = functions.iter().filter(|f| linkable(f)).cloned().collect();
    if add {
        // Another build's names (other features give other hashes), kept beside this one's.
        let old = std::fs::read_to_string(&target).unwrap_or_default();
        exact.extend(exact_names(&old));
    }
    script.push_str("SECTIONS\n{\n  .text :\n  {\n");
    for f in &exact {
        script.push_str(&format!("    *(.text.{f} .text.unlikely.{f})\n"));
    }
    for p in patterns.iter().filter(|p| !exact.contains(*p)) {
        script.push_str(&format!("    *(.text.{p} .text.unlikely.{p})\n"));
    }
    script.push_str(TRAILER);
    let mut file = tempfile::NamedTempFile::new_in(target.parent().ok_or("no bin/ directory")?)?;
    file.write_all(script.as_bytes())?;
    file.as_file().sync_all()?;
    file.persist(&target)?;
    println!(
        "{} functions executed by an idle worker ({} named in the script), {} patterns → {}",
        functions.len(),
        exact.len(),
        patterns.len(),
        target.display()
    );
    Ok(())
}

const HEADER: &str = "\
/* The worker's text layout: the functions an idle worker runs, placed first so that the code
   it touches shares a few pages. Generated by examples/worker_layout.rs (see there); do not edit.
   Linked by build.rs. */
";

/// After the idle worker's functions, the rest of `.text` as GNU ld's default script orders it.
/// The output section keeps the name `.text` (tools such as valgrind look symbols up in it) and
/// goes where the linker would put it anyway, after `.init` in the executable segment.
const TRAILER: &str = "\
    *(.text.unlikely .text.*_unlikely .text.unlikely.*)
    *(.text.exit .text.exit.*)
    *(.text.startup .text.startup.*)
    *(.text.hot .text.hot.*)
    *(.text .stub .text.*)
  }
}
INSERT AFTER .init;
";

/// Where things are for one run.
struct Paths {
    pegasusd: PathBuf,
    pegasusctl: PathBuf,
    wrapper: PathBuf,
    home: PathBuf,
    out_prefix: PathBuf,
    log: PathBuf,
}

/// Starts pegasusd with its worker under callgrind (creating the project when `create`), waits
/// until the worker is ready and idle, dumps what it has run, stops pegasusd. Returns the dump.
fn dump_idle_worker(p: &Paths, create: bool) -> Res<String> {
    let mut daemon = Daemon(
        Command::new(&p.pegasusd)
            .arg("--home")
            .arg(&p.home)
            .env("PEGASUS_WORKER_BIN", &p.wrapper)
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p.log)?,
            )
            .spawn()?,
    );
    let ctl = |args: &[&str]| -> Res<std::process::Output> {
        Ok(Command::new(&p.pegasusctl)
            .arg("--home")
            .arg(&p.home)
            .args(args)
            .output()?)
    };

    let deadline = Instant::now() + READY_DEADLINE;
    while !ctl(&["status"])?.status.success() {
        if Instant::now() > deadline {
            return Err("pegasusd did not answer `status`".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if create {
        let created = ctl(&[
            "project",
            "create",
            "layout",
            "--goal",
            "Measure what an idle worker runs",
        ])?;
        if !created.status.success() {
            return Err(format!(
                "project create failed: {}",
                String::from_utf8_lossy(&created.stderr)
            )
            .into());
        }
    }
    let pid = loop {
        let status: serde_json::Value =
            serde_json::from_slice(&ctl(&["--json", "status"])?.stdout)?;
        let project = &status["projects"][0];
        if project["worker_state"] == "ready" {
            break project["worker_pid"]
                .as_u64()
                .ok_or("status has no worker pid")?;
        }
        if Instant::now() > deadline {
            return Err(format!("the worker did not become ready: {project}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    wait_idle(pid, deadline)?;

    let dumped = Command::new("callgrind_control")
        .arg("--dump")
        .arg(pid.to_string())
        .output()?;
    if !dumped.status.success() {
        return Err(format!(
            "callgrind_control --dump failed: {}",
            String::from_utf8_lossy(&dumped.stderr)
        )
        .into());
    }
    let stopped = ctl(&["stop"])?;
    if !stopped.status.success() {
        return Err(format!(
            "pegasusctl stop failed: {}",
            String::from_utf8_lossy(&stopped.stderr)
        )
        .into());
    }
    daemon.wait(Duration::from_secs(60));
    Ok(format!("{}.{pid}.1", p.out_prefix.display()))
}

/// Waits until the worker's CPU time (utime + stime) has not moved for `IDLE_FOR`.
fn wait_idle(pid: u64, deadline: Instant) -> Res<()> {
    let cpu = || -> Res<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let after = stat.rsplit_once(") ").ok_or("bad /proc stat")?.1;
        let f: Vec<&str> = after.split_whitespace().collect();
        Ok(f.get(11).ok_or("bad /proc stat")?.parse::<u64>()?
            + f.get(12).ok_or("bad /proc stat")?.parse::<u64>()?)
    };
    let (mut last, mut since) = (cpu()?, Instant::now());
    while since.elapsed() < IDLE_FOR {
        if Instant::now() > deadline {
            return Err("the worker never went idle".into());
        }
        std::thread::sleep(Duration::from_millis(100));
        let now = cpu()?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// The functions callgrind saw executed in `object` (its `ob=` / `fn=` lines; names as in the
/// symbol table, recursion suffixes `'N` dropped).
fn executed_functions(dump: &str, object: &str) -> BTreeSet<String> {
    let mut in_object = false;
    let mut out = BTreeSet::new();
    for line in dump.lines() {
        if let Some(ob) = line.strip_prefix("ob=") {
            in_object = ob == object;
        } else if let Some(f) = line.strip_prefix("fn=") {
            if in_object {
                let f = match f.rsplit_once('\'') {
                    Some((name, n)) if n.bytes().all(|b| b.is_ascii_digit()) => name,
                    _ => f,
                };
                out.insert(f.to_string());
            }
        }
    }
    out
}

/// The section glob for one symbol (without the `.text.` prefix), or None for names that are
/// not symbols (`(below main)`, bare addresses) or hold characters a linker script cannot take
/// unquoted.
fn pattern(symbol: &str) -> Option<String> {
    if !linkable(symbol) {
        return None;
    }
    // ThinLTO's promoted locals carry `.llvm.<number>`, a hash of the module.
    let name = match symbol.find(".llvm.") {
        Some(i) => &symbol[..i],
        None => symbol,
    };
    if name.starts_with("_ZN") {
        // Legacy mangling ends in `17h<16 hex digits>E`.
        if let Some(stem) = name.strip_suffix('E') {
            if let Some(i) = stem.rfind("17h") {
                let hash = &stem[i + 3..];
                if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Some(format!("{}17h*", &stem[..i]));
                }
            }
        }
        Some(format!("{name}*"))
    } else if name.starts_with("_R") {
        Some(format!("{}*", glob_disambiguators(name)))
    } else {
        Some(name.to_string())
    }
}

/// The exact (glob-free) names of a script this example wrote.
fn exact_names(script: &str) -> Vec<String> {
    // Only the idle functions' lines: not the default rules of the trailer.
    let first_default = TRAILER.lines().next().unwrap_or_default();
    script
        .lines()
        .take_while(|l| *l != first_default)
        .filter_map(|l| l.trim().strip_prefix("*(.text."))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|name| !name.contains('*') && linkable(name))
        .map(str::to_string)
        .collect()
}

/// Whether `symbol` is a symbol name a linker script can take unquoted as a section name (not
/// callgrind's `(below main)` or a bare address).
fn linkable(symbol: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'.';
    !symbol.is_empty() && symbol.bytes().all(ok) && !symbol.starts_with("0x")
}

/// Replaces v0 crate disambiguators (`Cs<base-62>_`) by `Cs*_`: they change with the compiler
/// and the crate's metadata, the path after them does not.
fn glob_disambiguators(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'C' && b.get(i + 1) == Some(&b's') {
            let mut j = i + 2;
            while j < b.len() && b[j].is_ascii_alphanumeric() {
                j += 1;
            }
            if j > i + 2 && b.get(j) == Some(&b'_') {
                out.push_str("Cs*_");
                i = j + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// pegasusd, killed if still running when dropped.
struct Daemon(Child);

impl Daemon {
    fn wait(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_drop_hashes() {
        assert_eq!(
            pattern("_ZN13pegasus_store5jsonl11parse_lines17hf26a6bcc41d80d85E").as_deref(),
            Some("_ZN13pegasus_store5jsonl11parse_lines17h*")
        );
        assert_eq!(
            pattern("_ZN4core3ptr45drop_in_place$LT$serde_json..value..Value$GT$17h54324ce8591ed0f5E.llvm.1215975536763429826").as_deref(),
            Some("_ZN4core3ptr45drop_in_place$LT$serde_json..value..Value$GT$17h*")
        );
        assert_eq!(
            pattern("_RNvMNtCsjrHSEGnQ3l9_3std4timeNtB2_7Instant7elapsed").as_deref(),
            Some("_RNvMNtCs*_3std4timeNtB2_7Instant7elapsed*")
        );
        assert_eq!(pattern("main").as_deref(), Some("main"));
        assert_eq!(pattern("(below main)"), None);
        assert_eq!(pattern("0x0000000000121ba0"), None);
    }

    #[test]
    fn exact_names_are_read_back_without_the_patterns() {
        let script = format!(
            "{HEADER}SECTIONS\n{{\n  .text :\n  {{\n    *(.text._ZN1a1b17h0123456789abcdefE .text.unlikely._ZN1a1b17h0123456789abcdefE)\n    *(.text._ZN1a1b17h* .text.unlikely._ZN1a1b17h*)\n{TRAILER}"
        );
        assert_eq!(exact_names(&script), ["_ZN1a1b17h0123456789abcdefE"]);
    }

    #[test]
    fn functions_of_one_object_only() {
        let dump = "ob=/bin/w\nfn=a\ncfn=x\nfn=b'2\nob=/lib/libc.so.6\nfn=c\nob=/bin/w\nfn=d\n";
        let got: Vec<String> = executed_functions(dump, "/bin/w").into_iter().collect();
        assert_eq!(got, ["a", "b", "d"]);
    }
}
