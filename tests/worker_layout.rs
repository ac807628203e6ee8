//! The worker is linked with its text layout (`bin/project-worker.ld`, see
//! `examples/worker_layout.rs` and `build.rs`): every Rust function the script names or matches
//! lies in one block at the start of `.text`, before every function it does not match. This
//! holds for any build of the worker (this test sees the debug one, whose symbol hashes differ
//! from the release build the script was made from: the patterns still place them).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn idle_functions_come_first_in_text() {
    if std::env::var("PEGASUS_WORKER_TEXT_LAYOUT").is_ok_and(|v| v == "0") {
        eprintln!("PEGASUS_WORKER_TEXT_LAYOUT=0: the worker is linked without its layout");
        return;
    }
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("bin/project-worker.ld"),
    )
    .unwrap();
    let patterns = named_patterns(&script);
    assert!(patterns.len() > 100, "too few patterns: {}", patterns.len());

    let elf = std::fs::read(env!("CARGO_BIN_EXE_project-worker")).unwrap();
    let elf = Elf::parse(&elf);
    let (text_start, text_end) = elf.section(".text");
    // By address: rustc merges identical functions into aliases (two symbols, one section named
    // after one of them), so an address counts as matched when any of its symbols is.
    let mut by_addr: std::collections::BTreeMap<u64, (bool, String)> = Default::default();
    for (name, addr) in elf.functions() {
        if !(text_start..text_end).contains(&addr)
            || !(name.starts_with("_ZN") || name.starts_with("_R"))
        {
            continue;
        }
        let hit = patterns.iter().any(|p| glob(p, &name));
        let entry = by_addr.entry(addr).or_insert((false, name));
        entry.0 |= hit;
    }
    let first_unmatched = by_addr
        .iter()
        .find(|(_, (hit, _))| !hit)
        .map(|(a, _)| *a)
        .unwrap();
    let matched: Vec<(&u64, &String)> = by_addr
        .iter()
        .filter(|(_, (hit, _))| *hit)
        .map(|(a, (_, n))| (a, n))
        .collect();
    let in_block = matched
        .iter()
        .filter(|(a, _)| **a < first_unmatched)
        .count();
    assert!(
        matched.len() > 300,
        "only {} of the worker's functions match the layout",
        matched.len()
    );
    eprintln!(
        "{in_block} of {} matched functions in the leading block [{text_start:#x}, {first_unmatched:#x})",
        matched.len()
    );
    // A few matched names are aliases of a function whose section has another name; they stay
    // where that one is.
    let outside: Vec<_> = matched
        .iter()
        .filter(|(a, _)| **a >= first_unmatched)
        .take(5)
        .collect();
    assert!(
        in_block * 100 >= matched.len() * 95,
        "{in_block} of {} functions the layout names lie in one block at the start of .text \
         (before {first_unmatched:#x}); outside it, e.g.: {outside:?}",
        matched.len()
    );
    assert!(
        first_unmatched > text_start + 64 * 1024,
        "the block is too small"
    );
}

#[test]
fn glob_matches_like_the_linker() {
    assert!(glob("_ZN3foo17h*", "_ZN3foo17h0123456789abcdefE"));
    assert!(glob("_RNvCs*_3std3foo*", "_RNvCsjrHSEGnQ3l9_3std3foo"));
    assert!(!glob("_RNvCs*_3std3foo*", "_RNvCsjrHSEGnQ3l9_4core3foo"));
    assert!(glob("main", "main"));
    assert!(!glob("main", "main2"));
}

/// The symbol globs of the script (`*(.text.<glob> .text.unlikely.<glob>)` lines), without the
/// catch-all lines at the end.
fn named_patterns(script: &str) -> Vec<String> {
    script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*(.text."))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|p| p.starts_with("_ZN") || p.starts_with("_R") || *p == "main")
        .map(str::to_string)
        .collect()
}

/// A linker-script glob with `*` only (all the script uses).
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().unwrap();
    let Some(mut left) = name.strip_prefix(first) else {
        return false;
    };
    if rest.is_empty() {
        return left.is_empty();
    }
    for (i, part) in rest.iter().enumerate() {
        let last = i == rest.len() - 1;
        if last {
            return left.ends_with(part);
        }
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Just enough of ELF64 little-endian: section headers and the symbol table.
struct Elf<'a> {
    data: &'a [u8],
    sections: Vec<Section>,
    names: usize,
}

struct Section {
    name: u32,
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

impl<'a> Elf<'a> {
    fn parse(data: &'a [u8]) -> Self {
        assert_eq!(&data[..4], b"\x7fELF", "not an ELF file");
        assert_eq!(data[4], 2, "not ELF64");
        let shoff = u64le(data, 0x28) as usize;
        let shentsize = u16le(data, 0x3a) as usize;
        let shnum = u16le(data, 0x3c) as usize;
        let shstrndx = u16le(data, 0x3e) as usize;
        let sections: Vec<Section> = (0..shnum)
            .map(|i| {
                let h = shoff + i * shentsize;
                Section {
                    name: u32le(data, h),
                    kind: u32le(data, h + 4),
                    addr: u64le(data, h + 0x10),
                    offset: u64le(data, h + 0x18),
                    size: u64le(data, h + 0x20),
                    link: u32le(data, h + 0x28),
                }
            })
            .collect();
        let names = sections[shstrndx].offset as usize;
        Elf {
            data,
            sections,
            names,
        }
    }

    fn str_at(&self, table: usize, at: usize) -> &'a str {
        let start = table + at;
        let end = start + self.data[start..].iter().position(|&b| b == 0).unwrap();
        std::str::from_utf8(&self.data[start..end]).unwrap()
    }

    /// Start and end address of the section called `name`.
    fn section(&self, name: &str) -> (u64, u64) {
        let s = self
            .sections
            .iter()
            .find(|s| self.str_at(self.names, s.name as usize) == name)
            .unwrap_or_else(|| panic!("no {name} section"));
        (s.addr, s.addr + s.size)
    }

    /// Every function symbol of `.symtab`: name and address.
    fn functions(&self) -> Vec<(String, u64)> {
        const SHT_SYMTAB: u32 = 2;
        const STT_FUNC: u8 = 2;
        let symtab = self
            .sections
            .iter()
            .find(|s| s.kind == SHT_SYMTAB)
            .expect("the worker has no symbol table (stripped?)");
        let strings = self.sections[symtab.link as usize].offset as usize;
        let mut out = Vec::new();
        for i in 0..(symtab.size / 24) as usize {
            let e = symtab.offset as usize + i * 24;
            if self.data[e + 4] & 0xf != STT_FUNC {
                continue;
            }
            let name = self.str_at(strings, u32le(self.data, e) as usize);
            out.push((name.to_string(), u64le(self.data, e + 8)));
        }
        out
    }
}

fn u16le(d: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(d[at..at + 2].try_into().unwrap())
}
fn u32le(d: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(d[at..at + 4].try_into().unwrap())
}
fn u64le(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}
