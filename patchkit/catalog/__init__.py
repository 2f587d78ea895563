"""A catalog: a directory holding ``manifests/<fix>.toml`` and ``patches/<fix>/``; loads
manifests lazily and orders fixes by ``depends_on``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from ..engine.recordbase import Record, record_dataclass
from ..errors import ManifestError, PatchFormatError, PatchkitError, UnknownFixError, UsageError
from .config import load_config
from .manifest import load_manifest, name_problem
from .reader import close_matches, key_line, key_where
from .model import Fix, ProjectConfig

ENV_CATALOG = "PATCHKIT_CATALOG"
CONFIG_NAME = "patchkit.toml"  # a catalog's own settings (docs/manifest.md, patchkit.toml)
#: Where a regular install keeps the shipped catalog (package data, see pyproject.toml).
PACKAGED_CATALOG = "_catalog"


def _package_dir() -> Path:
    import patchkit

    return Path(patchkit.__file__).resolve().parent


def shipped_catalog_root() -> Path | None:
    """The catalog shipped with patchkit: the package data of a regular install, else the
    source tree's own manifests/ and patches/ (a source checkout or an editable install)."""
    for top in (_package_dir() / PACKAGED_CATALOG, _package_dir().parent):
        if (top / "manifests").is_dir() and (top / "patches").is_dir():
            return top
    return None


def _is_packaged(root: Path) -> bool:
    """Whether ``root`` is the catalog installed as package data (never written to)."""
    try:
        return root.resolve() == _package_dir() / PACKAGED_CATALOG
    except OSError:
        return False


def is_source_tree(root: Path, shipped: Path | None) -> bool:
    """Whether ``root`` is a patchkit source tree: the one this patchkit runs from (a clone,
    an editable install), or a clone beside a regular install (its pyproject.toml maps the
    top-level manifests/ and patches/ into the package as the shipped catalog)."""
    if shipped is not None and root == shipped.resolve():
        return True
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return f'"patchkit.{PACKAGED_CATALOG}.manifests" = "manifests"' in text


@record_dataclass(frozen=True)
class BrokenFix(Record):
    """A fix whose manifest (or a patch it names) cannot be read: listed as an error, not a fix."""

    name: str
    file: str
    line: int | None
    message: str

    @classmethod
    def of(cls, name: str, err: PatchkitError) -> "BrokenFix":
        details = getattr(err, "details", None) or {}
        file = str(details.get("file") or "")
        line = details.get("line")
        if line is None and file and details.get("key"):
            line = key_line(Path(file), str(details["key"]))
        return cls(name, file, line if isinstance(line, int) else None, err.message)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    @property
    def detail(self) -> str:
        """``FILE:LINE: what is wrong`` (the message without its own leading file name)."""
        said = re.sub(rf"^{re.escape(self.file)}(:\d+)*:\s*", "", self.message) if self.file \
            else self.message
        return f"{self.where}: {said}" if self.where else said

    def to_json(self) -> dict:
        return {"name": self.name, "status": "error",
                "error": {"file": self.file, "line": self.line, "message": self.message}}


def _pending_imports(root: Path) -> set[str]:
    """The fixes of imports in flight or killed before their commit point
    (patchkit/catalog/writer.py: ``.patchkit-import/<run>/journal.json`` not "linked")."""
    stage = root / ".patchkit-import"
    if not stage.is_dir():
        return set()
    out: set[str] = set()
    for journal in stage.glob("*/journal.json"):
        try:
            data = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and not data.get("linked"):
            out |= {str(f.get("name")) for f in data.get("fixes", []) if isinstance(f, dict)}
    return out


def _named(root: Path, said: str, given_by: str, todo: str) -> Path:
    """``root``, a catalog named explicitly (``said`` is how: ``--catalog DIR``,
    ``PATCHKIT_CATALOG=DIR``, patchkit.toml's key), refused unless it holds manifests/."""
    if not root.is_dir():
        problem = "no such directory" if not root.exists() else "not a directory"
    elif not (root / "manifests").is_dir():
        problem = "holds no manifests/ directory"
    else:
        return root
    raise UsageError(f"{said}: {problem}. {todo} (or make a catalog with `patchkit init DIR`)",
                     catalog=str(root), given_by=given_by)


class DependencyCycle(Exception):
    """``depends_on`` goes round: ``names`` the cycle, its first fix again at its end."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(" -> ".join(names))
        self.names = names


def in_dependency_order(names: Iterable[str], deps_of: Callable[[str], Iterable[str]]) -> list[str]:
    """``names`` and every fix they depend on (``deps_of``), each after its own dependencies;
    independent ones in the order of ``names``. Raises :class:`DependencyCycle`. The one
    walk of ``depends_on``: the catalog's order, and an import's check of what it would write."""
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        if name in done:
            return
        if name in stack:
            raise DependencyCycle(stack[stack.index(name):] + [name])
        for dep in deps_of(name):
            visit(dep, stack + [name])
        done.add(name)
        order.append(name)

    for name in names:
        visit(name, [])
    return order


class Catalog:
    """The fixes of one catalog directory, plus those of ``beside`` (the shipped catalog) that
    it does not have itself; writes go only to ``root``, never to a ``read_only`` catalog."""

    def __init__(self, root: Path | str, *, beside: Catalog | None = None,
                 read_only: bool = False) -> None:
        self.root = Path(root)
        self.manifests_dir = self.root / "manifests"
        self.patches_dir = self.root / "patches"
        if not self.manifests_dir.is_dir():
            raise UsageError(f"{self.root} is not a patchkit catalog: it has no manifests/ "
                             "directory. Point PATCHKIT_CATALOG (or --catalog) at the directory "
                             "holding manifests/ and patches/, or make one with `patchkit init "
                             "DIR`", catalog=str(self.root))
        self.beside = beside
        self.read_only = read_only or _is_packaged(self.root)
        self.source_tree = False  # read-only as patchkit's source tree, found by discovery
        self._fixes: dict[str, Fix] = {}

    def __repr__(self) -> str:
        return f"Catalog({str(self.root)!r})"

    @classmethod
    def open(cls, root: Path | str) -> Catalog:
        """The catalog at ``root`` as the command line opens it: with the shipped catalog
        beside it when its own ``patchkit.toml`` says ``shipped_fixes = true``."""
        root = Path(root)
        config = root / CONFIG_NAME
        beside = None
        if config.is_file() and load_config(config).shipped_fixes:
            shipped = shipped_catalog_root()
            if shipped is not None and shipped.resolve() != root.resolve():
                beside = cls(shipped, read_only=True)
        return cls(root, beside=beside)

    @classmethod
    def find(cls, given: Path | str | None = None, *, config: ProjectConfig | None = None,
             start: Path | str | None = None) -> Catalog:
        """The catalog a command works on, in the one order docs/cli.md gives: ``given``
        (``--catalog``), else $PATCHKIT_CATALOG, else the ``catalog`` key of ``config``
        (patchkit.toml), else the nearest catalog up from ``start`` (default: cwd), else the
        shipped one. A catalog named by any of the first three must be there: a missing one is
        a ``UsageError`` naming where it was named, never passed over for the next."""
        env = os.environ.get(ENV_CATALOG)
        if given is not None:  # the order is written in docs/cli.md (--catalog) and docs/manifest.md
            return cls.open(_named(Path(os.path.abspath(given)), f"--catalog {given}", "--catalog",
                                   "Give the directory holding manifests/ and patches/"))
        if env:
            return cls.open(_named(Path(os.path.abspath(Path(env).expanduser())),
                                   f"{ENV_CATALOG}={env}", ENV_CATALOG,
                                   f"Set {ENV_CATALOG} to the directory holding manifests/ and "
                                   "patches/, or unset it"))
        if config is not None and config.catalog is not None:
            said = f"{key_where(config.path, 'catalog')}: the catalog key names {config.catalog}"
            return cls.open(_named(config.catalog, said, str(config.path),
                                   f"Fix the catalog key of {config.path}"))
        return cls._found_from(start)

    @classmethod
    def discover(cls, start: Path | str | None = None) -> Catalog:
        """$PATCHKIT_CATALOG, else the nearest directory up from ``start`` (default: cwd)
        holding manifests/ and patches/, else the catalog shipped with patchkit (read-only):
        :meth:`find` without ``--catalog`` or a patchkit.toml."""
        return cls.find(start=start)

    @classmethod
    def _found_from(cls, start: Path | str | None) -> Catalog:
        """The nearest catalog up from ``start``, else the shipped one (the end of find's order)."""
        here = Path(start) if start is not None else Path.cwd()
        shipped = shipped_catalog_root()
        for candidate in (here.resolve(), *here.resolve().parents):
            if (candidate / "manifests").is_dir() and (candidate / "patches").is_dir():
                found = cls.open(candidate)
                if is_source_tree(candidate, shipped):
                    # a clone's own root (the README runs from there): its manifests/ and
                    # patches/ are the shipped catalog, read-only unless named explicitly
                    found.read_only, found.source_tree = True, True
                return found
        if shipped is not None:
            return cls(shipped, read_only=True)
        raise UsageError(f"no patchkit catalog found: no directory holding manifests/ and "
                         f"patches/ above {here}, and {ENV_CATALOG} is not set. Run from inside "
                         f"a catalog, set {ENV_CATALOG}, pass --catalog, or make one with "
                         "`patchkit init DIR`", start=str(here))

    def check_writable(self, what: str, *, dry_run: str = "") -> None:
        """Refuse to write into the catalog shipped with patchkit (replaced on upgrade);
        ``dry_run``: the command that only reads it, named in the message."""
        also = f" (`patchkit {dry_run}` writes nothing and works on it as it is)" if dry_run else ""
        if self.read_only and self.source_tree:
            raise UsageError(
                f"cannot {what}: {self.root} is patchkit's own source tree, and its manifests/ "
                "and patches/ are the catalog shipped with patchkit, never written to when found "
                f"from the working directory{also}. Make your own with `patchkit init DIR` (it keeps "
                "the shipped fixes beside yours), then run from inside it or pass --catalog DIR "
                "(to edit a shipped fix as a patchkit developer, name this tree with --catalog)",
                catalog=str(self.root))
        if self.read_only:
            raise UsageError(
                f"cannot {what}: no catalog of yours was found, and the catalog shipped with "
                f"patchkit ({self.root}) is never written to{also}. Make your own with "
                "`patchkit init DIR` (it keeps the shipped fixes beside yours), then run from "
                "inside it, or pass --catalog DIR", catalog=str(self.root))

    def check_own(self, names: Iterable[str], what: str) -> None:
        """Refuse to write a shipped fix seen beside this catalog: it is not the user's."""
        shipped = [n for n in names if self._owner(n) is not self]
        if shipped:
            raise UsageError(
                f"cannot {what} {', '.join(shipped)}: shipped with patchkit "
                f"({self.manifest_path(shipped[0]).parent}), not in {self.root}, and the "
                "shipped catalog is never written to. Capture your own version under a new "
                "name (`patchkit new NAME --from CHECKOUT`)", fixes=shipped)

    def shadowed(self) -> list[str]:
        """This catalog's fixes that hide a shipped fix of the same name."""
        return sorted(set(self.own_names()) & set(self.beside.names())) if self.beside else []

    # -- lookup --------------------------------------------------------------------------------

    def own_names(self) -> list[str]:
        """The fixes whose manifests lie in this catalog's own manifests/ (but those an import
        has moved in and not yet committed: all of an import's fixes appear at once)."""
        pending = _pending_imports(self.root)
        return sorted(p.stem for p in self.manifests_dir.glob("*.toml")
                      if p.is_file() and p.stem not in pending)

    def names(self) -> list[str]:
        return sorted(set(self.own_names()) | set(self.beside.names() if self.beside else ()))

    def shipped(self, name: str) -> bool:
        """Whether fix ``name`` comes from the shipped catalog beside this one (this catalog
        has no manifest of that name): a fix the user did not write, nor choose by writing it."""
        return self._owner(name) is not self

    def _owner(self, name: str) -> Catalog:
        """The catalog whose manifest of ``name`` counts: this one, unless only ``beside`` has it."""
        if name_problem(name):  # no file of that name can exist (nor be asked for: too long)
            return self
        if (self.beside is not None and not (self.manifests_dir / f"{name}.toml").is_file()
                and self.beside.manifest_path(name).is_file()):
            return self.beside
        return self

    def manifest_path(self, name: str) -> Path:
        owner = self._owner(name)
        return owner.manifest_path(name) if owner is not self else self.manifests_dir / f"{name}.toml"

    def get(self, name: str) -> Fix:
        problem = name_problem(name)
        if problem:
            raise UnknownFixError(f"no fix named '{name[:60]}' in the catalog {self.root}: "
                                  f"{problem}. List the fixes with `patchkit list`",
                                  name=name[:200], catalog=str(self.root))
        if name not in self._fixes:
            owner = self._owner(name)
            path = self.manifest_path(name)
            if owner is not self:
                self._fixes[name] = owner.get(name)
            elif not path.is_file():
                close = close_matches(name, self.names(), n=3, cutoff=0.5)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise UnknownFixError(f"no fix named '{name}' in the catalog {self.root}.{hint} "
                                      "List the fixes with `patchkit list`", name=name,
                                      catalog=str(self.root), suggestions=close)
            else:
                self._fixes[name] = load_manifest(path, patch_dir=self.patches_dir / name)
        return self._fixes[name]

    def forget(self, name: str) -> None:
        """Drop the loaded fix ``name``: its files were written, so the next :meth:`get` reads
        its manifest again."""
        self._fixes.pop(name, None)

    def all(self) -> list[Fix]:
        return [self.get(name) for name in self.names()]

    def readable(self) -> tuple[list[Fix], list[BrokenFix]]:
        """Every fix whose manifest reads, and the broken ones (file, line, message), so one
        bad manifest does not hide the rest (``list``, ``status``). A fix depending on a broken
        one, or on a name no manifest has, is broken too: it cannot be ordered."""
        fixes: list[Fix] = []
        broken: dict[str, BrokenFix] = {}
        for name in self.names():
            try:
                fixes.append(self.get(name))
            except (ManifestError, PatchFormatError) as err:
                broken[name] = BrokenFix.of(name, err)
        known = set(self.names())
        for fix in list(fixes):  # a name no manifest has: what apply and log refuse, said here
            for dep in (d for d in fix.depends_on if d not in known):
                try:
                    self._dep(fix, dep)
                except ManifestError as err:
                    fixes.remove(fix)
                    broken[fix.name] = BrokenFix.of(fix.name, err)
                    break
        # a fix on a depends_on cycle cannot be ordered either (apply and log refuse it)
        readable = {f.name: f for f in fixes}
        for fix in list(fixes):
            try:
                in_dependency_order([fix.name], lambda n: [d for d in readable[n].depends_on
                                                           if d in readable])
            except DependencyCycle as cycle:
                if fix.name in cycle.names:
                    fixes.remove(fix)
                    broken[fix.name] = BrokenFix.of(fix.name, self._cycle_error(cycle.names, fix.name))
        changed = True
        while changed:
            changed = False
            for fix in list(fixes):
                bad = [d for d in fix.depends_on if d in broken]
                if bad:
                    fixes.remove(fix)
                    line = key_line(fix.manifest_path, "depends_on")
                    where = f"{fix.manifest_path}:{line}" if line else str(fix.manifest_path)
                    broken[fix.name] = BrokenFix(fix.name, str(fix.manifest_path), line,
                                                 f"{where}: depends on {bad[0]}, whose manifest "
                                                 f"is in error ({broken[bad[0]].where})")
                    changed = True
        return fixes, [broken[n] for n in sorted(broken)]

    # -- relations -----------------------------------------------------------------------------

    def _dep(self, fix: Fix, dep: str) -> Fix:
        if not self.manifest_path(dep).is_file():
            close = close_matches(dep, self.names(), n=1, cutoff=0.6)
            hint = f"Did you mean '{close[0]}'? " if close else ""
            raise ManifestError(f"{key_where(fix.manifest_path, 'depends_on')}: depends_on names "
                                f"'{dep}', which is not in the catalog {self.root}. {hint}Fix the "
                                "name or add the manifest", file=str(fix.manifest_path),
                                key="depends_on", line=key_line(fix.manifest_path, "depends_on"))
        return self.get(dep)

    def _cycle_error(self, cycle: list[str], of: str) -> ManifestError:
        """The error of ``of``, a fix on ``cycle`` (its first name again at its end)."""
        files = ", ".join(dict.fromkeys(str(self.manifest_path(n)) for n in cycle))
        return ManifestError(f"depends_on forms a cycle: {' -> '.join(cycle)} ({files}). "
                             "Remove one of these dependencies", file=str(self.manifest_path(of)),
                             key="depends_on", cycle=cycle)

    def dependency_order(self, names: Iterable[str], *, with_deps: bool = False) -> list[Fix]:
        """The named fixes, dependencies first; their (transitive) dependencies are included
        only ``with_deps``. Order among independent fixes follows ``names``."""
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            self.get(name)
        try:
            order = in_dependency_order(
                wanted, lambda n: [self._dep(self.get(n), d).name for d in self.get(n).depends_on])
        except DependencyCycle as cycle:
            raise self._cycle_error(cycle.names, cycle.names[-1]) from None
        return [self.get(n) for n in order if with_deps or n in wanted]

    def apply_order(self, names: Iterable[str], *, with_deps: bool = False,
                    allow_inactive: bool = False) -> list[Fix]:
        """The named fixes in application order (dependencies first, included ``with_deps``);
        a dead or superseded fix is refused unless ``allow_inactive``."""
        fixes = self.dependency_order(names, with_deps=with_deps)
        for fix in fixes:
            if fix.is_inactive and not allow_inactive:
                found = self.replacements(fix.name)
                undone = [f.name for f in found if f.reverts == fix.name]
                replaced = [f.name for f in found if f.reverts != fix.name]
                said = ([f"{', '.join(undone)} revert{'s' if len(undone) == 1 else ''} it where "
                         "it was applied or committed"] if undone else []) + (
                    [f"it was replaced by {', '.join(replaced)}; apply "
                     f"{'that' if len(replaced) == 1 else 'those'} instead"] if replaced else [])
                instead = "; ".join(said) or "nothing in the catalog replaces it"
                raise UsageError(f"fix '{fix.name}' is {fix.status} ({instead}). To apply it "
                                 "anyway, allow inactive fixes (--allow-inactive); its manifest "
                                 f"is {fix.manifest_path}", fix=fix.name, status=fix.status)
        return fixes

    def rollback_order(self, names: Iterable[str], *, with_dependents: bool = False) -> list[Fix]:
        """The named fixes in rollback order (dependents first); ``with_dependents`` adds every
        fix of the catalog that depends on one of them."""
        wanted = list(dict.fromkeys(names))
        if with_dependents:
            for name in list(wanted):
                wanted.extend(f.name for f in self.dependents(name) if f.name not in wanted)
        return list(reversed(self.dependency_order(wanted)))

    def dependents(self, name: str, *, transitive: bool = True) -> list[Fix]:
        """Fixes that depend on ``name`` (directly, or through others), dependencies first."""
        self.get(name)
        direct: dict[str, list[str]] = {}
        for fix in self.all():
            for dep in fix.depends_on:
                direct.setdefault(dep, []).append(fix.name)
        found: list[str] = []
        todo = list(direct.get(name, []))
        while todo:
            current = todo.pop(0)
            if current in found or current == name:
                continue
            found.append(current)
            if transitive:
                todo.extend(direct.get(current, []))
        return self.dependency_order(found)

    def replacements(self, name: str) -> list[Fix]:
        """Fixes that supersede or revert ``name``: what to use instead of it."""
        return [f for f in self.all() if name in f.supersedes or f.reverts == name]

    def validate(self) -> list[Fix]:
        """Load every manifest and check what one manifest alone cannot (unknown or cyclic
        dependencies, lineage naming absent fixes, stray series); returns all fixes."""
        fixes = self.all()
        self._check_together(fixes)
        return fixes

    def validate_readable(self) -> tuple[list[Fix], list[BrokenFix]]:
        """:meth:`readable` with :meth:`validate`'s checks on the fixes that read: one bad
        manifest is an entry of the broken ones, not the end of the command (``log``)."""
        fixes, broken = self.readable()
        self._check_together(fixes)
        return fixes, broken

    def _check_together(self, fixes: list[Fix]) -> None:
        """What one manifest alone cannot show, over ``fixes`` (a link naming a fix whose
        manifest exists but cannot be read is not a missing fix)."""
        self.dependency_order([f.name for f in fixes])
        names = set(self.names())
        for fix in fixes:
            named = [*(("supersedes", s) for s in fix.supersedes), ("reverts", fix.reverts),
                     ("revert.fix", fix.revert.fix if fix.revert is not None else "")]
            named += [(f"{c.kind}.fix", str(c.get("fix") or "")) for c in fix.checks
                      if c.kind == "git-contains"]
            for key, target in named:
                if target and target not in names:
                    raise ManifestError(f"{key_where(fix.manifest_path, key)}: {key} names '{target}', "
                                        f"which is not in the catalog {self.root}. Keep the old "
                                        "manifest (with its status) so the lineage stays readable",
                                        file=str(fix.manifest_path), key=key,
                                        line=key_line(fix.manifest_path, key))
        own = set(self.own_names())
        series = self.patches_dir.iterdir() if self.patches_dir.is_dir() else ()
        stray = sorted(p.name for p in series
                       if p.is_dir() and p.name not in own and not p.name.startswith((".", "_")))
        if stray:
            raise ManifestError(f"{self.patches_dir}: series without a manifest: "
                                f"{', '.join(stray)}. Add manifests/<name>.toml or remove "
                                "the directory", file=str(self.patches_dir), key="")
