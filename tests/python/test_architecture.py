"""The house rules of docs/architecture.md, read from the `use` lines of src/.

- No file imports a file that imports it back, in any folder: the files of one folder (its
  `mod.rs` aside, which is the folder's own face) form no circle.
- No top-level module imports one that imports it back, and each imports only what the
  "may import" column of architecture.md's module table allows.

References are read from the code outside `#[cfg(test)]` (tests may reach anywhere): `use`
lines, and paths written in full in the code (`crate::gpu::ledger::Ledger`,
`super::pool::Pool`). A name reached through a folder's `mod.rs` counts as an import of the
file that defines it when `mod.rs` only re-exports it (`pub use child::Name`).
"""

import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

PATH_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\b(?:crate|super(?:::super)*|self)::[A-Za-z0-9_:]*\{[^;]*?\};", re.S)


def module_of(path):
    """`src/gpu/ledger/mod.rs` → ('gpu', 'ledger'); `src/gpu/admission.rs` → ('gpu', 'admission')."""
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts == ["lib"] or parts == ["main"]:
        return ()
    return tuple(parts)


def code_without_tests(text):
    """The text before the first `#[cfg(test)]` item, comments removed."""
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"//[^\n]*", "", text)
    return text


def expand_groups(text):
    """`use crate::a::{b, c::{d, e}};` → the paths `crate::a::b`, `crate::a::c::d`, ..."""
    out = []

    def walk(prefix, body):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(body[start:i])
                start = i + 1
        items.append(body[start:])
        for item in items:
            item = item.strip()
            if not item:
                continue
            if "{" in item:
                head, rest = item.split("{", 1)
                walk(prefix + head.strip(), rest.rsplit("}", 1)[0])
            else:
                item = item.split(" as ")[0].strip()
                out.append(prefix + ("" if item == "self" else item))

    for m in USE_GROUP_RE.finditer(text):
        stmt = m.group(0)[:-1]
        head, rest = stmt.split("{", 1)
        walk(head, rest.rsplit("}", 1)[0])
    return out


class Tree:
    def __init__(self):
        self.files = {}
        for path in sorted(SRC.rglob("*.rs")):
            if path.name == "tests.rs" or path.name == "testkit.rs":
                continue
            self.files[module_of(path)] = code_without_tests(path.read_text())
        self.modules = set(self.files)

    def reexports(self, folder):
        """Names `folder/mod.rs` re-exports from its children: name → child module."""
        text = self.files.get(folder, "")
        out = {}
        for m in re.finditer(r"pub(?:\([a-z]+\))?\s+use\s+([a-z_][a-z0-9_]*)::([^;]+);", text):
            child, rest = m.group(1), m.group(2)
            if folder + (child,) not in self.modules:
                continue
            names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rest)
            for n in names:
                out.setdefault(n, folder + (child,))
        return out

    def resolve(self, here, path):
        """The module a path in file `here` names, as deep as the tree goes."""
        parts = path.split("::")
        if parts[0] == "crate":
            base, rest = (), parts[1:]
        elif parts[0] == "super":
            # `here` is a file module; its parent is the folder.
            base, rest = here[:-1], parts[1:]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif parts[0] == "self":
            base, rest = here, parts[1:]
        else:
            return None
        mod = base
        for p in rest:
            if mod + (p,) in self.modules:
                mod = mod + (p,)
            else:
                # An item: if the folder's mod.rs only re-exports it from a child, that child.
                child = self.reexports(mod).get(p)
                if child is not None:
                    mod = child
                break
        return mod

    def references(self, here):
        text = self.files[here]
        paths = expand_groups(text)
        stripped = USE_GROUP_RE.sub("", text)
        paths += [m.group(0) for m in PATH_RE.finditer(stripped)]
        # A file's own child modules, named bare (`use fit::Fit;`, `slot::run_slot(..)`).
        for child in re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", text, re.M):
            for m in re.finditer(r"(?<![\w:])" + child + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
                paths.append("self::" + child + m.group(1))
            for m in re.finditer(r"(?<![\w:])" + child + r"::\{", text):
                paths.append("self::" + child)
        out = set()
        for p in paths:
            target = self.resolve(here, p)
            if target is not None and target != here:
                out.add(target)
        return out


def cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def folder_edges(tree):
    """Per folder: edges between its direct children (files or subfolders), mod.rs aside."""
    folders = {}
    for here in tree.files:
        if not here:
            continue
        for target in tree.references(here):
            # The deepest common folder, and the children of it on each side.
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            folder = here[:common]
            if len(here) <= common or len(target) <= common:
                continue  # one is the folder itself (its mod.rs), or inside the other
            a, b = here[common], target[common]
            if a != b:
                folders.setdefault(folder, {}).setdefault(a, set()).add(b)
    return folders


def allowed_imports():
    """architecture.md's module table: module → the modules it may import."""
    table = {}
    order = []
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `([a-z_]+)` \|.*\| ([^|]+) \|$", line)
        if m:
            name, may = m.group(1), m.group(2).strip()
            order.append(name)
            table[name] = may
    out = {}
    for i, name in enumerate(order):
        may = table[name]
        if may == "everything":
            out[name] = set(order) - {name}
        elif may.startswith("everything above but"):
            but = set(re.findall(r"`([a-z_]+)`", may))
            out[name] = set(order[:i]) - but
        elif may == "nothing of ours":
            out[name] = set()
        else:
            out[name] = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", may)))
    return out


# Circles that are known and being taken apart (issue 40); each entry goes when its circle does.
# The test fails on a new circle and on a known one that is gone, so this list stays true.
KNOWN_CIRCLES = []


class Architecture(unittest.TestCase):
    def setUp(self):
        self.tree = Tree()

    def test_no_folder_has_files_that_import_each_other_in_a_circle(self):
        found = []
        for folder, edges in sorted(folder_edges(self.tree).items()):
            for comp in cycles(edges):
                where = "/".join(("src",) + folder) or "src"
                found.append(f"{where}: {', '.join(comp)}")
        self.assertEqual(found, KNOWN_CIRCLES, "import circles:\n" + "\n".join(found))

    def test_top_level_modules_import_only_what_architecture_md_allows(self):
        allowed = allowed_imports()
        top = {m[0] for m in self.tree.modules if m}
        self.assertEqual(
            sorted(top - set(allowed)), [], "modules missing from architecture.md's table"
        )
        wrong = []
        for here in sorted(self.tree.files):
            if not here:
                continue
            for target in sorted(self.tree.references(here)):
                if target and target[0] != here[0] and target[0] not in allowed[here[0]]:
                    wrong.append(f"{'/'.join(here)} uses {'::'.join(target)}")
        self.assertEqual(wrong, [], "imports the table does not allow:\n" + "\n".join(wrong))

    def test_the_reader_sees_imports_it_must(self):
        # The reader itself: a `use` group, a path in the code, `super::` and a re-export.
        text = "use crate::a::{b::{C, d}, e};\nfn f() { super::g::h(); }\n"
        self.assertEqual(
            sorted(expand_groups(text)), ["crate::a::b::C", "crate::a::b::d", "crate::a::e"]
        )
        self.assertIn(("supervisor", "pool"), self.tree.references(("supervisor", "slot")))
        self.assertEqual(cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}), [["a", "b"]])


if __name__ == "__main__":
    unittest.main()
