"""docs/architecture.md matches the code: its room list names every module of hmp/ on
the floor tests/architecture/test_layering.py enforces, and every module, function or
file it names is there. Read statically (ast), so no TensorFlow is loaded."""

import ast
import pathlib
import re

import pytest

import hmp
from test_layering import FLOOR_OF_ROOM

LIBRARY = pathlib.Path(hmp.__file__).parent
REPOSITORY = LIBRARY.parent
DOC = REPOSITORY / "docs" / "architecture.md"
CODE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _rooms():
    """[[floor, the head of the room's first line ('hmp/run/', 'hmp/train.py'), the room's
    whole text]] of the fenced block under '## Rooms' (a room's words name its modules)."""
    text = DOC.read_text()
    block = text.split("## Rooms", 1)[1].split("```", 2)[1]
    rooms = []
    for line in block.splitlines():
        start = re.match(r"floor (\d)\s+(hmp/\w*(?:\.py|/))(.*)", line)
        if start:
            rooms.append([int(start.group(1)), start.group(2), start.group(2) + start.group(3)])
        elif rooms:
            rooms[-1][2] += " " + line.strip()
    return rooms


def _modules():
    """{'hmp.run.fit': path, ...}: every module of hmp/ but the package's own face."""
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = path.relative_to(REPOSITORY).with_suffix("").parts
        if parts[-1] != "__init__":
            found[".".join(parts)] = path
    return found


def _where(module):
    """(its room, the head of that room's line, the word that names it there):
    'hmp.run.fit' -> ('hmp.run', 'hmp/run/', 'fit'); 'hmp.cli' -> ('hmp.cli', None: a line
    of top-level files, 'cli.py')."""
    parts = module.split(".")
    if len(parts) == 2:
        return module, None, parts[1] + ".py"
    return ".".join(parts[:2]), "hmp/%s/" % parts[1], parts[2]


def test_the_room_list_names_every_module_on_its_floor():
    missing, misplaced, rooms = [], [], _rooms()
    for module in _modules():
        room, head, word = _where(module)
        floors = [floor for floor, line_head, text in rooms
                  if (line_head == head if head else line_head.endswith(".py"))
                  and re.search(r"(?<![\w.])%s(?![\w])" % re.escape(word), text)]
        if not floors:
            missing.append(module)
        elif set(floors) != {FLOOR_OF_ROOM.get(room)}:
            misplaced.append("%s: floor %s in the document, %s in test_layering.py"
                             % (module, floors, FLOOR_OF_ROOM.get(room)))
    assert missing == []
    assert misplaced == []


def test_the_room_list_names_no_module_that_is_not_there():
    modules = _modules()
    named = []
    for _, head, text in _rooms():
        if head.endswith("/"):   # a package: its modules as words (no check of the prose)
            assert (REPOSITORY / head / "__init__.py").is_file(), head
            continue
        named += ["hmp." + name for name in re.findall(r"(\w+)\.py", text)]
    assert [name for name in named if name not in modules] == []


def _module_file(dotted):
    """(the file of the longest module prefix of ``dotted``, the names after it)."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        base = REPOSITORY.joinpath(*parts[:length])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path, parts[length:]
    return None, parts


def _bound(body, name):
    """The node of ``body`` (a module's or class's statements) that binds ``name``: a
    def, a class, an assignment, an import; or a name in the module's ``__all__``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for target in targets for t in ast.walk(target)
                     if isinstance(t, ast.Name)}
            if name in names:
                return node
            if "__all__" in names and name in ast.literal_eval(node.value):
                return node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    return node
    return None


def _resolves(dotted):
    """Whether ``dotted`` ('hmp.run.trainer.BestEpoch', 'hmp.planning.Plan.alone') is a
    module of the repository or a name bound in one (a class's attribute too),
    following ``from x import name``."""
    path, names = _module_file(dotted)
    if path is None:
        return False
    body = ast.parse(path.read_text()).body
    for index, name in enumerate(names):
        node = _bound(body, name)
        if node is None:
            return False
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            return _resolves(".".join([node.module, alias.name, *names[index + 1:]]))
        if isinstance(node, ast.ClassDef):
            body = node.body
        elif index + 1 < len(names):
            return False
    return True


def _rule_rows():
    """The rule table's rows: [rule, the one place, used by]."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in DOC.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| rule ")]


def test_every_module_path_the_document_names_exists():
    named = set(re.findall(r"`(hmp(?:\.\w+)+)`", DOC.read_text()))
    assert len(named) > 40   # the table and the prose name many
    assert sorted(name for name in named if not _resolves(name)) == []


def test_the_one_place_of_each_rule_names_what_is_there():
    """Each name in a rule's 'one place' cell is bound in one of the modules the cell
    names (``hmp.errors`` (``InvalidInput``, ...); ``scripts/x.py`` (``name``))."""
    unresolved = []
    for rule, place, _ in _rule_rows():
        named = re.findall(r"`([^`]+)`", place)
        codes = [c for c in named if CODE_NAME.match(c)]
        modules = [c for c in codes if c.startswith("hmp.")] + [
            c[:-len(".py")].replace("/", ".") for c in named if re.match(r"scripts/\w+\.py$", c)]
        for name in codes:
            if name in modules:
                continue
            if not any(_resolves("%s.%s" % (module, name)) for module in modules):
                unresolved.append("%s: %s" % (rule[:40], name))
    assert unresolved == []


def test_every_file_the_document_names_is_in_the_repository():
    text = DOC.read_text()
    paths = set(re.findall(r"`((?:scripts|tests|docs|hmp|models)/[\w/.]+)`", text))
    links = {link for link in re.findall(r"\]\(([^)#]+)", text) if "://" not in link}
    assert paths   # the document names files
    missing = sorted({p for p in paths if not (REPOSITORY / p).exists()}
                     | {p for p in links if not (DOC.parent / p).exists()})
    assert missing == []


@pytest.mark.parametrize("dotted, there", [
    ("hmp.run.trainer.BestEpoch", True), ("hmp.planning.Plan.fastest_alone", True),
    ("hmp.fit", True), ("hmp.run.trainer.NoSuchName", False), ("hmp.run.nothing", False),
    ("hmp.planning.Plan.no_method", False)])
def test_a_name_resolves_only_when_it_is_there(dotted, there):
    assert _resolves(dotted) is there


def test_the_papers_are_cited_where_they_are():
    """The five papers' summary lies beside the repository (../shared/BACKGROUND.md), not
    in it: a module that cites it names that path."""
    cited = [str(path.relative_to(REPOSITORY)) for path in
             [*LIBRARY.rglob("*.py"), *(REPOSITORY / "models").glob("*.py"),
              *(REPOSITORY / "scripts").glob("*.py")]
             if re.search(r"(?<!shared/)BACKGROUND\.md", path.read_text())]
    assert cited == []
